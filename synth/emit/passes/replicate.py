"""The ``replicate`` pass: ``instances`` copies of a program on their own channels, every chunk
split as many ways; before ordering, :func:`split_bundles` makes every op of a chunk cover the same
chunk group, which the copy needs (:func:`consistent_groups` checks it)."""

from __future__ import annotations

from collections import defaultdict

from ..program import Instr, Threadblock
from .ir import LOCAL_OPS, Dag, IOp, Ir


def split_bundles(dag: Dag, ir: Ir) -> Ir:
    """Split grouped ops so that every op touching a chunk covers the same ordered chunk group.

    Instances split every chunk into pieces and give each copy of the program the same share of
    every op's group (:func:`replicate`); that is only consistent when a chunk is always grouped
    with the same chunks in the same order. Bundles start as chunks touched by exactly the same
    ops and are split until each is one contiguous run, in one order, in every op; ops are then
    cut into one op per bundle run.
    """
    units: list[list[IOp]] = [chain for chain in ir.chains] + [[op] for op in ir.copies]
    member: dict[int, list[int]] = defaultdict(list)
    for u, unit in enumerate(units):
        for c in unit[0].chunks:
            member[c].append(u)
    ids: dict[tuple[int, ...], int] = {}
    bundle = {c: ids.setdefault(tuple(us), len(ids)) for c, us in member.items()}
    fresh = len(ids)
    changed = True
    while changed:                       # passes until no op needs a split
        changed = False
        canon: dict[int, tuple[int, ...]] = {}     # bundle -> its run (chunk order) in an op
        for unit in units:
            chunks = unit[0].chunks
            seen: set[int] = set()
            i = 0
            while i < len(chunks):
                b = bundle[chunks[i]]
                j = i + 1
                while j < len(chunks) and bundle[chunks[j]] == b:
                    j += 1
                run = chunks[i:j]
                i = j
                ref = canon.setdefault(b, run) if b not in seen else None
                seen.add(b)
                if ref == run:
                    continue
                changed = True
                canon.pop(b, None)
                if ref is not None and sorted(ref) == sorted(run):
                    for c in run:          # same chunks in another order: singletons
                        bundle[c] = fresh
                        fresh += 1
                else:                      # a second run of b here, or other members: split off
                    for c in run:
                        bundle[c] = fresh
                    fresh += 1
    new_chains: list[list[IOp]] = []
    new_copies: list[IOp] = []
    # id(old op) -> (chunk -> its part's index, the old op's new ops in chunk order): one chunk
    # map per unit, shared by its ops (they cover the same chunks), not an entry per (op, chunk)
    split_of: dict[int, tuple[dict[int, int], list[IOp]]] = {}
    part_no: dict[int, int] = {}                # id(new local op) -> its part's index
    for unit in units:
        chunks = unit[0].chunks
        cuts = [0] + [i for i in range(1, len(chunks)) if bundle[chunks[i]] != bundle[chunks[i - 1]]]
        if len(cuts) == 1:
            (new_copies.append(unit[0]) if unit[0].typ in LOCAL_OPS else new_chains.append(unit))
            continue
        local = unit[0].typ in LOCAL_OPS
        part_of: dict[int, int] = {}
        news: list[list[IOp]] = [[] for _ in unit]
        for old, mine in zip(unit, news, strict=True):
            split_of[id(old)] = (part_of, mine)
        for k, (a, b) in enumerate(zip(cuts, [*cuts[1:], len(chunks)], strict=True)):
            piece = chunks[a:b]
            for c in piece:
                part_of[c] = k
            part: list[IOp] = []
            for old, mine in zip(unit, news, strict=True):
                op = IOp(old.rank, old.typ, old.step, old.phase, old.sendp, old.recvp, b - a,
                         old.src + a, old.dst + a, piece)
                if part:
                    op.prev, part[-1].nxt = part[-1], op
                elif old.typ in LOCAL_OPS:
                    op.prev = old.prev
                mine.append(op)
                if old.typ in LOCAL_OPS:
                    part_no[id(op)] = k
                part.append(op)
            (new_copies.extend(part) if local else new_chains.append(part))

    def where(old: IOp | None, chunk: int) -> IOp | None:
        """The new op holding ``chunk`` of the split op ``old`` (None: ``old`` was not split)."""
        got = split_of.get(id(old))
        if got is None:
            return None
        k = got[0].get(chunk)
        return None if k is None else got[1][k]

    if split_of:
        for x in (*dag.sends, *dag.recvs, *dag.copies, *dag.reductions):
            if x.iop is not None:
                x.iop = where(x.iop, x.chunk) or x.iop
        for op in new_copies:
            if op.prev is None:
                continue
            got = where(op.prev, op.chunks[0])
            if got is None and id(op.prev) in split_of:
                # an anchor holding other chunks (an out-of-place initial copy placed before a
                # receive): the anchor's part of the same index, so each instance keeps its own
                parts = split_of[id(op.prev)][1]
                got = parts[min(part_no.get(id(op), 0), len(parts) - 1)]
            op.prev = got if got is not None else op.prev
    return Ir(collective=ir.collective, num_steps=ir.num_steps, chains=new_chains, copies=new_copies,
              ordered=[])


def consistent_groups(ir: Ir) -> bool:
    """True when every op touching a chunk covers the same ordered chunk group (instance split)."""
    seen: dict[int, tuple[int, ...]] = {}
    for chain in ir.chains:
        for op in chain:
            for c in op.chunks:
                if seen.setdefault(c, op.chunks) != op.chunks:
                    return False
    for op in ir.copies:
        for c in op.chunks:
            if seen.setdefault(c, op.chunks) != op.chunks:
                return False
    return True


def replicate(per_rank: list[list[Threadblock]], instances: int, nchannels: int
              ) -> list[list[Threadblock]]:
    """``instances`` copies of the program, copy i on channels ``c + i * nchannels``.

    Every chunk is split in ``instances`` pieces (``nchunksperloop`` grows by that factor): a step
    on chunks ``off .. off+cnt-1`` covers pieces ``off*N .. (off+cnt)*N - 1``, and copy i takes the
    i-th ``cnt`` of them. This is consistent because every op that touches a chunk covers the same
    chunk group (:func:`consistent_groups`), so each piece is handled by one copy throughout.
    """
    if instances == 1:
        return per_rank
    N = instances
    out = []
    for tbs in per_rank:
        T = len(tbs)
        row = []
        for i in range(N):
            for tb in tbs:
                steps = tuple(
                    st if st.type == "nop" and st.depid < 0 else Instr(
                        st.s, st.type, st.srcbuf,
                        st.srcoff if st.type == "nop" else st.srcoff * N + i * st.cnt,
                        st.dstbuf, st.dstoff if st.type == "nop" else st.dstoff * N + i * st.cnt,
                        st.cnt, st.depid + i * T if st.depid >= 0 else -1, st.deps, st.hasdep)
                    for st in tb.steps)
                row.append(Threadblock(id=tb.id + i * T, send=tb.send, recv=tb.recv,
                                       chan=tb.chan + i * nchannels, steps=steps))
        out.append(row)
    return out
