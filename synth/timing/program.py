"""A timed model of an MSCCL-IR program: a discrete-event execution of the parsed XML.

The lock-step models (:mod:`synth.timing.lockstep`, :mod:`synth.timing.protocol`) price a *schedule*
as a sum of synchronous steps. The runtime does not run steps in lock step: every threadblock walks
its own step list, grid iteration after grid iteration, and only FIFOs, flags and shared links couple the
blocks (``docs/reference/msccl-xml-spec.md`` §3.5, §5.1-§5.4). This module executes the parsed
:class:`~synth.emit.program.Program` -- the same object the interpreter checks, folded the same way
(:func:`synth.emit.interpreter.fold_block`) -- in simulated time:

* **Blocks.** Each ``<tb>`` of each rank runs its folded operations in order, once per grid
  iteration (§3.5). A block starts its next iteration as soon as it finished the previous one, so
  blocks overlap iterations; FIFOs and flags are what hold them back.
* **Slicing.** A call of ``nbytes`` has chunks of ``S = nbytes / nchunksperloop`` bytes. With the
  protocol's effective chunk ``E`` (2 MiB Simple, 512 KiB EXEC Simple reduce/broadcast, 32 KiB LL,
  576 000 B LL128; spec §3.5) the host's ``M = clamp(floor(E / S), 1, 71)``; a chunk bigger than
  ``E`` is walked in ``ceil(S / E)`` iterations of ``E``-byte slices (the last one shorter). A step
  with ``cnt = k`` moves ``ceil(k / M)`` messages of ``min(M, k - c)`` slices each.
* **FIFOs.** Every (sender, receiver, channel) is a connection of ``NCCL_STEPS`` = 8 slots: 8
  messages in flight for LL/LL128, 2 for Simple (a Simple message takes ``MSCCL_CHUNKSTEPS`` = 4
  slots; §5.3). A send waits for a free slot (back-pressure); the slot is freed when the receiving
  block has consumed the message. A receive waits for the message to have arrived.
* **Dependencies.** An operation with waits starts only when every awaited block has published a
  step ``>=`` the awaited one in the same iteration (§5.4); ``hasdep=1`` operations publish when they
  complete.
* **Links.** A message is a fluid flow of ``bytes / efficiency`` wire bytes over the resources the
  topology gives the (sender, receiver) pair (:meth:`synth.topology.Topology.channel`: a direct link,
  or a switch's out-port and in-port -- NVSwitch ports and, across nodes, NIC ports of the fabric).
  **Sharing policy: max-min fair**, recomputed whenever a flow starts or ends (progressive filling
  over the connected component of flows that share resources with the change; every flow is also
  capped by its threadblock's own copy rate, ``channel_GBps`` of the protocol). Intra-node links of
  NVIDIA GPUs carry NCCL's usable NVLink bandwidth (:data:`NVLINK_EFFICIENCY`).
* **Cut-through.** The receiver may start on a message once its head has arrived (``alpha_us``
  after the first bytes left): at once for LL/LL128, whose 8-byte / 128-byte lines carry their own
  flags, after the first of a Simple message's 2 slices (``MSCCL_CHUNKSTEPS / MSCCL_SLICESTEPS``,
  spec §6). A receiving operation cannot finish before the message's tail has arrived, and a
  forwarding one (``rcs``, ``rrs``, ``rrcs``) cannot release its own message's tail earlier either,
  so a chain of forwards pipelines at line or slice granularity instead of store-and-forward.
* **Costs per operation** (:class:`ProgramModel`): each message pays the protocol's per-hop
  synchronisation ``hop_intra_us`` / ``hop_inter_us`` (NCCL's ``hwLat`` above the LL link latency,
  :mod:`synth.timing.protocol`) plus the executor's per-message flag/barrier cost ``step_us``; local
  ``cpy`` moves its bytes at the block's copy rate; a receive-only step (``r``, ``rrc``) copies out
  of the FIFO while the data arrives, and only the last Simple slice is exposed after the tail.
  **Assumed, not cited** (no published per-operation figures exist): a reduction costs its memory
  streams -- ``re`` with k sources reads k + 1 streams and writes one, so (k + 2) / 2 times a copy;
  ``rrc`` 1.5 times a copy; a fused ``rrs`` / ``rrcs`` sends at 2/3 of the block's rate (three
  streams instead of two). Measured since on one H200 (``results/gpu_block_rates.md``, local
  memory only): one block's two-source fp32 reduction takes 1.36 (640 threads) to 1.63 (512
  threads) times its copy's time, and a lone block copies at 48.4 GB/s, 1.25 times the cap used
  here. The call starts after the kernel launch ``launch_us``.

Deliberate simplifications: messages are fluid flows (no per-packet effects); the proxy thread of
network transfers is not modelled separately from the sending block; the FIFO capacity is the
guaranteed 2 (Simple) / 8 (LL, LL128) messages whatever the message size.

Where the floors come from: ``hop_*``, ``channel_GBps`` and the launch ``launch_us`` (NCCL's
per-protocol ring ``baseLat``) from NCCL's tuning model via :mod:`synth.timing.protocol` (cited there);
the usable NVLink bandwidth from NCCL's ``topo.h`` (:data:`NVLINK_EFFICIENCY`). The executor's
extra per-message flag cost ``step_us`` is *fitted* to MSCCL's own published ND H100 v5 times
(Azure/msccl ``docs/performance-nd-h100-v5.md`` @ 050b4a10, MSCCL executor 6eacec0, NCCL 2.18.3)
on the production XML files they were measured with, by ``benchmarks/reality_msccl.py`` (least
squares on log time; in-sample and leave-one-file-out errors in ``results/reality_msccl.md``): the
fit is 0.0 µs. A calibration's ``protocols.<P>.launch_us`` replaces the launch, its ``program``
section (``{"launch_us": .. or {protocol: ..}, "step_us": ..}``, written by
``synth calibrate --format msccl``, :mod:`synth.calibrate.program_fit`) both.

Outputs: :func:`program_time` (one size), :func:`program_times_us` (a sweep), and with ``trace`` a
Chrome/Perfetto trace (:func:`write_trace`): one track per rank x threadblock (its messages and
local operations), and one counter track per link/port with the bandwidth it carries.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import progress
from ..emit.interpreter import (
    LL128_CHUNK_BYTES,
    LL_CHUNK_BYTES,
    SIMPLE_CHUNK_BYTES,
    SIMPLE_ROOTED_CHUNK_BYTES,
    fifo_capacity,
    fold_block,
)
from ..emit.program import Program
from ..emit.xml_parse import get_profile, normalize_coll
from ..errors import SynthError, VerificationError
from ..topology import MB, Topology
from .fair_share import fair_rates
from .protocol import ProtocolModel, ProtocolParams, default_model, model_with_calibration

# operation codes, as the interpreter folds them
S, R, RCS, RRS, RRC, RRCS, CPY, RE = range(8)
_SENDS = (True, False, True, True, False, True, False, False)
_RECVS = (False, True, True, True, True, True, False, False)
_REDUCES = (False, False, False, True, True, True, False, True)

MAX_COUNT = 71
"""maxAllowedCount is clamped to ``MSCCL_MAX_COUNT - 1`` (spec §3.5, §6)."""
SIMPLE_SLICES_PER_MESSAGE = 2
"""``MSCCL_CHUNKSTEPS / MSCCL_SLICESTEPS`` = 4 / 2 (spec §6)."""
_FLAG_RADIX = 1 << 20
"""Flag encoding: iteration * radix + step number (lexicographic, like the runtime's, §5.4)."""

NVLINK_EFFICIENCY = {"volta": 20.0 / 25.0, "ampere": 20.0 / 25.0, "hopper": 20.6 / 25.0}
"""NCCL's usable NVLink bandwidth per lane over the nominal 25 GB/s per direction: NVIDIA/nccl
``src/graph/topo.h`` @ b6475625 (v2.20.3-1) ``SM70_NVLINK_BW 20.0``, ``SM80_NVLINK_BW 20.0``,
``SM90_NVLINK_BW 20.6`` GB/s. Applied to intra-node links and switch ports of NVIDIA GPUs."""

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


def program_model(topology: Topology, proto: str, calibration: Any = None,
                  protocols: ProtocolModel | None = None) -> ProgramModel:
    """The model for ``proto`` on ``topology``: NCCL's protocol figures plus the fitted floors.

    ``protocols`` is a protocol model already built (e.g. a catalog's, calibration applied); else
    it is NCCL's for the topology with ``calibration``'s protocol overrides.
    """
    from ..calibrate.format import load_calibration

    data = load_calibration(calibration) if calibration is not None else None
    pm = protocols if protocols is not None else model_with_calibration(default_model(topology),
                                                                        data)
    params = pm.get(proto)
    launch, step = params.launch_us, STEP_US
    src = (pm.source + "; launch = NCCL ring baseLat; executor step cost fitted (0.0 us) to "
           "Azure/msccl docs/performance-nd-h100-v5.md")
    if data is not None and data.get("program") is not None:
        over = data.get("program")
        if not isinstance(over, Mapping):
            raise SynthError("calibration: 'program' must be an object with launch_us / step_us")
        lv = over.get("launch_us", launch)
        if isinstance(lv, Mapping):      # per protocol (synth calibrate --format msccl)
            lv = lv.get(proto, launch)
        launch = _nonneg(lv, "calibration: program.launch_us")
        step = _nonneg(over.get("step_us", step), "calibration: program.step_us")
        src += "; floors from the calibration file"
    exposed = 1.0 / SIMPLE_SLICES_PER_MESSAGE if proto == "Simple" else 0.0
    nvl = NVLINK_EFFICIENCY.get(pm.generation, 1.0) if _nvidia(topology) else 1.0
    return ProgramModel(params, launch, step, exposed, exposed, nvl, True, src)


def not_a_gpu(topology: Topology) -> str | None:
    """Why this model's figures do not describe ``topology``'s ranks, or None where they may.

    The model times MSCCL's GPU executor: threadblocks copying at a GPU block's rate, NCCL's
    per-protocol latencies and FIFOs. A machine whose ``meta`` names a ``device`` (or a TPU
    ``platform``) and no ``gpu`` -- trn1_32 and trn2_64 (NeuronCores), the TPU meshes -- runs no
    MSCCL runtime and has none of those figures: a ranking by them would rest on NCCL's Ampere
    figures (without ``meta.gpu``: 24 GB/s a block for Simple, its latencies), not on that machine.
    Topologies that name neither (the builders, files without ``meta``) keep the model, as
    before."""
    meta = dict(topology.meta)
    if meta.get("gpu"):
        return None
    device = meta.get("device") or ("TPU" if meta.get("platform") == "tpu" else None)
    if not device:
        return None
    return (f"{topology.name}'s ranks are {device}, not GPUs: the program model times MSCCL's GPU "
            "executor (threadblocks at a GPU block's copy rate, NCCL's protocol latencies), which "
            "does not run there")


def _nvidia(topology: Topology) -> bool:
    gpu = str(dict(topology.meta).get("gpu", "")).upper()
    return any(tag in gpu for tag in ("V100", "A100", "A800", "A30", "H100", "H200", "H800"))


def _nonneg(value: Any, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SynthError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise SynthError(f"{what} must be >= 0, got {value!r}")
    return v


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
class _Conn:
    __slots__ = ("alpha", "cap", "inflight", "inter", "queue", "receiver", "res", "sender")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.inflight = 0          # messages whose send started and that are not yet consumed
        self.queue: deque[_Msg] = deque()   # messages sent and not yet taken by the receiver
        self.sender = -1
        self.receiver = -1
        self.res: tuple[int, ...] = ()
        self.alpha = 0.0
        self.inter = False


class _Msg:
    """One message on a connection: its head (enough to start consuming) and its tail arrive."""

    __slots__ = ("head", "tail", "tail_time", "waiter")

    def __init__(self) -> None:
        self.head = False
        self.tail = False
        self.tail_time = math.inf
        self.waiter: tuple | None = None   # a receiving unit that ended before the tail arrived


class _Sim:
    def __init__(self, program: Program, topology: Topology, nbytes: int, model: ProgramModel,
                 profile: str, trace: bool) -> None:
        if program.ngpus != topology.num_ranks:
            raise SynthError(f"the program has {program.ngpus} ranks but topology "
                             f"'{topology.name}' has {topology.num_ranks} (pick --topo/--nodes)")
        self.model = model
        self.sl = slicing(program, nbytes, profile)
        self.want_trace = trace
        self.events: list[dict] = []
        proto = model.proto
        self.eff = proto.efficiency
        self.tb_rate = proto.channel_GBps * 1e3          # data bytes per µs
        cap = fifo_capacity(program)
        # blocks and their folded operations
        self.block_rank: list[int] = []
        self.block_tb: list[int] = []
        self.ops: list[list[tuple]] = []
        rank_base: dict[int, int] = {}
        for g in sorted(program.gpus, key=lambda g: g.id):
            rank_base[g.id] = len(self.ops)
            for tb in sorted(g.tbs, key=lambda t: t.id):
                self.block_rank.append(g.id)
                self.block_tb.append(tb.id)
                self.ops.append([])
        self.nb = len(self.ops)
        self.out_conn: list[_Conn | None] = [None] * self.nb
        self.in_conn: list[_Conn | None] = [None] * self.nb
        conns: dict[tuple[int, int, int], _Conn] = {}
        self.res_index: dict[tuple, int] = {}
        res_caps: list[float] = []
        self.res_names: list[str] = []
        node_of = topology.node_of
        for g in sorted(program.gpus, key=lambda g: g.id):
            for tb in sorted(g.tbs, key=lambda t: t.id):
                b = rank_base[g.id] + tb.id
                for (code, _src, _dst, srcs, cnt, waits, pos, _first, hasdep, _n, _i) in fold_block(
                        tb, {"i": 0, "o": 0, "s": 0}, 1):
                    gw = tuple(rank_base[g.id] + d for d, _ in waits)
                    ks = tuple(k for _, k in waits)
                    nsrc = len(srcs) if srcs else 1
                    self.ops[b].append((code, cnt, tuple(zip(gw, ks, strict=True)), pos, hasdep,
                                        nsrc))
                for peer, outgoing in ((tb.send, True), (tb.recv, False)):
                    if peer < 0:
                        continue
                    key = (g.id, peer, tb.chan) if outgoing else (peer, g.id, tb.chan)
                    c = conns.get(key)
                    if c is None:
                        c = conns[key] = _Conn(cap)
                        src, dst = key[0], key[1]
                        ch = topology.channel(src, dst)
                        if ch is None:
                            raise SynthError(f"rank {src} sends to rank {dst}, which topology "
                                             f"'{topology.name}' does not connect to it")
                        ids = []
                        inter = node_of[src] != node_of[dst]
                        scale = 1.0 if inter else model.nvlink_efficiency
                        for rname, beta, lanes in ch.resources:
                            i = self.res_index.get(rname)
                            if i is None:
                                i = self.res_index[rname] = len(res_caps)
                                res_caps.append(scale * lanes * MB / beta)   # bytes per µs
                                self.res_names.append(":".join(rname))
                            ids.append(i)
                        c.res = tuple(ids)
                        c.alpha = ch.alpha_us
                        c.inter = inter
                    if outgoing:
                        c.sender = b
                        self.out_conn[b] = c
                    else:
                        c.receiver = b
                        self.in_conn[b] = c
        self.res_cap = np.asarray(res_caps, dtype=float)
        self.res_cap_list = [float(c) for c in res_caps]
        # dynamic state
        self.t = 0.0
        self.it = [0] * self.nb
        self.oi = [0] * self.nb
        self.ui = [0] * self.nb
        self.busy = [False] * self.nb
        self.done = [False] * self.nb
        self.flag = [-1] * self.nb
        self.flag_waiters: list[list[int]] = [[] for _ in range(self.nb)]
        self.heap: list[tuple[float, int, int, int, Any]] = []
        self.seq = 0
        # id -> [wire bytes left at t_ref, rate, block, conn, t_start, cap, data bytes, msg,
        #        head threshold (wire bytes left when the head is in; -1 once sent), t_ref, version]
        self.flows: dict[int, list] = {}
        self.on_res: list[set[int]] = [set() for _ in res_caps]
        self.dirty: set[int] = set()          # resources whose flows need new rates
        self.flow_ids = 0
        self.messages = 0
        self.flow_events = 0
        self.busy_us = [0.0] * self.nb
        self.cur_in: list[_Msg | None] = [None] * self.nb
        self.head_frac = model.cut_through

    # ---------------------------------------------------------------- helpers
    def _push(self, when: float, kind: int, b: int, payload: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, kind, b, payload))

    def _units(self, op: tuple) -> int:
        code, cnt = op[0], op[1]
        if _SENDS[code] or _RECVS[code]:
            return -(-cnt // self.sl.max_count)
        return 1

    def _unit_bytes(self, b: int, op: tuple) -> float:
        cnt, M = op[1], self.sl.max_count
        chunks = min(M, cnt - self.ui[b] * M) if _SENDS[op[0]] or _RECVS[op[0]] else cnt
        return chunks * self.sl.slices[self.it[b]]

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
        if self.ui[b] == 0:
            base = self.it[b] * _FLAG_RADIX
            for d, k in op[2]:
                if self.flag[d] < base + k:
                    self.flag_waiters[d].append(b)
                    return
        if _RECVS[code]:
            q = self.in_conn[b].queue
            if not q or not q[0].head:
                return  # woken when the head of the next message arrives
        if _SENDS[code]:
            c = self.out_conn[b]
            if c.inflight >= c.cap:
                return  # woken when the receiver frees a slot
        # start the unit
        self.busy[b] = True
        m = self.model
        nbytes = self._unit_bytes(b, op)
        if _RECVS[code]:
            self.cur_in[b] = self.in_conn[b].queue.popleft()
        sync = m.step_us
        if _SENDS[code]:    # NCCL's hwLat is per hop: charged once, on the sending side
            c = self.out_conn[b]
            sync += m.proto.hop_inter_us if c.inter else m.proto.hop_intra_us
        if _SENDS[code]:
            self.out_conn[b].inflight += 1
            self._push(self.t + sync, 1, b, (nbytes, self.t))      # 1: begin transfer
        else:
            # local work: receive-only copy-out tail, cpy, re
            rate = self.tb_rate
            if code in (R, RRC):
                # the copy-out runs while the message arrives; what is left after its tail:
                tail = nbytes * m.exposed_receive * (1.5 if code == RRC and m.reduce_streams
                                                     else 1.0) / rate
                self._push(self.t + sync, 2, b, (self.t, nbytes, tail))       # 2: timer
                return
            # cpy: one read + one write; re with nsrc sources reads nsrc + 1 streams, writes one
            work = nbytes if code == CPY else nbytes * ((op[5] + 2) / 2 if m.reduce_streams else 1.0)
            self._push(self.t + sync + work / rate, 2, b, (self.t, nbytes, None))

    def begin_transfer(self, b: int, nbytes: float, t_start: float) -> None:
        op = self.ops[b][self.oi[b]]
        c = self.out_conn[b]
        cap = self.tb_rate
        if op[0] in (RRS, RRCS) and self.model.reduce_streams:
            cap *= 2.0 / 3.0
        msg = _Msg()
        c.queue.append(msg)
        wire = nbytes / self.eff
        head_rem = wire * (1.0 - self.head_frac)
        if self.head_frac <= 0.0:
            self._push(self.t + c.alpha, 3, c.receiver, msg)          # 3: head arrives
            head_rem = -1.0
        self.flow_ids += 1
        # wire bytes; the block's cap is on data bytes, so in wire units it is cap / efficiency
        fid = self.flow_ids
        self.flows[fid] = [wire, 0.0, b, c, t_start, cap / self.eff, nbytes, msg, head_rem,
                           self.t, 0]
        for r in c.res:
            self.on_res[r].add(fid)
        self.dirty.update(c.res)
        self.messages += 1

    def finish_flow(self, fid: int) -> None:
        f = self.flows.pop(fid)
        b, c, t_start, nbytes, msg = f[2], f[3], f[4], f[6], f[7]
        for r in c.res:
            self.on_res[r].discard(fid)
        self.dirty.update(c.res)
        if f[8] >= 0:                      # the head threshold was never crossed separately
            self._push(self.t + c.alpha, 3, c.receiver, msg)
        incoming = self.cur_in[b]
        if incoming is not None and not incoming.tail:
            # a forwarding unit cannot end before what it forwards has fully arrived
            incoming.waiter = ("fwd", b, t_start, nbytes, msg)
            return
        self._push(self.t + c.alpha, 4, c.receiver, msg)              # 4: tail arrives
        self.unit_done(b, t_start, nbytes)

    def tail_arrives(self, msg: _Msg) -> None:
        msg.tail = True
        msg.tail_time = self.t
        w = msg.waiter
        if w is None:
            return
        msg.waiter = None
        if w[0] == "fwd":
            _, b, t_start, nbytes, out = w
            self._push(self.t + self.out_conn[b].alpha, 4, self.out_conn[b].receiver, out)
            self.unit_done(b, t_start, nbytes)
        else:
            _, b, t_start, nbytes, tail = w
            self._push(self.t + tail, 2, b, (t_start, nbytes, 0.0))

    def timer(self, b: int, t_start: float, nbytes: float, tail: float | None) -> None:
        """A local unit's work is over; a receive-only one also needs its message's tail."""
        msg = self.cur_in[b]
        if tail is not None and msg is not None:
            if not msg.tail:
                msg.waiter = ("recv", b, t_start, nbytes, tail)
                return
            end = msg.tail_time + tail
            if end > self.t + 1e-12:
                self._push(end, 2, b, (t_start, nbytes, 0.0))
                return
        self.unit_done(b, t_start, nbytes)

    def unit_done(self, b: int, t_start: float, nbytes: float | None = None) -> None:
        op = self.ops[b][self.oi[b]]
        code = op[0]
        self.busy[b] = False
        self.busy_us[b] += self.t - t_start
        if self.want_trace:
            names = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re")
            self._span(b, names[code], t_start, self.t,
                       {"iter": self.it[b], "step": op[3], "bytes": int(nbytes or 0)})
        if _RECVS[code]:
            c = self.in_conn[b]
            c.inflight -= 1
            self.cur_in[b] = None
            self.try_start(c.sender)
        self.ui[b] += 1
        if self.ui[b] >= self._units(op):
            self.ui[b] = 0
            if op[4]:
                self.flag[b] = self.it[b] * _FLAG_RADIX + op[3]
                waiters, self.flag_waiters[b] = self.flag_waiters[b], []
                for w in waiters:
                    self.try_start(w)
            self.oi[b] += 1
            if self.oi[b] >= len(self.ops[b]):
                self.oi[b] = 0
                self.it[b] += 1
                if self.it[b] >= len(self.sl.slices):
                    self.done[b] = True
                    self.t_end = max(self.t_end, self.t)
                    return
        self.try_start(b)

    # ---------------------------------------------------------------- main loop
    def _milestone(self, fid: int, f: list) -> None:
        """Schedule the flow's next milestone (head in, or last byte out) at its current rate."""
        f[10] += 1
        if f[1] <= 0:
            return
        target = f[8] if f[8] >= 0 else 0.0
        self._push(f[9] + max(f[0] - target, 0.0) / f[1], 5, fid, f[10])

    def _recompute(self) -> None:
        """New max-min rates for the flows connected (through shared resources) to a change.

        Max-min fair shares decompose over connected components of the flow-resource graph, so
        only the components touching a resource whose flow set changed are recomputed.
        """
        seen_res = set(self.dirty)
        self.dirty = set()
        todo = list(seen_res)
        comp: list[int] = []
        seen_flows: set[int] = set()
        while todo:
            r = todo.pop()
            for fid in self.on_res[r]:
                if fid in seen_flows:
                    continue
                seen_flows.add(fid)
                comp.append(fid)
                for r2 in self.flows[fid][3].res:
                    if r2 not in seen_res:
                        seen_res.add(r2)
                        todo.append(r2)
        if not comp:
            return
        comp.sort()
        flows = self.flows
        if len(comp) == 1:
            f = flows[comp[0]]
            rates = [min(f[5], *(self.res_cap_list[r] for r in f[3].res))]
        else:
            rates = fair_rates([flows[i][3].res for i in comp], self.res_cap_list,
                               [flows[i][5] for i in comp], self.res_cap)
        t = self.t
        for fid, rate in zip(comp, rates, strict=True):
            f = flows[fid]
            if rate != f[1] or f[10] == 0:
                f[0] -= f[1] * (t - f[9])
                f[9] = t
                f[1] = rate
                self._milestone(fid, f)
        if self.want_trace:
            for r in sorted(seen_res):
                load = sum(flows[i][1] for i in self.on_res[r])
                self.events.append({"name": self.res_names[r], "ph": "C", "ts": round(t, 4),
                                    "pid": "links", "args": {"GB/s": round(load / 1e3, 3)}})
        self.flow_events += 1

    def milestone(self, fid: int, version: int) -> None:
        f = self.flows.get(fid)
        if f is None or f[10] != version:
            return                      # superseded by a rate change
        f[0] -= f[1] * (self.t - f[9])
        f[9] = self.t
        if f[8] >= 0 and f[0] <= f[8] + 1e-6 * max(1.0, f[8]):
            f[8] = -1.0                 # the head (Simple: the first slice) is in
            self._push(self.t + f[3].alpha, 3, f[3].receiver, f[7])
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
        while True:
            if self.dirty:
                self._recompute()
            if not heap:
                break
            self.t = heap[0][0]
            while heap and heap[0][0] <= self.t:
                _, _, kind, b, payload = heapq.heappop(heap)
                if kind == 1:
                    self.begin_transfer(b, payload[0], payload[1])
                elif kind == 2:
                    self.timer(b, *payload)
                elif kind == 3:
                    payload.head = True
                    self.try_start(b)
                elif kind == 4:
                    self.tail_arrives(payload)
                else:
                    self.milestone(b, payload)
        stuck = [b for b in range(self.nb) if not self.done[b]]
        if stuck:
            b = stuck[0]
            raise VerificationError(
                "deadlock", f"at {self.sl.nbytes} bytes (M={self.sl.max_count}) {len(stuck)} "
                f"threadblocks never finish, e.g. rank {self.block_rank[b]} tb {self.block_tb[b]} "
                f"in iteration {self.it[b]} at its operation {self.oi[b]}: the file's size range "
                "(maxBytes) does not allow this size")
        return self.t_end   # not self.t: superseded flow milestones may still be in the heap


@progress.spanned("program-model")
def program_time(program: Program, topology: Topology, nbytes: int, *,
                 model: ProgramModel | None = None, calibration: Any = None,
                 profile: str = "exec", trace: bool = False) -> ProgramTiming:
    """Simulated time of one call of ``program`` moving ``nbytes`` (nccl-tests' size) on ``topology``.

    The program must already have passed the interpreter (:func:`synth.emit.interpreter.
    verify_program`); a size the file cannot run at raises a ``deadlock`` VerificationError.
    """
    if nbytes < 1:
        raise SynthError(f"message size must be at least 1 byte, got {nbytes}")
    if model is None:
        model = program_model(topology, program.proto, calibration)
    elif model.proto.name != program.proto:
        model = replace(model, proto=default_model(topology).get(program.proto))
    sim = _Sim(program, topology, int(nbytes), model, profile, trace)
    t = sim.run()
    busy = {(sim.block_rank[b], sim.block_tb[b]): sim.busy_us[b] for b in range(sim.nb)}
    return ProgramTiming(int(nbytes), t, len(sim.sl.slices), sim.sl.max_count, sim.messages,
                         sim.flow_events, model, busy, sim.events if trace else None)


def program_times_us(program: Program, topology: Topology, sizes: Sequence[int], *,
                     model: ProgramModel | None = None, calibration: Any = None,
                     profile: str = "exec") -> list[float]:
    """:func:`program_time` over a sweep (µs); ``inf`` where the file deadlocks at that size."""
    if model is None:
        model = program_model(topology, program.proto, calibration)
    out = []
    for n in sizes:
        try:
            out.append(program_time(program, topology, n, model=model, profile=profile).time_us)
        except VerificationError as e:
            if "deadlock" not in str(e):
                raise
            out.append(math.inf)
    return out


def write_trace(timing: ProgramTiming, program: Program, path) -> None:
    """Write the run's Chrome/Perfetto trace (JSON object format) atomically."""
    from pathlib import Path

    from ..files import atomic_write

    if timing.trace is None:
        raise SynthError("the run was not traced (program_time(..., trace=True))")
    meta: list[dict] = []
    for g in sorted(program.gpus, key=lambda g: g.id):
        meta.append({"name": "process_name", "ph": "M", "pid": g.id, "args": {"name": f"rank {g.id}"}})
        for tb in g.tbs:
            meta.append({"name": "thread_name", "ph": "M", "pid": g.id, "tid": tb.id,
                         "args": {"name": f"tb {tb.id} (send {tb.send}, recv {tb.recv}, "
                                          f"chan {tb.chan})"}})
    meta.append({"name": "process_name", "ph": "M", "pid": "links", "args": {"name": "links/ports"}})
    doc = {"traceEvents": meta + timing.trace, "displayTimeUnit": "ns",
           "otherData": {"program": program.name, "nbytes": timing.nbytes,
                         "time_us": timing.time_us, "model": timing.model.to_dict()}}
    atomic_write(Path(path), json.dumps(doc, separators=(",", ":")) + "\n")


# ------------------------------------------------------------------------------ sweeps for reports
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
              "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}
"""nccl-tests' busBw = algBw x factor (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``)."""


@dataclass(frozen=True)
class ProgramPoint:
    """One size of a sweep: simulated time, nccl-tests' algbw/busbw, and % of synth's bound."""

    bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    bound_us: float
    pct_of_bound: float
    iterations: int
    max_count: int
    messages: int
    in_range: bool
    """Whether the file is selected at this size (minBytes <= size <= maxBytes, 0 = unbounded)."""

    def to_dict(self) -> dict[str, Any]:
        def r(x: float) -> float | None:
            return round(x, 4) if math.isfinite(x) else None
        return {"bytes": self.bytes, "time_us": r(self.time_us), "algbw_GBps": r(self.algbw_GBps),
                "busbw_GBps": r(self.busbw_GBps), "bound_us": r(self.bound_us),
                "pct_of_bound": r(self.pct_of_bound), "iterations": self.iterations,
                "max_count": self.max_count, "messages": self.messages, "in_range": self.in_range}


def in_size_range(program: Program, nbytes: int) -> bool:
    lo, hi = program.min_bytes, program.max_bytes
    return nbytes >= lo and (hi == 0 or nbytes <= hi)


def sweep(program: Program, topology: Topology, sizes: Sequence[int], *,
          model: ProgramModel | None = None, calibration: Any = None,
          profile: str = "exec") -> list[ProgramPoint]:
    """:func:`program_time` at every size with the report's derived figures."""
    from ..bounds import lower_bound
    from ..collectives import make_collective

    kind = normalize_coll(program.coll)
    n = program.ngpus
    bound = lower_bound(topology, make_collective(kind, n)) if kind in BUS_FACTOR else None
    factor = BUS_FACTOR.get(kind, lambda _n: 1.0)(n)
    if model is None:
        model = program_model(topology, program.proto, calibration)
    points = []
    for size in sizes:
        try:
            tm = program_time(program, topology, size, model=model, profile=profile)
            t, its, m, msgs = tm.time_us, tm.iterations, tm.max_count, tm.messages
        except VerificationError as e:
            if "deadlock" not in str(e):
                raise
            sl = slicing(program, size, profile)
            t, its, m, msgs = math.inf, len(sl.slices), sl.max_count, 0
        algbw = size / (t * 1e3) if math.isfinite(t) and t > 0 else 0.0
        b = bound.time_us(size) if bound is not None else math.nan
        pct = 100.0 * b / t if math.isfinite(t) and t > 0 else 0.0
        points.append(ProgramPoint(int(size), t, algbw, algbw * factor, b, pct, its, m, msgs,
                                   in_size_range(program, size)))
    return points


class ProgramTimes:
    """The program model as a :class:`synth.timing.TimeModel`: prices a parsed MSCCL-IR program
    (:func:`synth.emit.xml_parse.parse_program`) that the interpreter accepted; ``inf`` where it
    deadlocks. The calibration's ``protocols`` and ``program`` sections apply."""

    name = "program"

    def __init__(self, topology: Topology, calibration: Any = None, profile: str = "exec") -> None:
        self.topology = topology
        self.calibration = calibration
        self.profile = profile
        self._models: dict[str, ProgramModel] = {}
        self.source = program_model(topology, "Simple", calibration).source

    def model(self, proto: str) -> ProgramModel:
        """The figures for one protocol, built once."""
        if proto not in self._models:
            self._models[proto] = program_model(self.topology, proto, self.calibration)
        return self._models[proto]

    def times_us(self, subject: Program, sizes: Sequence[int]) -> list[float]:
        return program_times_us(subject, self.topology, sizes, model=self.model(subject.proto),
                                profile=self.profile)
