"""Lowering a synthesized :class:`~synth.schedule.Schedule` into a permute program.

Each rank keeps a buffer of the collective's chunks (one row per global chunk). A schedule step is
a set of transfers (chunk, src, dst, copy|reduce). Neuron's Permute takes only *circular* patterns:
source→target pairs that form rings over directly connected ranks (runtime docs, "Permute
Operation"; :mod:`synth.closed.constraints`). A tree's or a MILP's step is no ring, so each step is
split into **permute classes**, each of them a ring pattern the runtime accepts:

* the step itself, when its pairs already are rings over direct links (a ring schedule's steps);
* a **rotation** along one mesh axis: every rank sends to the rank ``j`` positions further along
  that axis (``j = 1`` and ``g - 1`` on a torus ring, every ``j`` inside a fully linked chip),
  usable when every hop of it is a direct link. A transfer whose ends differ in one axis by ``j`` is
  carried by that class; the rotation moves every rank's rows at once, ranks with nothing to send
  padding their share;
* a **pair exchange**: for any other transfer (s, d), the 2-ring {s→d, d→s} over a direct link in
  both directions (the reverse carries padding), packed into vertex-disjoint sets.

A class's permute carries, per rank, the rows that rank sends through it (padded to the most any
rank sends); it is a rank-dependent row gather → ``permute`` → rank-dependent row update (copy or
reduce), the reductions as local adds between permutes. All gathers of a step read the buffer as
it was at the start of the step, as the Schedule IR requires. The classes are few and reused by
every step (five on trn1_32: ±row, ±col, core), which matters: Neuron loads at most 16 replica-group
configurations per graph, and each distinct permute pattern is one.

Programs are built **per unit**: one element per chunk row (:func:`unit_elements`); the driver runs
them on a trailing column axis of any width (:mod:`synth.closed.columns`), so one program serves
every message size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..collectives import Collective
from ..errors import SynthError
from ..schedule import Schedule
from ..topology import Topology
from .ir import Builder, Program, TensorSpec
from .mesh import Mesh

KIND = {"allgather": "allgather", "reducescatter": "reducescatter", "allreduce": "allreduce",
        "alltoall": "alltoall"}


@dataclass(frozen=True)
class LoweredPlan:
    """A strategy made from a schedule: ``lowered(<algorithm>)``."""

    collective: str
    schedule: Schedule = field(compare=False)
    algorithm: str = ""
    pieces: int = 1
    bundling: str = "single"

    @property
    def name(self) -> str:
        return f"lowered-schedule({self.algorithm or self.schedule.algorithm})"

    def families(self, mesh: Mesh) -> tuple[str, ...]:
        return ("lowered-schedule", "ring-permute") if "ring" in self.name else ("lowered-schedule",)

    @property
    def vendor_calls(self) -> int:
        return 0


# ------------------------------------------------------------------------------ permute classes
@dataclass(frozen=True)
class PermuteClass:
    """One ring pattern a permute may use: ``axes`` (the mesh axes of its replica groups), ``perm``
    (positions inside each group) and the global ``next`` of every rank that sends."""

    label: str
    axes: tuple[str, ...]
    perm: tuple[tuple[int, int], ...]
    next: dict[int, int] = field(compare=False, hash=False)

    @property
    def prev(self) -> dict[int, int]:
        return {d: s for s, d in self.next.items()}


def rotation_classes(mesh: Mesh, topology: Topology | None) -> list[PermuteClass]:
    """Every rotation along one mesh axis whose every hop is a direct link (all of them without a
    topology): the classes a step's transfers are sorted into."""
    out: list[PermuteClass] = []
    for axis in mesh.axes:
        g = axis.size
        if g < 2:
            continue
        groups = mesh.groups((axis.name,))
        for j in range(1, g):
            nxt = {grp[p]: grp[(p + j) % g] for grp in groups for p in range(g)}
            if topology is not None and not all(topology.has_channel(s, d) for s, d in nxt.items()):
                continue
            label = f"{axis.name}{'+' if j <= g // 2 else '-'}{j if j <= g // 2 else g - j}"
            out.append(PermuteClass(label, (axis.name,),
                                    tuple((p, (p + j) % g) for p in range(g)), nxt))
    return out


