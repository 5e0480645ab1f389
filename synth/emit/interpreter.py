"""Execute an MSCCL-IR :class:`Program` as the runtimes do, on symbolic data (spec §4, §5, §9).

Model (``docs/reference/msccl-xml-spec.md``):

* Every threadblock of every rank is a sequential program. Its steps are *folded* as the runtime
  folds them: a ``nop`` only adds its ``(depid, deps)`` to the wait set of the next non-nop step,
  and fusable ``re`` runs become one operation ``DST ⊕= SRC1 ⊕ SRC2 ⊕ ...``. A folded operation's
  step number is the position of its last XML step; if it has ``hasdep=1`` the block publishes that
  number in its flag when the operation completes. An operation starts only when, for every wait
  ``(d, k)``, block d's flag is ``>= k`` (the runtime's test is "≥", so a wait on a step with
  ``hasdep=0`` is only released by a later publishing step -- or never).
* Each (sender rank, receiver rank, channel) is a FIFO connection holding at most ``capacity``
  messages: ``NCCL_STEPS``=8 slots, one per message for LL/LL128 and four for Simple, so 8 and 2.
  A step with ``cnt=k`` moves ``ceil(k/M)`` messages, ``M`` = the runtime's maxAllowedCount at the
  file's ``maxBytes`` (§3.5; 1 when unbounded). A send-type unit needs a free slot, a receive-type
  unit a message, a fused unit (``rcs``/``rrs``/``rrcs``) both at once.
* Scheduling: a deterministic ready queue; each runnable block runs until it blocks, and a block
  is re-queued when the message, slot or flag it waits for appears. The system is determinate
  (§5.5), so one fair execution decides completion. When the queue is empty and some block has not
  finished, the run fails with reason ``deadlock`` naming every blocked block and what it waits for.
* Memory: per rank one array of cells covering ``i``, ``o`` and ``s`` with the aliasing of the mode
  (§3.4: in place, allgather's ``i[j]`` is ``o[r·k+j]``, reduce-scatter's ``o[j]`` is ``i[r·k+j]``,
  the others ``i[j] = o[j]``). Cells hold UNDEFINED or a set of contributions ``(j, rank)`` (see
  :mod:`.interp_semantics`). Failures: ``undefined_read`` (reading or reducing an UNDEFINED cell),
  ``double_count`` (a reduction of overlapping sets), ``input_write`` (writing the send buffer in an
  out-of-place run, or input cells outside the output in an in-place reduce-scatter),
  ``output_write`` (a non-root rank writing its output in an out-of-place reduce), ``overlap``
  (source and destination partially overlap after aliasing), ``unmatched`` (a message whose size
  differs from what the receiver expects, or messages left in a FIFO), ``postcondition``.
* Races (G2): happens-before is program order + dependency edges (the publishing operation → the
  released waiter) + message edges (send → matching receive), transitively (§5.5). Two tiers:
  (1) statically, per rank and mode, find the *shared* cells (two blocks access them, at least one
  writes) and check every conflicting pair of their accesses against the rank-local order (program
  order + dependency edges; the releasing operation of a wait is static); cells whose pairs are all
  ordered there cannot race. (2) The remaining cells -- ordered, if at all, only through messages
  via other ranks -- are checked during the run with vector clocks whose components are only their
  accessors (a program whose sharing is covered by dependencies pays nothing). Clocks travel with
  messages and flag snapshots; each such cell keeps its last write and the reads since (FastTrack);
  an access not ordered after a conflicting access of another block is reported as ``race``. This is
  exact for the model (no false positives, no misses) because the execution is determinate.

Simplifications (documented, deliberate): one abstract grid iteration with whole chunks (slices of
different iterations touch disjoint memory, §3.5); a unit of a fused operation is atomic at
message granularity; local operations (``cpy``, ``re``) are one unit; LL's and Simple's actual
slot accounting is summarised by the guaranteed capacities 8 and 2.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import collector, progress
from ..collectives import Collective
from ..errors import SynthError, VerificationError
from .interp_fold import (
    CPY,
    LL128_CHUNK_BYTES,
    LL_CHUNK_BYTES,
    MSCCL_CHUNKSTEPS,
    NCCL_STEPS,
    NEEDS_IN,
    NEEDS_OUT,
    RCS,
    RE,
    RRC,
    RRS,
    SIMPLE_CHUNK_BYTES,
    SIMPLE_ROOTED_CHUNK_BYTES,
    R,
    S,
    fifo_capacity,
    fold_block,
    fold_steps,
    max_allowed_count,
)
from .interp_races import RaceChecks
from .interp_semantics import Semantics, combine, describe, overlap, semantics
from .program import Program, Threadblock
from .xml_lint import lint_program

__all__ = ["LL128_CHUNK_BYTES", "LL_CHUNK_BYTES", "MODES", "MSCCL_CHUNKSTEPS", "NCCL_STEPS",
           "SIMPLE_CHUNK_BYTES", "SIMPLE_ROOTED_CHUNK_BYTES", "InterpretReport", "declared_modes",
           "fifo_capacity", "fold_block", "max_allowed_count", "run_program", "verify_file",
           "verify_program"]

MODES = ("inplace", "outofplace")


_READY, _BLOCKED_FLAG, _BLOCKED_IN, _BLOCKED_OUT, _DONE = range(5)





@dataclass
class InterpretReport:
    """The outcome of one successful run."""

    mode: str
    collective: str
    ngpus: int
    threadblocks: int
    operations: int
    messages: int
    max_count: int
    """M: chunks per message (the runtime's maxAllowedCount at maxBytes)."""
    fifo_capacity: int
    max_fifo_depth: int
    race_checked_cells: int
    """Cells accessed by two blocks of a rank with at least one write (checked for ordering)."""
    race_dynamic_cells: int
    """Of those, the cells not ordered by program order and dependencies alone, whose accesses
    were checked against message happens-before during the run (vector clocks)."""
    elapsed_s: float
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.collective} {self.mode}: ok ({self.ngpus} ranks, {self.threadblocks} blocks, "
                f"{self.operations} operations, {self.messages} messages, M={self.max_count}, "
                f"FIFO depth {self.max_fifo_depth}/{self.fifo_capacity}, "
                f"{self.race_checked_cells} shared cells ({self.race_dynamic_cells} checked dynamically), "
                f"{self.elapsed_s:.2f}s)")


