"""The program IR of a composed closed-stack strategy.

A :class:`Program` is SPMD: every rank runs the same op list on its own tensors. Values are named
(SSA); each op reads ``ins`` and writes ``outs``. Two kinds of op:

* **vendor calls** on replica groups given by mesh ``axes`` (see :mod:`synth.closed.mesh`):
  ``all_gather`` (concatenate along ``dim`` in group order), ``reduce_scatter`` (reduce with
  ``op``, split ``dim`` into group-size parts, keep the own part), ``all_reduce``, ``all_to_all``
  (split ``dim`` into parts, part i to group member i, concatenate received parts along ``dim2`` in
  group order) and ``permute`` (``perm``: (source, target) positions inside each group; a position
  that is no target receives zeros);
* **tensor transformations**: ``reshape``, ``transpose``, ``concat``, ``split``, ``pad`` (append
  zeros along ``dim`` up to ``length``), ``unpad`` (keep the first ``length`` along ``dim``),
  ``take_rows`` (rank-dependent row gather: row j of the output is row ``table[p][j]`` of the input,
  p the rank's position along ``axes``), ``put_rows`` (rank-dependent row update of ``ins[0]`` with
  the rows of ``ins[1]`` at ``table[p]``, -1 = dropped, combined with ``op`` or copied) and
  ``combine`` (elementwise ``op`` of two tensors).

Shapes are concrete: a program is built for one list of input (shape, dtype).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import SynthError
from .mesh import Mesh

CALLS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "permute")
TRANSFORMS = ("reshape", "transpose", "concat", "split", "pad", "unpad", "take_rows", "put_rows",
              "combine")
REDUCE_OPS = ("add", "min", "max")


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Op:
    kind: str
    ins: tuple[str, ...]
    outs: tuple[str, ...]
    axes: tuple[str, ...] = ()
    dim: int = 0
    dim2: int = 0
    op: str = "copy"
    perm: tuple[tuple[int, int], ...] = ()
    shape: tuple[int, ...] = ()
    order: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    length: int = 0
    table: tuple[tuple[int, ...], ...] = ()
    stage: str = ""
    """Which part of the strategy the op belongs to (tensor, piece, level), for reports."""

    @property
    def is_call(self) -> bool:
        return self.kind in CALLS


@dataclass(frozen=True)
class Program:
    """A composed strategy for one collective on one mesh, for concrete input tensors."""

    collective: str
    mesh: Mesh
    inputs: tuple[tuple[str, TensorSpec], ...]
    outputs: tuple[str, ...]
    ops: tuple[Op, ...]
    reduce_op: str = "add"
    name: str = ""
    families: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def calls(self) -> list[Op]:
        return [o for o in self.ops if o.is_call]

    def specs(self) -> dict[str, TensorSpec]:
        """Shape and dtype of every value (shape inference; raises on an ill-formed program)."""
        return infer(self)


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs)


def infer(program: Program) -> dict[str, TensorSpec]:
    env: dict[str, TensorSpec] = dict(program.inputs)
    mesh = program.mesh
    for i, op in enumerate(program.ops):
        try:
            ins = [env[v] for v in op.ins]
        except KeyError as exc:
            raise SynthError(f"op {i} ({op.kind}) reads undefined value {exc}") from None
        outs = _infer_op(op, ins, mesh)
        if len(outs) != len(op.outs):
            raise SynthError(f"op {i} ({op.kind}) has {len(op.outs)} outputs, expected {len(outs)}")
        for name, spec in zip(op.outs, outs, strict=True):
            if name in env:
                raise SynthError(f"op {i} ({op.kind}) writes {name} twice")
            env[name] = spec
    for o in program.outputs:
        if o not in env:
            raise SynthError(f"program output {o} is never written")
    return env


def _infer_op(op: Op, ins: list[TensorSpec], mesh: Mesh) -> list[TensorSpec]:
    k = op.kind
    x = ins[0]
    shp, dt = list(x.shape), x.dtype
    g = mesh.group_size(op.axes) if op.axes else 1

    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise SynthError(f"{k}: {msg} (input shape {tuple(x.shape)})")

    if k == "all_gather":
        need(0 <= op.dim < len(shp), f"dim {op.dim} out of range")
        shp[op.dim] *= g
        return [TensorSpec(tuple(shp), dt)]
    if k == "reduce_scatter":
        need(0 <= op.dim < len(shp) and shp[op.dim] % g == 0,
             f"dim {op.dim} must be divisible by the group size {g}")
        shp[op.dim] //= g
        return [TensorSpec(tuple(shp), dt)]
    if k in ("all_reduce", "permute"):
        return [x]
    if k == "all_to_all":
        need(shp[op.dim] % g == 0, f"split dim {op.dim} must be divisible by the group size {g}")
        shp[op.dim] //= g
        shp[op.dim2] *= g
        return [TensorSpec(tuple(shp), dt)]
    if k == "reshape":
        need(_prod(op.shape) == _prod(shp), f"cannot reshape to {op.shape}")
        return [TensorSpec(tuple(op.shape), dt)]
    if k == "transpose":
        need(sorted(op.order) == list(range(len(shp))), f"bad transpose order {op.order}")
        return [TensorSpec(tuple(shp[i] for i in op.order), dt)]
    if k == "concat":
        total = 0
        for s in ins:
            need(s.dtype == dt and len(s.shape) == len(shp)
                 and all(a == b for j, (a, b) in enumerate(zip(s.shape, shp, strict=True))
                         if j != op.dim), "concatenated tensors differ")
            total += s.shape[op.dim]
        shp[op.dim] = total
        return [TensorSpec(tuple(shp), dt)]
    if k == "split":
        need(sum(op.sizes) == shp[op.dim], f"split sizes {op.sizes} do not add up")
        out = []
        for s in op.sizes:
            part = list(shp)
            part[op.dim] = s
            out.append(TensorSpec(tuple(part), dt))
        return out
    if k == "pad":
        need(op.length >= shp[op.dim], f"cannot pad to {op.length}")
        shp[op.dim] = op.length
        return [TensorSpec(tuple(shp), dt)]
    if k == "unpad":
        need(op.length <= shp[op.dim], f"cannot unpad to {op.length}")
        shp[op.dim] = op.length
        return [TensorSpec(tuple(shp), dt)]
    if k == "take_rows":
        need(len(op.table) == g and len({len(t) for t in op.table}) == 1, "bad row table")
        need(min(map(min, op.table)) >= 0 and max(map(max, op.table)) < shp[0],
             "row index out of range")
        shp[0] = len(op.table[0])
        return [TensorSpec(tuple(shp), dt)]
    if k == "put_rows":
        v = ins[1]
        need(len(op.table) == g and all(len(t) == v.shape[0] for t in op.table), "bad row table")
        need(min(map(min, op.table)) >= -1 and max(map(max, op.table)) < shp[0],
             "row index out of range")
        need(v.shape[1:] == x.shape[1:] and v.dtype == dt, "row shapes differ")
        return [x]
    if k == "combine":
        need(ins[1] == x, "combined tensors differ")
        return [x]
    raise SynthError(f"unknown op kind '{k}'")


# ------------------------------------------------------------------------------------ builder
class Builder:
    """Appends ops with fresh value names; skips no-op transforms; tracks shapes as it goes."""

    def __init__(self, mesh: Mesh, inputs: Sequence[TensorSpec]) -> None:
        self.mesh = mesh
        self.ops: list[Op] = []
        self.env: dict[str, TensorSpec] = {}
        self.inputs: list[tuple[str, TensorSpec]] = []
        self._n = 0
        self.stage = ""
        for i, spec in enumerate(inputs):
            name = f"x{i}"
            self.inputs.append((name, spec))
            self.env[name] = spec

    def fresh(self) -> str:
        self._n += 1
        return f"t{self._n}"

    def shape(self, v: str) -> tuple[int, ...]:
        return self.env[v].shape

    def emit(self, kind: str, ins: Sequence[str], nout: int = 1, **kw: Any) -> list[str]:
        outs = tuple(self.fresh() for _ in range(nout))
        op = Op(kind, tuple(ins), outs, stage=self.stage, **kw)
        specs = _infer_op(op, [self.env[v] for v in ins], self.mesh)
        for name, spec in zip(outs, specs, strict=True):
            self.env[name] = spec
        self.ops.append(op)
        return list(outs)

    # transforms -----------------------------------------------------------------------------
    def reshape(self, v: str, shape: Sequence[int]) -> str:
        shape = tuple(int(s) for s in shape)
        if self.shape(v) == shape:
            return v
        return self.emit("reshape", [v], shape=shape)[0]

    def flat(self, v: str) -> str:
        return self.reshape(v, (_prod(self.shape(v)),))

    def transpose(self, v: str, order: Sequence[int]) -> str:
        order = tuple(order)
        if order == tuple(range(len(order))):
            return v
        return self.emit("transpose", [v], order=order)[0]

    def concat(self, vs: Sequence[str], dim: int) -> str:
        if len(vs) == 1:
            return vs[0]
        return self.emit("concat", vs, dim=dim)[0]

    def split(self, v: str, sizes: Sequence[int], dim: int) -> list[str]:
        if len(sizes) == 1:
            return [v]
        return self.emit("split", [v], nout=len(sizes), sizes=tuple(sizes), dim=dim)

    def pad(self, v: str, dim: int, length: int) -> str:
        if self.shape(v)[dim] == length:
            return v
        return self.emit("pad", [v], dim=dim, length=length)[0]

    def unpad(self, v: str, dim: int, length: int) -> str:
        if self.shape(v)[dim] == length:
            return v
        return self.emit("unpad", [v], dim=dim, length=length)[0]

    def take_rows(self, v: str, axes: Sequence[str], table: Sequence[Sequence[int]]) -> str:
        table = tuple(map(tuple, table))
        ident = tuple(range(self.shape(v)[0]))
        if all(t == ident for t in table):
            return v
        return self.emit("take_rows", [v], axes=tuple(axes), table=table)[0]

    def put_rows(self, base: str, val: str, axes: Sequence[str], table: Sequence[Sequence[int]],
                 op: str = "copy") -> str:
        table = tuple(map(tuple, table))
        return self.emit("put_rows", [base, val], axes=tuple(axes), table=table, op=op)[0]

    def combine(self, a: str, b: str, op: str) -> str:
        return self.emit("combine", [a, b], op=op)[0]

    # calls -----------------------------------------------------------------------------------
    def call(self, kind: str, v: str, axes: Sequence[str], **kw: Any) -> str:
        return self.emit(kind, [v], axes=tuple(axes), **kw)[0]

    def program(self, collective: str, outputs: Sequence[str], reduce_op: str, name: str,
                families: Sequence[str], meta: dict[str, Any] | None = None) -> Program:
        return Program(collective, self.mesh, tuple(self.inputs), tuple(outputs), tuple(self.ops),
                       reduce_op, name, tuple(families), dict(meta or {}))


def with_name(program: Program, name: str, families: Sequence[str]) -> Program:
    return replace(program, name=name, families=tuple(families))