def _circular(pairs: Sequence[tuple[int, int]], topology: Topology | None) -> bool:
    """Do ``pairs`` form rings (unique sources and targets, every chain closing) over direct links?"""
    nxt = dict(pairs)
    if len(nxt) != len(pairs) or len(set(nxt.values())) != len(pairs):
        return False
    if any(s == d or nxt.get(d) is None for s, d in pairs):
        return False
    return topology is None or all(topology.has_channel(s, d) for s, d in pairs)


def _exchanges(pairs: list[tuple[int, int]], topology: Topology | None) -> list[list[tuple[int, int]]]:
    """Pairs no rotation carries, as vertex-disjoint 2-rings (s→d with its reverse d→s), greedily
    packed; a pair whose reverse is no direct link keeps its own one-way permute (valid for XLA,
    rejected on Neuron by :mod:`synth.closed.constraints`)."""
    links = sorted({(min(s, d), max(s, d)) for s, d in pairs})
    sets: list[tuple[set[int], list[tuple[int, int]]]] = []
    for a, b in links:
        both = topology is None or (topology.has_channel(a, b) and topology.has_channel(b, a))
        ring = [(a, b), (b, a)] if both else [p for p in pairs if {p[0], p[1]} == {a, b}]
        for used, chosen in sets:
            if a not in used and b not in used:
                used |= {a, b}
                chosen += ring
                break
        else:
            sets.append(({a, b}, list(ring)))
    return [chosen for _, chosen in sets]


def step_classes(pairs: Sequence[tuple[int, int]], mesh: Mesh, topology: Topology | None,
                 rotations: Sequence[PermuteClass]) -> list[tuple[PermuteClass, list[tuple[int, int]]]]:
    """The permutes of one step: (class, the step's pairs it carries), every pair in exactly one."""
    pairs = sorted(set(pairs))
    if _circular(pairs, topology):
        perm = tuple(pairs)
        return [(PermuteClass("step", mesh.names, perm, dict(pairs)), list(pairs))]
    out: list[tuple[PermuteClass, list[tuple[int, int]]]] = []
    left = []
    carried: dict[str, list[tuple[int, int]]] = {}
    for s, d in pairs:
        cls = next((c for c in rotations if c.next.get(s) == d), None)
        if cls is None:
            left.append((s, d))
        else:
            carried.setdefault(cls.label, []).append((s, d))
    for cls in rotations:
        if cls.label in carried:
            out.append((cls, carried[cls.label]))
    for ring in _exchanges(left, topology):
        perm = tuple(sorted(ring))
        out.append((PermuteClass("exchange", mesh.names, perm, dict(perm)),
                    [p for p in ring if p in set(left)]))
    return out


# ------------------------------------------------------------------------------ lowering
def unit_elements(schedule: Schedule) -> int:
    """Elements per rank of the unit program: one per chunk row of the collective's input."""
    coll = schedule.collective
    kind = KIND.get(coll.kind)
    if kind is None:
        raise SynthError(f"cannot lower a {coll.kind} schedule (closed stacks: allgather, "
                         "reducescatter, allreduce, alltoall)")
    n = coll.num_ranks
    per_block = coll.num_chunks if kind == "allreduce" else coll.chunks_per_rank
    return (n if kind in ("reducescatter", "alltoall") else 1) * per_block


