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
* ``min_message_size``/``max_message_size`` carry the size tile, ``protocol`` is ``Simple``.

Not emitted (said plainly): the LL packet protocol and NVLS switch channels. Plans are out of place.
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

    instances: int = 1
    min_bytes: int = 0
    max_bytes: int = 0
    """0: unbounded."""
    num_threads_per_block: int = 1024


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
    program = compile_schedule(schedule, profile="exec", proto="Simple",
                               instances=options.instances, min_bytes=options.min_bytes,
                               max_bytes=options.max_bytes, inplace=False)
    obj = _Lowering(program, topology.node_of, options).plan(schedule)
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


class _Lowering:
    def __init__(self, program: Any, node_of: tuple[int, ...], options: PlanOptions) -> None:
        self.p = program
        self.node_of = node_of
        self.options = options
        self.ranks = [_Rank(scratch=g.s_chunks) for g in program.gpus]
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
            staging = []
            for cnt in sends[key]:
                staging.append(rd.scratch)
                rd.scratch += cnt
            self.conn[key] = {"type": t, "send_ch": len(rs.channels[t]) - 1,
                              "recv_ch": len(rd.channels[t]) - 1, "staging": staging,
                              "remote": self._remote(src, dst, t)}

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
                "scratch_chunks": r.scratch,
                "threadblocks": blocks,
                "channels": [{"channel_type": t, "connected_to": r.channels[t]}
                             for t in ("memory", "port") if r.channels[t]],
                "remote_buffers": [{"rank": o, "type": "s", "access_channel_types": [t]}
                                   for o, t in r.remote],
                "semaphores": [{"init_value": 0} for _ in range(r.semaphores)],
            })
        coll = schedule.collective
        return {
            "name": p.name, "collective": coll.kind, "protocol": "Simple", "inplace": False,
            "reuse_resources": False, "gpus": gpus,
            "num_threads_per_block": self.options.num_threads_per_block,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": self.options.min_bytes,
            "max_message_size": self.options.max_bytes or UNBOUNDED,
        }

    def _semaphore(self, rank: int) -> int:
        self.ranks[rank].semaphores += 1
        return self.ranks[rank].semaphores - 1

    def _blocks(self, rank: int, tb: Any, first_id: int) -> list[dict[str, Any]]:
        """One MSCCL-IR block as one or more MSCCL++ blocks (cut at MAX_OPERATION)."""
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