class _Op:
    __slots__ = ("cnt", "code", "dst", "first", "hasdep", "instr", "nunits", "pos", "src", "srcs",
                 "waits")

    def __init__(self, code, src, dst, srcs, cnt, waits, pos, first, hasdep, nunits, instr):
        self.code = code
        self.src = src
        self.dst = dst
        self.srcs = srcs
        self.cnt = cnt
        self.waits = waits
        self.pos = pos
        self.first = first
        self.hasdep = hasdep
        self.nunits = nunits
        self.instr = instr


class _Conn:
    __slots__ = ("chan", "dst", "q", "receiver", "sender", "src")

    def __init__(self, src: int, dst: int, chan: int) -> None:
        self.q: deque = deque()
        self.src, self.dst, self.chan = src, dst, chan
        self.sender = -1
        self.receiver = -1




class _Machine(RaceChecks):
    """One run of a program in one mode."""

    def __init__(self, program: Program, mode: str, sem: Semantics, M: int, cap: int,
                 folds: dict[int, list[tuple]] | None = None) -> None:
        self.mode = mode
        self.sem = sem
        self.M = M
        self.cap = cap
        gpus = sorted(program.gpus, key=lambda g: g.id)
        self.gpus = gpus
        # memory, layout, protection
        self.bases: list[dict[str, int]] = []
        self.mem: list[list[Any]] = []
        self.prot: list[bytearray] = []
        self.regions: list[tuple[int, int, int, int, int, int]] = []
        kind = sem.kind
        for g in gpus:
            r = g.id
            ib, ob, sb, total = sem.layout(r, mode, g.s_chunks)
            ni, no = sem.in_size[r], sem.out_size[r]
            self.bases.append({"i": ib, "o": ob, "s": sb})
            self.regions.append((ib, ni, ob, no, sb, g.s_chunks))
            mem: list[Any] = [None] * total
            mem[ib:ib + len(sem.init[r])] = sem.init[r]
            self.mem.append(mem)
            prot = bytearray(total)
            if mode == "outofplace":
                prot[ib:ib + ni] = b"\x01" * ni
                if kind == "reduce" and r != sem.root:
                    prot[ob:ob + no] = b"\x02" * no
            elif kind == "reducescatter":
                prot[ib:ib + ni] = b"\x01" * ni
                prot[ob:ob + no] = bytes(no)
            self.prot.append(prot)
        # blocks
        self.block_rank: list[int] = []
        self.block_tb: list[Threadblock] = []
        self.rank_base: list[int] = []
        for g in gpus:
            self.rank_base.append(len(self.block_tb))
            for tb in sorted(g.tbs, key=lambda t: t.id):
                self.block_rank.append(g.id)
                self.block_tb.append(tb)
        nb = len(self.block_tb)
        self.nb = nb
        folds = folds if folds is not None else {}
        raw = []
        for b, tb in enumerate(self.block_tb):
            folded = folds.get(id(tb))
            if folded is None:
                folded = folds[id(tb)] = fold_steps(tb)
            raw.append(fold_block(tb, self.bases[self.block_rank[b]], M, folded))
        # publishing operations per block, for resolving waits to the releasing operation
        pub_pos: list[list[int]] = []
        pub_idx: list[list[int]] = []
        for ops in raw:
            pp, pi = [], []
            for idx, op in enumerate(ops):
                if op[8]:
                    pp.append(op[6])
                    pi.append(idx)
            pub_pos.append(pp)
            pub_idx.append(pi)
        self.needed_snaps: set[tuple[int, int]] = set()
        self.ops: list[list[_Op]] = []
        for b, ops in enumerate(raw):
            base = self.rank_base[self.block_rank[b]]
            lst = []
            for (code, src, dst, srcs, cnt, waits, pos, first, hasdep, nunits, instr) in ops:
                gw = []
                for d, k in waits:
                    gd = base + d
                    j = bisect_left(pub_pos[gd], k)
                    pub = pub_idx[gd][j] if j < len(pub_pos[gd]) else -1
                    if pub >= 0:
                        self.needed_snaps.add((gd, pub))
                    gw.append((gd, k, pub))
                lst.append(_Op(code, src, dst, srcs, cnt, tuple(gw), pos, first, hasdep, nunits,
                               instr))
            self.ops.append(lst)
        # connections
        self.conns: dict[tuple[int, int, int], _Conn] = {}
        self.out_conn: list[_Conn | None] = [None] * nb
        self.in_conn: list[_Conn | None] = [None] * nb
        for b, tb in enumerate(self.block_tb):
            r = self.block_rank[b]
            if tb.send >= 0:
                c = self._conn(r, tb.send, tb.chan)
                c.sender = b
                self.out_conn[b] = c
            if tb.recv >= 0:
                c = self._conn(tb.recv, r, tb.chan)
                c.receiver = b
                self.in_conn[b] = c
        self._find_conflicts()
        # dynamic state
        self.pc = [0] * nb
        self.unit = [0] * nb
        self.waited = [False] * nb
        self.status = [_READY] * nb
        self.flag = [-1] * nb
        self.flag_waiters: list[list[int]] = [[] for _ in range(nb)]
        self.snaps: dict[tuple[int, int], np.ndarray] = {}
        self.ready: deque[int] = deque(range(nb))
        self.n_ops = 0
        self.n_msgs = 0
        self.max_depth = 0

    def _conn(self, a: int, b: int, chan: int) -> _Conn:
        key = (a, b, chan)
        c = self.conns.get(key)
        if c is None:
            c = self.conns[key] = _Conn(a, b, chan)
        return c

    # ---------------------------------------------------------------- reporting helpers
    def _where(self, b: int, op: _Op | None = None) -> str:
        r = self.block_rank[b]
        tb = self.block_tb[b]
        if op is None:
            return f"rank {r} tb {tb.id}"
        steps = f"{op.first}" if op.first == op.pos else f"{op.first}-{op.pos}"
        return f"rank {r} tb {tb.id} step {steps} ({op.instr.type})"

    def _cell(self, r: int, x: int) -> str:
        ib, ni, ob, no, sb, ns = self.regions[r]
        names = []
        if ob <= x < ob + no:
            names.append(f"o[{x - ob}]")
        if ib <= x < ib + ni:
            names.append(f"i[{x - ib}]")
        if sb <= x < sb + ns:
            names.append(f"s[{x - sb}]")
        return " = ".join(names) if names else f"cell {x}"

    def _chunk(self, r: int, x: int) -> int:
        ib, ni, ob, no, sb, ns = self.regions[r]
        for base, size in ((ob, no), (ib, ni), (sb, ns)):
            if base <= x < base + size:
                return x - base
        return x

    def _fail(self, reason: str, b: int, op: _Op, msg: str, x: int | None = None) -> VerificationError:
        r = self.block_rank[b]
        return VerificationError(reason, f"{self._where(b, op)}: {msg} [{self.mode}]", step=op.first,
                                 rank=r, chunk=None if x is None else self._chunk(r, x))

    # ---------------------------------------------------------------- memory access
    def _read(self, b: int, op: _Op, mem: list, x: int, t: int) -> Any:
        v = mem[x]
        if v is None:
            r = self.block_rank[b]
            raise self._fail("undefined_read", b, op, f"reads {self._cell(r, x)}, which holds no "
                             "defined value (never written, or an input this rank does not have)", x)
        if self.clocks_on:
            sh = self.shadow[self.block_rank[b]].get(x)
            if sh is not None:
                self._check(b, op, sh, x, t, False)
        return v

    def _write(self, b: int, op: _Op, mem: list, prot: bytearray, x: int, v: Any, t: int) -> None:
        if prot[x]:
            r = self.block_rank[b]
            if prot[x] == 1:
                raise self._fail("input_write", b, op, f"writes {self._cell(r, x)}, part of the send "
                                 "buffer, which must be preserved", x)
            raise self._fail("output_write", b, op, f"writes {self._cell(r, x)} on a non-root rank of "
                             "reduce (its receive buffer may be unusable)", x)
        if self.clocks_on:
            sh = self.shadow[self.block_rank[b]].get(x)
            if sh is not None:
                self._check(b, op, sh, x, t, True)
        mem[x] = v

    # ---------------------------------------------------------------- execution
    def run(self) -> None:
        ready = self.ready
        status = self.status
        while ready:
            b = ready.popleft()
            if status[b] != _READY:
                continue
            self._run_block(b)
        unfinished = [b for b in range(self.nb) if status[b] != _DONE]
        if unfinished:
            self._deadlock(unfinished)
        for c in self.conns.values():
            if c.q:
                raise VerificationError("unmatched", f"{len(c.q)} message(s) left in the FIFO rank "
                                        f"{c.src} -> rank {c.dst} channel {c.chan} after every block "
                                        f"finished [{self.mode}]", rank=c.dst)

    def _blocked_on(self, b: int) -> tuple[str, int]:
        """Why an unfinished block waits, and the block it waits for (-1 if none can help)."""
        op = self.ops[b][self.pc[b]]
        st = self.status[b]
        if st == _BLOCKED_IN:
            c = self.in_conn[b]
            assert c is not None
            return f"waits for a message from rank {c.src} on channel {c.chan}", c.sender
        if st == _BLOCKED_OUT:
            c = self.out_conn[b]
            assert c is not None
            return (f"waits for space in the FIFO to rank {c.dst} on channel {c.chan} ({self.cap} "
                    "messages in flight)", c.receiver)
        pending = [(d, k) for d, k, _ in op.waits if self.flag[d] < k]
        text = ", ".join(f"tb {self.block_tb[d].id} step {k}" for d, k in pending)
        return f"waits for {text}", pending[0][0] if pending else -1

    def _deadlock(self, unfinished: list[int]) -> None:
        lines = [f"{self._where(b, self.ops[b][self.pc[b]])} {self._blocked_on(b)[0]}"
                 for b in unfinished]
        # follow the wait-for edges from the first blocked block: a cycle, or a finished block
        b, seen, path = unfinished[0], {}, []
        while b >= 0 and b not in seen and self.status[b] != _DONE:
            seen[b] = len(path)
            path.append(b)
            b = self._blocked_on(b)[1]
        if b >= 0 and b in seen:
            cyc = path[seen[b]:]
            head = ("wait-for cycle: " + " -> ".join(self._where(x, self.ops[x][self.pc[x]])
                                                        for x in cyc[:6])
                    + (" -> ..." if len(cyc) > 6 else "") + " -> back")
        elif b >= 0:
            head = (f"{self._where(path[-1], self.ops[path[-1]][self.pc[path[-1]]])} waits for "
                    f"{self._where(b)}, which has finished (unmatched messages or a dependency on a "
                    "step it never publishes)")
        else:
            head = "a dependency can never be satisfied"
        shown = "; ".join(lines[:8]) + (f"; ... and {len(lines) - 8} more" if len(lines) > 8 else "")
        b0 = path[0]
        raise VerificationError("deadlock", f"no threadblock can progress, {len(unfinished)} "
                                f"unfinished [{self.mode}, FIFO capacity {self.cap}, {self.M} "
                                f"chunk(s) per message]; {head}; blocked: {shown}",
                                rank=self.block_rank[b0], step=self.ops[b0][self.pc[b0]].first)

    def _wake(self, b: int) -> None:
        self.status[b] = _READY
        self.ready.append(b)

    def _run_block(self, b: int) -> None:
        ops = self.ops[b]
        nops = len(ops)
        pc = self.pc[b]
        unit = self.unit[b]
        r = self.block_rank[b]
        mem = self.mem[r]
        prot = self.prot[r]
        inc = self.in_conn[b]
        outc = self.out_conn[b]
        in_q = inc.q if inc is not None else None
        out_q = outc.q if outc is not None else None
        cap = self.cap
        M = self.M
        clocks = self.clocks_on
        comp = self.comp[b]
        vc = self.clk[b] if clocks else None
        status = self.status
        flag = self.flag
        read = self._read
        write = self._write
        t = int(vc[comp]) if clocks and comp >= 0 else 0
        while pc < nops:
            op = ops[pc]
            if not self.waited[b]:
                for d, k, _pub in op.waits:
                    if flag[d] < k:
                        self.flag_waiters[d].append(b)
                        status[b] = _BLOCKED_FLAG
                        self.pc[b], self.unit[b] = pc, unit
                        return
                if clocks:
                    for d, _k, pub in op.waits:
                        np.maximum(vc, self.snaps[(d, pub)], out=vc)
                self.waited[b] = True
            code = op.code
            if NEEDS_IN[code] and not in_q:
                status[b] = _BLOCKED_IN
                self.pc[b], self.unit[b] = pc, unit
                return
            if NEEDS_OUT[code] and len(out_q) >= cap:  # type: ignore[arg-type]
                status[b] = _BLOCKED_OUT
                self.pc[b], self.unit[b] = pc, unit
                return
            if clocks and comp >= 0:
                t += 1
                vc[comp] = t
            cnt = op.cnt
            if op.nunits == 1:
                c0, c1 = 0, cnt
            else:
                c0 = unit * M
                c1 = min(c0 + M, cnt)
            n = c1 - c0
            if code == S:
                src = op.src
                vals = [read(b, op, mem, src + x, t) for x in range(c0, c1)]
                self._push(outc, out_q, vals, n, vc)  # type: ignore[arg-type]
            elif code == CPY:
                src, dst = op.src, op.dst
                if src != dst and abs(src - dst) < cnt:
                    raise self._overlap(b, op, src, dst)
                vals = [read(b, op, mem, src + x, t) for x in range(c0, c1)]
                for i, x in enumerate(range(c0, c1)):
                    write(b, op, mem, prot, dst + x, vals[i], t)
            elif code == RE:
                dst = op.dst
                for s in op.srcs:
                    if s != dst and abs(s - dst) < cnt:
                        raise self._overlap(b, op, s, dst)
                for x in range(c0, c1):
                    v = read(b, op, mem, dst + x, t)
                    for s in op.srcs:
                        w = read(b, op, mem, s + x, t)
                        nv = combine(v, w)
                        if nv is None:
                            raise self._double(b, op, dst + x, v, w)
                        v = nv
                    write(b, op, mem, prot, dst + x, v, t)
            else:
                vals, mclk = self._pop(b, op, inc, in_q, n)  # type: ignore[arg-type]
                if clocks:
                    np.maximum(vc, mclk, out=vc)
                if code in (R, RCS):
                    dst = op.dst
                    for i, x in enumerate(range(c0, c1)):
                        write(b, op, mem, prot, dst + x, vals[i], t)
                    if code == RCS:
                        self._push(outc, out_q, vals, n, vc)  # type: ignore[arg-type]
                else:  # RRS, RRC, RRCS: IN[x] ⊕ SRC[x]
                    src = op.src
                    if code != RRS and src != op.dst and abs(src - op.dst) < cnt:
                        raise self._overlap(b, op, src, op.dst)
                    red = []
                    for i, x in enumerate(range(c0, c1)):
                        w = read(b, op, mem, src + x, t)
                        nv = combine(vals[i], w)
                        if nv is None:
                            raise self._double(b, op, src + x, vals[i], w)
                        red.append(nv)
                    if code != RRS:
                        dst = op.dst
                        for i, x in enumerate(range(c0, c1)):
                            write(b, op, mem, prot, dst + x, red[i], t)
                    if code != RRC:
                        self._push(outc, out_q, red, n, vc)  # type: ignore[arg-type]
            unit += 1
            if unit >= op.nunits:
                self.n_ops += 1
                if op.hasdep:
                    flag[b] = op.pos
                    if clocks and (b, pc) in self.needed_snaps:
                        self.snaps[(b, pc)] = vc.copy()  # type: ignore[union-attr]
                    waiters = self.flag_waiters[b]
                    if waiters:
                        for w in waiters:
                            if status[w] == _BLOCKED_FLAG:
                                self._wake(w)
                        waiters.clear()
                pc += 1
                unit = 0
                self.waited[b] = False
        self.pc[b], self.unit[b] = pc, unit
        status[b] = _DONE

    def _push(self, conn: _Conn, q: deque, vals: list, n: int, vc) -> None:
        q.append((vals, n, vc.copy() if vc is not None else None))
        self.n_msgs += 1
        if len(q) > self.max_depth:
            self.max_depth = len(q)
        rcv = conn.receiver
        if rcv >= 0 and self.status[rcv] == _BLOCKED_IN:
            self._wake(rcv)

    def _pop(self, b: int, op: _Op, conn: _Conn, q: deque, n: int):
        vals, m, clk = q.popleft()
        if m != n:
            raise self._fail("unmatched", b, op, f"receives a message of {m} chunk(s) from rank "
                             f"{conn.src} on channel {conn.chan} but expects {n} (sender and "
                             "receiver cnt differ)")
        snd = conn.sender
        if snd >= 0 and self.status[snd] == _BLOCKED_OUT:
            self._wake(snd)
        return vals, clk

    def _overlap(self, b: int, op: _Op, s: int, d: int) -> VerificationError:
        r = self.block_rank[b]
        return self._fail("overlap", b, op, f"source {self._cell(r, s)}.. and destination "
                          f"{self._cell(r, d)}.. of {op.cnt} chunks partially overlap after "
                          "aliasing", d)

    def _double(self, b: int, op: _Op, x: int, v, w) -> VerificationError:
        r = self.block_rank[b]
        return self._fail("double_count", b, op, f"reducing into/with {self._cell(r, x)} combines "
                          f"{describe(v)} with {describe(w)}: {overlap(v, w)} would be counted "
                          "twice", x)

    # ---------------------------------------------------------------- postcondition
    def check_postcondition(self) -> None:
        sem = self.sem
        for g in self.gpus:
            r = g.id
            mem = self.mem[r]
            ob = self.bases[r]["o"]
            for j, acc in enumerate(sem.expect[r]):
                if acc is None:
                    continue
                v = mem[ob + j]
                if v not in acc:
                    want = " or ".join(describe(a) for a in acc[:3])
                    alias = self._cell(r, ob + j)
                    raise VerificationError(
                        "postcondition", f"{sem.name} [{self.mode}]: rank {r} output chunk "
                        f"{alias} holds {describe(v)}, expected {want}", rank=r, chunk=j)


