"""The discrete-event machine behind the program model (:mod:`synth.timing.program`).

:mod:`synth.timing.program` says what the model charges and why (blocks, slicing, FIFOs,
dependencies, links shared max-min fair, cut-through, per-operation costs) and builds the figures
(:class:`ProgramModel`) from NCCL's and a calibration's; this module runs a parsed program under
those figures, event by event (:func:`simulate`). It is kept apart because it is the part whose
speed matters: the select layer times every candidate file at many sizes, and ``synth solve``
times the files it writes at every size of its sweep.

What keeps it fast without changing a single result (``tests/test_program_model.py`` pins times to
the bit): a program's per-size-independent structure is built once (:class:`Layout`,
:func:`layout_of`); the max-min fair rates of a recurring flow-resource component are computed
once (:meth:`Layout.fair`); and the per-event paths avoid method calls and allocations where
they can. Events are processed in exactly the order, and with exactly the floating-point
operations, of the straightforward version (``benchmarks/speed.py`` measures them side by side).
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from typing import Any

import numpy as np

from .. import collector
from ..emit.interp_fold import (
    LL128_CHUNK_BYTES,
    LL_CHUNK_BYTES,
    SIMPLE_CHUNK_BYTES,
    SIMPLE_ROOTED_CHUNK_BYTES,
    fifo_capacity,
    fold_block,
)
from ..emit.program import Program
from ..emit.runtimes import get_profile, normalize_coll
from ..errors import SynthError, VerificationError
from ..topology import MB, Topology
from .fair_share import SMALL_COMPONENT, fair_rates
from .protocol import ProtocolParams

# operation codes, as the interpreter folds them
S, R, RCS, RRS, RRC, RRCS, CPY, RE = range(8)
SENDS = (True, False, True, True, False, True, False, False)
RECVS = (False, True, True, True, True, True, False, False)
REDUCES = (False, False, False, True, True, True, False, True)

MAX_COUNT = 71
"""maxAllowedCount is clamped to ``MSCCL_MAX_COUNT - 1`` (spec §3.5, §6)."""
SIMPLE_SLICES_PER_MESSAGE = 2
"""``MSCCL_CHUNKSTEPS / MSCCL_SLICESTEPS`` = 4 / 2 (spec §6)."""
_FLAG_RADIX = 1 << 20
"""Flag encoding: iteration * radix + step number (lexicographic, like the runtime's, §5.4)."""

STEP_US = 0.0
"""Executor flag/barrier cost per message *beyond* NCCL's per-hop latency (``hop_*``): fitted to
MSCCL's published ND H100 v5 times with the cited launch, the best value on a 0.05 µs grid is 0.0
(``results/reality_msccl.md``), so none is added by default; a calibration may set one."""


@dataclass(frozen=True)
class ProgramModel:
    """Everything the timed model charges besides the topology's links (µs, GB/s)."""

    proto: ProtocolParams
    launch_us: float = 0.0
    step_us: float = STEP_US
    exposed_receive: float = 0.0
    """Fraction of a receive-only message's copy-out that is not overlapped with its arrival."""
    cut_through: float = 0.0
    """Fraction of a message that must have arrived before the receiver can start on it."""
    nvlink_efficiency: float = 1.0
    """Usable share of an intra-node link's nominal bandwidth (NCCL's NVLink figure / nominal)."""
    reduce_streams: bool = True
    """Reductions read one more stream per source (slower than a copy)."""
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": self.proto.name, "launch_us": self.launch_us, "step_us": self.step_us,
                "exposed_receive": self.exposed_receive, "cut_through": self.cut_through,
                "nvlink_efficiency": self.nvlink_efficiency, "efficiency": self.proto.efficiency,
                "channel_GBps": self.proto.channel_GBps, "hop_intra_us": self.proto.hop_intra_us,
                "hop_inter_us": self.proto.hop_inter_us, "source": self.source}


def effective_chunk_bytes(program: Program, profile: str = "exec") -> int:
    """The host's chunkEffBytes for the program's protocol (spec §3.5)."""
    prof = get_profile(profile)
    if program.proto == "Simple":
        rooted = prof.name in ("exec", "rccl") and normalize_coll(program.coll) in ("reduce",
                                                                                     "broadcast")
        return SIMPLE_ROOTED_CHUNK_BYTES if rooted else SIMPLE_CHUNK_BYTES
    return LL_CHUNK_BYTES if program.proto == "LL" else LL128_CHUNK_BYTES


