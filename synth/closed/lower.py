"""Lowering a synthesized :class:`~synth.schedule.Schedule` into a permute program.

Each rank keeps a buffer of the collective's chunks (one row per global chunk). A schedule step
is a set of transfers (chunk, src, dst, copy|reduce); its (src, dst) pairs are split into
*matchings* (no two pairs share a source or a target: one ``permute`` each, XLA's rule), every
matching carrying the same number of rows (shorter lists are padded and the padding dropped on
arrival). A matching becomes: rank-dependent row gather (what each rank sends) → ``permute`` →
rank-dependent row update (copy or reduce). All gathers of a step read the buffer as it was at
the start of the step, as the Schedule IR requires.

On Neuron a permute must be rings over directly connected ranks: a ring schedule's steps pass, a
tree's or a direct schedule's do not, and :mod:`synth.closed.constraints` says which step fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..collectives import Collective
from ..errors import SynthError
from ..schedule import Schedule
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


def _matchings(pairs: dict[tuple[int, int, str], list[int]]) -> list[list[tuple[int, int, str]]]:
    """Greedy split of (src, dst, op) pairs into matchings (unique sources and targets), one op
    per matching."""
    left = sorted(pairs, key=lambda p: (-len(pairs[p]), p))
    out: list[list[tuple[int, int, str]]] = []
    while left:
        used_s: set[int] = set()
        used_d: set[int] = set()
        op = left[0][2]
        batch, rest = [], []
        for s, d, o in left:
            if s in used_s or d in used_d or o != op:
                rest.append((s, d, o))
            else:
                batch.append((s, d, o))
                used_s.add(s)
                used_d.add(d)
        out.append(batch)
        left = rest
    return out


def lower_schedule(schedule: Schedule, mesh: Mesh, inputs: Sequence[TensorSpec],
                   reduce_op: str = "add") -> Program:
    """The permute program of ``schedule`` for one input tensor per rank."""
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
    for si, step in enumerate(schedule.steps):
        b.stage = f"step {si}"
        pairs: dict[tuple[int, int, str], list[int]] = {}
        for tr in step.transfers:
            pairs.setdefault((tr.src, tr.dst, tr.op), []).append(tr.chunk)
        start = buf
        received = []
        for batch in _matchings(pairs):
            q = max(len(pairs[p]) for p in batch)
            send = [[0] * q for _ in range(n)]
            recv = [[-1] * q for _ in range(n)]
            for s, d, o in batch:
                for j, chunk in enumerate(sorted(pairs[(s, d, o)])):
                    send[s][j] = chunk
                    recv[d][j] = chunk
            sel = b.take_rows(start, axes, send)
            moved = b.call("permute", sel, axes, perm=tuple((s, d) for s, d, _ in batch))
            received.append((moved, recv, "copy" if batch[0][2] == "copy" else reduce_op))
        for moved, recv, op in received:
            buf = b.put_rows(buf, moved, axes, recv, op)
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
    limit = 2 * mesh.size
    return [LoweredPlan(collective, s, name) for name, s in sorted(found.items())
            if permute_calls(s) <= limit]


def permute_calls(schedule: Schedule) -> int:
    """How many permute calls the lowering makes (matchings per step, summed)."""
    total = 0
    for step in schedule.steps:
        pairs = {(t.src, t.dst, t.op): [] for t in step.transfers}
        total += len(_matchings(pairs))  # type: ignore[arg-type]
    return total
