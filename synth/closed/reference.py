"""NumPy reference semantics of the vendor primitives, the collectives, and the program IR.

Every function works on *stacked* values: an array whose first axis is the rank (``x[r]`` is rank
r's tensor). The primitives follow XLA's operation semantics, which torch-xla (``xm.*``) and
``jax.lax`` both lower to:

* replica groups must cover every rank exactly once and have one size; the order inside a group
  is the concatenation (and scatter) order;
* ``all_gather``: every member gets the members' tensors concatenated along ``dim`` in group order;
* ``reduce_scatter``: the group's reduction (in group order) split along ``dim`` into group-size
  equal parts; member i keeps part i; the dim must divide;
* ``all_reduce``: every member gets the reduction;
* ``all_to_all``: member j's tensor is split along ``split_dim`` into group-size parts; member i
  receives part i of every member and concatenates them along ``concat_dim`` in group order;
* ``collective_permute``: (source, target) pairs, no two sharing a source or a target; a target gets
  its source's tensor, every rank that is no target gets zeros.

Reductions accumulate in group order in the tensor's own dtype (``add``, ``min``, ``max``). Tests
use inputs whose sums are exact, so the order does not change a bit of the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import SynthError
from .ir import Program

Groups = Sequence[Sequence[int]]


def check_groups(groups: Groups, n: int, what: str = "replica groups") -> None:
    seen = sorted(r for g in groups for r in g)
    if seen != list(range(n)):
        raise SynthError(f"{what} {_short(groups)} must list every one of the {n} ranks exactly once")
    if len({len(g) for g in groups}) != 1:
        raise SynthError(f"{what} {_short(groups)} must all have the same size")


def _short(groups: Groups) -> str:
    text = str([list(g) for g in groups])
    return text if len(text) < 80 else text[:77] + "...]"


def reduce(arrays: Sequence[np.ndarray], op: str) -> np.ndarray:
    """Reduce in list order, in the arrays' dtype."""
    if op not in ("add", "min", "max"):
        raise SynthError(f"unsupported reduction '{op}' (add, min, max)")
    if arrays[0].dtype == np.bool_ and op == "add":
        raise SynthError("cannot add booleans; use min or max")
    acc = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        if op == "add":
            acc = np.add(acc, a, dtype=acc.dtype)
        elif op == "min":
            acc = np.minimum(acc, a)
        else:
            acc = np.maximum(acc, a)
    return acc


def _per_group(x: np.ndarray, groups: Groups,
               results: Callable[[Sequence[int]], Sequence[np.ndarray]]) -> np.ndarray:
    """Stacked results of a grouped primitive: ``results(g)`` gives each member of group ``g``
    its tensor, in group order (the groups are checked first)."""
    check_groups(groups, len(x))
    out: list[np.ndarray | None] = [None] * len(x)
    for g in groups:
        for r, y in zip(g, results(g), strict=True):
            out[r] = y
    return np.stack(out)  # type: ignore[arg-type]


def all_gather(x: np.ndarray, groups: Groups, dim: int) -> np.ndarray:
    return _per_group(x, groups, lambda g: [np.concatenate([x[r] for r in g], axis=dim)] * len(g))


def reduce_scatter(x: np.ndarray, groups: Groups, dim: int, op: str) -> np.ndarray:
    def parts(g: Sequence[int]) -> list[np.ndarray]:
        if x.shape[1 + dim] % len(g):
            raise SynthError(f"reduce_scatter: dim {dim} of size {x.shape[1 + dim]} is not divisible "
                             f"by the group size {len(g)}")
        return np.split(reduce([x[r] for r in g], op), len(g), axis=dim)

    return _per_group(x, groups, parts)


def all_reduce(x: np.ndarray, groups: Groups, op: str) -> np.ndarray:
    return _per_group(x, groups, lambda g: [reduce([x[r] for r in g], op)] * len(g))


