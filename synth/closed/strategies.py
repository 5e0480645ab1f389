"""The strategy space: composed programs generated from the topology's hierarchy.

A :class:`Plan` is a strategy independent of tensor shapes; :func:`build_program` turns it into a
:class:`~synth.closed.ir.Program` for concrete input tensors. Families (OverlayCCL's strategy
layer, BlueConnect, Neuron's own hierarchical composition):

* ``flat``: one vendor call over every rank;
* ``hierarchical``: the same collective level by level over the mesh axes, in **every** order and
  every grouping of axes into levels (ordered set partitions). All-gather levels concatenate
  group-major, so a final transpose restores rank order; reduce-scatter transposes first;
  all-to-all transposes around every level (dimension labels are tracked, not assumed);
* ``torus-decomposition``: the hierarchical forms whose levels split the torus dimensions;
* ``rs-ar-ag`` (all-reduce): reduce-scatter over some levels, all-reduce over the remaining axes,
  all-gather back in reverse order (BlueConnect; Neuron's multi-node composition), with pad/unpad
  when the size does not divide; ``rs-ag`` (no middle all-reduce) and ``ar-ar`` (all-reduce level by
  level) too;
* ``ring-permute``: all-gather / reduce-scatter / all-reduce as rings of ``permute`` calls over a
  Hamiltonian cycle of directly linked ranks (Neuron's ring-only permute), whole group or per axis;
* ``ar-slice`` (reduce-scatter): all-reduce then keep the own block (integer reduce-scatter on
  Neuron, min/max reduce-scatter on JAX);
* ``bundled`` (M tensors): all tensors flattened and concatenated into one buffer, one strategy run,
  split back; against ``per-tensor``: the strategy run M times (calls of a stage issued back to back);
* ``pipelined``: one buffer split into K pieces run through the strategy one after the other, so
  the levels of consecutive pieces can overlap on different links.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from ..errors import SynthError
from ..topology import Topology
from .ir import Builder, Program, TensorSpec
from .mesh import Mesh, ring_cycle

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
SHORT = {"all_gather": "ag", "reduce_scatter": "rs", "all_reduce": "ar", "all_to_all": "a2a"}


@dataclass(frozen=True)
class Level:
    axes: tuple[str, ...]
    impl: str = "vendor"
    """``vendor`` (one call) or ``ring`` (a ring of permute calls)."""


@dataclass(frozen=True)
class Plan:
    collective: str
    levels: tuple[Level, ...]
    """Execution order. allreduce: the reduce-scatter levels (the all-gathers mirror them)."""
    ar_stages: tuple[tuple[str, ...], ...] = ()
    """allreduce only: all-reduce calls over these axes between the reduce-scatters and gathers."""
    slice_ar: bool = False
    """reducescatter only: all-reduce over every axis, then keep the own block."""
    pieces: int = 1
    bundling: str = "single"
    """``single`` (one tensor), ``per-tensor`` or ``bundled``."""
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    # ------------------------------------------------------------------ naming
    @property
    def core_name(self) -> str:
        c = self.collective
        if c == "reducescatter" and self.slice_ar:
            return "ar[*] > slice"
        prim = {"allgather": "ag", "reducescatter": "rs", "alltoall": "a2a", "allreduce": "rs"}[c]
        parts = [_level_name(prim, lv) for lv in self.levels]
        if c == "allreduce":
            parts += [f"ar[{','.join(s)}]" for s in self.ar_stages]
            parts += [_level_name("ag", lv) for lv in reversed(self.levels)]
        return " > ".join(parts)

    @property
    def name(self) -> str:
        name = self.core_name
        if self.pieces > 1:
            name = f"pipelined×{self.pieces}( {name} )"
        if self.bundling == "bundled":
            name = f"bundled( {name} )"
        elif self.bundling == "per-tensor":
            name = f"per-tensor( {name} )"
        return name

    def families(self, mesh: Mesh) -> tuple[str, ...]:
        fam: list[str] = []
        c = self.collective
        vendor_levels = [lv for lv in self.levels if lv.impl == "vendor"]
        if c == "reducescatter" and self.slice_ar:
            fam.append("ar-slice")
        elif c == "allreduce":
            if not self.levels:
                fam.append("flat" if len(self.ar_stages) == 1 else "ar-ar")
            elif self.ar_stages:
                fam.append("rs-ar-ag")
            else:
                fam.append("rs-ag")
        elif len(self.levels) == 1:
            if vendor_levels:
                fam.append("flat")
        else:
            fam.append("hierarchical")
        if c != "reducescatter" or not self.slice_ar:
            stages = [lv.axes for lv in self.levels] + list(self.ar_stages)
            if len(stages) > 1 and "hierarchical" not in fam:
                fam.append("hierarchical")
            torus = [a.name for a in mesh.axes if a.role == "torus"]
            if len(torus) > 1 and len({i for i, s in enumerate(stages) for a in s if a in torus}) > 1:
                fam.append("torus-decomposition")
        if any(lv.impl == "ring" for lv in self.levels):
            fam.append("ring-permute")
        if self.pieces > 1:
            fam.append("pipelined")
        if self.bundling != "single":
            fam.append(self.bundling)
        return tuple(fam)

    @property
    def vendor_calls(self) -> int:
        n = sum(1 for lv in self.levels if lv.impl == "vendor")
        if self.collective == "allreduce":
            n = 2 * n + len(self.ar_stages)
        return n + (1 if self.slice_ar else 0)


def _level_name(prim: str, lv: Level) -> str:
    axes = ",".join(lv.axes)
    return f"ring-{prim}[{axes}]" if lv.impl == "ring" else f"{prim}[{axes}]"


# ------------------------------------------------------------------------------------ enumeration
def ordered_partitions(items: Sequence[str]) -> Iterator[tuple[tuple[str, ...], ...]]:
    """Every ordered partition of ``items`` into non-empty blocks (blocks keep the items' order)."""
    items = tuple(items)
    if not items:
        yield ()
        return
    n = len(items)
    for mask in range(1, 1 << n):
        first = tuple(items[i] for i in range(n) if mask >> i & 1)
        rest = tuple(items[i] for i in range(n) if not mask >> i & 1)
        for tail in ordered_partitions(rest):
            yield (first, *tail)


def base_plans(collective: str, mesh: Mesh) -> list[Plan]:
    """Every single-tensor, unpipelined strategy for ``collective`` on ``mesh``."""
    if collective not in COLLECTIVES:
        raise SynthError(f"closed-stack strategies exist for {', '.join(COLLECTIVES)}, "
                         f"not '{collective}'")
    axes = mesh.names
    plans: list[Plan] = []
    if collective in ("allgather", "reducescatter", "alltoall"):
        for part in ordered_partitions(axes):
            plans.append(Plan(collective, tuple(Level(b) for b in part)))
        if collective in ("allgather", "reducescatter"):
            plans.append(Plan(collective, (Level(axes, "ring"),)))
            if len(axes) > 1:
                plans.append(Plan(collective, tuple(Level((a,), "ring") for a in reversed(axes))))
        if collective == "reducescatter":
            plans.append(Plan(collective, (), slice_ar=True))
    else:
        plans.append(Plan(collective, (), ar_stages=(axes,)))
        n = len(axes)
        for size in range(1, n + 1):
            for subset in itertools.combinations(axes, size):
                rest = tuple(a for a in axes if a not in subset)
                for part in ordered_partitions(subset):
                    plans.append(Plan(collective, tuple(Level(b) for b in part),
                                      ar_stages=(rest,) if rest else ()))
        if n > 1:
            for perm in itertools.permutations(axes):
                plans.append(Plan(collective, (), ar_stages=tuple((a,) for a in perm)))
        plans.append(Plan(collective, (Level(axes, "ring"),)))
        if n > 1:
            plans.append(Plan(collective, tuple(Level((a,), "ring") for a in reversed(axes))))
    return plans


def all_plans(collective: str, mesh: Mesh, tensors: int = 1,
              pieces: Sequence[int] = (2, 4)) -> list[Plan]:
    """Base plans, their pipelined forms, and (``tensors`` > 1) per-tensor and bundled forms."""
    out: list[Plan] = []
    for p in base_plans(collective, mesh):
        variants = [p]
        if p.vendor_calls >= 2 and not p.slice_ar:
            variants += [replace(p, pieces=k) for k in pieces]
        if tensors == 1:
            out += variants
        else:
            out.append(replace(p, bundling="per-tensor"))
            out += [replace(v, bundling="bundled") for v in variants]
    return out


# ------------------------------------------------------------------------------------ building
@dataclass
class Context:
    mesh: Mesh
    topology: Topology | None = None
    _rings: dict = field(default_factory=dict)

    def ring(self, axes: tuple[str, ...]) -> tuple[int, ...]:
        if axes not in self._rings:
            cyc = ring_cycle(self.mesh, axes, self.topology) if self.topology is not None else None
            self._rings[axes] = cyc
        cyc = self._rings[axes]
        if cyc is None:
            raise SynthError(f"no ring of directly linked ranks covers each group over "
                             f"[{','.join(axes)}]")
        return cyc


def build_program(plan: Plan, ctx: Context, inputs: Sequence[TensorSpec],
                  reduce_op: str = "add") -> Program:
    """The program of ``plan`` for these input tensors (``len(inputs)`` = the tensor count)."""
    mesh = ctx.mesh
    n = mesh.size
    c = plan.collective
    if c not in ("allreduce", "reducescatter") and reduce_op != "add":
        reduce_op = "add"
    if plan.bundling == "single" and len(inputs) != 1:
        raise SynthError(f"strategy '{plan.name}' takes one tensor, got {len(inputs)}")
    for spec in inputs:
        if c != "allreduce" and len(spec.shape) < 1:
            raise SynthError(f"{c} needs tensors with at least one dimension")
    if plan.bundling == "bundled" and len({s.dtype for s in inputs}) > 1:
        raise SynthError("bundling needs every tensor in one dtype")
    b = Builder(mesh, inputs)
    # 2-D (blocks, width) view of every tensor
    bufs: list[str] = []
    widths: list[int] = []
    blocks_in = n if c in ("reducescatter", "alltoall") else 1
    blocks_out = n if c in ("allgather", "alltoall") else 1
    for i, (name, spec) in enumerate(b.inputs):
        b.stage = f"tensor {i}"
        t = b.flat(name)
        if blocks_in > 1:
            s0 = spec.shape[0]
            r = math.prod(spec.shape[1:])
            rows = -(-s0 // n)
            t = b.pad(t, 0, n * rows * r)
            w = rows * r
        else:
            w = math.prod(spec.shape)
        bufs.append(t)
        widths.append(w)

    def run_core(buf: str, width: int, tag: str) -> str:
        """flat (blocks_in*width,) -> flat (blocks_out*width,), pipelined if asked."""
        if plan.pieces <= 1:
            b.stage = tag
            return _core(b, plan, ctx, buf, width, reduce_op)
        k = plan.pieces
        w = -(-width // k)
        b.stage = tag
        t = b.reshape(buf, (blocks_in, width))
        t = b.pad(t, 1, k * w)
        parts = b.split(t, [w] * k, 1)
        outs = []
        for j, part in enumerate(parts):
            b.stage = f"{tag} piece {j}"
            y = _core(b, plan, ctx, b.flat(part), w, reduce_op)
            outs.append(b.reshape(y, (blocks_out, w)))
        b.stage = tag
        y = b.concat(outs, 1)
        y = b.unpad(y, 1, width)
        return b.flat(y)

    results: list[str] = []
    if plan.bundling == "bundled":
        b.stage = "bundle"
        two_d = [b.reshape(t, (blocks_in, w)) for t, w in zip(bufs, widths, strict=True)]
        big = b.flat(b.concat(two_d, 1))
        y = run_core(big, sum(widths), "bundle")
        b.stage = "bundle"
        y = b.reshape(y, (blocks_out, sum(widths)))
        results = [b.flat(p) for p in b.split(y, widths, 1)]
    elif plan.bundling == "per-tensor":
        chains = []
        for i, (t, w) in enumerate(zip(bufs, widths, strict=True)):
            start = len(b.ops)
            results.append(run_core(t, w, f"tensor {i}"))
            chains.append(b.ops[start:])
            del b.ops[start:]
        b.ops += _interleave(chains)
    else:
        results = [run_core(bufs[0], widths[0], "tensor 0")]
    outs = []
    for i, ((_, spec), y) in enumerate(zip(b.inputs, results, strict=True)):
        b.stage = f"tensor {i}"
        if c == "allgather":
            outs.append(b.reshape(y, (n * spec.shape[0], *spec.shape[1:])))
        elif c == "allreduce":
            outs.append(b.reshape(y, spec.shape))
        elif c == "reducescatter":
            outs.append(b.reshape(y, (-(-spec.shape[0] // n), *spec.shape[1:])))
        else:
            outs.append(b.reshape(y, (n * -(-spec.shape[0] // n), *spec.shape[1:])))
    return b.program(c, outs, reduce_op, plan.name, plan.families(mesh),
                     meta={"plan": plan, "tensors": len(inputs)})


def _interleave(chains: list[list]) -> list:
    """Merge per-tensor op lists stage by stage, so the calls of one stage run back to back."""
    segs = []
    for ops in chains:
        cur: list[list] = [[]]
        for op in ops:
            if op.is_call:
                cur.append([op])
                cur.append([])
            else:
                cur[-1].append(op)
        segs.append(cur)
    out = []
    for i in range(max(len(s) for s in segs)):
        for s in segs:
            if i < len(s):
                out += s[i]
    return out


def _core(b: Builder, plan: Plan, ctx: Context, t: str, width: int, op: str) -> str:
    c = plan.collective
    mesh = ctx.mesh
    if c == "allgather":
        return _ag_levels(b, ctx, t, plan.levels, width)
    if c == "reducescatter":
        if plan.slice_ar:
            y = b.call("all_reduce", t, mesh.names, op=op)
            y = b.reshape(y, (mesh.size, width))
            y = b.take_rows(y, mesh.names, [[p] for p in range(mesh.size)])
            return b.flat(y)
        return _rs_levels(b, ctx, t, plan.levels, width, op)
    if c == "alltoall":
        return _a2a_levels(b, ctx, t, plan.levels, width)
    # allreduce
    p = math.prod(mesh.group_size(lv.axes) for lv in plan.levels)
    padded = -(-width // p) * p
    y = b.pad(t, 0, padded)
    for lv in plan.levels:
        y = _rs_level(b, ctx, y, lv, op)
    for axes in plan.ar_stages:
        y = b.call("all_reduce", y, axes, op=op)
    for lv in reversed(plan.levels):
        y = _ag_level(b, ctx, y, lv)
    return b.unpad(y, 0, width)


# all-gather ------------------------------------------------------------------------------------
def _ag_level(b: Builder, ctx: Context, t: str, lv: Level) -> str:
    if lv.impl == "vendor":
        return b.call("all_gather", t, lv.axes, dim=0)
    g = ctx.mesh.group_size(lv.axes)
    cyc = ctx.ring(lv.axes)
    idx = {p: k for k, p in enumerate(cyc)}
    perm = tuple((cyc[k], cyc[(k + 1) % g]) for k in range(g))
    m = b.shape(t)[0]
    got = [t]
    for _ in range(g - 1):
        got.append(b.call("permute", got[-1], lv.axes, perm=perm))
    y = b.reshape(b.concat([b.reshape(v, (1, m)) for v in got], 0), (g, m))
    # got[s] on position p holds the block of the position s steps back along the cycle
    table = [[(idx[p] - idx[j]) % g for j in range(g)] for p in range(g)]
    y = b.take_rows(y, lv.axes, table)
    return b.flat(y)


def _ag_levels(b: Builder, ctx: Context, t: str, levels: Sequence[Level], width: int) -> str:
    mesh = ctx.mesh
    digits: list[str] = []
    for lv in levels:
        t = _ag_level(b, ctx, t, lv)
        digits = list(lv.axes) + digits
    natural = list(mesh.names)
    if digits != natural:
        t = b.reshape(t, [mesh.axis(a).size for a in digits] + [width])
        t = b.transpose(t, [digits.index(a) for a in natural] + [len(digits)])
        t = b.flat(t)
    return t


# reduce-scatter --------------------------------------------------------------------------------
def _rs_level(b: Builder, ctx: Context, t: str, lv: Level, op: str) -> str:
    if lv.impl == "vendor":
        return b.call("reduce_scatter", t, lv.axes, dim=0, op=op)
    g = ctx.mesh.group_size(lv.axes)
    cyc = ctx.ring(lv.axes)
    idx = {p: k for k, p in enumerate(cyc)}
    perm = tuple((cyc[k], cyc[(k + 1) % g]) for k in range(g))
    m = b.shape(t)[0] // g
    y = b.reshape(t, (g, m))
    # at step s position p adds its share of the block of the position s+1 steps back
    table = [[cyc[(idx[p] - s - 1) % g] for s in range(g)] for p in range(g)]
    y = b.take_rows(y, lv.axes, table)
    rows = b.split(y, [1] * g, 0)
    acc = rows[0]
    for s in range(1, g):
        acc = b.call("permute", acc, lv.axes, perm=perm)
        acc = b.combine(acc, rows[s], op)
    return b.flat(acc)


def _rs_levels(b: Builder, ctx: Context, t: str, levels: Sequence[Level], width: int,
               op: str) -> str:
    mesh = ctx.mesh
    order = [a for lv in levels for a in lv.axes]
    natural = list(mesh.names)
    if order != natural:
        t = b.reshape(t, [*mesh.shape, width])
        t = b.transpose(t, [natural.index(a) for a in order] + [len(natural)])
        t = b.flat(t)
    for lv in levels:
        t = _rs_level(b, ctx, t, lv, op)
    return t


# all-to-all ------------------------------------------------------------------------------------
def _a2a_levels(b: Builder, ctx: Context, t: str, levels: Sequence[Level], width: int) -> str:
    """Dims are labelled by axis; each level moves its axes' dims outermost, exchanges, and the
    exchanged dims then index the source instead of the destination."""
    mesh = ctx.mesh
    natural = list(mesh.names)
    labels = list(natural)  # destination digits, then the width
    t = b.reshape(t, [*mesh.shape, width])
    for lv in levels:
        front = list(lv.axes)
        new = front + [a for a in labels if a not in front]
        t = b.transpose(t, [labels.index(a) for a in new] + [len(labels)])
        labels = new
        g = mesh.group_size(front)
        rest = [mesh.axis(a).size for a in labels[len(front):]] + [width]
        t = b.reshape(t, (g * math.prod(rest),))
        t = b.call("all_to_all", t, lv.axes, dim=0, dim2=0)
        t = b.reshape(t, [mesh.axis(a).size for a in labels] + [width])
    t = b.transpose(t, [labels.index(a) for a in natural] + [len(natural)])
    return b.flat(t)
