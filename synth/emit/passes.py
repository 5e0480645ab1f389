"""Compiler passes from a :class:`~synth.schedule.Schedule` to MSCCL-IR (MSCCLang, ASPLOS'23).

Each pass is a small function over one IR; :mod:`synth.emit.compile` chains them::

    lower        Schedule -> Dag     per-rank send / recv / copy ops on buffer cells: the buffer
                                     layout (input ``i``, output ``o``, scratch ``s``) and liveness
    fuse         Dag -> Dag          a receive and the next step's send of the same value become
                                     one op: rcs (copy), rrs / rrcs (reduce, without / with store)
    agreement    Ir                  fused copies whose two message ends could not carry the same
                                     fields (spec E2) are split again (:func:`disagreements`)
    aggregate    Dag -> Ir           ops of chunks that travel the same route in the same steps and
                                     sit in contiguous cells at every hop become one op, cnt > 1
    order        Ir                  one global order every threadblock follows (FIFO-consistent)
    hazards      Ir                  same-rank data dependencies (RAW, WAR, WAW) on physical cells
    allocate     Ir -> threadblocks  channels per route, one tb per (send peer, recv peer, channel)
                 (allocate_connections, for a program over a limit: unfused, each connection's
                 ops in runs over as few channels as its length needs)
    progress     Ir                  a sufficient deadlock-freedom check under the FIFO model
    dependencies Ir -> tb step lists depid / deps / hasdep, extra dependencies as nops
    replicate    tb step lists       ``instances`` copies on their own channels, chunks subdivided

Semantics carried over from the schedule (``synth.verify``): all transfers of a step read the
state at the start of the step and write at its end; each (rank, chunk) is one *slot* whose
successive values are *versions*. A version lives in one cell; the layout pass picks the cell so
that a program is correct with ``i``, ``o``, ``s`` disjoint (out-of-place) and, for the in-place
modes, under the runtime's aliasing (spec §3.4): writes go to the output cell of the chunk or to
scratch, never to the input buffer; a value still read in the step that overwrites it moves to a
second cell (so no step waits on a send of the same step); an output cell whose aliased input cell
holds a live value of another chunk (in-place alltoall) is written through scratch and copied
later.

Deadlock freedom (spec §5.3). Threadblocks run their ops in the global order: per step, initial
copies, then plain sends, then receives (sorted per receiving rank by sending peer, then by message
order), then final copies. A fused op's send happens at its receive. The ``progress`` pass executes
that order abstractly, op by op, with FIFOs of ``capacity`` messages and ``ceil(cnt / M)`` messages
per op; a plain send streams into a receiver that can run at that moment. An op that would block
is a violation; the driver then un-fuses the ops involved and recompiles. Without fused ops every
threadblock is send-only or receive-only and the check always passes (each receive's dependencies
are on earlier steps or on sends the order already completed), so the loop terminates with a
program that makes progress with any FIFO capacity.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from dataclasses import dataclass
from itertools import pairwise
from math import ceil

from ..collectives import Collective
from ..errors import SynthError
from ..schedule import Schedule
from .program import Instr, Threadblock

CELL = 1 << 24
"""A cell is ``buffer * CELL + offset`` with buffer 0 = ``i``, 1 = ``o``, 2 = ``s``."""
BUFFERS = "ios"
IN, OUT, SCRATCH = 0, 1, 2
MAX_COUNT = 71
"""cnt of one step: 1..71 (MSCCL_MAX_COUNT = 72, exclusive)."""
INF = 1 << 60
PAIR_SETS = 1
"""Channel sets a route may move to when its fused ops clash with the peer pairs already on its
channel; beyond that the clashing ops are un-fused (more channels cost threadblocks everywhere)."""

OOP, INPLACE, BOTH = "outofplace", "inplace", "both"
MODES = (OOP, INPLACE, BOTH)
ALIASED_KINDS = ("allreduce", "broadcast", "reduce", "alltoall", "allgather", "reducescatter")
"""Collectives whose in-place aliasing the runtime defines (spec §3.4)."""

_S_LABEL, _A_LABEL = -1, -2
"""Placeholder cells in the layout pass: a slot's home scratch cell and its second scratch cell."""


# ================================================================================== the Dag IR

class Send:
    """Rank ``rank`` sends its current version of ``chunk`` to ``peer`` in ``step``."""

    __slots__ = ("absorbed", "chunk", "iop", "peer", "rank", "recv", "src", "step")

    def __init__(self, rank: int, step: int, peer: int, chunk: int, src: int) -> None:
        self.rank, self.step, self.peer, self.chunk, self.src = rank, step, peer, chunk, src
        self.recv: Recv | None = None
        self.absorbed = False
        """Fused into the receive that produced the value (its message leaves with that op)."""
        self.iop: IOp | None = None


class Recv:
    """Rank ``rank`` receives ``chunk`` from ``peer`` in ``step``; copy or reduce into ``dst``."""

    __slots__ = ("cands", "chunk", "dst", "fwd", "iop", "last", "nofuse", "operand", "peer", "rank",
                 "reduce", "send", "sole", "step", "store")

    def __init__(self, rank: int, step: int, peer: int, chunk: int, reduce: bool, operand: int,
                 dst: int, last: bool, sole: bool) -> None:
        self.rank, self.step, self.peer, self.chunk = rank, step, peer, chunk
        self.reduce, self.operand, self.dst = reduce, operand, dst
        self.last = last
        """The last of the step's writers of this slot: it completes the new version."""
        self.sole = sole
        """The new version's only use is one send in the next step (an rrs need not store it)."""
        self.send: Send | None = None
        self.cands: list[Send] = []
        """Sends of the new version in the next step (fusion candidates), by peer."""
        self.fwd: Send | None = None
        self.store = True
        self.nofuse = False
        self.iop: IOp | None = None