def all_to_all(x: np.ndarray, groups: Groups, split_dim: int, concat_dim: int) -> np.ndarray:
    def received(g: Sequence[int]) -> list[np.ndarray]:
        if x.shape[1 + split_dim] % len(g):
            raise SynthError(f"all_to_all: split dimension {split_dim} of size {x.shape[1 + split_dim]} "
                             f"is not divisible by the split count {len(g)}")
        parts = {r: np.split(x[r], len(g), axis=split_dim) for r in g}
        return [np.concatenate([parts[s][i] for s in g], axis=concat_dim) for i in range(len(g))]

    return _per_group(x, groups, received)


def check_pairs(pairs: Sequence[Sequence[int]], n: int) -> None:
    srcs = [int(p[0]) for p in pairs]
    dsts = [int(p[1]) for p in pairs]
    bad = [r for r in srcs + dsts if not 0 <= r < n]
    if bad:
        raise SynthError(f"collective_permute: rank {bad[0]} is out of range 0..{n - 1}")
    if len(set(srcs)) != len(srcs):
        raise SynthError("collective_permute: two pairs share a source (XLA CollectivePermute rule)")
    if len(set(dsts)) != len(dsts):
        raise SynthError("collective_permute: two pairs share a target (XLA CollectivePermute rule)")


def collective_permute(x: np.ndarray, pairs: Sequence[Sequence[int]]) -> np.ndarray:
    check_pairs(pairs, len(x))
    out = np.zeros_like(x)
    for s, t in pairs:
        out[t] = x[s]
    return out


