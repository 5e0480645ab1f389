"""Execute an MSCCL++ execution plan symbolically and prove it correct, or say where it is not.

Model (the executor at microsoft/mscclpp@1f5f065d7b13ab02df32c22568f38785d1eeec01; see
``docs/mscclpp-plan-format.md``):

* Every threadblock of every rank is a sequential program of resolved operations
  (:mod:`synth.mscclpp.plan`); a ``pipeline`` runs its body once over whole chunks (its iterations
  touch disjoint slices and repeat the same synchronisation on both sides).
* Memory: cells ``(rank, buffer, cell)``, a cell being one chunk part (``Plan.parts`` per chunk, for
  ``tbg_info`` splits). In-place plans alias the input into the output the way the executor's
  buffers overlap: allgather ``i[j] = o[r·k+j]``, reducescatter ``o[j] = i[r·k+j]``, the others
  ``i[j] = o[j]``. A cell holds UNDEFINED or a set of input contributions (the XML interpreter's
  values, :mod:`synth.emit.interp_semantics`), and a format: plain data or LL packets.
* Synchronisation, each giving happens-before edges carried by vector clocks:
  ``signal``/``wait`` on a memory or port channel (a counting semaphore per direction of each
  channel pair: the k-th channel rank r lists to p is paired with the k-th channel p lists to r);
  ``barrier`` (a device syncer over ``num_threadblocks`` blocks of one rank); ``sem_release`` /
  ``sem_acquire`` (device semaphores with their ``init_value``); an LL packet read, which spins on
  the packet's flag until the write arrives. Relaxed signals/waits (``rlxsignal``/``rlxwait``) order
  execution but publish no data (no memory fence), so they justify reuse of a buffer (a
  write after a read) but not the read of data written before them.
* Port-channel puts are carried by the proxy: their data is published only by a later ``signal``,
  ``pws``/``pwsf`` or ``flush`` on the same channel by the same block.
* Scheduling: a ready queue of blocks; each runs until it blocks on a wait, an acquire, a barrier
  or a packet not yet written, and is woken when that arrives. Semaphores only grow and packets only
  appear, so the execution is determinate: one fair run decides completion.

Rejections (``VerificationError.reason``): ``race`` (a read not ordered after the write it reads, or a
write not ordered after an earlier access of another block), ``deadlock`` (blocks left waiting,
each named with what it waits for), ``unmatched`` (signals never waited for: the next launch would
start with stale semaphores), ``range``/``channel``/``limit``/``unsupported`` (from the parser),
``undefined_read``, ``format`` (plain read of packet data or the reverse), ``double_count``,
``postcondition``. Every message names the rank, threadblock and operation.

Deliberate simplifications: one launch (no cross-launch reuse of scratch or semaphores beyond the
``unmatched`` check); a threadblock's threads act together (the ``nop`` block barriers the DSL inserts
between data operations and signals are not required); a port put's source is read when issued.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..emit.interp_semantics import Value, combine, describe, overlap
from ..errors import SynthError, VerificationError
from .plan import Access, Chan, Op, Plan

MAX_THREADS = 4096
"""Threadblocks (all ranks) the verifier accepts: its two dense T x T clocks take 16·T² bytes."""

POSTCONDITIONS = ("allgather", "allreduce", "reducescatter", "alltoall")
"""Collectives whose postcondition follows from the plan alone; others are checked for safety only."""


@dataclass
class Report:
    """What a verified plan did."""

    name: str
    collective: str
    protocol: str
    ranks: int
    threadblocks: int
    operations: int
    signals: int
    postcondition: bool
    """False when the collective has no known postcondition (``test``, ``sendrecv``...)."""


@dataclass
class _Cell:
    value: Value | None = None
    fmt: str | None = None  # "plain" | "pkt" | None (never written)
    writer: int = -1  # thread index, -1 = the initial input
    wclock: int = 0
    wvis: np.ndarray | None = None  # the writer's visibility clock, for packet reads
    pending: tuple | None = None  # (thread, Chan) of an unpublished port put
    reads: dict[int, int] = field(default_factory=dict)


class _Fail(Exception):
    pass


class Interpreter:
    """One symbolic run of ``plan``; :meth:`run` returns a :class:`Report` or raises."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.n = plan.num_ranks
        self.threads = [(g.rank, t) for g in plan.gpus for t in range(len(g.tbs))]
        self.tindex = {rt: i for i, rt in enumerate(self.threads)}
        self.ops = [plan.gpus[r].tbs[t] for r, t in self.threads]
        T = len(self.threads)
        if T > MAX_THREADS:
            raise SynthError(f"plan '{plan.name}' has {T} threadblocks in all; the verifier's vector "
                             f"clocks are dense (T x T) and stop at {MAX_THREADS}")
        self.vis = np.zeros((T, T), dtype=np.int64)
        self.exe = np.zeros((T, T), dtype=np.int64)
        self.pc = [0] * T
        self.cells: dict[tuple[int, str, int], _Cell] = {}
        self.chanq: dict[tuple, deque] = {}
        self.semq: dict[tuple[int, int], deque] = {}
        """Releases not yet acquired, per (rank, semaphore), with the releaser's clocks."""
        self.sem_left: dict[tuple[int, int], int] = {}
        """Acquires each semaphore's ``init_value`` still lets through (they order nothing). A
        count, not a queue of tokens: an init_value of 10^12 is one integer here."""
        self.barriers: dict[tuple[int, int], list[int]] = {}
        self.released: set[int] = set()  # threads let through a barrier they arrived at
        self.waiting: dict[tuple, list[int]] = {}
        self.blocked: dict[int, str] = {}
        self.pending_port: dict[tuple[int, Chan], list[_Cell]] = {}
        self.signals = 0
        self.undefined: list[str] = []
        self._init_memory()

    # ---------------------------------------------------------------------------- memory
    def _k(self) -> int:
        """Chunks per rank of the collective (``chunk_factor``), from rank 0's buffers."""
        c = self.plan.gpus[0].chunks
        coll = self.plan.collective
        if coll == "allgather":
            return c["o"] // self.n
        if coll in ("reducescatter", "allreduce", "alltoall"):
            return c["i"] // self.n
        return c["i"]

    def _alias(self, rank: int, buf: str, cell: int) -> tuple[int, str, int]:
        if not self.plan.inplace:
            return rank, buf, cell
        coll = self.plan.collective
        P = self.plan.parts
        k = self._k()
        if coll == "allgather" and buf == "i":
            return rank, "o", rank * k * P + cell
        if coll == "reducescatter" and buf == "o":
            return rank, "i", rank * k * P + cell
        if coll in ("allreduce", "alltoall") and buf == "o":
            return rank, "i", cell
        return rank, buf, cell

    def _init_memory(self) -> None:
        P = self.plan.parts
        for g in self.plan.gpus:
            for j in range(g.chunks["i"]):
                for p in range(P):
                    key = self._alias(g.rank, "i", j * P + p)
                    self.cells[key] = _Cell(value=((j, 1 << g.rank),), fmt="plain")

    def _key(self, a: Access, x: int) -> tuple[int, str, int]:
        """The cell ``x`` of an access names. In LL plans scratch packets live at twice the plain
        offset, so the packet view of scratch is its own cell space (``S``); :meth:`_check_ll_layout`
        proves the two views never overlap physically."""
        if a.pkt and a.buf == "s" and self.plan.protocol == "LL":
            return a.rank, "S", a.start + x
        return self._alias(a.rank, a.buf, a.start + x)

    def _check_ll_layout(self) -> None:
        if self.plan.protocol != "LL":
            return
        P = self.plan.parts
        plain: dict[int, dict[int, Op]] = {}
        packets: dict[int, set[int]] = {}
        for ops in self.ops:
            for op in ops:
                for m in op.moves:
                    for a in m.srcs + m.dsts:
                        if a.buf != "s":
                            continue
                        for c in range(a.start, a.start + a.n):
                            if a.pkt:
                                packets.setdefault(a.rank, set()).add(c // P)
                            else:
                                plain.setdefault(a.rank, {}).setdefault(c // P, op)
        for rank, used in sorted(plain.items()):
            for j, op in sorted(used.items()):
                if j // 2 in packets.get(rank, ()):
                    raise VerificationError(
                        "format", f"{op.where}: plain scratch chunk {j} of rank {rank} lies inside "
                        f"the LL packets of scratch chunk {j // 2} (packets take twice the space)")

    def _cell(self, rank: int, buf: str, cell: int) -> _Cell:
        key = self._alias(rank, buf, cell)
        c = self.cells.get(key)
        if c is None:
            c = self.cells[key] = _Cell()
        return c

    # ---------------------------------------------------------------------------- run
    def run(self) -> Report:
        self._check_ll_layout()
        ready = deque(range(len(self.threads)))
        queued = set(ready)
        while ready:
            t = ready.popleft()
            queued.discard(t)
            ops = self.ops[t]
            while self.pc[t] < len(ops):
                woken = self._step(t, ops[self.pc[t]])
                for u in woken:
                    if u not in queued:
                        queued.add(u)
                        ready.append(u)
                if t in self.blocked:
                    break
                self.pc[t] += 1
        stuck = [t for t in range(len(self.threads)) if self.pc[t] < len(self.ops[t])]
        if stuck:
            lines = [f"{self.ops[t][self.pc[t]].where} waits for {self.blocked.get(t, '?')}"
                     for t in stuck]
            more = f" (and {len(lines) - 6} more blocks)" if len(lines) > 6 else ""
            raise VerificationError("deadlock", f"{len(stuck)} threadblock(s) never finish: "
                                    + "; ".join(lines[:6]) + more)
        if self.undefined:
            raise VerificationError("undefined_read", self.undefined[0])
        for (src, dst, typ, k), q in sorted(self.chanq.items()):
            if q:
                raise VerificationError(
                    "unmatched", f"rank {src} sends {len(q)} signal(s) to rank {dst} over its "
                    f"{typ} channel #{k} to that rank that rank {dst} never waits for (the next "
                    "launch would start with a stale semaphore)")
        checked = self._postcondition()
        return Report(name=self.plan.name, collective=self.plan.collective,
                      protocol=self.plan.protocol, ranks=self.n, threadblocks=len(self.threads),
                      operations=self.plan.num_ops, signals=self.signals, postcondition=checked)

    def _tick(self, t: int) -> int:
        self.vis[t, t] += 1
        self.exe[t, t] = self.vis[t, t]
        return int(self.vis[t, t])

    def _block(self, t: int, key: tuple, why: str) -> list[int]:
        self.blocked[t] = why
        self.waiting.setdefault(key, []).append(t)
        return []

    def _wake(self, key: tuple) -> list[int]:
        ts = self.waiting.pop(key, [])
        for u in ts:
            self.blocked.pop(u, None)
        return ts

    def _step(self, t: int, op: Op) -> list[int]:
        """Execute ``op`` of thread ``t``; returns the threads it wakes (``t`` blocked: not done)."""
        rank = self.threads[t][0]
        if op.kind == "wait":
            # all channels must have a signal pending; take them together
            keys = [(c.peer, rank, c.type, c.k) for c in op.chans]
            for key, c in zip(keys, op.chans, strict=False):
                if not self.chanq.get(key):
                    return self._block(t, ("chan", *key),
                                       f"a signal from rank {c.peer} on its {c.type} channel")
            self._tick(t)
            for key in keys:
                vis, exe, relaxed = self.chanq[key].popleft()
                np.maximum(self.exe[t], exe, out=self.exe[t])
                if not relaxed and not op.relaxed:
                    np.maximum(self.vis[t], vis, out=self.vis[t])
            return []
        if op.kind == "sem_acquire":
            for s in op.ids:
                if not self._sem_initial(rank, s) and not self.semq.get((rank, s)):
                    return self._block(t, ("sem", rank, s), f"a release of semaphore {s}")
            self._tick(t)
            for s in op.ids:
                if self.sem_left[(rank, s)]:  # the initial value goes first, as a counter's would
                    self.sem_left[(rank, s)] -= 1
                    continue
                got = self.semq[(rank, s)].popleft()
                np.maximum(self.vis[t], got[0], out=self.vis[t])
                np.maximum(self.exe[t], got[1], out=self.exe[t])
            return []
        if op.kind == "barrier":
            return self._barrier(t, rank, op)
        if op.kind == "data":
            woken = self._data(t, op)
            if t in self.blocked:
                return woken
            if op.flush_after or op.signal_after:
                self._publish_port(t, op.chans)
            if op.signal_after:
                woken += self._signal(t, rank, op.chans, relaxed=False)
            return woken
        self._tick(t)
        if op.kind == "signal":
            if any(c.type == "port" for c in op.chans):
                self._publish_port(t, op.chans)
            return self._signal(t, rank, op.chans, op.relaxed)
        if op.kind == "flush":
            self._publish_port(t, op.chans)
            return []
        if op.kind == "sem_release":
            woken: list[int] = []
            for s in op.ids:
                self.semq.setdefault((rank, s), deque()).append((self.vis[t].copy(),
                                                                 self.exe[t].copy()))
                woken += self._wake(("sem", rank, s))
            return woken
        return []  # nop

    def _sem_initial(self, rank: int, s: int) -> int:
        """Acquires of semaphore ``s`` of ``rank`` its initial value still lets through."""
        key = (rank, s)
        if key not in self.sem_left:
            self.sem_left[key] = self.plan.gpus[rank].semaphores[s]
        return self.sem_left[key]

    def _signal(self, t: int, rank: int, chans: tuple[Chan, ...], relaxed: bool) -> list[int]:
        woken: list[int] = []
        for c in chans:
            key = (rank, c.peer, c.type, c.k)
            self.chanq.setdefault(key, deque()).append(
                (None if relaxed else self.vis[t].copy(), self.exe[t].copy(), relaxed))
            self.signals += 1
            woken += self._wake(("chan", *key))
        return woken

    def _publish_port(self, t: int, chans: tuple[Chan, ...]) -> None:
        clock = int(self.vis[t, t])
        for c in chans:
            for cell in self.pending_port.pop((t, c), []):
                if cell.pending is not None and cell.pending[0] == t:
                    cell.pending = None
                    cell.wclock = clock

    def _barrier(self, t: int, rank: int, op: Op) -> list[int]:
        bid, nb = op.ids
        if t in self.released:
            self.released.discard(t)
            self.blocked.pop(t, None)
            return []
        arrived = self.barriers.setdefault((rank, bid), [])
        arrived.append(t)
        for u in arrived:
            other = self.ops[u][self.pc[u]]
            if other.ids[1] != nb:
                raise VerificationError("deadlock", f"{op.where}: barrier {bid} over {nb} blocks, but "
                                        f"{other.where} enters it over {other.ids[1]}")
        if len(arrived) < nb:
            self.blocked[t] = f"barrier {bid} ({len(arrived)} of {nb} blocks arrived)"
            return []
        del self.barriers[(rank, bid)]
        self._tick(t)
        vis = np.max(self.vis[arrived], axis=0)
        exe = np.max(self.exe[arrived], axis=0)
        woken = []
        for u in arrived:
            self.vis[u] = np.maximum(self.vis[u], vis)
            self.exe[u] = np.maximum(self.exe[u], exe)
            if u != t:
                self.released.add(u)
                woken.append(u)
        return woken

    # ---------------------------------------------------------------------------- data
    def _data(self, t: int, op: Op) -> list[int]:
        # an LL read spins until its packets are there: check before touching anything
        for m in op.moves:
            for a in m.srcs:
                if a.pkt:
                    for x in range(a.n):
                        c = self._cell(*self._key(a, x))
                        if c.fmt != "pkt":
                            key = ("pkt", *self._key(a, x))
                            return self._block(t, key, f"LL packets in rank {a.rank}'s '{a.buf}' "
                                               f"chunk {(a.start + x) // self.plan.parts}")
        clock = self._tick(t)
        woken: list[int] = []
        for m in op.moves:
            values = []
            for x in range(m.srcs[0].n):
                acc: Value | None = None
                poisoned = False
                for a in m.srcs:
                    v = self._read(t, op, a, x, clock)
                    if v is None:
                        # a later write by another block that this read does not precede is reported
                        # as a race; if none comes, the read is of garbage (reported after the run)
                        if not self.undefined:
                            self.undefined.append(
                                f"{op.where}: reads rank {a.rank}'s '{a.buf}' chunk "
                                f"{(a.start + x) // self.plan.parts}, which holds no data")
                        poisoned = True
                    elif not poisoned:
                        nxt = v if acc is None else combine(acc, v)
                        if nxt is None:
                            raise VerificationError(
                                "double_count", f"{op.where}: reduces {describe(acc)} with "
                                f"{describe(v)}: {overlap(acc, v)} counted twice")  # type: ignore[arg-type]
                        acc = nxt
                values.append(None if poisoned else acc)
            for d in m.dsts:
                for x, v in enumerate(values):
                    woken += self._write(t, op, d, x, v, clock, m.port)
        return woken

    def _read(self, t: int, op: Op, a: Access, x: int, clock: int) -> Value | None:
        c = self._cell(*self._key(a, x))
        chunk = (a.start + x) // self.plan.parts
        what = f"rank {a.rank}'s '{a.buf}' chunk {chunk}"
        if a.pkt:
            if c.wvis is not None:
                np.maximum(self.vis[t], c.wvis, out=self.vis[t])
                np.maximum(self.exe[t], c.wvis, out=self.exe[t])
        else:
            if c.fmt == "pkt":
                raise VerificationError("format", f"{op.where}: reads {what} as plain data, but it "
                                        "holds LL packets")
            w = c.writer
            if w >= 0 and w != t:
                if c.pending is not None:
                    raise VerificationError(
                        "race", f"{op.where}: reads {what}, written by a port-channel put of "
                        f"{self._name(w)} that no signal or flush on that channel has published")
                if self.vis[t, w] < c.wclock:
                    raise VerificationError(
                        "race", f"{op.where}: reads {what} before the write by {self._name(w)} is "
                        "ordered before it by a signal/wait (or barrier, semaphore) pair")
        if c.reads.get(t, -1) < clock:
            c.reads[t] = clock
        return c.value

    def _write(self, t: int, op: Op, d: Access, x: int, v: Value | None, clock: int,
               port: Chan | None) -> list[int]:
        c = self._cell(*self._key(d, x))
        what = f"rank {d.rank}'s '{d.buf}' chunk {(d.start + x) // self.plan.parts}"
        if not d.pkt and d.buf == "i" and not self.plan.inplace and self.plan.collective in \
                POSTCONDITIONS:
            raise VerificationError("input_write", f"{op.where}: writes {what}: the input of an "
                                    "out-of-place collective is the caller's send buffer")
        w = c.writer
        if w >= 0 and w != t and (c.pending is not None or self.exe[t, w] < c.wclock):
            raise VerificationError("race", f"{op.where}: overwrites {what}, written by "
                                    f"{self._name(w)}, without being ordered after that write")
        for u, rc in c.reads.items():
            if u != t and self.exe[t, u] < rc:
                raise VerificationError("race", f"{op.where}: overwrites {what} while "
                                        f"{self._name(u)} may still be reading it (no signal/wait, "
                                        "barrier or semaphore orders the read first)")
        c.value = v
        c.fmt = "pkt" if d.pkt else "plain"
        c.writer = t
        c.wclock = clock
        c.reads = {}
        c.pending = None
        c.wvis = self.vis[t].copy() if d.pkt else None
        if port is not None and not d.pkt:  # LL packets carry their own flag: no publish needed
            c.pending = (t, port)
            self.pending_port.setdefault((t, port), []).append(c)
            c.wvis = None
        if d.pkt:
            return self._wake(("pkt", *self._key(d, x)))
        return []

    def _name(self, t: int) -> str:
        r, tb = self.threads[t]
        return f"rank {r} threadblock {tb}"

    # ---------------------------------------------------------------------------- postcondition
    def _postcondition(self) -> bool:
        coll = self.plan.collective
        if coll not in POSTCONDITIONS:
            return False
        n, P, k = self.n, self.plan.parts, self._k()
        for g in self.plan.gpus:
            r = g.rank
            want_o = {"allgather": n * k, "reducescatter": k}.get(coll, n * k)
            want_i = {"allgather": k, "reducescatter": n * k}.get(coll, n * k)
            if g.chunks["o"] != want_o or g.chunks["i"] != want_i:
                raise VerificationError(
                    "postcondition", f"rank {r}: a {coll} over {n} ranks with {k} chunk(s) per rank "
                    f"needs {want_i} input and {want_o} output chunks, the plan declares "
                    f"{g.chunks['i']} and {g.chunks['o']}")
            for j in range(want_o):
                if coll == "allgather":
                    exp: Value = ((j % k, 1 << (j // k)),)
                elif coll == "allreduce":
                    exp = ((j, (1 << n) - 1),)
                elif coll == "reducescatter":
                    exp = ((r * k + j, (1 << n) - 1),)
                else:  # alltoall: o[q·k+x] at r = i[r·k+x] of q
                    exp = ((r * k + j % k, 1 << (j // k)),)
                for p in range(P):
                    c = self._cell(r, "o", j * P + p)
                    if c.value != exp or c.fmt != "plain":
                        got = describe(c.value) + (" (as LL packets)" if c.fmt == "pkt" else "")
                        raise VerificationError(
                            "postcondition", f"rank {r}: output chunk {j} holds {got}, a {coll} "
                            f"needs {describe(exp)}")
        return True


def verify_plan(plan: Plan) -> Report:
    """Run ``plan``; a :class:`Report` when it is correct, else VerificationError."""
    return Interpreter(plan).run()
