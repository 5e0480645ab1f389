"""Symbolic values, buffer layout and postconditions for the XML interpreter.

A chunk's symbolic value is the set of input contributions it combines: pairs (input chunk index j,
contributing rank q), i.e. ``in_q[j]``. It is stored compactly as a tuple of ``(j, rank_mask)``
pairs sorted by j (almost always a single pair): ``((3, 0b1011),)`` is
``in_0[3] ⊕ in_1[3] ⊕ in_3[3]``. ``None`` is UNDEFINED (scratch never written, output before it is
produced, a non-root broadcast input). For non-combining collectives a value is a single
contribution: the identity of the input element that was copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..collectives import Collective
from ..errors import SynthError
from ..topology import rank_ranges
from .program import Program
from .runtimes import RECV_TYPES, SEND_TYPES, normalize_coll, physical_chunks

Value = tuple[tuple[int, int], ...]

BUILTIN = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
"""Collectives whose postcondition follows from the file alone (spec §8)."""


def combine(a: Value, b: Value) -> Value | None:
    """``a ⊕ b`` of two disjoint contribution sets; None when they share a contribution."""
    if len(a) == 1 and len(b) == 1:
        ja, ma = a[0]
        jb, mb = b[0]
        if ja == jb:
            if ma & mb:
                return None
            return ((ja, ma | mb),)
    d = dict(a)
    for j, m in b:
        old = d.get(j)
        if old is None:
            d[j] = m
        elif old & m:
            return None
        else:
            d[j] = old | m
    return tuple(sorted(d.items()))


def describe(v: Value | None) -> str:
    """Human form: ``in[3] from ranks 0-2,5``; UNDEFINED for None."""
    if v is None:
        return "UNDEFINED"
    parts = []
    for j, m in v:
        ranks = [q for q in range(m.bit_length()) if m >> q & 1]
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        parts.append(f"in[{j}] of {who}")
    return " ⊕ ".join(parts)


def overlap(a: Value, b: Value) -> str:
    """The shared contributions of two values, for a double-count message."""
    d = dict(a)
    shared = []
    for j, m in b:
        if j in d and d[j] & m:
            shared.append((j, d[j] & m))
    return describe(tuple(shared))


@dataclass
class Semantics:
    """What a run starts from and must end with, independent of the in-place/out-of-place mode."""

    kind: str                       # normalized collective kind ("custom" for others)
    name: str
    root: int | None
    in_size: list[int]              # physical input extent per rank (chunks)
    out_size: list[int]
    chunks_per_rank: int            # k, for the in-place aliasing of allgather/reducescatter
    init: list[list[Value | None]]  # initial value of each input slot, per rank
    expect: list[list[tuple[Value, ...] | None]]
    """Acceptable final values of each output slot per rank; None = unconstrained."""

    def layout(self, rank: int, mode: str, s_chunks: int) -> tuple[int, int, int, int]:
        """(input base, output base, scratch base, total cells) of ``rank``'s memory (§3.4)."""
        ni, no = self.in_size[rank], self.out_size[rank]
        if mode == "outofplace":
            return 0, ni, ni + no, ni + no + s_chunks
        k = self.chunks_per_rank
        if self.kind == "allgather":          # i[j] == o[r*k + j]
            return rank * k, 0, no, no + s_chunks
        if self.kind == "reducescatter":      # o[j] == i[r*k + j]
            return 0, rank * k, ni, ni + s_chunks
        size = max(ni, no)                    # i[j] == o[j]
        return 0, 0, size, size + s_chunks


def infer_root(program: Program, kind: str) -> int:
    """Broadcast: the only rank that never receives; reduce: the only one that never sends; else 0."""
    types = SEND_TYPES if kind == "reduce" else RECV_TYPES
    candidates = [g.id for g in program.gpus
                  if not any(st.type in types for tb in g.tbs for st in tb.steps)]
    return candidates[0] if len(candidates) == 1 else 0


def semantics(program: Program, collective: Collective | None) -> Semantics:
    """Build the initial state and postcondition from ``collective`` or, if None, from the file."""
    N, C = program.ngpus, program.nchunksperloop
    if collective is None:
        return _builtin(program, normalize_coll(program.coll), N, C)
    return _from_collective(program, collective, N, C)