def lower_schedule(schedule: Schedule, mesh: Mesh, inputs: Sequence[TensorSpec],
                   reduce_op: str = "add", topology: Topology | None = None) -> Program:
    """The permute program of ``schedule`` for one input tensor per rank (module docstring)."""
    coll: Collective = schedule.collective
    kind = KIND.get(coll.kind)
    if kind is None:
        raise SynthError(f"cannot lower a {coll.kind} schedule (closed stacks: allgather, "
                         "reducescatter, allreduce, alltoall)")
    n = mesh.size
    if coll.num_ranks != n:
        raise SynthError(f"the schedule has {coll.num_ranks} ranks, the mesh {n}")
    if len(inputs) != 1:
        raise SynthError("a lowered schedule takes one tensor")
    spec = inputs[0]
    if kind != "allreduce" and len(spec.shape) < 1:
        raise SynthError(f"{kind} needs tensors with at least one dimension")
    k = coll.chunks_per_rank
    c_total = coll.num_chunks
    axes = mesh.names
    b = Builder(mesh, inputs)
    name = b.inputs[0][0]
    blocks_in = n if kind in ("reducescatter", "alltoall") else 1
    blocks_out = n if kind in ("allgather", "alltoall") else 1
    t = b.flat(name)
    if blocks_in > 1:
        rows = -(-spec.shape[0] // n)
        width = rows * math.prod(spec.shape[1:])
        t = b.pad(t, 0, n * width)
    else:
        width = math.prod(spec.shape)
    per_block = k if kind != "allreduce" else c_total
    w = -(-width // per_block)
    t = b.reshape(t, (blocks_in, width))
    t = b.pad(t, 1, per_block * w)
    n_in = blocks_in * per_block
    t = b.reshape(t, (n_in, w))
    if any(len(coll.inputs[r]) != n_in for r in range(n)):
        raise SynthError("the schedule's input layout does not match the collective's")
    # buffer of all chunks: rows a rank does not hold start as zeros
    if any(tuple(coll.inputs[r]) != tuple(range(c_total)) for r in range(n)):
        t = b.pad(t, 0, n_in + 1)
        table = [[coll.inputs[r].index(c) if c in coll.inputs[r] else n_in for c in range(c_total)]
                 for r in range(n)]
        buf = b.take_rows(t, axes, table)
    else:
        buf = t
    rotations = rotation_classes(mesh, topology)
    for si, step in enumerate(schedule.steps):
        b.stage = f"step {si}"
        sent: dict[tuple[int, int], list[tuple[int, str]]] = {}
        for tr in step.transfers:
            sent.setdefault((tr.src, tr.dst), []).append((tr.chunk, tr.op))
        start = buf
        received = []
        for cls, carried in step_classes(list(sent), mesh, topology, rotations):
            rows = {p: sorted(sent[p]) for p in carried}
            q = max(len(v) for v in rows.values())
            send = [[0] * q for _ in range(n)]
            recv = {"copy": [[-1] * q for _ in range(n)], "reduce": [[-1] * q for _ in range(n)]}
            for (s, d), chunks in rows.items():
                for j, (chunk, op) in enumerate(chunks):
                    send[s][j] = chunk
                    recv[op][d][j] = chunk
            sel = b.take_rows(start, axes, send)
            moved = b.call("permute", sel, cls.axes, perm=cls.perm)
            for op in ("copy", "reduce"):
                if any(r >= 0 for row in recv[op] for r in row):
                    received.append((moved, recv[op], "copy" if op == "copy" else reduce_op))
        for moved, recv_rows, op in received:
            buf = b.put_rows(buf, moved, axes, recv_rows, op)
    b.stage = "output"
    out_rows = [list(coll.outputs[r]) for r in range(n)]
    y = b.take_rows(buf, axes, out_rows)
    y = b.reshape(y, (blocks_out, per_block * w))
    y = b.unpad(y, 1, width)
    y = b.flat(y)
    if kind == "allgather":
        y = b.reshape(y, (n * spec.shape[0], *spec.shape[1:]))
    elif kind == "allreduce":
        y = b.reshape(y, spec.shape)
    elif kind == "reducescatter":
        y = b.reshape(y, (-(-spec.shape[0] // n), *spec.shape[1:]))
    else:
        y = b.reshape(y, (n * -(-spec.shape[0] // n), *spec.shape[1:]))
    plan = LoweredPlan(kind, schedule, schedule.algorithm)
    return b.program(kind, [y], reduce_op if kind in ("allreduce", "reducescatter") else "add",
                     plan.name, plan.families(mesh), meta={"plan": plan, "tensors": 1})


def baseline_plans(collective: str, topology, mesh: Mesh) -> list[LoweredPlan]:
    """The project's baseline schedules (ring, trees, ...) for ``collective``, as lowerable plans."""
    from ..collectives import make_collective
    from ..encodings.baseline.algorithms import all_baselines

    try:
        found = all_baselines(topology, make_collective(collective, mesh.size, 1))
    except SynthError:
        return []
    limit = 4 * mesh.size
    rotations = rotation_classes(mesh, topology)
    return [LoweredPlan(collective, s, name) for name, s in sorted(found.items())
            if permute_calls(s, mesh, topology, rotations) <= limit]


def permute_calls(schedule: Schedule, mesh: Mesh, topology: Topology | None = None,
                  rotations: Sequence[PermuteClass] | None = None) -> int:
    """How many permute calls the lowering makes (classes per step, summed)."""
    rot = rotation_classes(mesh, topology) if rotations is None else rotations
    return sum(len(step_classes(list({(t.src, t.dst) for t in step.transfers}), mesh, topology, rot))
               for step in schedule.steps)
