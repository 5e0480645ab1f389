"""A timed model of an MSCCL++ execution plan: the program model (:mod:`synth.timing.program`)
extended to plans, so synth's plans, MSCCL++'s own DSL plans and a ring plan are priced alike.

Discrete-event execution of the resolved plan (:mod:`synth.mscclpp.plan`) in simulated time, with
the same synchronisation the verifier uses (channel semaphores, barriers, device semaphores, LL
flags). What costs time, all from :class:`synth.timing.program.ProgramModel` (NCCL's protocol
figures, NVLink efficiency, launch) and the topology's links:

* every access to another rank's memory is a fluid **flow** over the resources
  :meth:`~synth.topology.Topology.channel` gives the pair (a link, or a switch's out- and in-port,
  NIC ports across nodes), sharing them **max-min fairly**
  (:func:`synth.timing.fair_share.fair_rates`), each flow capped by its block's copy rate
  (``channel_GBps``); LL flows carry ``1 / efficiency`` wire bytes (flags);
* a flow's data is there ``alpha_us`` after its last byte; a ``signal`` reaches the peer after the
  protocol's per-hop latency (``hop_intra_us`` / ``hop_inter_us``);
* local copies and reductions move their bytes at the block's copy rate (a reduction of k sources
  streams (k + 2) / 2 times a copy, as the program model assumes);
* memory-channel ops keep their block busy until their flows end; port-channel puts are handed to
  the proxy (the block goes on) and their signal leaves when the data has arrived;
* the call starts after the kernel launch ``launch_us``; its time is when the last block ends.

Deliberate simplifications: a ``pipeline`` body runs once over whole chunks (no overlap of its
iterations), flows are fluid (no packet effects), the proxy is not a separate bottleneck.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..mscclpp.plan import Access, Op, Plan
from ..topology import Topology
from .fair_share import fair_rates
from .program import ProgramModel, program_model

_EPS = 1e-9


@dataclass
class _Flow:
    res: tuple[int, ...]
    left: float  # bytes
    cap: float  # bytes/us
    alpha: float
    owner: int  # thread, or -1 for a proxy (port) flow
    on_done: list  # callbacks(time)


def message_chunk_bytes(plan: Plan, nbytes: int) -> float:
    """Bytes per chunk: the executor sizes chunks from the input (output for allgather), as the
    message size of nccl-tests (``ExecutionPlan::Impl::getSizeAndChunks``, ``checkMessageSize``)."""
    c = plan.gpus[0].chunks
    if plan.collective == "allgather" or c["i"] == 0:
        return nbytes / c["o"]
    return nbytes / c["i"]


class PlanTimer:
    """Time one call of ``plan`` moving ``nbytes`` on ``topology`` under ``model``."""

    def __init__(self, plan: Plan, topology: Topology, model: ProgramModel, nbytes: int) -> None:
        self.plan = plan
        self.topo = topology
        self.m = model
        self.cell = message_chunk_bytes(plan, nbytes) / plan.parts
        self.node = topology.node_of
        self.threads = [(g.rank, t) for g in plan.gpus for t in range(len(g.tbs))]
        self.ops = [plan.gpus[r].tbs[t] for r, t in self.threads]
        self.pc = [0] * len(self.threads)
        self.busy = [0] * len(self.threads)  # outstanding flows of the current op
        self.heap: list[tuple[float, int, int]] = []
        self.seq = 0
        self.flows: list[_Flow] = []
        self.res_index: dict = {}
        self.res_cap: list[float] = []
        self.chanq: dict[tuple, deque] = {}
        self.semq: dict[tuple[int, int], deque] = {}
        self.barriers: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self.released: dict[int, float] = {}
        self.parked: dict[tuple, list[int]] = {}
        self.pkt_ready: dict[tuple, float] = {}
        self.port_pending: dict[tuple, list[int]] = {}  # (thread, chan) -> [open flows]
        self.port_signal: dict[tuple, list] = {}  # (thread, chan) -> signals waiting for data
        self.copy_rate = model.proto.channel_GBps * 1e3  # a block's copy rate, bytes per us
        self.eff = model.proto.efficiency if plan.protocol == "LL" else 1.0
        self.end = 0.0

    # ---------------------------------------------------------------------------- helpers
    def _push(self, t: float, thread: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, thread))

    def _resources(self, a: int, b: int) -> tuple[tuple[int, ...], float]:
        ch = self.topo.channel(a, b)
        if ch is None:  # not adjacent: the verifier accepted it, price it as the slowest path
            raise ValueError(f"ranks {a} and {b} are not adjacent in {self.topo.name}")
        out = []
        intra = self.node[a] == self.node[b]
        for key, beta, lanes in ch.resources:
            if key not in self.res_index:
                gbps = lanes * 1000.0 / beta
                if intra:
                    gbps *= self.m.nvlink_efficiency
                self.res_index[key] = len(self.res_cap)
                self.res_cap.append(gbps * 1e3)
            out.append(self.res_index[key])
        return tuple(out), ch.alpha_us

    def _hop(self, a: int, b: int) -> float:
        return self.m.proto.hop_intra_us if self.node[a] == self.node[b] else self.m.proto.hop_inter_us

    # ---------------------------------------------------------------------------- flows
    def _advance(self, now: float, until: float) -> float:
        """Run flows from ``now`` up to ``until`` (or the first completion); returns the time."""
        while self.flows:
            rates = fair_rates([f.res for f in self.flows], self.res_cap,
                               [f.cap for f in self.flows])
            dt = min((f.left / r if r > 0 else np.inf) for f, r in zip(self.flows, rates, strict=True))
            step = min(dt, until - now)
            for f, r in zip(self.flows, rates, strict=True):
                f.left -= r * step
            now += step
            done = [f for f in self.flows if f.left <= _EPS * max(1.0, self.cell)]
            if not done:
                return now
            self.flows = [f for f in self.flows if f not in done]
            for f in done:
                for cb in f.on_done:
                    cb(now + f.alpha)
            return now  # completions may have scheduled earlier events
        return until

    def _flow(self, t: int, src: int, dst: int, nbytes: float, on_done: list) -> None:
        res, alpha = self._resources(src, dst)
        self.flows.append(_Flow(res, nbytes / self.eff, self.copy_rate, alpha, t, on_done))

    # ---------------------------------------------------------------------------- run
    def run(self) -> float:
        for t in range(len(self.threads)):
            self._push(self.m.launch_us, t)
        now = 0.0
        while self.heap or self.flows:
            nxt = self.heap[0][0] if self.heap else np.inf
            if self.flows and nxt > now:
                now = self._advance(now, nxt)
                continue
            if not self.heap:
                break
            at, _, t = heapq.heappop(self.heap)
            now = max(now, at)
            self._run_thread(t, now)
        stuck = [t for t in range(len(self.threads)) if self.pc[t] < len(self.ops[t])]
        if stuck:  # the verifier proves plans deadlock-free; this is a bug in the model
            raise RuntimeError(f"timing model stalled with {len(stuck)} blocks left")
        return self.end

    def _finish_op(self, t: int, at: float) -> None:
        self.pc[t] += 1
        self.end = max(self.end, at)
        self._push(at, t)

    def _park(self, key: tuple, t: int) -> None:
        self.parked.setdefault(key, []).append(t)

    def _wake(self, key: tuple, at: float) -> None:
        for u in self.parked.pop(key, []):
            self._push(at, u)

    def _run_thread(self, t: int, now: float) -> None:
        ops = self.ops[t]
        if self.pc[t] >= len(ops) or self.busy[t]:
            return
        op = ops[self.pc[t]]
        rank = self.threads[t][0]
        if op.kind == "wait":
            keys = [(c.peer, rank, c.type, c.k) for c in op.chans]
            for key in keys:
                q = self.chanq.get(key)
                if not q:
                    return self._park(("chan", *key), t)
            arrival = max(self.chanq[key].popleft() for key in keys)
            return self._finish_op(t, max(now, arrival))
        if op.kind == "sem_acquire":
            for s in op.ids:
                q = self.semq.setdefault((rank, s), deque([0.0] * self.plan.gpus[rank].semaphores[s]))
                if not q:
                    return self._park(("sem", rank, s), t)
            got = max(self.semq[(rank, s)].popleft() for s in op.ids)
            return self._finish_op(t, max(now, got))
        if op.kind == "sem_release":
            for s in op.ids:
                self.semq.setdefault((rank, s), deque([0.0] * self.plan.gpus[rank].semaphores[s]))
                self.semq[(rank, s)].append(now)
                self._wake(("sem", rank, s), now)
            return self._finish_op(t, now)
        if op.kind == "barrier":
            if t in self.released:
                return self._finish_op(t, max(now, self.released.pop(t)))
            bid, nb = op.ids
            arrived = self.barriers.setdefault((rank, bid), [])
            arrived.append((t, now))
            if len(arrived) < nb:
                return None
            del self.barriers[(rank, bid)]
            at = max(x for _, x in arrived)
            for u, _ in arrived:
                if u != t:
                    self.released[u] = at
                    self._push(at, u)
            return self._finish_op(t, at)
        if op.kind == "signal":
            for c in op.chans:
                self._signal(t, rank, c, now)
            return self._finish_op(t, now)
        if op.kind == "flush":
            return self._finish_op(t, now)  # the proxy's flows already carry their time
        if op.kind == "nop":
            return self._finish_op(t, now)
        return self._data(t, rank, op, now)

    def _signal(self, t: int, rank: int, c, now: float) -> None:
        key = (rank, c.peer, c.type, c.k)
        pend = c.type == "port" and self.port_pending.get((t, c), [0])[0] > 0

        def post(at: float) -> None:
            self.chanq.setdefault(key, deque()).append(at + self._hop(rank, c.peer))
            self._wake(("chan", *key), at + self._hop(rank, c.peer))
        if pend:
            self.port_signal.setdefault((t, c), []).append(post)
        else:
            post(now)

    def _port_done(self, t: int, c, at: float) -> None:
        lst = self.port_pending[(t, c)]
        lst[0] -= 1
        lst[1] = max(lst[1], at)
        if lst[0] == 0:
            for post in self.port_signal.pop((t, c), []):
                post(lst[1])

    def _data(self, t: int, rank: int, op: Op, now: float) -> None:
        # LL reads spin until their packets are there
        for m in op.moves:
            for a in m.srcs:
                if a.pkt:
                    for x in range(a.n):
                        key = (a.rank, a.buf, a.start + x)
                        if key not in self.pkt_ready:
                            return self._park(("pkt", *key), t)
                        now = max(now, self.pkt_ready[key])
        local_us = 0.0
        blocking = 0
        ends: list[float] = [now]

        def done_cb(at: float) -> None:
            ends.append(at)
            self.busy[t] -= 1
            if self.busy[t] == 0:
                self._finish_op(t, max(ends) + local_us)

        for m in op.moves:
            n = m.srcs[0].n * self.cell
            streams = (len(m.srcs) + 2) / 2 if len(m.srcs) > 1 else 1.0
            remote_srcs = [a for a in m.srcs if a.rank != rank]
            for a in remote_srcs:  # reads of peers' memory (rre, rres, glres)
                blocking += 1
                self._flow(t, a.rank, rank, n, [done_cb])
            for d in m.dsts:
                if d.rank == rank:
                    local_us += n * streams / self.copy_rate
                    if d.pkt:
                        self._pkt_written(d, now + local_us)
                    continue
                cbs: list = []
                if d.pkt:
                    cbs.append(lambda at, d=d: self._pkt_written(d, at))
                if m.port is not None:
                    key = (t, m.port)
                    lst = self.port_pending.setdefault(key, [0, now])
                    lst[0] += 1
                    cbs.append(lambda at, c=m.port: self._port_done(t, c, at))
                else:
                    blocking += 1
                    cbs.append(done_cb)
                self._flow(t, rank, d.rank, n, cbs)
        if op.signal_after:
            for c in op.chans:
                self._signal(t, rank, c, now)
        if blocking:
            self.busy[t] = blocking
        else:
            self._finish_op(t, now + local_us)

    def _pkt_written(self, d: Access, at: float) -> None:
        for x in range(d.n):
            key = (d.rank, d.buf, d.start + x)
            self.pkt_ready[key] = at
            self._wake(("pkt", *key), at)


def plan_time_us(plan: Plan, topology: Topology, model: ProgramModel, nbytes: int) -> float:
    """Modelled time of one call of ``plan`` moving ``nbytes`` (µs)."""
    return PlanTimer(plan, topology, model, nbytes).run()


class PlanTimes:
    """The MSCCL++ plan model as a :class:`synth.timing.TimeModel`: prices a plan with the
    program model's figures for its protocol (the calibration's sections apply as there)."""

    name = "plan"

    def __init__(self, topology: Topology, calibration: Any = None) -> None:
        self.topology = topology
        self.calibration = calibration
        self.source = ("synth.timing.plan: the program model's figures, max-min fair flows over the "
                       "topology's ports")

    def times_us(self, subject: Plan, sizes: Sequence[int]) -> list[float]:
        model = program_model(self.topology, subject.protocol, self.calibration)
        return [plan_time_us(subject, self.topology, model, int(n)) for n in sizes]
