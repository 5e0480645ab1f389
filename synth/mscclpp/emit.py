"""Emit a synthesized schedule as an MSCCL++ execution plan, verified before it leaves memory.

The schedule goes through the XML compiler's passes first (:func:`synth.emit.compile.compile_schedule`:
lower, fuse, aggregate, order, hazards, allocate threadblocks and channels, progress, dependencies,
instances), so threadblock placement, fusion, instances and step dependencies are the ones the
MSCCL-IR file would have. This module only translates that program's two-sided model into MSCCL++'s
one-sided one (``docs/mscclpp-plan-format.md``):

* every MSCCL-IR connection ``(r → p, channel c)`` that carries messages becomes one channel pair:
  a *memory* channel when r and p share a node (NVLink/NVSwitch peer memory), a *port* channel
  when they do not (the proxy and the NIC). Both ends are created together, so they are the k-th
  channel between r and p on each side, which is how the executor pairs them;
* each message gets its own staging range in the receiver's scratch. The sender writes it there
  (``put`` then a block ``nop`` and ``signal`` on memory channels; ``pwsf``, put-signal-flush, on port
  channels); the receiver ``wait``s, ``nop``s, then finishes the step locally: ``r`` copies to its
  destination, ``rrc``/``rrcs``/``rrs`` reduce their operand with the staged data (``re``), the
  forwarding steps (``rcs``/``rrs``/``rrcs``) then send the result like an ``s``;
* at the start of a launch each receiving block signals (relaxed on memory channels) that its
  staging is free, and each sending block waits for that before its first put, so back-to-back
  launches never overwrite staging still being read;
* MSCCL-IR dependencies ``(depid, deps)`` become device semaphores: the producer block releases one
  per dependent after the step, the dependent acquires it before its step;
* a block longer than the executor's 64 operations is cut into consecutive blocks handing over with
  a semaphore (program order is kept);
* ``protocol`` ``LL`` instead: the sender writes LL packets (data + flag) into the receiver's
  staging (``ppkt``; across nodes ``cpkt`` into a local packet buffer, then ``ppkt`` on the port
  channel), and the receiver's ``upkt``/``repkt`` spin on the flags, so no signal or wait is needed;
  the program's own scratch and reduce temporaries are plain data placed past the packets (which
  take twice the space of their index), and the scratch is doubled so consecutive launches
  alternate halves;
* ``min_message_size``/``max_message_size`` carry the size tile.

Not emitted: NVLS switch channels (``glres``/``gstore``). Plans are out of place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import SynthError
from ..schedule import Schedule
from ..topology import Topology
from .interpreter import POSTCONDITIONS, Report, verify_plan
from .plan import MAX_DEVICE_SEMAPHORES, MAX_OPERATION, load_plan

UNBOUNDED = 2**64 - 1
SEND_TYPES = frozenset(("s", "rcs", "rrs", "rrcs"))
RECV_TYPES = frozenset(("r", "rcs", "rrs", "rrc", "rrcs"))


@dataclass(frozen=True)
class PlanOptions:
    """What ``solve --format mscclpp`` can choose."""

    proto: str = "Simple"
    """``Simple`` (put/signal/wait) or ``LL`` (packets with flags, no semaphores)."""
    instances: int = 1
    min_bytes: int = 0
    max_bytes: int = 0
    """0: unbounded."""
    num_threads_per_block: int = 1024
    max_threadblocks: int | None = None
    """Threadblocks one rank may use: the GPU's SMs. The executor's blocks synchronise with each
    other (semaphores, barriers, LL flags), so all of a rank's blocks must be resident at once;
    a plan needing more would hang. None: not checked (unknown GPU)."""


def plan_unsupported_reason(schedule: Schedule) -> str | None:
    """Why this schedule has no MSCCL++ plan here (None when it has one)."""
    coll = schedule.collective
    if coll.custom is not None:
        return "custom collectives have no MSCCL++ postcondition to verify"
    if coll.kind not in POSTCONDITIONS:
        return (f"synth emits MSCCL++ plans for {', '.join(POSTCONDITIONS)}, whose postconditions "
                f"its verifier checks, not {coll.kind}")
    return None


def emit_verified_plan(schedule: Schedule, topology: Topology,
                       options: PlanOptions = PlanOptions()) -> tuple[str, Report]:
    """The plan's JSON text and its verification report; raises SynthError if it cannot be made."""
    from ..emit.compile import compile_schedule

    reason = plan_unsupported_reason(schedule)
    if reason:
        raise SynthError(f"cannot emit an MSCCL++ plan: {reason}")
    if topology.num_ranks != schedule.collective.num_ranks:
        raise SynthError(f"topology {topology.name} has {topology.num_ranks} ranks, the schedule "
                         f"{schedule.collective.num_ranks}")
    if options.proto not in ("Simple", "LL"):
        raise SynthError(f"MSCCL++ plans use the Simple or LL protocol, not {options.proto}")
    program = compile_schedule(schedule, profile="exec", proto=options.proto,
                               instances=options.instances, min_bytes=options.min_bytes,
                               max_bytes=options.max_bytes, inplace=False)
    obj = _Lowering(program, topology.node_of, options).plan(schedule)
    most = max(len(g["threadblocks"]) for g in obj["gpus"])
    if options.max_threadblocks is not None and most > options.max_threadblocks:
        raise SynthError(f"the MSCCL++ plan needs {most} threadblocks per rank; all must be "
                         f"co-resident and the GPU has {options.max_threadblocks} SMs")
    text = json.dumps(obj, indent=1) + "\n"
    report = verify_plan(load_plan(text, f"{obj['name']}.json"))
    if not report.postcondition:  # pragma: no cover - POSTCONDITIONS gate above
        raise SynthError("the emitted plan's postcondition was not checked")
    return text, report


