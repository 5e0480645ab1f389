"""The ``lower`` pass: Schedule -> Dag (buffer layout, liveness, local copies)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict

from ...collectives import Collective
from ...errors import SynthError
from ...schedule import Schedule
from .ir import (
    ALIASED_KINDS,
    CELL,
    IN,
    INF,
    INPLACE,
    MAX_REDUCE_FUSION,
    OOP,
    OUT,
    SCRATCH,
    Copy,
    Dag,
    Recv,
    Reduce,
    Send,
    physical,
)

_S_LABEL, _A_LABEL = -1, -2
"""Placeholder cells in the layout pass: a slot's home scratch cell and its second scratch cell."""


def _alias_table(coll: Collective, mode: str) -> list[tuple[int, int, int]]:
    n, k = coll.num_ranks, coll.chunks_per_rank
    if mode == OOP or coll.custom is not None or coll.kind not in ALIASED_KINDS:
        return [(-1, -1, 0)] * n
    if coll.kind == "allgather":            # i[j] == o[r*k + j]
        return [(IN, OUT, r * k) for r in range(n)]
    if coll.kind == "reducescatter":        # o[j] == i[r*k + j]
        return [(OUT, IN, r * k) for r in range(n)]
    return [(IN, OUT, 0)] * n               # i[j] == o[j]


