"""``--encoding auto`` for the scale path: pick an encoding by collective and size, and say why.

:func:`choose` is a pure function of the request; :func:`auto_encoding` runs the choice and writes
the reason into every returned schedule's ``meta["why"]`` (prefixed to the encoding's own reason).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..collectives import Collective
from ..schedule import Schedule
from ..topology import Topology
from .trees.encoding import TREE_KINDS

EXACT_MAX_RANKS = 8
"""Up to this many ranks an exact (SMT) search is worth its time when it is registered."""


def _point_to_point(collective: Collective) -> bool:
    if collective.combining:
        return False
    for pre, post in zip(collective.pre, collective.post, strict=True):
        targets = [r for r in post if r not in pre]
        if targets and (len(pre) != 1 or len(targets) > 1):
            return False
    return True


def choose(topology: Topology, collective: Collective, available: Mapping[str, object]
           ) -> tuple[str, str]:
    """(encoding name, reason) for this request among the ``available`` encodings."""
    n = topology.num_ranks
    if n <= EXACT_MAX_RANKS and "smt" in available and collective.custom is None:
        return "smt", (f"{n} ranks: small enough for an exact step/round search, which also "
                       "optimises latency")
    if collective.custom is None and collective.kind in TREE_KINDS and "trees" in available:
        return "trees", (f"{collective.kind} on {n} ranks: spanning-tree packing is "
                         "bandwidth-optimal (meets the cut bound) and polynomial; symmetry keeps "
                         "it fast at 512-1024 ranks")
    if _point_to_point(collective) and "flow" in available:
        return "flow", (f"{collective.name} moves each chunk to one rank: a multi-commodity flow "
                        "LP (no copies needed) is exact up to rounding, with symmetry for "
                        "alltoall")
    return "baseline", (f"no synthesis encoding covers {collective.name} here; NCCL-style "
                        "baselines")


def auto_encoding(topology: Topology, collective: Collective, options,
                  encodings: Mapping[str, object]) -> dict[str, Schedule]:
    """Run :func:`choose`'s encoding and record the choice in ``meta["why"]``."""
    name, reason = choose(topology, collective, encodings)
    found = encodings[name](topology, collective, options)  # type: ignore[operator]
    for schedule in found.values():
        own = schedule.meta.get("why")
        schedule.meta["why"] = f"auto chose {name}: {reason}" + (f" | {own}" if own else "")
        schedule.meta["auto"] = name
    return found