# ------------------------------------------------------------------------------ the collectives
def padded_rows(x: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Stacked x (ranks, s0, ...) zero-padded along s0 to a multiple of n; returns (x, rows per block)."""
    s0 = x.shape[1]
    c = -(-s0 // n)
    if c * n != s0:
        pad = [(0, 0)] * x.ndim
        pad[1] = (0, c * n - s0)
        x = np.pad(x, pad)
    return x, c


def expected(kind: str, x: np.ndarray, op: str = "add") -> np.ndarray:
    """The collective's result, stacked, computed directly (no primitives).

    * allgather: every rank gets all ranks' tensors concatenated along dim 0 in rank order;
    * allreduce: every rank gets the reduction (same shape);
    * reducescatter: the reduction, zero-padded along dim 0 to a multiple of the rank count,
      split into equal parts; rank r gets part r (shape (ceil(s0 / N), ...));
    * alltoall: each rank's tensor zero-padded the same way and split into N parts; rank j gets part
      j of every rank, concatenated in rank order (shape (N * ceil(s0 / N), ...)).
    """
    n = len(x)
    if kind == "allgather":
        cat = np.concatenate(list(x), axis=0)
        return np.stack([cat] * n)
    if kind == "allreduce":
        red = reduce(list(x), op)
        return np.stack([red] * n)
    if kind == "reducescatter":
        xp, c = padded_rows(x, n)
        red = reduce(list(xp), op)
        return np.stack([red[r * c:(r + 1) * c] for r in range(n)])
    if kind == "alltoall":
        xp, c = padded_rows(x, n)
        return np.stack([np.concatenate([xp[s][j * c:(j + 1) * c] for s in range(n)])
                         for j in range(n)])
    raise SynthError(f"no reference for collective '{kind}'")


# ------------------------------------------------------------------------------ the interpreter
def interpret(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a program on stacked inputs (one array per program input, first axis = rank)."""
    mesh = program.mesh
    n = mesh.size
    if len(inputs) != len(program.inputs):
        raise SynthError(f"program takes {len(program.inputs)} tensors, got {len(inputs)}")
    env: dict[str, np.ndarray] = {}
    for (name, spec), x in zip(program.inputs, inputs, strict=True):
        if x.shape != (n, *spec.shape) or x.dtype != np.dtype(spec.dtype):
            raise SynthError(f"input {name}: expected {(n, *spec.shape)} {spec.dtype}, "
                             f"got {x.shape} {x.dtype}")
        env[name] = x
    for op in program.ops:
        vals = [env[v] for v in op.ins]
        outs = _run(op, vals, program)
        for name, v in zip(op.outs, outs, strict=True):
            env[name] = v
    return [env[o] for o in program.outputs]


def global_pairs(program_mesh, axes: Sequence[str], perm: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(source, target) global ranks of a permute given by positions inside each group."""
    return [(g[s], g[t]) for g in program_mesh.groups(axes) for s, t in perm]


def _positions(mesh, axes: Sequence[str]) -> list[int]:
    return [mesh.position(r, axes) for r in range(mesh.size)]


def _run(op, vals: list[np.ndarray], program: Program) -> list[np.ndarray]:
    mesh = program.mesh
    k = op.kind
    x = vals[0]
    n = len(x)
    if k == "all_gather":
        return [all_gather(x, mesh.groups(op.axes), op.dim)]
    if k == "reduce_scatter":
        return [reduce_scatter(x, mesh.groups(op.axes), op.dim, op.op)]
    if k == "all_reduce":
        return [all_reduce(x, mesh.groups(op.axes), op.op)]
    if k == "all_to_all":
        return [all_to_all(x, mesh.groups(op.axes), op.dim, op.dim2)]
    if k == "permute":
        return [collective_permute(x, global_pairs(mesh, op.axes, op.perm))]
    if k == "reshape":
        return [x.reshape((n, *op.shape))]
    if k == "transpose":
        return [np.transpose(x, (0, *(i + 1 for i in op.order)))]
    if k == "concat":
        return [np.concatenate(vals, axis=op.dim + 1)]
    if k == "split":
        cuts = np.cumsum(op.sizes)[:-1]
        return list(np.split(x, cuts, axis=op.dim + 1))
    if k == "pad":
        pad = [(0, 0)] * x.ndim
        pad[op.dim + 1] = (0, op.length - x.shape[op.dim + 1])
        return [np.pad(x, pad)]
    if k == "unpad":
        idx = [slice(None)] * x.ndim
        idx[op.dim + 1] = slice(0, op.length)
        return [x[tuple(idx)]]
    if k == "take_rows":
        pos = _positions(mesh, op.axes)
        return [np.stack([x[r][list(op.table[pos[r]])] for r in range(n)])]
    if k == "put_rows":
        pos = _positions(mesh, op.axes)
        v = vals[1]
        out = np.array(x, copy=True)
        for r in range(n):
            for j, row in enumerate(op.table[pos[r]]):
                if row < 0:
                    continue
                out[r][row] = v[r][j] if op.op == "copy" else reduce([out[r][row], v[r][j]], op.op)
        return [out]
    if k == "combine":
        return [reduce([x, vals[1]], op.op)]
    raise SynthError(f"unknown op kind '{k}'")


def random_inputs(shapes: Sequence[tuple[int, ...]], dtype: str, n: int, seed: int = 0,
                  kind: str = "allreduce") -> list[np.ndarray]:
    """Stacked random inputs whose reductions are exact in ``dtype`` (small integers)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    out = []
    for shape in shapes:
        size = (n, *shape)
        if dt == np.bool_:
            out.append(rng.integers(0, 2, size=size).astype(bool))
        elif np.issubdtype(dt, np.floating):
            # integers scaled by 1/4: sums of up to 64 of them stay exact in float16/32
            lim = 8 if dt.itemsize <= 2 else 1000
            out.append((rng.integers(-lim, lim, size=size) / 4).astype(dt))
        elif np.issubdtype(dt, np.unsignedinteger):
            out.append(rng.integers(0, min(np.iinfo(dt).max, 1000) + 1, size=size).astype(dt))
        else:
            lim = min(np.iinfo(dt).max // max(n, 1), 10**6)
            out.append(rng.integers(-lim, lim, size=size).astype(dt))
    return out


def nbytes_of(shape: Sequence[int], dtype: str) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize
