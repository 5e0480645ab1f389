"""What each closed platform accepts, checked on a program before it is scored or emitted.

``neuron`` (torch-neuronx / Neuron runtime, docs/reference/closed-stacks.md):

* permute is ring-only: its (source, target) pairs must form rings (disjoint cycles) whose every hop
  joins two directly connected ranks;
* at most 16 replica-group configurations (communicators) per compiled graph;
* a replica group that spans nodes must be symmetric: the same number of ranks on every node it
  touches, with the same local indices;
* reductions are add, min or max; integer reduce-scatter is rejected (the reduction runs in fp32);
* shapes must divide: reduce-scatter and all-to-all dims by the group size (the strategy builder
  inserts pad/unpad; this check proves it did).

``jax`` (XLA collectives under ``shard_map``):

* CollectivePermute: no two pairs share a source or a target (ranks that are no target get zeros);
* ``lax.psum_scatter`` only sums: a min/max reduce-scatter must be expressed another way;
* reductions add (psum), min (pmin), max (pmax);
* all-to-all: split dimension divisible by the split count; replica groups cover every rank (a
  named-axis group always does).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..errors import SynthError
from ..topology import Topology
from .ir import Program
from .reference import global_pairs

PLATFORMS = ("neuron", "jax")
_SYMMETRIC: dict = {}
_RINGS: dict = {}
MAX_NEURON_GROUPS = 16


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def violations(program: Program, platform: str, topology: Topology | None = None) -> list[Violation]:
    if platform not in PLATFORMS:
        from ..errors import unknown_name
        raise unknown_name("platform", platform, PLATFORMS)
    try:
        specs = program.specs()
    except SynthError as exc:
        return [Violation("shape", exc.message)]
    mesh = program.mesh
    out: list[Violation] = []
    configs: set = set()
    for op in program.ops:
        if not op.is_call:
            continue
        dtype = np.dtype(specs[op.ins[0]].dtype)
        g = mesh.group_size(op.axes)
        if op.kind in ("reduce_scatter", "all_reduce"):
            if op.op not in ("add", "min", "max"):
                out.append(Violation("reduction", f"{op.kind} with '{op.op}': only add, min, max"))
            if dtype == np.bool_ and op.op == "add":
                out.append(Violation("reduction", f"{op.kind} cannot add booleans"))
        if op.kind in ("reduce_scatter", "all_to_all"):
            size = specs[op.ins[0]].shape[op.dim]
            if size % g:
                out.append(Violation("divisibility", f"{op.kind} over [{','.join(op.axes)}]: dim "
                                     f"{op.dim} of size {size} is not divisible by {g}"))
        pairs = None
        if op.kind == "permute":
            pairs = global_pairs(mesh, op.axes, op.perm)
            out += _xla_permute(pairs)
            configs.add(("permute", tuple(sorted(pairs))))
        else:
            configs.add(("groups", op.axes))
        if platform == "neuron":
            if op.kind == "reduce_scatter" and not np.issubdtype(dtype, np.floating):
                out.append(Violation("neuron-integer-reduce-scatter",
                                     f"reduce_scatter of {dtype.name} is rejected by Neuron (the "
                                     "reduction runs in fp32); use all_reduce + slice"))
            if op.kind == "permute":
                key = (tuple(pairs), id(topology))
                if key not in _RINGS:
                    _RINGS[key] = _neuron_ring(pairs, topology)
                out += _RINGS[key]
            else:
                key = (mesh, op.axes)
                if key not in _SYMMETRIC:
                    _SYMMETRIC[key] = _neuron_symmetric(mesh, op.axes)
                out += _SYMMETRIC[key]
        else:
            if op.kind == "reduce_scatter" and op.op != "add":
                out.append(Violation("jax-psum-scatter",
                                     f"lax.psum_scatter only sums; a {op.op} reduce-scatter needs "
                                     "pmin/pmax + slice (the ar-slice strategy)"))
    if platform == "neuron" and len(configs) > MAX_NEURON_GROUPS:
        out.append(Violation("neuron-replica-groups",
                             f"{len(configs)} replica-group configurations in one graph; Neuron "
                             f"allows at most {MAX_NEURON_GROUPS}"))
    return _dedupe(out)


def check(program: Program, platform: str, topology: Topology | None = None) -> None:
    """Raise a :class:`SynthError` listing every rule the program breaks on ``platform``."""
    found = violations(program, platform, topology)
    if found:
        raise SynthError(f"{program.name or 'program'} is not valid on {platform}: "
                         + "; ".join(str(v) for v in found))


def _dedupe(items: list[Violation]) -> list[Violation]:
    seen = []
    for v in items:
        if v not in seen:
            seen.append(v)
    return seen


def _xla_permute(pairs: list[tuple[int, int]]) -> list[Violation]:
    out = []
    src = Counter(s for s, _ in pairs)
    dst = Counter(t for _, t in pairs)
    if any(c > 1 for c in src.values()):
        out.append(Violation("xla-permute", "two pairs share a source"))
    if any(c > 1 for c in dst.values()):
        out.append(Violation("xla-permute", "two pairs share a target"))
    return out


def _neuron_ring(pairs: list[tuple[int, int]], topology: Topology | None) -> list[Violation]:
    out = []
    nxt = dict(pairs)
    if len(nxt) != len(pairs) or len(set(nxt.values())) != len(pairs):
        return out  # reported by the XLA rule
    if any(s == t for s, t in pairs):
        out.append(Violation("neuron-permute-ring", "a rank sends to itself"))
    for s in nxt:
        r, steps = s, 0
        while True:
            r = nxt.get(r, -1)
            steps += 1
            if r == s or r == -1 or steps > len(nxt):
                break
        if r != s:
            out.append(Violation("neuron-permute-ring",
                                 f"pairs are not rings: the chain from rank {s} does not close "
                                 "(Neuron permute is ring-only)"))
            break
    if topology is not None:
        for s, t in pairs:
            if s != t and not topology.has_channel(s, t):
                out.append(Violation("neuron-permute-ring",
                                     f"ranks {s} and {t} are not directly connected (Neuron permute "
                                     "rings must use direct links)"))
                break
    return out


def _neuron_symmetric(mesh, axes) -> list[Violation]:
    """Groups spanning nodes need the same local indices on every node (mesh groups do, unless
    the mesh itself is irregular); checked on the actual rank lists."""
    if "node" not in mesh.names:
        return []
    per_node = mesh.size // mesh.axis("node").size
    for g in mesh.groups(axes):
        by_node: dict[int, list[int]] = {}
        for r in g:
            by_node.setdefault(r // per_node, []).append(r % per_node)
        if len(by_node) > 1 and len({tuple(sorted(v)) for v in by_node.values()}) > 1:
            return [Violation("neuron-symmetric-groups",
                              f"group {list(g)} spans nodes with different local ranks")]
    return []


def check_groups_symmetric(groups, ranks_per_node: int) -> None:
    """Neuron's rule on explicit replica groups (for hand-written groups)."""
    for g in groups:
        by_node: dict[int, list[int]] = {}
        for r in g:
            by_node.setdefault(r // ranks_per_node, []).append(r % ranks_per_node)
        if len(by_node) > 1 and len({tuple(sorted(v)) for v in by_node.values()}) > 1:
            raise SynthError(f"replica group {list(g)} is not symmetric across nodes (Neuron needs "
                             "the same local ranks on every node)")
