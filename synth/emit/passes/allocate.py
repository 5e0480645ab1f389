"""The ``allocate`` pass: channels and threadblocks for the ordered Ir (:func:`allocate`), the
per-connection placement of an unfused program over a limit (:func:`allocate_connections`), and
block sharing for a rank over its block budget (:func:`pack`)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from itertools import islice
from math import ceil

from .ir import LOCAL_OPS, IOp, Ir, Tb

PAIR_SETS = 1
"""Channel sets a route may move to when its fused ops clash with the peer pairs already on its
channel; beyond that the clashing ops are un-fused (more channels cost threadblocks everywhere)."""


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
        if len(fused) == 1:     # most routes: no revisit to weigh
            op = fused[0]
            if pair_r.get((op.rank, ch, op.recvp), op.sendp) != op.sendp or \
                    pair_s.get((op.rank, ch, op.sendp), op.recvp) != op.recvp:
                return [op]
            return []
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

    # Loads and opened peers are kept per connection side, one entry per channel: a chain weighs
    # every channel of ``spread`` (hundreds of thousands of chains, millions of weighings on
    # dgx_h100 x 64), and its sides' rows are found once, their per-channel maxima taken in one
    # ``zip`` instead of a keyed lookup per side and channel.
    width = max(max_channels, spread)
    zero = [0] * width
    nothing: list[set[int] | None] = [None] * width
    load: dict[tuple[int, int], list[int]] = {}         # (rank, +-(peer+1)) -> ops per channel
    opened: dict[tuple[int, bool], list[set[int] | None]] = {}  # (rank, send?) -> peers per chan
    find_load, find_opened = load.get, opened.get

    def overflow(touched: list[tuple[set[int], list[set[int] | None]]], c: int) -> int:
        """Connection sides the chain would open beyond ``side_limit`` on channel c."""
        total = 0
        for peers, row in touched:
            have = row[c]
            new = len(peers) if have is None else len(peers - have)
            if new:
                total += max(0, (0 if have is None else len(have)) + new - side_limit)
        return total

    chains = ir.chains
    if balance:
        chains = sorted(chains, key=lambda ch: (-len(ch) * ch[0].cnt, ch[0].ordinal))
    for chain in chains:
        fused = chain[1:-1]
        if fill or balance:
            flat: list[tuple[int, int]] = []
            touch: dict[tuple[int, bool], set[int]] = {}
            for op in chain:
                if op.sendp >= 0:
                    flat.append((op.rank, op.sendp + 1))
                    touch.setdefault((op.rank, True), set()).add(op.sendp)
                if op.recvp >= 0:
                    flat.append((op.rank, -op.recvp - 1))
                    touch.setdefault((op.rank, False), set()).add(op.recvp)
            # the most ops any of the chain's connection sides holds on each channel
            rows = [find_load(k, zero) for k in flat]
            peak = list(map(max, islice(zip(*rows, strict=True), spread)))
            touched = [(peers, find_opened(k, nothing)) for k, peers in touch.items()] \
                if side_limit else []
            base = None
            if fill:    # first fit: every side under ``fill`` (the cheaper test first)
                for c in range(spread):
                    if peak[c] < fill and not (touched and overflow(touched, c)):
                        base = c
                        break
            if base is None:    # the channel opening fewest sides over the limit, then lightest
                base = min((overflow(touched, c) if touched else 0, peak[c], c)
                           for c in range(spread))[2]
        else:
            base = min(chain[0].chunks) * spread // nch
        chosen = -1
        if not fused:
            chosen = base
        else:
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
            for k in flat:
                row = find_load(k)
                if row is None:
                    row = load[k] = [0] * width
                row[chosen] += 1
            for k, peers in touch.items():
                row = find_opened(k)
                if row is None:
                    row = opened[k] = [None] * width
                have = row[chosen]
                if have is None:
                    row[chosen] = set(peers)
                else:
                    have |= peers
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

    # the loop runs once per op and placement attempt (millions on dgx_a100 x 8): tb_for inlined
    find, paired_s, paired_r = tbs.get, pair_s.get, pair_r.get
    for op in ir.ordered:
        if op.typ in LOCAL_OPS:
            continue
        rank, chan, send, recv = op.rank, op.chan, op.sendp, op.recvp
        if send < 0:
            send = paired_r((rank, chan, recv), -1)
        elif recv < 0:
            recv = paired_s((rank, chan, send), -1)
        key = (rank, chan, send, recv)
        tb = find(key)
        if tb is None:
            tb = tbs[key] = Tb(rank, chan, send, recv)
        op.tb = tb
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