def lower(schedule: Schedule, mode: str, gather: bool = False) -> Dag:
    """Schedule -> Dag: every transfer becomes a send and a receive on cells; add local copies.

    Layout: an initial value sits in its input cell; a received version of a chunk goes to the
    chunk's output cell when the rank must end with it, else to the slot's scratch cell. A version
    that is still read in the step that overwrites it, or an output cell aliased to another chunk's
    live input (in-place modes), sends the new version to the other scratch cell instead. A final
    version not in its output cell gets a copy there: initial values at the start, received ones in
    the phase after their step (or after the aliased input is dead).

    ``gather``: where 2 to 17 ranks reduce into one chunk in one step, the lowest of them is still
    a receive-reduce into the new version's cell, and the others are plain receives into scratch
    cells of their own (one plane per writer position, chunks contiguous within a plane, so a
    peer's chunks stay one message), folded in by one :class:`Reduce` after the step. Why: the
    receive-reduces of one cell must run one after another (each reads what the previous wrote),
    so n - 1 writers cost n - 1 reductions in series, each in the block of its peer; gathered, the
    receives run at once and one multi-source ``re`` (up to 16 sources, spec §4.1) reads each
    source once. The reduces of a rank's chunks are anchored to the writers' blocks in turn, so
    they also run in parallel (what MSCCL's all-pairs allreduce files do, ``docs/notes/
    msccl-production-files.md``). The version is then complete only after the reduce, so the
    step's receives do not fuse with the next step's sends.
    """
    coll = schedule.collective
    n, nch = coll.num_ranks, coll.num_chunks
    aliases = _alias_table(coll, mode)
    aliased = mode != OOP and aliases[0][0] >= 0
    # only alltoall aliases an output cell with another chunk's input cell (spec §3.4): elsewhere
    # no write can clobber another slot's live value, so occupancy need not be tracked
    track = aliased and coll.kind == "alltoall"
    in_idx = [{c: j for j, c in enumerate(coll.inputs[r])} for r in range(n)]
    out_idx = [{c: j for j, c in enumerate(coll.outputs[r])} for r in range(n)]
    for c, holders in enumerate(coll.pre):
        for r in holders:
            if c not in in_idx[r]:
                raise SynthError(f"collective {coll.name}: rank {r} holds chunk {c} at the start but "
                                 "its input buffer has no slot for it, so it cannot be emitted")

    # ---- reads and writes per slot (slot = rank * nch + chunk)
    wsteps: dict[int, list[int]] = {}     # distinct write steps, ascending
    wops: dict[int, list[tuple[int, int, str]]] = {}   # (step, src, op) in step then src order
    rsteps: dict[int, list[int]] = {}     # one entry per send, ascending
    transfers: list[tuple[int, int, int, int, bool]] = []
    combining = coll.combining
    for t, step in enumerate(schedule.steps):
        for tr in step.transfers:
            src, dst, c, op = tr.src, tr.dst, tr.chunk, tr.op
            if not (0 <= src < n and 0 <= dst < n and 0 <= c < nch) or src == dst:
                raise SynthError(f"step {t}: transfer {src}->{dst} of chunk {c} is outside the "
                                 f"collective ({n} ranks, {nch} chunks); verify the schedule first")
            if op == "reduce" and not combining:
                raise SynthError(f"step {t}: a reduce in the non-combining collective {coll.name}; "
                                 "verify the schedule first")
            transfers.append((t, src, dst, c, op == "reduce"))
            ds = dst * nch + c
            ws = wsteps.get(ds)
            if ws is None:
                wsteps[ds] = [t]
                wops[ds] = [(t, src, op)]
            else:
                if ws[-1] != t:
                    ws.append(t)
                wops[ds].append((t, src, op))
            ss = src * nch + c
            rs = rsteps.get(ss)
            if rs is None:
                rsteps[ss] = [t]
            else:
                rs.append(t)

    def version(slot: int, t: int) -> int:
        """The version a read in step t sees (0 = the initial value)."""
        ws = wsteps.get(slot)
        return bisect_left(ws, t) if ws else 0

    def writers(slot: int, t: int) -> list[tuple[int, int, str]]:
        ops = wops[slot]
        if len(ops) == 1:
            return ops
        lo = bisect_left(ops, (t, -1, ""))
        hi = bisect_left(ops, (t + 1, -1, ""))
        return ops[lo:hi]

    def last_uses(slot: int) -> list[int]:
        """Per version: the last step it is read (by a send or as a reduce operand), INF if final."""
        ws = wsteps.get(slot, [])
        lu = [-1] * (len(ws) + 1)
        for s in rsteps.get(slot, ()):
            v = bisect_left(ws, s)
            lu[v] = max(lu[v], s)
        for i, w in enumerate(ws):
            if writers(slot, w)[0][2] == "reduce":
                lu[i] = max(lu[i], w)
        if slot % nch in out_idx[slot // nch]:
            lu[-1] = INF
        return lu

    def last_read(slot: int, v: int) -> int:
        """The last step version v of ``slot`` is read (-1 if never), ignoring finality."""
        ws = wsteps.get(slot, [])
        lo = ws[v - 1] if v > 0 else -1
        hi = ws[v] if v < len(ws) else INF
        rs = rsteps.get(slot, [])
        i = bisect_right(rs, hi)
        last = rs[i - 1] if i > bisect_right(rs, lo) else -1
        if v < len(ws) and writers(slot, ws[v])[0][2] == "reduce":
            last = max(last, ws[v])
        return last

    # ---- the layout: one cell per version
    vcell: dict[int, list[int | None]] = {}
    lu_cache: dict[int, list[int]] = {}
    occupant: dict[tuple[int, int], tuple[int, int]] = {}   # (rank, physical cell) -> (slot, version)

    def live_other(r: int, hx: int, slot: int, t: int) -> bool:
        """Whether physical cell hx of rank r holds another slot's value still read at step >= t."""
        occ = occupant.get((r, hx))
        if occ is None or occ[0] == slot:
            return False
        lu = lu_cache.get(occ[0])
        if lu is None:
            lu = lu_cache[occ[0]] = last_uses(occ[0])
        return lu[occ[1]] >= t

    for r in range(n):
        for c, j in in_idx[r].items():
            if r in coll.pre[c]:
                slot = r * nch + c
                vcell[slot] = [IN * CELL + j]
                if track:
                    occupant[(r, physical(aliases[r], IN * CELL + j))] = (slot, 0)
    by_step: dict[int, list[int]] = defaultdict(list)
    for slot, ws in wsteps.items():
        for w in ws:
            by_step[w].append(slot)
    uses_s: dict[int, set[int]] = defaultdict(set)     # rank -> chunks with a home scratch cell
    uses_a: dict[int, set[int]] = defaultdict(set)     # rank -> chunks with a second scratch cell
    for t in sorted(by_step):
        for slot in sorted(by_step[t]):
            r, c = divmod(slot, nch)
            al = aliases[r]
            cells = vcell.get(slot)
            if cells is None:
                cells = vcell[slot] = [None]
            cur = cells[-1]
            rs = rsteps.get(slot)
            same_step_read = rs is not None and bisect_right(rs, t) > bisect_left(rs, t)
            oj = out_idx[r].get(c)
            chosen = None
            if oj is not None:
                x = OUT * CELL + oj
                hx = physical(al, x)
                if not (same_step_read and cur is not None and cur >= 0 and physical(al, cur) == hx) \
                        and not (track and live_other(r, hx, slot, t)):
                    chosen = x
                    if track:
                        occupant[(r, hx)] = (slot, len(cells))
            if chosen is None:
                chosen = _A_LABEL if same_step_read and cur == _S_LABEL else _S_LABEL
                (uses_a if chosen == _A_LABEL else uses_s)[r].add(c)
            cells.append(chosen)

    # scratch indices: home cells in chunk order, then second cells in chunk order (contiguity)
    scratch = [0] * n
    sidx: dict[tuple[int, int, int], int] = {}
    for r in range(n):
        for c in sorted(uses_s.get(r, ())):
            sidx[(r, _S_LABEL, c)] = scratch[r]
            scratch[r] += 1
        for c in sorted(uses_a.get(r, ())):
            sidx[(r, _A_LABEL, c)] = scratch[r]
            scratch[r] += 1
    if sidx:
        for slot, cells in vcell.items():
            r, c = divmod(slot, nch)
            for i, x in enumerate(cells):
                if x is not None and x < 0:
                    cells[i] = SCRATCH * CELL + sidx[(r, x, c)]

    # ---- gathered reductions: their writers (by rank) and the scratch cell of each but the first
    gathered: dict[tuple[int, int], tuple[int, ...]] = {}     # (slot, step) -> writers
    gcell: dict[tuple[int, int, int], int] = {}               # (slot, step, writer) -> cell
    gindex: dict[tuple[int, int], int] = {}                   # (slot, step) -> index on its rank
    if gather:
        for ds in wops:
            for w in wsteps[ds]:
                ws = writers(ds, w)
                if 2 <= len(ws) <= MAX_REDUCE_FUSION + 1 and all(op == "reduce" for _, _, op in ws):
                    gathered[(ds, w)] = tuple(sorted(s for _, s, _ in ws))
        per_rank: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for ds, w in gathered:
            per_rank[ds // nch].append((w, ds))
        for r in sorted(per_rank):
            keys = sorted(per_rank[r])
            stride = len(keys)
            planes = max(len(gathered[(ds, w)]) for w, ds in keys) - 1
            for i, (w, ds) in enumerate(keys):
                gindex[(ds, w)] = i
                for plane, s in enumerate(gathered[(ds, w)][1:]):
                    gcell[(ds, w, s)] = SCRATCH * CELL + scratch[r] + plane * stride + i
            scratch[r] += planes * stride

    # ---- ops
    sends: list[Send] = []
    recvs: list[Recv] = []
    sends_of: dict[int, list[Send]] = {}     # slot -> its sends in step order (parallel to rsteps)
    final_writer: dict[int, Recv | Reduce] = {}   # slot -> the op that completes its last version
    gather_recv: dict[tuple[int, int, int], Recv] = {}   # (slot, step, writer) -> its receive
    for t, src, dst, c, reduce in transfers:
        ss = src * nch + c
        cells = vcell.get(ss)
        sws = wsteps.get(ss)
        sv = bisect_left(sws, t) if sws else 0
        cell = cells[sv] if cells is not None and sv < len(cells) else None
        if cell is None:
            raise SynthError(f"step {t}: rank {src} sends chunk {c} to rank {dst} before it holds "
                             "it; verify the schedule first")
        snd = Send(src, t, dst, c, cell)
        sends.append(snd)
        lst = sends_of.get(ss)
        if lst is None:
            sends_of[ss] = [snd]
        else:
            lst.append(snd)
        ds = dst * nch + c
        dcells = vcell[ds]
        dws = wsteps[ds]
        vn = bisect_left(dws, t) + 1
        dcell = dcells[vn]
        ws = wops[ds]
        if len(ws) > 1:
            ws = writers(ds, t)
        if len(ws) == 1:
            first = last = True
        else:
            if any(op != "reduce" for _, _, op in ws):
                raise SynthError(f"step {t}: several ranks write rank {dst}'s chunk {c} and one of "
                                 "them copies; verify the schedule first")
            first, last = ws[0][1] == src, ws[-1][1] == src
        g = gathered.get((ds, t)) if gathered else None
        if g is not None:
            first, last = src == g[0], False
            if not first:       # a plain receive into the writer's own scratch cell
                rcv = Recv(dst, t, src, c, False, -1, gcell[(ds, t, src)], False, False)
                snd.recv, rcv.send = rcv, snd
                recvs.append(rcv)
                gather_recv[(ds, t, src)] = rcv
                continue
        operand = -1
        if reduce:
            operand = dcells[vn - 1] if first else dcell
            if operand is None:
                raise SynthError(f"step {t}: rank {src} reduces chunk {c} into rank {dst}, which "
                                 "holds nothing; verify the schedule first")
        sole = False
        if reduce and last:
            rs = rsteps.get(ds, [])
            nxt = dws[vn] if vn < len(dws) else INF
            uses = bisect_right(rs, nxt) - bisect_right(rs, t)
            next_reduces = nxt < INF and writers(ds, nxt)[0][2] == "reduce"
            final = vn == len(dws) and c in out_idx[dst]
            sole = uses == 1 and bisect_right(rs, t + 1) - bisect_right(rs, t) == 1 and \
                not next_reduces and not final
        rcv = Recv(dst, t, src, c, reduce, operand, dcell, last, sole)
        snd.recv, rcv.send = rcv, snd
        recvs.append(rcv)
        if last:
            final_writer[ds] = rcv
    reductions: list[Reduce] = []
    for (ds, t), g in sorted(gathered.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        r, c = divmod(ds, nch)
        dws = wsteps[ds]
        vn = bisect_left(dws, t) + 1
        others = g[1:]
        anchor = gather_recv[(ds, t, others[gindex[(ds, t)] % len(others)])]
        red = Reduce(r, t, c, vcell[ds][vn], tuple(gcell[(ds, t, s)] for s in others), anchor)
        reductions.append(red)
        if vn == len(dws):
            final_writer[ds] = red
    for rcv in recvs:
        if rcv.last:
            slot = rcv.rank * nch + rcv.chunk
            sl = sends_of.get(slot)
            if sl:
                rs = rsteps[slot]
                lo = bisect_left(rs, rcv.step + 1)
                hi = bisect_left(rs, rcv.step + 2)
                if hi > lo:
                    rcv.cands = sorted(sl[lo:hi], key=lambda s: s.peer)

    # ---- copies into the output buffer
    copies: list[Copy] = []
    first_recv: list[Recv | None] = [None] * n
    for rcv in recvs:
        cur = first_recv[rcv.rank]
        if cur is None or (rcv.step, rcv.peer, rcv.chunk) < (cur.step, cur.peer, cur.chunk):
            first_recv[rcv.rank] = rcv
    for r in range(n):
        al = aliases[r]
        for c, oj in out_idx[r].items():
            slot = r * nch + c
            cells = vcell.get(slot)
            fin = cells[-1] if cells else None
            if fin is None:
                raise SynthError(f"rank {r} never receives chunk {c} of {coll.name}; verify the "
                                 "schedule first")
            out = OUT * CELL + oj
            if fin == out or (mode == INPLACE and aliased and physical(al, fin) == physical(al, out)):
                continue
            ws = wsteps.get(slot)
            if not ws:
                sl = sends_of.get(slot)
                anchor = None
                if mode == OOP and first_recv[r] is not None:
                    anchor = first_recv[r]
                elif sl:
                    rs = rsteps[slot]
                    anchor = min(sl[:bisect_right(rs, rs[0])], key=lambda s: s.peer)
                copies.append(Copy(r, 0, -1, c, fin, out, anchor))
                # A copy receiver that may forward the value (an rcs) and lands it in the cell of
                # the same name as this output copy takes it from there: both ends of the message
                # then name one location, so the forward can stay fused and still agree with it
                # (spec E2, :func:`disagreements`). The initial copy runs first in step 0, so this
                # only adds a same-rank dependency on a local copy.
                for snd in sends_of.get(slot, ()):
                    rv = snd.recv
                    if rv is not None and not rv.reduce and rv.cands and rv.dst == out:
                        snd.src = out
                continue
            step = ws[-1]
            if track:         # wait until the aliased input cell's value (another chunk's) is dead
                occ = occupant.get((r, physical(al, out)))
                if occ is not None and occ[0] != slot:
                    step = max(step, last_read(*occ))
            copies.append(Copy(r, step, 2, c, fin, out, final_writer.get(slot)))
    return Dag(collective=coll, mode=mode, num_steps=len(schedule.steps), sends=sends, recvs=recvs,
               copies=copies, scratch=scratch, alias=aliases, reductions=reductions)
