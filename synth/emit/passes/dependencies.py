"""The ``dependencies`` pass: cross-threadblock predecessors as ``depid/deps/hasdep`` and nops,
giving the threadblocks' step lists; :func:`renumber` keeps every depid within int8."""

from __future__ import annotations

from ..program import Instr, Threadblock
from .ir import BUFFERS, CELL, Tb


def dependencies(per_rank: list[list[Tb]]) -> list[list[Threadblock]]:
    """Cross-threadblock predecessors -> ``depid/deps`` (first on the step, the others as nops
    just before it), ``hasdep=1`` on every referenced step; build the step lists.

    A predecessor in a threadblock this one already waited on at that step or later is implied
    by the earlier wait and dropped. (``allocate`` cleared ``hasdep``.)"""
    for tbs in per_rank:
        for tb in tbs:
            known: dict[Tb, int] = {}
            pos = 0
            for op in tb.ops:
                if op.preds:
                    best: dict[Tb, int] = {}
                    for p in op.preds:
                        if p.tb is not tb and p.tbidx > best.get(p.tb, -1):
                            best[p.tb] = p.tbidx
                    deps = sorted(((t, i) for t, i in best.items() if known.get(t, -1) < i),
                                  key=lambda d: (d[0].id, d[1]))
                    for t, i in deps:
                        known[t] = i
                        t.ops[i].hasdep = 1
                    op.deps = deps
                    if len(deps) > 1:
                        pos += len(deps) - 1
                else:
                    op.deps = []
                op.pos = pos
                pos += 1
    out: list[list[Threadblock]] = []
    for tbs in per_rank:
        row = []
        for tb in tbs:
            steps: list[Instr] = []
            for op in tb.ops:
                depid = dpos = -1
                if op.deps:
                    deps = [(t.id, t.ops[i].pos) for t, i in op.deps]
                    for d, k in deps[1:]:
                        steps.append(Instr(len(steps), "nop", "i", -1, "o", -1, 0, d, k, 0))
                    depid, dpos = deps[0]
                sb, so = divmod(op.src, CELL)
                db, do = divmod(op.dst, CELL)
                steps.append(Instr(len(steps), op.typ, BUFFERS[sb], so, BUFFERS[db], do, op.cnt,
                                   depid, dpos, op.hasdep))
            row.append(Threadblock(id=tb.id, send=tb.send, recv=tb.recv, chan=tb.chan,
                                   steps=tuple(steps)))
        out.append(row)
    return out


def renumber(per_rank: list[list[Threadblock]]) -> list[list[Threadblock]]:
    """If a depid would exceed 127 (int8), give the threadblocks that are waited on the lowest ids."""
    out = []
    for tbs in per_rank:
        targets = {st.depid for tb in tbs for st in tb.steps if st.depid >= 0}
        if not targets or max(targets) <= 127:
            out.append(tbs)
            continue
        order = [tb for tb in tbs if tb.id in targets] + [tb for tb in tbs if tb.id not in targets]
        new_id = {tb.id: i for i, tb in enumerate(order)}
        out.append([Threadblock(id=new_id[tb.id], send=tb.send, recv=tb.recv, chan=tb.chan,
                                steps=tuple(st if st.depid < 0 else Instr(
                                    st.s, st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff,
                                    st.cnt, new_id[st.depid], st.deps, st.hasdep)
                                    for st in tb.steps))
                    for tb in order])
    return out