class Copy:
    """A local copy of ``chunk`` on ``rank`` at (``step``, ``phase``): initial (-1) or final (2)."""

    __slots__ = ("anchor", "chunk", "dst", "iop", "phase", "rank", "src", "step")

    def __init__(self, rank: int, step: int, phase: int, chunk: int, src: int, dst: int,
                 anchor: Send | Recv | None) -> None:
        self.rank, self.step, self.phase, self.chunk = rank, step, phase, chunk
        self.src, self.dst, self.anchor = src, dst, anchor
        self.iop: IOp | None = None


@dataclass
class Dag:
    """Per-rank ops of a schedule with their cells; fusion marks live on the ops."""

    collective: Collective
    mode: str
    num_steps: int
    sends: list[Send]
    recvs: list[Recv]
    copies: list[Copy]
    scratch: list[int]
    """Scratch cells used per rank."""
    alias: list[tuple[int, int, int]]
    """Per rank (from_buffer, to_buffer, offset shift) of the in-place aliasing, or (-1, -1, 0)."""


def _alias_table(coll: Collective, mode: str) -> list[tuple[int, int, int]]:
    n, k = coll.num_ranks, coll.chunks_per_rank
    if mode == OOP or coll.custom is not None or coll.kind not in ALIASED_KINDS:
        return [(-1, -1, 0)] * n
    if coll.kind == "allgather":            # i[j] == o[r*k + j]
        return [(IN, OUT, r * k) for r in range(n)]
    if coll.kind == "reducescatter":        # o[j] == i[r*k + j]
        return [(OUT, IN, r * k) for r in range(n)]
    return [(IN, OUT, 0)] * n               # i[j] == o[j]


def physical(alias: tuple[int, int, int], cell: int) -> int:
    """The cell's identity under the aliasing (the cell itself when nothing aliases)."""
    frm, to, shift = alias
    if cell // CELL == frm:
        return cell + (to - frm) * CELL + shift
    return cell