@dataclass(frozen=True)
class Slicing:
    """How a call of ``nbytes`` is walked: ``M`` chunks per message, slices per iteration."""

    nbytes: int
    chunk_bytes: float
    max_count: int
    slices: tuple[float, ...]
    """Bytes of one chunk moved in each grid iteration."""


def slicing(program: Program, nbytes: int, profile: str = "exec") -> Slicing:
    eff = effective_chunk_bytes(program, profile)
    chunk = nbytes / program.nchunksperloop
    m = int(max(1, min(MAX_COUNT, eff // max(1, math.ceil(chunk)))))
    if chunk <= eff:
        slices: tuple[float, ...] = (chunk,)
    else:
        n = math.ceil(chunk / eff)
        slices = tuple([float(eff)] * (n - 1) + [chunk - eff * (n - 1)])
    return Slicing(nbytes, chunk, m, slices)


@dataclass
class ProgramTiming:
    """The outcome of one timed run."""

    nbytes: int
    time_us: float
    iterations: int
    max_count: int
    messages: int
    flow_events: int
    model: ProgramModel
    per_block_busy_us: dict[tuple[int, int], float] = field(default_factory=dict)
    trace: list[dict] | None = None


# ------------------------------------------------------------------------------ the machine
class Layout:
    """What a run of a program on a topology depends on besides the size: each block's folded
    operations, the connections with the resources (links, ports) each one's messages cross, and
    those resources' capacities.

    Built once per (program, topology, link scaling) and shared by every size (:func:`layout_of`):
    a sweep or a select layer timing one file at many sizes used to fold every block and look up
    every channel again per size (0.5 s a size on trn1_32's largest file). ``memo`` keeps the
    max-min fair rates of every flow-resource component met so far, keyed by the component's
    classes of alike flows (resource class, cap, count: :meth:`fair`), which decide them
    (:func:`synth.timing.fair_share.fair_rates` is a function of its arguments), so a component
    that recurs -- every grid iteration of a ring repeats the last one's -- is shared out once:
    on synth's 64-rank ring allreduce at 1 GiB, 54,642 multi-flow shares had 487 distinct
    components.
    """

    MEMO_LIMIT = 1 << 18
    """Components remembered at most (then the memo starts again): bounds its memory."""

    def __init__(self, program: Program, topology: Topology, nvlink_efficiency: float) -> None:
        if program.ngpus != topology.num_ranks:
            raise SynthError(f"the program has {program.ngpus} ranks but topology "
                             f"'{topology.name}' has {topology.num_ranks} (pick --topo/--nodes)")
        self.fifo_cap = fifo_capacity(program)
        self.block_rank: list[int] = []
        self.block_tb: list[int] = []
        self.ops: list[list[tuple]] = []
        """Per block: (code, cnt, waits ((block, step), ...), step, hasdep, sources, moves),
        ``moves`` when the operation sends or receives (its units are messages)."""
        rank_base: dict[int, int] = {}
        gpus = sorted(program.gpus, key=lambda g: g.id)
        for g in gpus:
            rank_base[g.id] = len(self.ops)
            for tb in sorted(g.tbs, key=lambda t: t.id):
                self.block_rank.append(g.id)
                self.block_tb.append(tb.id)
                self.ops.append([])
        self.nb = nb = len(self.ops)
        self.out_conn = [-1] * nb
        self.in_conn = [-1] * nb
        self.conn_sender: list[int] = []
        self.conn_receiver: list[int] = []
        self.conn_res: list[tuple[int, ...]] = []
        self.conn_alpha: list[float] = []
        self.conn_inter: list[bool] = []
        conns: dict[tuple[int, int, int], int] = {}
        res_index: dict[tuple, int] = {}
        res_caps: list[float] = []
        self.res_names: list[str] = []
        node_of = topology.node_of
        for g in gpus:
            for tb in sorted(g.tbs, key=lambda t: t.id):
                b = rank_base[g.id] + tb.id
                ops = self.ops[b]
                for (code, _src, _dst, srcs, cnt, waits, pos, _first, hasdep, _n, _i) in fold_block(
                        tb, {"i": 0, "o": 0, "s": 0}, 1):
                    gw = tuple((rank_base[g.id] + d, k) for d, k in waits)
                    nsrc = len(srcs) if srcs else 1
                    ops.append((code, cnt, gw, pos, hasdep, nsrc, SENDS[code] or RECVS[code]))
                for peer, outgoing in ((tb.send, True), (tb.recv, False)):
                    if peer < 0:
                        continue
                    key = (g.id, peer, tb.chan) if outgoing else (peer, g.id, tb.chan)
                    c = conns.get(key)
                    if c is None:
                        c = conns[key] = len(self.conn_res)
                        src, dst = key[0], key[1]
                        ch = topology.channel(src, dst)
                        if ch is None:
                            raise SynthError(f"rank {src} sends to rank {dst}, which topology "
                                             f"'{topology.name}' does not connect to it")
                        ids = []
                        inter = node_of[src] != node_of[dst]
                        scale = 1.0 if inter else nvlink_efficiency
                        for rname, beta, lanes in ch.resources:
                            i = res_index.get(rname)
                            if i is None:
                                i = res_index[rname] = len(res_caps)
                                res_caps.append(scale * lanes * MB / beta)   # bytes per µs
                                self.res_names.append(":".join(rname))
                            ids.append(i)
                        self.conn_sender.append(-1)
                        self.conn_receiver.append(-1)
                        self.conn_res.append(tuple(ids))
                        self.conn_alpha.append(ch.alpha_us)
                        self.conn_inter.append(inter)
                    if outgoing:
                        self.conn_sender[c] = b
                        self.out_conn[b] = c
                    else:
                        self.conn_receiver[c] = b
                        self.in_conn[b] = c
        self.res_cap = np.asarray(res_caps, dtype=float)
        self.res_cap_list = [float(c) for c in res_caps]
        self.conn_min_cap = [min(self.res_cap_list[r] for r in res) if res else math.inf
                             for res in self.conn_res]
        classes: dict[tuple[int, ...], int] = {}
        self.conn_class = [classes.setdefault(res, len(classes)) for res in self.conn_res]
        """Each connection's resource class: connections crossing the same resources share one
        (channels between one pair of ranks), and their flows, capped alike, share alike."""
        self.class_res = list(classes)
        width = max((len(res) for res in self.class_res), default=0)
        self.class_rows = np.full((len(self.class_res), max(1, width)), -1, dtype=np.int64)
        """Each class's resources as a row padded with -1 (what :meth:`fair` hands
        :func:`fair_rates` for a large component, gathered by class in one step)."""
        for c, res in enumerate(self.class_res):
            self.class_rows[c, :len(res)] = res
        self.memo: dict[tuple, list[float]] = {}
        self.op_count = sum(len(ops) for ops in self.ops)
        """Operations over every block: what :data:`LAYOUT_OPS_KEPT` counts."""

    def fair(self, classes: tuple[int, ...], caps: tuple[float, ...], weight: tuple[int, ...]
             ) -> list[float]:
        """Max-min fair rates of one component given as its classes of alike flows: entry i is
        ``weight[i]`` flows on a connection of resource class ``classes[i]`` capped at
        ``caps[i]``; one rate per entry, each of its flows' (:func:`fair_rates`). Remembered by
        all three, which decide them."""
        key = (classes, caps, weight)
        rates = self.memo.get(key)
        if rates is None:
            if len(self.memo) >= self.MEMO_LIMIT:
                self.memo.clear()
            rows = self.class_rows[list(classes)] if len(classes) > SMALL_COMPONENT else None
            rates = self.memo[key] = fair_rates([self.class_res[c] for c in classes],
                                                self.res_cap_list, caps, self.res_cap, rows,
                                                weight)
        return rates


_LAYOUTS: OrderedDict[tuple, tuple[Any, Any, Layout]] = OrderedDict()
_LAYOUTS_KEPT = 8
"""Layouts always kept (the most recent), whatever their size."""
LAYOUT_OPS_KEPT = 1_500_000
"""Beyond :data:`_LAYOUTS_KEPT`, layouts are kept while their operations add up to at most this
many (a bound on their memory by count, not a measured size). Why: the program scorer walks
sizes in its outer loop and every (candidate, protocol, instances) program in the inner one, so
a cache of 8 rebuilt a layout on 2,329 of 2,872 calls on ``synth solve --topo dgx1 --coll
allreduce`` (measured; 142 with this budget, same files); the programs of an 8- or 16-rank
solve fit."""


def layout_of(program: Program, topology: Topology, nvlink_efficiency: float) -> Layout:
    """The :class:`Layout` of ``program`` on ``topology``, built once while both are alive (the
    most recent are kept, by identity -- a program is not hashed -- up to
    :data:`LAYOUT_OPS_KEPT` operations)."""
    key = (id(program), id(topology), nvlink_efficiency)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is program and hit[1]() is topology:
        _LAYOUTS.move_to_end(key)
        return hit[2]
    layout = Layout(program, topology, nvlink_efficiency)
    _LAYOUTS[key] = (weakref.ref(program), weakref.ref(topology), layout)
    _LAYOUTS.move_to_end(key)
    for k in [k for k, (p, t, _) in _LAYOUTS.items() if p() is None or t() is None]:
        del _LAYOUTS[k]  # its program or machine is gone: nobody can ask for it again
    held = sum(e[2].op_count for e in _LAYOUTS.values())
    while len(_LAYOUTS) > _LAYOUTS_KEPT and held > LAYOUT_OPS_KEPT:
        _, (_, _, old) = _LAYOUTS.popitem(last=False)
        held -= old.op_count
    return layout


class _Conn:
    __slots__ = ("alpha", "cap", "id", "inflight", "inter", "min_cap", "queue", "rclass",
                 "receiver", "res", "send_sync", "sender")

    def __init__(self, layout: Layout, i: int, send_sync: float) -> None:
        self.id = i
        self.cap = layout.fifo_cap
        self.inflight = 0          # messages whose send started and that are not yet consumed
        self.queue: deque[_Msg] = deque()   # messages sent and not yet taken by the receiver
        self.sender = layout.conn_sender[i]
        self.receiver = layout.conn_receiver[i]
        self.res = layout.conn_res[i]
        self.rclass = layout.conn_class[i]
        self.alpha = layout.conn_alpha[i]
        self.inter = layout.conn_inter[i]
        self.min_cap = layout.conn_min_cap[i]
        self.send_sync = send_sync
        """Floors before a send: the executor's step cost, then NCCL's per-hop latency."""


class _Msg:
    """One message on a connection: its head (enough to start consuming) and its tail arrive."""

    __slots__ = ("head", "tail", "tail_time", "waiter")

    def __init__(self) -> None:
        self.head = False
        self.tail = False
        self.tail_time = math.inf
        self.waiter: tuple | None = None   # a receiving unit that ended before the tail arrived


class _Share:
    """The flows in progress on connections of one resource class with one cap: max-min sharing
    gives them one rate (they rise and freeze together), so a recomputation reaches, weighs and
    rates them as one entry, and touches a flow only where its rate changes or it is new."""

    __slots__ = ("cap", "flows", "fresh", "rate", "rclass", "res")

    def __init__(self, rclass: int, cap: float, res: tuple[int, ...]) -> None:
        self.rclass = rclass
        self.cap = cap
        self.res = res
        self.flows: dict[int, list] = {}
        """Id -> flow, in the order the flows began (ids rise): the first is the oldest."""
        self.fresh: list[int] = []
        """Flows begun since the last recomputation (rated then whatever the rate)."""
        self.rate = -1.0
        """The rate every flow here had at the last recomputation (all alike)."""


_OP_NAMES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re")


COMPACT_MIN = 4096
"""Entries the event heap may hold before superseded milestones are dropped
(:meth:`_Sim._compact`): below it the heap is cheap whatever it holds."""
COMPACT_GROWTH = 4
"""After a compaction, the heap may grow to this many times its live entries before the next."""


class _Sim:
    """One call of the program at one size, event by event.

    Events are ``(time, sequence, kind, block or flow, payload)`` in a heap; events at one time
    run in the order they were scheduled, and the rates of the flows a change touched are shared
    out once all of that time's events have run. Kinds: 1 a send's transfer begins, 2 a local
    unit's timer, 3 a message's head arrives, 4 its tail arrives, 5 a flow's milestone (head
    in, or last byte out; superseded by a rate change when its version is old).
    """

    def __init__(self, layout: Layout, program: Program, nbytes: int, model: ProgramModel,
                 profile: str, trace: bool) -> None:
        self.layout = layout
        self.model = model
        self.sl = slicing(program, nbytes, profile)
        self.want_trace = trace
        self.events: list[dict] = []
        proto = model.proto
        self.eff = proto.efficiency
        self.tb_rate = proto.channel_GBps * 1e3          # data bytes per µs
        nb = self.nb = layout.nb
        self.block_rank = layout.block_rank
        self.block_tb = layout.block_tb
        self.ops = layout.ops
        step = model.step_us
        conns = [_Conn(layout, i, step + (proto.hop_inter_us if layout.conn_inter[i]
                                          else proto.hop_intra_us))
                 for i in range(len(layout.conn_res))]
        self.out_conn: list[_Conn | None] = [conns[c] if c >= 0 else None for c in layout.out_conn]
        self.in_conn: list[_Conn | None] = [conns[c] if c >= 0 else None for c in layout.in_conn]
        self.res_cap_list = layout.res_cap_list
        self.res_names = layout.res_names
        # per-call constants
        self.max_count = self.sl.max_count
        self.slices = self.sl.slices
        self.nslices = len(self.sl.slices)
        # the block's cap is on data bytes, so in wire units it is cap / efficiency
        self.flow_cap = self.tb_rate / self.eff
        self.fused_flow_cap = (self.tb_rate * (2.0 / 3.0) if model.reduce_streams
                               else self.tb_rate) / self.eff
        self.rrc_factor = 1.5 if model.reduce_streams else 1.0
        # dynamic state
        self.t = 0.0
        self.t_end = 0.0
        self.it = [0] * nb
        self.oi = [0] * nb
        self.ui = [0] * nb
        self.busy = [False] * nb
        self.done = [False] * nb
        self.flag = [-1] * nb
        self.flag_waiters: list[list[int]] = [[] for _ in range(nb)]
        self.heap: list[tuple[float, int, int, int, Any]] = []
        self.seq = 0
        self.compact_at = COMPACT_MIN
        # id -> [wire bytes left at t_ref, rate, block, conn, t_start, cap, data bytes, msg,
        #        head threshold (wire bytes left when the head is in; -1 once sent), t_ref, version,
        #        share]
        self.flows: dict[int, list] = {}
        self.shares: dict[tuple[int, float], _Share] = {}
        self.on_res: list[set[_Share]] = [set() for _ in layout.res_cap_list]
        """Per resource, the shares with a flow crossing it."""
        self.flows_on: list[set[int]] = ([set() for _ in layout.res_cap_list] if trace else [])
        """Per resource, the flows crossing it (kept for a trace's link loads only)."""
        self.dirty: set[int] = set()          # resources whose flows need new rates
        self.flow_ids = 0
        self.messages = 0
        self.flow_events = 0
        self.busy_us = [0.0] * nb
        self.cur_in: list[_Msg | None] = [None] * nb
        self.head_frac = model.cut_through

    # ---------------------------------------------------------------- helpers
    def _span(self, b: int, name: str, t0: float, t1: float, args: dict | None = None) -> None:
        if self.want_trace and t1 > t0:
            ev = {"name": name, "ph": "X", "ts": round(t0, 4), "dur": round(t1 - t0, 4),
                  "pid": self.block_rank[b], "tid": self.block_tb[b]}
            if args:
                ev["args"] = args
            self.events.append(ev)

    # ---------------------------------------------------------------- block progress
    def try_start(self, b: int) -> None:
        """Start block b's next unit if nothing holds it back (else register what it waits on)."""
        if self.busy[b] or self.done[b]:
            return
        op = self.ops[b][self.oi[b]]
        code = op[0]
        ui = self.ui[b]
        if ui == 0 and op[2]:
            base = self.it[b] * _FLAG_RADIX
            flag = self.flag
            for d, k in op[2]:
                if flag[d] < base + k:
                    self.flag_waiters[d].append(b)
                    return
        sends = SENDS[code]
        if RECVS[code]:
            q = self.in_conn[b].queue
            if not q or not q[0].head:
                return  # woken when the head of the next message arrives
            if sends:
                c = self.out_conn[b]
                if c.inflight >= c.cap:
                    return  # woken when the receiver frees a slot
            self.cur_in[b] = q.popleft()
        elif sends:
            c = self.out_conn[b]
            if c.inflight >= c.cap:
                return  # woken when the receiver frees a slot
        # start the unit
        self.busy[b] = True
        t = self.t
        if op[6]:
            m = self.max_count
            left = op[1] - ui * m
            nbytes = (m if m < left else left) * self.slices[self.it[b]]
        else:
            nbytes = op[1] * self.slices[self.it[b]]
        self.seq += 1
        if sends:    # NCCL's hwLat is per hop: charged once, on the sending side
            c.inflight += 1
            heappush(self.heap, (t + c.send_sync, self.seq, 1, b, (nbytes, t)))  # transfer
            return
        m = self.model
        rate = self.tb_rate
        if code in (R, RRC):
            # the copy-out runs while the message arrives; what is left after its tail:
            tail = nbytes * m.exposed_receive * (self.rrc_factor if code == RRC else 1.0) / rate
            heappush(self.heap, (t + m.step_us, self.seq, 2, b, (t, nbytes, tail)))   # timer
            return
        # cpy: one read + one write; re with nsrc sources reads nsrc + 1 streams, writes one
        work = nbytes if code == CPY else nbytes * ((op[5] + 2) / 2 if m.reduce_streams else 1.0)
        heappush(self.heap, (t + m.step_us + work / rate, self.seq, 2, b, (t, nbytes, None)))

    def begin_transfer(self, b: int, nbytes: float, t_start: float) -> None:
        code = self.ops[b][self.oi[b]][0]
        c = self.out_conn[b]
        msg = _Msg()
        c.queue.append(msg)
        wire = nbytes / self.eff
        t = self.t
        if self.head_frac <= 0.0:
            self.seq += 1
            heappush(self.heap, (t + c.alpha, self.seq, 3, c.receiver, msg))  # head arrives
            head_rem = -1.0
        else:
            head_rem = wire * (1.0 - self.head_frac)
        self.flow_ids += 1
        fid = self.flow_ids
        cap = self.fused_flow_cap if code in (RRS, RRCS) else self.flow_cap
        share = self.shares.get((c.rclass, cap))
        if share is None:
            share = self.shares[(c.rclass, cap)] = _Share(c.rclass, cap, c.res)
        f = self.flows[fid] = [wire, 0.0, b, c, t_start, cap, nbytes, msg, head_rem, t, 0, share]
        if not share.flows:
            on_res = self.on_res
            for r in c.res:
                on_res[r].add(share)
        share.flows[fid] = f
        share.fresh.append(fid)
        if self.want_trace:
            for r in c.res:
                self.flows_on[r].add(fid)
        self.dirty.update(c.res)
        self.messages += 1

    def finish_flow(self, fid: int) -> None:
        f = self.flows.pop(fid)
        b, c, t_start, nbytes, msg = f[2], f[3], f[4], f[6], f[7]
        share = f[11]
        del share.flows[fid]
        if not share.flows:
            on_res = self.on_res
            for r in c.res:
                on_res[r].discard(share)
        if self.want_trace:
            for r in c.res:
                self.flows_on[r].discard(fid)
        self.dirty.update(c.res)
        t = self.t
        if f[8] >= 0:                      # the head threshold was never crossed separately
            self.seq += 1
            heappush(self.heap, (t + c.alpha, self.seq, 3, c.receiver, msg))
        incoming = self.cur_in[b]
        if incoming is not None and not incoming.tail:
            # a forwarding unit cannot end before what it forwards has fully arrived
            incoming.waiter = ("fwd", b, t_start, nbytes, msg)
            return
        self.seq += 1
        heappush(self.heap, (t + c.alpha, self.seq, 4, c.receiver, msg))   # tail arrives
        self.unit_done(b, t_start, nbytes)

    def tail_arrives(self, msg: _Msg) -> None:
        msg.tail = True
        msg.tail_time = self.t
        w = msg.waiter
        if w is None:
            return
        msg.waiter = None
        self.seq += 1
        if w[0] == "fwd":
            _, b, t_start, nbytes, out = w
            c = self.out_conn[b]
            heappush(self.heap, (self.t + c.alpha, self.seq, 4, c.receiver, out))
            self.unit_done(b, t_start, nbytes)
        else:
            _, b, t_start, nbytes, tail = w
            heappush(self.heap, (self.t + tail, self.seq, 2, b, (t_start, nbytes, 0.0)))

    def timer(self, b: int, t_start: float, nbytes: float, tail: float | None) -> None:
        """A local unit's work is over; a receive-only one also needs its message's tail."""
        msg = self.cur_in[b]
        if tail is not None and msg is not None:
            if not msg.tail:
                msg.waiter = ("recv", b, t_start, nbytes, tail)
                return
            end = msg.tail_time + tail
            if end > self.t + 1e-12:
                self.seq += 1
                heappush(self.heap, (end, self.seq, 2, b, (t_start, nbytes, 0.0)))
                return
        self.unit_done(b, t_start, nbytes)

    def unit_done(self, b: int, t_start: float, nbytes: float | None = None) -> None:
        ops = self.ops[b]
        oi = self.oi[b]
        op = ops[oi]
        code = op[0]
        t = self.t
        self.busy[b] = False
        self.busy_us[b] += t - t_start
        if self.want_trace:
            self._span(b, _OP_NAMES[code], t_start, t,
                       {"iter": self.it[b], "step": op[3], "bytes": int(nbytes or 0)})
        if RECVS[code]:
            c = self.in_conn[b]
            c.inflight -= 1
            self.cur_in[b] = None
            self.try_start(c.sender)
        ui = self.ui[b] + 1
        if ui >= (-(-op[1] // self.max_count) if op[6] else 1):
            self.ui[b] = 0
            if op[4]:
                self.flag[b] = self.it[b] * _FLAG_RADIX + op[3]
                waiters = self.flag_waiters[b]
                if waiters:
                    self.flag_waiters[b] = []
                    for w in waiters:
                        self.try_start(w)
            oi += 1
            if oi >= len(ops):
                self.oi[b] = 0
                it = self.it[b] = self.it[b] + 1
                if it >= self.nslices:
                    self.done[b] = True
                    if t > self.t_end:
                        self.t_end = t
                    return
            else:
                self.oi[b] = oi
        else:
            self.ui[b] = ui
        self.try_start(b)

    # ---------------------------------------------------------------- main loop
    def _milestone(self, fid: int, f: list) -> None:
        """Schedule the flow's next milestone (head in, or last byte out) at its current rate."""
        f[10] += 1
        if f[1] <= 0:
            return
        left = f[0] - f[8] if f[8] >= 0 else f[0] - 0.0
        self.seq += 1
        heap = self.heap
        heappush(heap, (f[9] + (0.0 if left < 0.0 else left) / f[1], self.seq, 5, fid, f[10]))
        if len(heap) > self.compact_at:
            self._compact()

    def _compact(self) -> None:
        """Drop the superseded flow milestones from the event heap, in place.

        A rate change schedules a flow's milestone anew and leaves the old entry in the heap, to be
        popped and ignored (:meth:`milestone` checks its version). In the ``trees`` allgather on
        dgx_a100 x 8 at 256 MiB that was 1.5 million milestones for 38,000 flows, and 93% of the
        heap's 15,000-42,000 entries were such dead ones, each pushed, sifted and popped for
        nothing. Dropping them changes no event's time or order: an entry's key (time, ``seq``) is
        unique (every push takes a new ``seq``), so the heap pops the live entries in the same order
        however they are laid out, and a dead entry's pop does nothing. The next compaction waits
        until the heap has grown to :data:`COMPACT_GROWTH` times what is left live (at least
        :data:`COMPACT_MIN`), so the filtering costs a constant per push."""
        flows = self.flows
        heap = self.heap
        heap[:] = [e for e in heap
                   if e[2] != 5 or ((f := flows.get(e[3])) is not None and f[10] == e[4])]
        heapify(heap)
        self.compact_at = max(COMPACT_MIN, COMPACT_GROWTH * len(heap))

    def _recompute(self) -> None:
        """New max-min rates for the flows connected (through shared resources) to a change.

        Max-min fair shares decompose over connected components of the flow-resource graph, so
        only the components touching a resource whose flow set changed are recomputed (all of
        them in one sharing, as they changed at one instant). A component is reached, weighed and
        rated by its shares (:class:`_Share`: alike flows, one rate), entered in the order of
        their oldest flows, and the flows are then updated oldest first: what rating every flow
        of the component one by one, by id, gives, float for float and event for event.
        """
        seen_res = self.dirty
        self.dirty = set()
        todo = list(seen_res)
        comp: set[_Share] = set()
        seen_classes: set[int] = set()
        on_res = self.on_res
        while todo:
            # a set difference per resource, not a test per share: in a large component most of
            # a resource's shares were already reached through another resource; and a share's
            # resources are looked at once per resource class (its shares cross the same)
            fresh = on_res[todo.pop()] - comp
            if fresh:
                comp |= fresh
                for sh in fresh:
                    if sh.rclass in seen_classes:
                        continue
                    seen_classes.add(sh.rclass)
                    for r2 in sh.res:
                        if r2 not in seen_res:
                            seen_res.add(r2)
                            todo.append(r2)
        if not comp:
            return
        t = self.t
        if len(comp) == 1 and len(next(iter(comp)).flows) == 1:
            sh = next(iter(comp))
            sh.fresh.clear()
            fid, f = next(iter(sh.flows.items()))
            cap, cm = f[5], f[3].min_cap
            rate = sh.rate = cap if cap <= cm else cm
            if rate != f[1] or f[10] == 0:
                f[0] -= f[1] * (t - f[9])
                f[9] = t
                f[1] = rate
                self._milestone(fid, f)
        else:
            # by each share's oldest flow (its first: ids rise); ids are unique, so the sort
            # never compares two shares
            shares = [sh for _, sh in sorted([(next(iter(sh.flows)), sh) for sh in comp])]
            rates = self.layout.fair(tuple([sh.rclass for sh in shares]),
                                     tuple([sh.cap for sh in shares]),
                                     tuple([len(sh.flows) for sh in shares]))
            changed: list[int] = []
            for sh, rate in zip(shares, rates, strict=True):
                if rate != sh.rate:
                    sh.rate = rate
                    changed.extend(sh.flows)
                elif sh.fresh:
                    changed.extend(fid for fid in sh.fresh if fid in sh.flows)
                sh.fresh.clear()
            if changed:
                flows = self.flows
                changed.sort()
                for fid in changed:
                    f = flows[fid]
                    f[0] -= f[1] * (t - f[9])
                    f[9] = t
                    f[1] = f[11].rate
                    self._milestone(fid, f)
        if self.want_trace:
            flows = self.flows
            for r in sorted(seen_res):
                load = sum(flows[i][1] for i in self.flows_on[r])
                self.events.append({"name": self.res_names[r], "ph": "C", "ts": round(t, 4),
                                    "pid": "links", "args": {"GB/s": round(load / 1e3, 3)}})
        self.flow_events += 1

    def milestone(self, fid: int, version: int) -> None:
        f = self.flows.get(fid)
        if f is None or f[10] != version:
            return                      # superseded by a rate change
        t = self.t
        f[0] -= f[1] * (t - f[9])
        f[9] = t
        if f[8] >= 0 and f[0] <= f[8] + 1e-6 * max(1.0, f[8]):
            f[8] = -1.0                 # the head (Simple: the first slice) is in
            c = f[3]
            self.seq += 1
            heappush(self.heap, (t + c.alpha, self.seq, 3, c.receiver, f[7]))
            if f[0] > 1e-6:
                self._milestone(fid, f)
                return
        if f[0] <= 1e-6 * max(1.0, f[6]):
            self.finish_flow(fid)
        else:
            self._milestone(fid, f)

    def run(self) -> float:
        for b in range(self.nb):
            if not self.ops[b]:
                self.done[b] = True
        self.t = self.t_end = self.model.launch_us
        for b in range(self.nb):
            self.try_start(b)
        heap = self.heap
        begin_transfer, timer, try_start = self.begin_transfer, self.timer, self.try_start
        tail_arrives, milestone, recompute = self.tail_arrives, self.milestone, self._recompute
        while True:
            if self.dirty:
                recompute()
            if not heap:
                break
            t = self.t = heap[0][0]
            while heap and heap[0][0] <= t:
                _, _, kind, b, payload = heappop(heap)
                if kind == 5:
                    milestone(b, payload)
                elif kind == 1:
                    begin_transfer(b, payload[0], payload[1])
                elif kind == 2:
                    timer(b, *payload)
                elif kind == 3:
                    payload.head = True
                    try_start(b)
                else:
                    tail_arrives(payload)
        stuck = [b for b in range(self.nb) if not self.done[b]]
        if stuck:
            b = stuck[0]
            raise VerificationError(
                "deadlock", f"at {self.sl.nbytes} bytes (M={self.sl.max_count}) {len(stuck)} "
                f"threadblocks never finish, e.g. rank {self.block_rank[b]} tb {self.block_tb[b]} "
                f"in iteration {self.it[b]} at its operation {self.oi[b]}: the file's size range "
                "(maxBytes) does not allow this size")
        return self.t_end   # not self.t: superseded flow milestones may still be in the heap


def simulate(program: Program, topology: Topology, nbytes: int, model: ProgramModel,
             profile: str = "exec", trace: bool = False) -> ProgramTiming:
    """One call of ``program`` moving ``nbytes`` on ``topology`` under ``model``, event by event
    (:func:`synth.timing.program.program_time` checks the arguments and builds the model)."""
    with collector.paused():    # millions of events, no cyclic garbage (synth.collector)
        sim = _Sim(layout_of(program, topology, model.nvlink_efficiency), program, int(nbytes),
                   model, profile, trace)
        t = sim.run()
    busy = {(sim.block_rank[b], sim.block_tb[b]): sim.busy_us[b] for b in range(sim.nb)}
    return ProgramTiming(int(nbytes), t, len(sim.sl.slices), sim.sl.max_count, sim.messages,
                         sim.flow_events, model, busy, sim.events if trace else None)