@dataclass
class _Rank:
    """One rank's plan under construction."""

    channels: dict[str, list[int]] = field(default_factory=lambda: {"memory": [], "port": []})
    remote: list[tuple[int, str]] = field(default_factory=list)  # (owner, access type)
    semaphores: int = 0
    scratch: int = 0
    """Simple: scratch chunks used (the program's own, then staging). LL: packet chunks."""
    plain: int = 0
    """LL: plain scratch chunks (the program's own, then temporaries), placed after the packets."""

    def plain_base(self) -> int:
        """LL: plain scratch starts past the packets, which take twice the space of their index."""
        return 2 * self.scratch

    def scratch_chunks(self, ll: bool) -> int:
        return self.scratch + (self.plain + 1) // 2 if ll else self.scratch


class _Lowering:
    def __init__(self, program: Any, node_of: tuple[int, ...], options: PlanOptions) -> None:
        self.p = program
        self.node_of = node_of
        self.options = options
        self.ll = options.proto == "LL"
        self.ranks = [_Rank(plain=g.s_chunks) if self.ll else _Rank(scratch=g.s_chunks)
                      for g in program.gpus]
        self.conn: dict[tuple[int, int, int], dict[str, Any]] = {}
        self._match()

    # ---------------------------------------------------------------------------- messages
    def _ctype(self, a: int, b: int) -> str:
        return "memory" if self.node_of[a] == self.node_of[b] else "port"

    def _match(self) -> None:
        """Pair sends with receives per connection, give each message a staging range."""
        sends: dict[tuple[int, int, int], list[int]] = {}
        for g in self.p.gpus:
            for tb in g.tbs:
                if tb.send >= 0:
                    key = (g.id, tb.send, tb.chan)
                    sends[key] = [st.cnt for st in tb.steps if st.type in SEND_TYPES]
        for key in sorted(sends):
            src, dst, _chan = key
            if not sends[key]:
                continue
            t = self._ctype(src, dst)
            # one channel on each side, created together: the k-th between src and dst on both
            rs, rd = self.ranks[src], self.ranks[dst]
            rs.channels[t].append(dst)
            rd.channels[t].append(src)
            staging, temps = [], []
            for cnt in sends[key]:
                staging.append(rd.scratch)
                rd.scratch += cnt
                if self.ll and t == "port":  # the proxy copies packets: stage them locally first
                    temps.append(rs.scratch)
                    rs.scratch += cnt
            self.conn[key] = {"type": t, "send_ch": len(rs.channels[t]) - 1,
                              "recv_ch": len(rd.channels[t]) - 1, "staging": staging,
                              "temps": temps, "remote": self._remote(src, dst, t)}

    def _remote(self, rank: int, owner: int, t: str) -> int:
        rb = self.ranks[rank].remote
        if (owner, t) not in rb:
            rb.append((owner, t))
        return rb.index((owner, t))

    # ---------------------------------------------------------------------------- plan
    def plan(self, schedule: Schedule) -> dict[str, Any]:
        p = self.p
        # semaphores for MSCCL-IR dependencies: (rank, producer tb, step) -> [semaphore ids]
        self.releases: dict[tuple[int, int, int], list[int]] = {}
        self.acquires: dict[tuple[int, int, int], list[int]] = {}
        for g in p.gpus:
            for tb in g.tbs:
                pending: list[tuple[int, int]] = []
                for st in tb.steps:
                    if st.depid >= 0:
                        pending.append((st.depid, st.deps))
                    if st.type == "nop":
                        continue
                    for d, k in pending:
                        sid = self._semaphore(g.id)
                        self.releases.setdefault((g.id, d, k), []).append(sid)
                        self.acquires.setdefault((g.id, tb.id, st.s), []).append(sid)
                    pending = []
        gpus = []
        for g in p.gpus:
            blocks: list[dict[str, Any]] = []
            for tb in g.tbs:
                blocks.extend(self._blocks(g.id, tb, len(blocks)))
            r = self.ranks[g.id]
            gpus.append({
                "id": g.id, "input_chunks": g.i_chunks, "output_chunks": g.o_chunks,
                "scratch_chunks": r.scratch_chunks(self.ll),
                "threadblocks": blocks,
                "channels": [{"channel_type": t, "connected_to": r.channels[t]}
                             for t in ("memory", "port") if r.channels[t]],
                "remote_buffers": [{"rank": o, "type": "s", "access_channel_types": [t]}
                                   for o, t in r.remote],
                "semaphores": [{"init_value": 0} for _ in range(r.semaphores)],
            })
        coll = schedule.collective
        return {
            "name": p.name, "collective": coll.kind, "protocol": self.options.proto,
            "inplace": False,
            "reuse_resources": False, "gpus": gpus,
            "num_threads_per_block": self.options.num_threads_per_block,
            # LL: alternate launches use alternate scratch halves, so packets never meet stale flags
            "use_double_scratch_buffer": self.ll, "buffer_alignment": 16,
            "min_message_size": self.options.min_bytes,
            "max_message_size": self.options.max_bytes or UNBOUNDED,
        }

    def _semaphore(self, rank: int) -> int:
        self.ranks[rank].semaphores += 1
        return self.ranks[rank].semaphores - 1

    def _blocks(self, rank: int, tb: Any, first_id: int) -> list[dict[str, Any]]:
        """One MSCCL-IR block as one or more MSCCL++ blocks (cut at MAX_OPERATION)."""
        if self.ll:
            return self._blocks_ll(rank, tb, first_id)
        chans: dict[str, list[int]] = {"memory": [], "port": []}
        rbufs: dict[str, list[int]] = {"memory": [], "port": []}

        def local_ch(t: str, glob: int) -> int:
            if glob not in chans[t]:
                chans[t].append(glob)
            return chans[t].index(glob)

        def local_rb(t: str, rb: int) -> int:
            if rb not in rbufs[t]:
                rbufs[t].append(rb)
            return rbufs[t].index(rb)

        out_conn = self.conn.get((rank, tb.send, tb.chan))
        in_conn = self.conn.get((tb.recv, rank, tb.chan))
        ops: list[dict[str, Any]] = []
        if in_conn:  # staging free for this launch
            t = in_conn["type"]
            ops.append({"name": "rlxsignal" if t == "memory" else "signal",
                        "channel_ids": [local_ch(t, in_conn["recv_ch"])], "channel_type": t})
        if out_conn:
            t = out_conn["type"]
            ops.append({"name": "rlxwait" if t == "memory" else "wait",
                        "channel_ids": [local_ch(t, out_conn["send_ch"])], "channel_type": t})
        nsent = nrecv = 0

        def ref(buf: str, off: int, cnt: int) -> dict[str, Any]:
            return {"type": buf, "index": off, "size": cnt}

        def send(buf: str, off: int, cnt: int) -> None:
            nonlocal nsent
            c = out_conn
            assert c is not None
            t = c["type"]
            dst = {"buffer_id": local_rb(t, c["remote"]), "index": c["staging"][nsent], "size": cnt}
            ch = local_ch(t, c["send_ch"])
            if t == "memory":
                ops.append({"name": "put", "src_buff": [ref(buf, off, cnt)], "dst_buff": [dst],
                            "channel_type": "memory"})
                ops.append({"name": "nop"})
                ops.append({"name": "signal", "channel_ids": [ch], "channel_type": "memory"})
            else:
                ops.append({"name": "pwsf", "src_buff": [ref(buf, off, cnt)], "dst_buff": [dst],
                            "channel_ids": [ch], "channel_type": "port"})
            nsent += 1

        def receive() -> int:
            nonlocal nrecv
            c = in_conn
            assert c is not None
            t = c["type"]
            ops.append({"name": "wait", "channel_ids": [local_ch(t, c["recv_ch"])],
                        "channel_type": t})
            ops.append({"name": "nop"})
            nrecv += 1
            return c["staging"][nrecv - 1]

        for st in tb.steps:
            for sid_chunk in _chunks(self.acquires.get((rank, tb.id, st.s), [])):
                ops.append({"name": "sem_acquire", "semaphore_ids": sid_chunk})
            k = st.cnt
            if st.type == "s":
                send(st.srcbuf, st.srcoff, k)
            elif st.type == "r":
                sg = receive()
                ops.append({"name": "copy", "src_buff": [ref("s", sg, k)],
                            "dst_buff": [ref(st.dstbuf, st.dstoff, k)]})
            elif st.type == "rcs":
                sg = receive()
                ops.append({"name": "copy", "src_buff": [ref("s", sg, k)],
                            "dst_buff": [ref(st.dstbuf, st.dstoff, k)]})
                ops.append({"name": "nop"})
                send(st.dstbuf, st.dstoff, k)
            elif st.type in ("rrc", "rrcs"):
                sg = receive()
                ops.append({"name": "re", "src_buff": [ref(st.srcbuf, st.srcoff, k), ref("s", sg, k)],
                            "dst_buff": [ref(st.dstbuf, st.dstoff, k)], "reduce_op": "sum"})
                if st.type == "rrcs":
                    ops.append({"name": "nop"})
                    send(st.dstbuf, st.dstoff, k)
            elif st.type == "rrs":
                sg = receive()
                ops.append({"name": "re", "src_buff": [ref(st.srcbuf, st.srcoff, k), ref("s", sg, k)],
                            "dst_buff": [ref("s", sg, k)], "reduce_op": "sum"})
                ops.append({"name": "nop"})
                send("s", sg, k)
            elif st.type == "cpy":
                ops.append({"name": "copy", "src_buff": [ref(st.srcbuf, st.srcoff, k)],
                            "dst_buff": [ref(st.dstbuf, st.dstoff, k)]})
            elif st.type == "re":
                ops.append({"name": "re", "src_buff": [ref(st.dstbuf, st.dstoff, k),
                                                       ref(st.srcbuf, st.srcoff, k)],
                            "dst_buff": [ref(st.dstbuf, st.dstoff, k)], "reduce_op": "sum"})
            elif st.type != "nop":  # pragma: no cover - the compiler emits only these
                raise SynthError(f"MSCCL-IR step '{st.type}' has no MSCCL++ lowering")
            releases = self.releases.get((rank, tb.id, st.s), [])
            if releases:
                ops.append({"name": "nop"})
                for sid_chunk in _chunks(releases):
                    ops.append({"name": "sem_release", "semaphore_ids": sid_chunk})
        return self._cut(rank, ops, chans, rbufs, first_id)

    def _blocks_ll(self, rank: int, tb: Any, first_id: int) -> list[dict[str, Any]]:
        """LL: packets into the receiver's staging; the receiver's packet read waits on the flags."""
        chans: dict[str, list[int]] = {"memory": [], "port": []}
        rbufs: dict[str, list[int]] = {"memory": [], "port": []}
        me = self.ranks[rank]
        out_conn = self.conn.get((rank, tb.send, tb.chan))
        in_conn = self.conn.get((tb.recv, rank, tb.chan))
        ops: list[dict[str, Any]] = []
        nsent = nrecv = 0

        def ref(buf: str, off: int, cnt: int) -> dict[str, Any]:
            if buf == "s":  # the program's own scratch is plain data: past the packets
                off += me.plain_base()
            return {"type": buf, "index": off, "size": cnt}

        def pkt(off: int, cnt: int) -> dict[str, Any]:
            return {"type": "s", "index": off, "size": cnt}

        def local(t: str, table: dict[str, list[int]], x: int) -> int:
            if x not in table[t]:
                table[t].append(x)
            return table[t].index(x)

        def data(op: dict[str, Any]) -> None:
            ops.append(op)
            ops.append({"name": "nop"})  # the next op's threads read what this one's wrote

        def send(src: dict[str, Any], cnt: int) -> None:
            nonlocal nsent
            c = out_conn
            assert c is not None
            t = c["type"]
            dst = {"buffer_id": local(t, rbufs, c["remote"]), "index": c["staging"][nsent],
                   "size": cnt}
            if t == "memory":
                data({"name": "ppkt", "src_buff": [src], "dst_buff": [dst], "channel_type": "memory"})
            else:
                tmp = pkt(c["temps"][nsent], cnt)
                data({"name": "cpkt", "src_buff": [src], "dst_buff": [tmp]})
                data({"name": "ppkt", "src_buff": [tmp], "dst_buff": [dst],
                      "channel_ids": [local("port", chans, c["send_ch"])], "channel_type": "port"})
            nsent += 1

        def staged(cnt: int) -> dict[str, Any]:
            nonlocal nrecv
            assert in_conn is not None
            nrecv += 1
            return pkt(in_conn["staging"][nrecv - 1], cnt)

        for st in tb.steps:
            for sid_chunk in _chunks(self.acquires.get((rank, tb.id, st.s), [])):
                ops.append({"name": "sem_acquire", "semaphore_ids": sid_chunk})
            k = st.cnt
            if st.type == "s":
                send(ref(st.srcbuf, st.srcoff, k), k)
            elif st.type in ("r", "rcs"):
                data({"name": "upkt", "src_buff": [staged(k)],
                      "dst_buff": [ref(st.dstbuf, st.dstoff, k)]})
                if st.type == "rcs":
                    send(ref(st.dstbuf, st.dstoff, k), k)
            elif st.type in ("rrc", "rrcs"):
                data({"name": "repkt", "src_buff": [ref(st.srcbuf, st.srcoff, k), staged(k)],
                      "dst_buff": [ref(st.dstbuf, st.dstoff, k)], "reduce_op": "sum"})
                if st.type == "rrcs":
                    send(ref(st.dstbuf, st.dstoff, k), k)
            elif st.type == "rrs":
                tmp = {"type": "s", "index": me.plain_base() + me.plain, "size": k}
                me.plain += k
                data({"name": "repkt", "src_buff": [ref(st.srcbuf, st.srcoff, k), staged(k)],
                      "dst_buff": [tmp], "reduce_op": "sum"})
                send(tmp, k)
            elif st.type == "cpy":
                data({"name": "copy", "src_buff": [ref(st.srcbuf, st.srcoff, k)],
                      "dst_buff": [ref(st.dstbuf, st.dstoff, k)]})
            elif st.type == "re":
                data({"name": "re", "src_buff": [ref(st.dstbuf, st.dstoff, k),
                                                 ref(st.srcbuf, st.srcoff, k)],
                      "dst_buff": [ref(st.dstbuf, st.dstoff, k)], "reduce_op": "sum"})
            elif st.type != "nop":  # pragma: no cover - the compiler emits only these
                raise SynthError(f"MSCCL-IR step '{st.type}' has no MSCCL++ lowering")
            for sid_chunk in _chunks(self.releases.get((rank, tb.id, st.s), [])):
                ops.append({"name": "sem_release", "semaphore_ids": sid_chunk})
        return self._cut(rank, ops, chans, rbufs, first_id)

    def _cut(self, rank: int, ops: list[dict[str, Any]], chans: dict[str, list[int]],
             rbufs: dict[str, list[int]], first_id: int) -> list[dict[str, Any]]:
        room = MAX_OPERATION - 3  # an acquire at the start, a nop and a release at the end
        pieces = [ops[i:i + room] for i in range(0, len(ops), room)] or [[]]
        handovers = [self._semaphore(rank) for _ in pieces[1:]]
        blocks = []
        for i, piece in enumerate(pieces):
            body = list(piece)
            if i > 0:
                body.insert(0, {"name": "sem_acquire", "semaphore_ids": [handovers[i - 1]]})
            if i < len(handovers):
                body.append({"name": "nop"})
                body.append({"name": "sem_release", "semaphore_ids": [handovers[i]]})
            blocks.append({
                "id": first_id + i, "ops": body,
                "channels": [{"channel_type": t, "channel_ids": chans[t]}
                             for t in ("memory", "port") if chans[t]],
                "remote_buffer_refs": [{"access_channel_type": t, "remote_buffer_ids": rbufs[t]}
                                       for t in ("memory", "port") if rbufs[t]],
            })
        return blocks


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[i:i + MAX_DEVICE_SEMAPHORES] for i in range(0, len(ids), MAX_DEVICE_SEMAPHORES)]
