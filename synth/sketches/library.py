"""Finding sketches: shipped ones by name, user files by path, the default one for a topology.

Shipped sketches live in ``synth/sketches/shipped/*.yaml`` (package data), one file per sketch,
named after the sketch. They are parsed and validated once per process.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from ..builders import multinode_name
from ..errors import SynthError, unknown_name
from ..files import load_yaml, read_data
from ..topology import Topology
from .check import check_sketch, require_fit
from .model import Sketch
from .schema import parse_sketch

SKETCH_SUFFIXES = (".yaml", ".yml", ".json")


@cache
def _shipped() -> dict[str, Sketch]:
    import yaml

    folder = resources.files("synth.sketches").joinpath("shipped")
    found: dict[str, Sketch] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith((".yaml", ".yml")):
            continue
        source = f"synth/sketches/shipped/{entry.name}"
        try:
            data = load_yaml(entry.read_text(encoding="utf-8"), source)
        except yaml.YAMLError as exc:
            raise SynthError(f"{source}: not valid YAML: {str(exc).replace(chr(10), ' ')}") from None
        sketch = parse_sketch(data, source)
        if sketch.name != Path(entry.name).stem:
            raise SynthError(f"{source}: field 'name': '{sketch.name}' must match the file name")
        found[sketch.name] = sketch
    return dict(sorted(found.items()))


def shipped_sketches() -> dict[str, Sketch]:
    """Shipped sketch name -> sketch, sorted by name."""
    return dict(_shipped())


def load_sketch(spec: str, topology: Topology | None = None) -> Sketch:
    """Resolve a shipped sketch name or a ``.yaml``/``.yml``/``.json`` file.

    With ``topology``, the sketch must also fit it (:func:`require_fit`), so a caller never runs
    an encoding on a sketch written for another machine.
    """
    shipped = _shipped()
    if spec in shipped:
        sketch = shipped[spec]
    elif Path(spec).suffix in SKETCH_SUFFIXES or Path(spec).exists():
        path = Path(spec)
        sketch = parse_sketch(read_data(path, "sketch file"), str(path))
    else:
        raise unknown_name("sketch", spec, shipped)
    if topology is not None:
        require_fit(sketch, topology)
    return sketch


def base_topology_name(topology: Topology) -> str:
    """The single-node topology a (possibly multi-node) topology was built from.

    :func:`synth.topology_io.load_topology` names ``N`` joined copies with
    :func:`synth.builders.multinode_name` ('dgx_a100x4', 'torus:2x2-x2'); this reads that back,
    so 'dgx_a100x4' gives 'dgx_a100'. A single-node topology is its own base.
    """
    n = topology.num_nodes
    if n > 1:
        for suffix in (f"-x{n}", f"x{n}"):
            if topology.name.endswith(suffix):
                base = topology.name[: -len(suffix)]
                if base and multinode_name(base, n) == topology.name:
                    return base
    return topology.name


def sketch_for(topology: Topology) -> Sketch | None:
    """The shipped sketch for this machine and node count, or None when none is shipped (or fits).

    Candidates are the shipped sketches written for the topology's base name that list its node
    count and pass :func:`check_sketch`; the most specific one (fewest node counts listed) wins,
    ties broken by name, so the pick is deterministic.
    """
    base = base_topology_name(topology)
    candidates = sorted((s for s in _shipped().values()
                         if s.topology == base and topology.num_nodes in s.nodes),
                        key=lambda s: (len(s.nodes), s.name))
    for sketch in candidates:
        if not check_sketch(sketch, topology):
            return sketch
    return None