def lower(schedule: Schedule, mode: str) -> Dag:
    """Schedule -> Dag: every transfer becomes a send and a receive on cells; add local copies.

    Layout: an initial value sits in its input cell; a received version of a chunk goes to the
    chunk's output cell when the rank must end with it, else to the slot's scratch cell. A version
    that is still read in the step that overwrites it, or an output cell aliased to another chunk's
    live input (in-place modes), sends the new version to the other scratch cell instead. A final
    version not in its output cell gets a copy there: initial values at the start, received ones in
    the phase after their step (or after the aliased input is dead).
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

    # ---- ops
    sends: list[Send] = []
    recvs: list[Recv] = []
    sends_of: dict[int, list[Send]] = {}     # slot -> its sends in step order (parallel to rsteps)
    final_writer: dict[int, Recv] = {}      # slot -> the receive that completes its last version
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
                if sl:
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
               copies=copies, scratch=scratch, alias=aliases)


# ================================================================================== fusion

def fuse(dag: Dag, enabled: bool = True) -> int:
    """Mark receive + next-step send pairs of one version as fused ops; returns how many.

    Only the receive that completes the version (the last writer of the step) fuses, with the
    lowest-peer send of the next step; ``nofuse`` receives (set by the driver when the progress or
    allocation pass rejected them) stay plain. A reduce whose result is only forwarded is an
    ``rrs`` (no local store); otherwise ``rrcs``; a copy is an ``rcs``.
    """
    for s in dag.sends:
        s.absorbed = False
    for rv in dag.recvs:
        rv.fwd = None
        rv.store = True
    if not enabled:
        return 0
    count = 0
    for rv in dag.recvs:
        if not rv.last or rv.nofuse or not rv.cands:
            continue
        snd = rv.cands[0]
        rv.fwd = snd
        snd.absorbed = True
        rv.store = not (rv.reduce and rv.sole)
        count += 1
    return count


# ================================================================================== the Ir

class IOp:
    """One instruction-level op (an MSCCL ``<step>`` before dependencies): a group of chunks."""

    __slots__ = ("chan", "chunks", "cnt", "deps", "done", "dst", "hasdep", "nxt", "ordinal", "phase",
                 "pos", "preds", "prev", "rank", "recvp", "sendp", "src", "step", "tb", "tbidx",
                 "typ")

    def __init__(self, rank: int, typ: str, step: int, phase: int, sendp: int, recvp: int, cnt: int,
                 src: int, dst: int, chunks: tuple[int, ...]) -> None:
        self.rank, self.typ, self.step, self.phase = rank, typ, step, phase
        self.sendp, self.recvp, self.cnt, self.src, self.dst = sendp, recvp, cnt, src, dst
        self.chunks = chunks
        self.prev: IOp | None = None     # the op whose message this op receives
        self.nxt: IOp | None = None      # the op that receives this op's message
        self.ordinal = -1
        self.preds: list[IOp] = []
        self.chan = 0
        self.tb: Tb | None = None
        self.tbidx = -1
        self.done = False
        self.deps: list[tuple[Tb, int]] = []
        self.pos = -1
        self.hasdep = 0


@dataclass
class Ir:
    collective: Collective
    num_steps: int
    chains: list[list[IOp]]
    """Routes: a head ``s`` followed by its receive ops (all fused but the last)."""
    copies: list[IOp]
    ordered: list[IOp]
    """All ops in the global order (set by :func:`order`)."""


def _recv_type(rv: Recv) -> str:
    if rv.fwd is None:
        return "rrc" if rv.reduce else "r"
    if not rv.reduce:
        return "rcs"
    return "rrcs" if rv.store else "rrs"


def _landing(rv: Recv) -> int:
    """Where a message to ``rv`` lands (its write cell, or its operand for an rrs)."""
    return rv.dst if rv.store else rv.operand


def aggregate(dag: Dag, enabled: bool = True) -> Ir:
    """Dag -> Ir: group routes (head send plus its chain of fused receives) into cnt > 1 ops.

    Chains whose heads leave the same rank for the same peer in the same step and that then take
    the same path with the same op types are candidates; sorted by their cells, a run joins while
    every cell of the next chain is the previous one's plus one (at most 71 chunks). Copies anchored
    to the same op with contiguous source and destination join likewise.
    """
    chains: list[list[Send | Recv]] = []
    for s in dag.sends:
        if s.absorbed:
            continue
        ch: list[Send | Recv] = [s]
        rv = s.recv
        while True:
            assert rv is not None
            ch.append(rv)
            if rv.fwd is None:
                break
            rv = rv.fwd.recv
        chains.append(ch)

    def vector(ch: list) -> tuple[int, ...]:
        out = [ch[0].src]
        for rv in ch[1:]:
            if rv.store:
                out.append(rv.dst)
            if rv.reduce:
                out.append(rv.operand)
        return tuple(out)

    runs: list[list[list]] = []
    if enabled:
        by_head: dict[tuple[int, int, int], list[list]] = defaultdict(list)
        for ch in chains:
            by_head[(ch[0].rank, ch[0].step, ch[0].peer)].append(ch)
        for group in by_head.values():
            if len(group) == 1:
                runs.append(group)
                continue
            by_sig: dict[tuple, list[list]] = defaultdict(list)
            for ch in group:
                sig = tuple((rv.rank, rv.step, rv.reduce, rv.fwd is None, rv.store) for rv in ch[1:])
                by_sig[sig].append(ch)
            for members in by_sig.values():
                members.sort(key=vector)
                vecs = [vector(ch) for ch in members]
                run = [members[0]]
                for i in range(1, len(members)):
                    if len(run) < MAX_COUNT and all(b == a + 1 for a, b in zip(vecs[i - 1], vecs[i],
                                                                                 strict=True)):
                        run.append(members[i])
                    else:
                        runs.append(run)
                        run = [members[i]]
                runs.append(run)
    else:
        runs = [[ch] for ch in chains]

    out_chains: list[list[IOp]] = []
    for run in runs:
        first = run[0]
        cnt = len(run)
        chunks = tuple(ch[0].chunk for ch in run)
        head: Send = first[0]
        r1: Recv = first[1]
        iops = [IOp(head.rank, "s", head.step, 0, head.peer, -1, cnt, head.src, _landing(r1), chunks)]
        for j in range(1, len(first)):
            rv: Recv = first[j]
            typ = _recv_type(rv)
            prev = iops[-1]
            if typ == "r":      # the message's source: the sender's cell (spec E2)
                src, dst = prev.src if prev.typ == "s" else prev.dst, rv.dst
            elif typ == "rcs":
                src = dst = rv.dst
            elif typ == "rrs":
                assert rv.fwd is not None and rv.fwd.recv is not None
                src, dst = rv.operand, _landing(rv.fwd.recv)
            else:
                src, dst = rv.operand, rv.dst
            op = IOp(rv.rank, typ, rv.step, 1, rv.fwd.peer if rv.fwd else -1, rv.peer, cnt, src,
                     dst, chunks)
            op.prev, prev.nxt = prev, op
            iops.append(op)
        for ch in run:
            for j, x in enumerate(ch):
                x.iop = iops[j]
        out_chains.append(iops)

    copies: list[IOp] = []
    groups: dict[tuple, list[Copy]] = defaultdict(list)
    for cp in dag.copies:
        anchor = cp.anchor.iop if cp.anchor is not None else None
        groups[(cp.rank, cp.step, cp.phase, id(anchor) if enabled else id(cp))].append(cp)
    for members in groups.values():
        members.sort(key=lambda cp: (cp.src, cp.dst))
        run = [members[0]]
        for cp in [*members[1:], None]:
            if cp is not None and len(run) < MAX_COUNT and cp.src == run[-1].src + 1 and \
                    cp.dst == run[-1].dst + 1:
                run.append(cp)
                continue
            f = run[0]
            op = IOp(f.rank, "cpy", f.step, f.phase, -1, -1, len(run), f.src, f.dst,
                     tuple(x.chunk for x in run))
            op.prev = f.anchor.iop if f.anchor is not None else None    # anchor (placement only)
            for x in run:
                x.iop = op
            copies.append(op)
            run = [cp]
    return Ir(collective=dag.collective, num_steps=dag.num_steps, chains=out_chains, copies=copies,
              ordered=[])


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
    where: dict[tuple[int, int], IOp] = {}      # (id(old op), chunk) -> new op
    for unit in units:
        chunks = unit[0].chunks
        cuts = [0] + [i for i in range(1, len(chunks)) if bundle[chunks[i]] != bundle[chunks[i - 1]]]
        if len(cuts) == 1:
            (new_copies.append(unit[0]) if unit[0].typ == "cpy" else new_chains.append(unit))
            continue
        for a, b in zip(cuts, [*cuts[1:], len(chunks)], strict=True):
            part: list[IOp] = []
            for old in unit:
                op = IOp(old.rank, old.typ, old.step, old.phase, old.sendp, old.recvp, b - a,
                         old.src + a, old.dst + a, chunks[a:b])
                if part:
                    op.prev, part[-1].nxt = part[-1], op
                elif old.typ == "cpy":
                    op.prev = old.prev
                for c in chunks[a:b]:
                    where[(id(old), c)] = op
                part.append(op)
            (new_copies.extend(part) if unit[0].typ == "cpy" else new_chains.append(part))
    if where:
        for x in (*dag.sends, *dag.recvs, *dag.copies):
            if x.iop is not None:
                x.iop = where.get((id(x.iop), x.chunk), x.iop)
        for op in new_copies:
            if op.prev is not None:
                op.prev = where.get((id(op.prev), op.chunks[0]), op.prev)
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


# ================================================================================== agreement

_COPY_RECEIVES = frozenset(("r", "rcs"))


def disagreements(ir: Ir) -> list[IOp]:
    """Fused ops to split so that both ends of every copy message name the same location.

    The runtimes read only the sender's source and the receiver's destination, but checkers pair
    a message's two ends and compare all their fields (spec E2, the VERIFIER's rule): a receive
    (``r`` or ``rcs``) must carry the ``srcbuf/srcoff/dstbuf/dstoff/cnt`` of the step that sent
    the message, and an ``rcs`` names one location for both (``src == dst``) because it forwards
    from where it stored. A message carries its sender's location and the landing location: for
    ``s`` its ``src`` and ``dst``; a forwarding op (``rcs``, ``rrs``, ``rrcs``) sends the value it
    stored (``rrs``: would store) at its ``dst``, so its messages carry ``dst`` twice (the
    VERIFIER forwards an ``rcs`` message exactly so). An ``rcs`` therefore agrees only when the
    incoming message comes from a cell of its own name, and a copy receive behind a forwarding op
    only when it lands where that op stored. Reduce receives are outside the rule: their ``src``
    is the local operand the runtime reads (spec §4.1). Splitting an op turns its forward into a
    plain send from its own cell, which agrees by construction, so one pass finds every op to
    split.
    """
    out: dict[int, IOp] = {}
    for chain in ir.chains:
        for prev, op in pairwise(chain):
            if op.typ not in _COPY_RECEIVES:
                continue
            if prev.typ == "s":
                if op.typ == "rcs" and prev.src != op.dst:
                    out[id(op)] = op              # the message's source is not the rcs's cell
            elif prev.dst != op.dst:
                out[id(prev)] = prev              # a forward lands elsewhere than it stored
                if op.typ == "rcs":
                    out[id(op)] = op              # ... and then comes from another cell
    return list(out.values())


# ================================================================================== order

def order(ir: Ir) -> None:
    """Give every op its place in one global order (``ordinal``); threadblocks follow it.

    Per step: initial copies, plain sends (by rank, peer, cell), receive-type ops (by rank, sending
    peer, then the order of the ops that sent them), final copies. Messages of one connection are
    therefore sent and received in the same order: a fused op's message leaves in the phase after
    its receive, before the next step's plain sends, and is received in the next step.
    """
    T = max(ir.num_steps, 1)
    buckets: list[list[list[IOp]]] = [[[], [], [], []] for _ in range(T)]
    for chain in ir.chains:
        for op in chain:
            buckets[op.step][op.phase + 1].append(op)
    for op in ir.copies:
        buckets[op.step][op.phase + 1].append(op)
    ordered: list[IOp] = []
    for t in range(T):
        pre, snd, rcv, post = buckets[t]
        pre.sort(key=lambda o: (o.rank, o.src, o.dst))
        snd.sort(key=lambda o: (o.rank, o.sendp, o.src))
        post.sort(key=lambda o: (o.rank, o.src, o.dst))
        for group in (pre, snd):
            for op in group:
                op.ordinal = len(ordered)
                ordered.append(op)
        rcv.sort(key=lambda o: (o.rank, o.recvp, o.prev.ordinal))
        for op in rcv:
            op.ordinal = len(ordered)
            ordered.append(op)
        for op in post:
            op.ordinal = len(ordered)
            ordered.append(op)
    ir.ordered = ordered


# ================================================================================== hazards

_READS_SRC = frozenset(("s", "rrs", "rrc", "rrcs", "cpy"))
_WRITES_DST = frozenset(("r", "rcs", "rrc", "rrcs", "cpy"))


def hazards(ir: Ir, aliases: list[tuple[int, int, int]]) -> None:
    """Set ``preds``: the earlier ops of the same rank that touch a cell this op touches, one of
    the two accesses a write (cells compared after the in-place aliasing when it applies)."""
    last_write: dict[int, IOp] = {}
    readers: dict[int, list[IOp]] = {}
    span = 4 * CELL
    for op in ir.ordered:
        frm, to, shift = aliases[op.rank]
        base = op.rank * span
        preds: dict[int, IOp] = {}
        typ = op.typ
        if typ in _READS_SRC:
            for cell in range(op.src, op.src + op.cnt):
                if cell // CELL == frm:
                    cell += (to - frm) * CELL + shift
                key = base + cell
                w = last_write.get(key)
                if w is not None:
                    preds[w.ordinal] = w
                rd = readers.get(key)
                if rd is None:
                    readers[key] = [op]
                else:
                    rd.append(op)
        if typ in _WRITES_DST:
            for cell in range(op.dst, op.dst + op.cnt):
                if cell // CELL == frm:
                    cell += (to - frm) * CELL + shift
                key = base + cell
                w = last_write.get(key)
                if w is not None and w is not op:
                    preds[w.ordinal] = w
                for rd in readers.pop(key, ()):
                    if rd is not op:
                        preds[rd.ordinal] = rd
                last_write[key] = op
        op.preds = [preds[k] for k in sorted(preds)] if preds else []


# ================================================================================== allocation

class Tb:
    """A threadblock being built: its peers, channel and ops in order."""

    __slots__ = ("chan", "id", "ops", "rank", "recv", "send")

    def __init__(self, rank: int, chan: int, send: int, recv: int) -> None:
        self.rank, self.chan, self.send, self.recv = rank, chan, send, recv
        self.ops: list[IOp] = []
        self.id = -1

    def sort_key(self, n: int) -> tuple[int, int, int]:
        return (self.chan, self.send if self.send >= 0 else n, self.recv if self.recv >= 0 else n)


def allocate(ir: Ir, spread: int, max_channels: int, pair_sets: int | None = None,
             balance: bool = False, side_limit: int = 0, fill: int = 0
             ) -> tuple[list[list[Tb]], list[IOp]]:
    """Channels and threadblocks. Returns (tbs per rank ordered by id, fused ops that did not fit).

    A route's ops share a channel. Its base channel is its block of chunk ids among ``spread`` blocks (so
    a long schedule spreads over channels and each threadblock stays within the step limit) or, with
    ``balance``, the least loaded of ``spread`` channels for the ranks and peers it touches (routes
    longest first; with ``side_limit``, the runtime's 32 send-side / receive-side blocks per channel, a
    channel where the route would open a connection side beyond it on some rank ranks after every channel
    where it would not). A route whose fused ops clash with the (receive peer, send peer) pairs already on
    its channel moves to ``base + spread * j`` (``pair_sets`` choices), else those ops are reported. A
    fused op pairs its receive peer Q and send peer P in one tb; a plain send to P uses P's paired tb on
    that channel if there is one, else a send-only tb, and a plain receive likewise (never one tb for both
    directions of an exchange). Copies go to their anchor's tb, else to the rank's first tb.

    With ``fill`` (a step count) a route goes to the first of ``spread`` channels where every
    connection side it touches holds fewer than ``fill`` ops (first fit, routes in order), so each
    side opens as few channels, hence blocks, as its length needs.
    """
    coll = ir.collective
    n, nch = coll.num_ranks, coll.num_chunks
    sets = PAIR_SETS if pair_sets is None else pair_sets
    pair_r: dict[tuple[int, int, int], int] = {}    # (rank, chan, recv peer) -> send peer
    pair_s: dict[tuple[int, int, int], int] = {}    # (rank, chan, send peer) -> recv peer
    misfits: list[IOp] = []

    def clashes(fused: list[IOp], ch: int) -> list[IOp]:
        """Fused ops that cannot pair their peers on channel ch (route revisits included)."""
        mine_r: dict[tuple[int, int, int], int] = {}
        mine_s: dict[tuple[int, int, int], int] = {}
        out = []
        for op in fused:
            kr, ks = (op.rank, ch, op.recvp), (op.rank, ch, op.sendp)
            if pair_r.get(kr, mine_r.get(kr, op.sendp)) != op.sendp or \
                    pair_s.get(ks, mine_s.get(ks, op.recvp)) != op.recvp:
                out.append(op)
            else:
                mine_r[kr], mine_s[ks] = op.sendp, op.recvp
        return out

    load: dict[tuple[int, int, int], int] = defaultdict(int)   # (rank, chan, +-(peer+1)) -> ops
    opened: dict[tuple[int, int, bool], set[int]] = defaultdict(set)  # (rank, chan, send?) -> peers

    def overflow(chain: list[IOp], c: int) -> int:
        """Connection sides the chain would open beyond ``side_limit`` on channel c."""
        if not side_limit:
            return 0
        extra: dict[tuple[int, int, bool], set[int]] = defaultdict(set)
        for op in chain:
            for is_send, peer in ((True, op.sendp), (False, op.recvp)):
                k = (op.rank, c, is_send)
                if peer >= 0 and peer not in opened[k]:
                    extra[k].add(peer)
        return sum(max(0, len(opened[k]) + len(v) - side_limit) for k, v in extra.items())

    def sides(op: IOp, ch: int) -> list[tuple[int, int, int]]:
        out = []
        if op.sendp >= 0:
            out.append((op.rank, ch, op.sendp + 1))
        if op.recvp >= 0:
            out.append((op.rank, ch, -op.recvp - 1))
        return out

    chains = ir.chains
    if balance:
        chains = sorted(chains, key=lambda ch: (-len(ch) * ch[0].cnt, ch[0].ordinal))
    for chain in chains:
        fused = chain[1:-1]
        if fill:
            # the load test first: it is cheaper than overflow's and fails more often
            base = next((c for c in range(spread) if all(
                load[k] + 1 <= fill for op in chain for k in sides(op, c))
                and not overflow(chain, c)), None)
            if base is None:
                base = min(range(spread), key=lambda c: (
                    overflow(chain, c), max(load[k] + 1 for op in chain for k in sides(op, c)), c))
        elif balance:
            base = min(range(spread), key=lambda c: (
                overflow(chain, c), max(load[k] + 1 for op in chain for k in sides(op, c)), c))
        else:
            base = min(chain[0].chunks) * spread // nch
        chosen = -1
        for ch in range(base, min(max_channels, base + spread * sets), spread):
            if not clashes(fused, ch):
                chosen = ch
                break
        if chosen < 0:
            chosen = base
            misfits.extend(clashes(fused, base))
        for op in fused:
            pair_r.setdefault((op.rank, chosen, op.recvp), op.sendp)
            pair_s.setdefault((op.rank, chosen, op.sendp), op.recvp)
        for op in chain:
            op.chan = chosen
            if balance or fill:
                for k in sides(op, chosen):
                    load[k] += 1
                if op.sendp >= 0:
                    opened[(op.rank, chosen, True)].add(op.sendp)
                if op.recvp >= 0:
                    opened[(op.rank, chosen, False)].add(op.recvp)
    if misfits:
        return [], misfits
    return _blocks(ir, n, pair_s, pair_r), []


def allocate_connections(ir: Ir, cap: int, max_channels: int, side_limit: int = 0,
                         budget: int = 0) -> list[list[Tb]]:
    """Channels and threadblocks for a program without fused ops: each connection's ops, in the
    global order, are dealt over ``ceil(ops / cap)`` consecutive channels.

    Every block is then send-only or receive-only and holds at most ``cap`` ops of one connection
    side (before copies and dependency nops), so a rank has ``sum(ceil(ops / cap))`` blocks over its
    connection sides: the fewest that hold each side within ``cap`` steps. :func:`allocate` spreads
    every route over the same channels instead, which opens a block for every side on every channel
    (a rank whose sides differ in length ends up with many short blocks). A connection's runs start
    at the first channel where neither of its sides would exceed ``side_limit`` blocks (the runtime's
    32 send-side / receive-side blocks per channel); connections with more ops place first.

    The ops go to their connection's channels in turn (op i on channel ``i mod runs``), not in
    contiguous runs: blocks run at once only if each has work all through the schedule, and a
    connection on k contiguous runs would have one block busy at a time, moving at one block's copy
    rate while its link could take k (the timed model measured 6.6 ms against 4.3 ms for trn1_32's
    32-piece trees at 1 GiB). With a ``budget`` of blocks per rank, the blocks it leaves spare go,
    one channel at a time, to the connection with the most chunks per block whose two ranks both
    stay within it: a busy connection's ops spread over more blocks, which copy in parallel.
    Requires ``fuse(dag, False)`` (every route is one send and one receive).
    """
    n = ir.collective.num_ranks
    by_conn: dict[tuple[int, int], list[list[IOp]]] = defaultdict(list)
    for chain in ir.chains:
        if len(chain) != 2:
            raise ValueError("allocate_connections needs a program without fused ops")
        by_conn[(chain[0].rank, chain[0].sendp)].append(chain)
    runs_of = {conn: min(max_channels, ceil(len(chains) / cap)) for conn, chains in by_conn.items()}
    if budget:
        _spread_runs(by_conn, runs_of, n, max_channels, budget)
    opened: dict[tuple[int, int, bool], int] = defaultdict(int)   # (rank, chan, send?) -> sides
    for (a, b), chains in sorted(by_conn.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        chains.sort(key=lambda ch: ch[0].ordinal)
        runs = runs_of[(a, b)]
        base = 0
        if side_limit:
            base = next((o for o in range(max_channels - runs + 1) if all(
                opened[(a, c, True)] < side_limit and opened[(b, c, False)] < side_limit
                for c in range(o, o + runs))), 0)
        for i, chain in enumerate(chains):
            chan = base + i % runs
            for op in chain:
                op.chan = chan
        for c in range(base, base + runs):
            opened[(a, c, True)] += 1
            opened[(b, c, False)] += 1
    return _blocks(ir, n, {}, {})


def _spread_runs(by_conn: dict[tuple[int, int], list[list[IOp]]], runs_of: dict[tuple[int, int], int],
                 n: int, max_channels: int, budget: int) -> None:
    """Give spare blocks to the connections with the most chunks per block (see
    :func:`allocate_connections`; an op of ``cnt`` chunks is ``cnt`` chunks of one block's copying):
    each extra channel of connection (a, b) costs rank a a send-side block and rank b a receive-side
    block, so it is given only while both stay within ``budget``, and never more channels than the
    connection has ops. Ties go to the lower (sender, receiver), so the outcome is deterministic."""
    used = [0] * n
    for (a, b), runs in runs_of.items():
        used[a] += runs
        used[b] += runs
    load = {conn: sum(ch[0].cnt for ch in chains) for conn, chains in by_conn.items()}
    heap = [(-load[conn] / runs_of[conn], conn) for conn in by_conn]
    heapq.heapify(heap)
    while heap:
        _, (a, b) = heapq.heappop(heap)
        runs = runs_of[(a, b)]
        if runs >= max_channels or runs >= len(by_conn[(a, b)]) or used[a] >= budget \
                or used[b] >= budget:
            continue
        runs_of[(a, b)] = runs + 1
        used[a] += 1
        used[b] += 1
        heapq.heappush(heap, (-load[(a, b)] / (runs + 1), (a, b)))


def _blocks(ir: Ir, n: int, pair_s: dict[tuple[int, int, int], int],
            pair_r: dict[tuple[int, int, int], int]) -> list[list[Tb]]:
    """Threadblocks from the ops' channels: one per (rank, channel, send peer, receive peer), a
    plain send or receive joining the block its peer is paired in (``pair_s``/``pair_r``); copies go
    to their anchor's block, else to the rank's first; ids in :meth:`Tb.sort_key` order."""
    tbs: dict[tuple[int, int, int, int], Tb] = {}

    def tb_for(rank: int, chan: int, send: int, recv: int) -> Tb:
        key = (rank, chan, send, recv)
        tb = tbs.get(key)
        if tb is None:
            tb = tbs[key] = Tb(rank, chan, send, recv)
        return tb

    for op in ir.ordered:
        if op.typ == "cpy":
            continue
        if op.sendp >= 0 and op.recvp >= 0:
            op.tb = tb_for(op.rank, op.chan, op.sendp, op.recvp)
        elif op.sendp >= 0:
            op.tb = tb_for(op.rank, op.chan, op.sendp, pair_s.get((op.rank, op.chan, op.sendp), -1))
        else:
            op.tb = tb_for(op.rank, op.chan, pair_r.get((op.rank, op.chan, op.recvp), -1), op.recvp)
    per_rank: list[list[Tb]] = [[] for _ in range(n)]
    for tb in tbs.values():
        per_rank[tb.rank].append(tb)
    for r in range(n):
        if not per_rank[r]:
            per_rank[r].append(tb_for(r, 0, -1, -1))
        per_rank[r].sort(key=lambda tb: tb.sort_key(n))
    for op in ir.copies:
        op.tb = op.prev.tb if op.prev is not None else per_rank[op.rank][0]
        op.chan = op.tb.chan
    for op in ir.ordered:
        tb = op.tb
        op.tbidx = len(tb.ops)
        op.hasdep = 0
        tb.ops.append(op)
    for r in range(n):
        for i, tb in enumerate(per_rank[r]):
            tb.id = i
    return per_rank


def pack(per_rank: list[list[Tb]], max_steps: int, budget: int) -> int:
    """Share blocks where a rank has more than ``budget``: a send-only block (send=P) and a
    receive-only block (recv=Q) of one channel become one block (send=P, recv=Q) whose ops keep
    the global order, while it stays within ``max_steps``. Each FIFO still has one owner per side
    and channel (spec §5.2), so every message, chunk and connection is the schedule's; only the
    two sides now share a block's threads. Only as many pairs as the excess are merged, the
    fullest send side with the emptiest receive side first. Returns the blocks saved."""
    saved = 0
    for tbs in per_rank:
        excess = len(tbs) - budget
        if excess <= 0:
            continue
        chans = sorted({tb.chan for tb in tbs})
        merged: list[Tb] = []
        gone: set[int] = set()
        for chan in chans:
            sends = sorted((tb for tb in tbs if tb.chan == chan and tb.send >= 0 and tb.recv < 0),
                           key=lambda tb: (-len(tb.ops), tb.send))
            recvs = sorted((tb for tb in tbs if tb.chan == chan and tb.recv >= 0 and tb.send < 0),
                           key=lambda tb: (len(tb.ops), tb.recv))
            for st in sends:
                if excess <= 0:
                    break
                rt = next((r for r in recvs if id(r) not in gone
                           and len(st.ops) + len(r.ops) <= max_steps), None)
                if rt is None:
                    continue
                tb = Tb(st.rank, chan, st.send, rt.recv)
                tb.ops = sorted(st.ops + rt.ops, key=lambda op: op.ordinal)
                for i, op in enumerate(tb.ops):
                    op.tb, op.tbidx = tb, i
                gone.update((id(st), id(rt)))
                merged.append(tb)
                excess -= 1
                saved += 1
        if merged:
            n = max(max(tb.send, tb.recv) for tb in tbs) + 2
            keep = [tb for tb in tbs if id(tb) not in gone] + merged
            keep.sort(key=lambda tb: tb.sort_key(n))
            tbs[:] = keep
            for i, tb in enumerate(tbs):
                tb.id = i
    return saved


# ================================================================================== progress

def progress(ir: Ir, max_count: int, capacity: int) -> list[IOp]:
    """Execute the global order abstractly; return the ops that could not run when their turn came.

    Each op runs atomically when its predecessor in its tb and its data predecessors are done, its
    incoming message is there and, for a send part, ``ceil(cnt / max_count)`` messages fit in the
    connection's FIFO of ``capacity`` messages. A plain send whose receiver (a plain receive) can
    run at that moment streams into it instead and needs no FIFO space. The check is sufficient:
    when it passes, this order is an execution of the program, so the runtime cannot deadlock.
    """
    occ: dict[tuple[int, int, int], int] = defaultdict(int)
    bad: list[IOp] = []
    for op in ir.ordered:
        op.done = False

    def ready(op: IOp) -> bool:
        if op.tbidx > 0 and not op.tb.ops[op.tbidx - 1].done:
            return False
        return all(p.done for p in op.preds)

    for op in ir.ordered:
        if op.done:
            continue
        ok = (op.tbidx == 0 or op.tb.ops[op.tbidx - 1].done) and \
            (not op.preds or all(p.done for p in op.preds))
        units = -(-op.cnt // max_count)
        if op.recvp >= 0 and not op.prev.done:
            ok = False
        paired = None
        if op.sendp >= 0:
            conn = (op.rank, op.sendp, op.chan)
            y = op.nxt
            if op.typ == "s" and y.sendp < 0 and not y.done and ready(y):
                paired = y
            elif occ[conn] + units > capacity:
                ok = False
        if not ok:
            bad.append(op)
        op.done = True
        if op.recvp >= 0:
            occ[(op.recvp, op.rank, op.chan)] -= units
        if op.sendp >= 0:
            if paired is not None:
                paired.done = True
            else:
                occ[(op.rank, op.sendp, op.chan)] += units
    return bad


def progress_any_order(ir: Ir, max_count: int, capacity: int) -> list[IOp]:
    """Like :func:`progress`, but not tied to the global order: any block whose next op can run
    runs it, until none can; returns, for each block that cannot finish, the op it is stuck at
    (empty: no deadlock).

    Blocks run their ops in order; an op runs when its predecessors are done, its incoming message
    was sent and, for a send part, ``ceil(cnt / max_count)`` messages fit in the connection's FIFO
    (a plain send streams into a plain receive that is its block's next op instead). Every wait is
    for something no other block can take away (each FIFO has one sending block), so when one
    interleaving finishes every fair one does. Blocks that share a send side and a receive side
    (:func:`pack`) need this: in the global order such a block's send can come while the FIFO
    holds messages its receiver drains only later in the same step, which :func:`progress`
    reports as blocked though the runtime only waits for that receiver."""
    for op in ir.ordered:
        op.done = False
    blocks: list[Tb] = []
    seen: set[int] = set()
    for op in ir.ordered:
        if id(op.tb) not in seen:
            seen.add(id(op.tb))
            blocks.append(op.tb)
    pos = {id(tb): 0 for tb in blocks}
    waiters: dict[int, list[Tb]] = defaultdict(list)
    for op in ir.ordered:
        for p in op.preds:
            waiters[id(p)].append(op.tb)
    occ: dict[tuple[int, int, int], int] = defaultdict(int)
    queue = deque(blocks)
    queued = set(seen)

    def wake(tb: Tb | None) -> None:
        if tb is not None and id(tb) not in queued:
            queued.add(id(tb))
            queue.append(tb)

    def head(tb: Tb) -> IOp | None:
        i = pos[id(tb)]
        return tb.ops[i] if i < len(tb.ops) else None

    def finish(op: IOp) -> None:
        op.done = True
        pos[id(op.tb)] += 1
        for tb in waiters.get(id(op), ()):
            wake(tb)
        if op.nxt is not None:
            wake(op.nxt.tb)
        if op.prev is not None and op.recvp >= 0:
            wake(op.prev.tb)
        nxt = head(op.tb)
        if nxt is not None and nxt.recvp >= 0 and nxt.prev is not None:
            wake(nxt.prev.tb)
        wake(op.tb)

    while queue:
        tb = queue.popleft()
        queued.discard(id(tb))
        op = head(tb)
        if op is None or not all(p.done for p in op.preds):
            continue
        if op.recvp >= 0 and not op.prev.done:
            continue
        units = -(-op.cnt // max_count)
        if op.sendp >= 0:
            conn = (op.rank, op.sendp, op.chan)
            y = op.nxt
            if occ[conn] + units <= capacity:
                occ[conn] += units
            elif op.typ == "s" and y.sendp < 0 and head(y.tb) is y and all(p.done for p in y.preds):
                finish(op)
                finish(y)
                continue
            else:
                continue
        if op.recvp >= 0:       # a streamed message finished with its send, above
            occ[(op.recvp, op.rank, op.chan)] -= units
        finish(op)
    return [op for tb in blocks if (op := head(tb)) is not None]


# ================================================================================== dependencies

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


# ================================================================================== instances

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


def units_params(proto: str, max_bytes: int, nchunksperloop: int, coll: str, profile: str
                 ) -> tuple[int, int]:
    """(M, capacity): chunks per message at ``max_bytes`` (1 if unbounded) and FIFO messages."""
    if proto == "Simple":
        eff = 512 * 1024 if profile in ("exec", "rccl") and coll in ("reduce", "broadcast") \
            else 2 * 1024 * 1024
    elif proto == "LL":
        eff = 32 * 1024
    else:
        eff = 576000
    if max_bytes <= 0:
        m = 1
    else:
        per_chunk = ceil(max_bytes / nchunksperloop)
        m = max(1, min(MAX_COUNT, eff // per_chunk))
    return m, (2 if proto == "Simple" else 8)