def _builtin(program: Program, kind: str, N: int, C: int) -> Semantics:
    if kind not in BUILTIN:
        raise SynthError(f"no built-in postcondition for coll '{program.coll}' (known: "
                         f"{', '.join(BUILTIN)}); pass the collective explicitly")
    k = C // N
    n_in, n_out = physical_chunks(kind, N, C)
    ALL = (1 << N) - 1
    root = infer_root(program, kind) if kind in ("broadcast", "reduce") else None
    init: list[list[Value | None]] = []
    expect: list[list[tuple[Value, ...] | None]] = []
    for r in range(N):
        bit = 1 << r
        if kind == "broadcast" and r != root:
            init.append([None] * n_in)
        else:
            init.append([((j, bit),) for j in range(n_in)])
        if kind == "allgather":
            expect.append([(((j, 1 << q),),) for q in range(N) for j in range(k)])
        elif kind == "reducescatter":
            expect.append([(((r * k + j, ALL),),) for j in range(k)])
        elif kind == "allreduce":
            expect.append([(((j, ALL),),) for j in range(C)])
        elif kind == "alltoall":
            expect.append([(((r * k + j, 1 << q),),) for q in range(N) for j in range(k)])
        elif kind == "broadcast":
            expect.append([(((j, 1 << root),),) for j in range(C)])  # type: ignore[operator]
        else:  # reduce
            expect.append([(((j, ALL),),) for j in range(C)] if r == root else [None] * C)
    name = kind if root is None else f"{kind}(root={root})"
    return Semantics(kind=kind, name=name, root=root, in_size=[n_in] * N,
                     out_size=[n_out] * N, chunks_per_rank=k, init=init, expect=expect)


def _from_collective(program: Program, coll: Collective, N: int, C: int) -> Semantics:
    if coll.custom is None and coll.kind in BUILTIN:
        return _standard(coll, N, C)
    return _build(program, coll, N, C)


@lru_cache(maxsize=8)
def _standard(coll: Collective, N: int, C: int) -> Semantics:
    """A standard collective's semantics, built once per (collective, ranks, chunks): they read
    nothing of the program, and each proof runs two modes of files that share a collective (an
    8-rank allreduce of 512 chunks took a tenth of a concurrent dgx1 x8 solve to rebuild them).
    The interpreter only reads a :class:`Semantics`, so one object serves every run."""
    return _build(None, coll, N, C)


def _build(program: Program | None, coll: Collective, N: int, C: int) -> Semantics:
    if coll.num_ranks != N:
        raise SynthError(f"the collective is for {coll.num_ranks} ranks but the program has "
                         f"ngpus={N}")
    kind = coll.kind if coll.custom is None else "custom"
    if kind in BUILTIN:
        if coll.buffer_chunks != C:
            raise SynthError(f"the collective {coll.name} has {coll.buffer_chunks} chunks per buffer "
                             f"but the program has nchunksperloop={C}")
        n_in, n_out = physical_chunks(kind, N, C)
        in_size, out_size = [n_in] * N, [n_out] * N
    else:
        assert program is not None
        gpus = {g.id: g for g in program.gpus}
        in_size = [max(len(coll.inputs[r]), gpus[r].i_chunks if r in gpus else 0) for r in range(N)]
        out_size = [max(len(coll.outputs[r]), gpus[r].o_chunks if r in gpus else 0)
                    for r in range(N)]
    slot = [{c: s for s, c in enumerate(coll.inputs[q])} for q in range(N)]
    init: list[list[Value | None]] = []
    expect: list[list[tuple[Value, ...] | None]] = []
    for r in range(N):
        row: list[Value | None] = [None] * in_size[r]
        for s in range(len(coll.inputs[r])):
            row[s] = ((s, 1 << r),)
        init.append(row)
        out: list[tuple[Value, ...] | None] = [None] * out_size[r]
        for s, c in enumerate(coll.outputs[r]):
            holders = [q for q in coll.pre[c] if c in slot[q]]
            if not holders:
                raise SynthError(f"chunk {c} must end on rank {r} but no rank's input holds it")
            if coll.combining:
                d: dict[int, int] = {}
                for q in holders:
                    d[slot[q][c]] = d.get(slot[q][c], 0) | (1 << q)
                out[s] = (tuple(sorted(d.items())),)
            else:
                out[s] = tuple(((slot[q][c], 1 << q),) for q in holders)
        expect.append(out)
    return Semantics(kind=kind, name=coll.name, root=coll.root, in_size=in_size, out_size=out_size,
                     chunks_per_rank=coll.chunks_per_rank, init=init, expect=expect)
