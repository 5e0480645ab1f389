"""Communication sketches (TACCL): the hints that shrink the MILP's search. See :mod:`.model`."""

from .check import check_sketch, require_fit, rotate
from .library import base_topology_name, load_sketch, shipped_sketches, sketch_for
from .model import ANY_SWITCH, HINTS, INTERNODE_MODES, INTRANODE_MODES, Relay, Sketch, SwitchPolicy
from .schema import SKETCH_SCHEMA, parse_sketch

__all__ = [
    "ANY_SWITCH",
    "HINTS",
    "INTERNODE_MODES",
    "INTRANODE_MODES",
    "SKETCH_SCHEMA",
    "Relay",
    "Sketch",
    "SwitchPolicy",
    "base_topology_name",
    "check_sketch",
    "load_sketch",
    "parse_sketch",
    "require_fit",
    "rotate",
    "shipped_sketches",
    "sketch_for",
]