@progress.spanned("interpret")
def run_program(program: Program, *, mode: str = "inplace", collective: Collective | None = None,
                profile: str = "exec", max_count: int | None = None,
                capacity: int | None = None, check: bool = True,
                folds: dict[int, list[tuple]] | None = None) -> InterpretReport:
    """Execute ``program`` in ``mode`` and check the postcondition; VerificationError on failure.

    ``collective`` gives the postcondition; by default it is derived from ``coll``, ``ngpus`` and
    ``nchunksperloop`` (§8; the root of broadcast/reduce is the only rank that never receives /
    sends, else 0). ``max_count`` (M) and ``capacity`` override the values derived from the file's
    ``proto`` and ``maxBytes`` for ``profile``. Structural rules are checked first (without the
    profile's numeric limits; :func:`verify_program` checks those too) unless ``check`` is False
    (for a program already linted: the run relies on those rules). ``folds``: the blocks' folded
    steps by ``id`` of the block (:func:`synth.emit.interp_fold.fold_steps`), filled and shared
    by the modes of one :func:`verify_program`.
    """
    if mode not in MODES:
        raise SynthError(f"unknown mode '{mode}' (known: {', '.join(MODES)})")
    t0 = time.perf_counter()
    warnings = lint_program(program, None) if check else []
    sem = semantics(program, collective)
    M = max_count if max_count is not None else max_allowed_count(program, profile)
    cap = capacity if capacity is not None else fifo_capacity(program)
    if M < 1 or cap < 1:
        raise SynthError("max_count and capacity must be at least 1")
    with collector.paused():    # millions of live objects, no cyclic garbage (synth.collector)
        mach = _Machine(program, mode, sem, M, cap, folds)
        mach.run()
        mach.check_postcondition()
    return InterpretReport(mode=mode, collective=sem.name, ngpus=program.ngpus,
                           threadblocks=mach.nb, operations=mach.n_ops, messages=mach.n_msgs,
                           max_count=M, fifo_capacity=cap, max_fifo_depth=mach.max_depth,
                           race_checked_cells=mach.race_cells,
                           race_dynamic_cells=mach.dynamic_cells,
                           elapsed_s=time.perf_counter() - t0, warnings=warnings)


def declared_modes(program: Program) -> tuple[str, ...]:
    return tuple(m for m, on in (("inplace", program.inplace), ("outofplace", program.outofplace))
                 if on)


@progress.spanned("interpret")
def verify_program(program: Program, modes: tuple[str, ...] = MODES, *,
                   collective: Collective | None = None, profile: str = "exec",
                   max_count: int | None = None, capacity: int | None = None
                   ) -> list[InterpretReport]:
    """Lint ``program`` for ``profile`` and run it in every mode of ``modes`` the file declares."""
    for m in modes:
        if m not in MODES:
            raise SynthError(f"unknown mode '{m}' (known: {', '.join(MODES)})")
    warnings = lint_program(program, profile)
    todo = [m for m in modes if m in declared_modes(program)]
    if not todo:
        raise VerificationError("header", f"the program declares inplace={program.inplace} "
                                f"outofplace={program.outofplace}: none of the requested modes "
                                f"({', '.join(modes)}) applies")
    reports = []
    folds: dict[int, list[tuple]] = {}     # the program's blocks stay alive: ids are stable
    for m in todo:
        rep = run_program(program, mode=m, collective=collective, profile=profile,
                          max_count=max_count, capacity=capacity, check=False, folds=folds)
        rep.warnings = list(warnings)
        reports.append(rep)
    return reports


def verify_file(path, profile: str = "exec", modes: tuple[str, ...] = MODES, *,
                collective: Collective | None = None) -> list[InterpretReport]:
    """Parse an algorithm file as ``profile`` and verify it in every declared mode."""
    from .xml_parse import read_program
    return verify_program(read_program(path, profile), modes, collective=collective, profile=profile)
