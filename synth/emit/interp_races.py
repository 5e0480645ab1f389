"""Race detection for the XML interpreter (spec §5.5, G2): which cells two blocks of a rank touch
unordered, decided statically where the rank's own order settles it and during the run with
vector clocks elsewhere.

:class:`RaceChecks` is a part of the interpreter's machine (:class:`synth.emit.interpreter.
_Machine` derives from it): it reads the machine's ranks (``gpus``, ``rank_base``, ``nb``), its
folded operations (``ops``), memory (``mem``) and block names (``block_tb``), and reports a race
through the machine's ``_fail`` and ``_cell``. It sets ``race_cells``, ``dynamic_cells``,
``shadow`` (per rank, the cells checked during the run: last write and reads since), ``comp``
(each block's vector-clock component, -1 if none), ``comp_block``, ``clocks_on`` and ``clk``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .interp_fold import RE, USES_DST, USES_SRC


class RaceChecks:
    """The interpreter machine's race checks (module docstring: what it needs, what it sets)."""

    gpus: list[Any]
    rank_base: list[int]
    nb: int
    ops: list[list[Any]]
    mem: list[list[Any]]
    block_tb: list[Any]
    block_rank: list[int]

    def _op_cells(self, op: Any) -> tuple[list[range], range | None]:
        """(cells read, cells written) by one operation."""
        code, cnt = op.code, op.cnt
        reads: list[range] = []
        if USES_SRC[code]:
            reads.append(range(op.src, op.src + cnt))
            if op.srcs:
                reads.extend(range(s, s + cnt) for s in op.srcs[1:])
        writes = range(op.dst, op.dst + cnt) if USES_DST[code] else None
        if code == RE:
            reads.append(writes)  # type: ignore[arg-type]
        return reads, writes

    def _find_conflicts(self) -> None:
        """Decide which cells need a dynamic race check, and give their accessors clock components.

        1. Shared cells: accessed by two blocks of a rank, at least one access a write.
        2. A pair of conflicting accesses is *statically* ordered when program order and dependency
           edges of that rank alone order the two operations (the releasing operation of a wait is
           known statically: the first ``hasdep=1`` operation at or after the awaited step). Cells
           whose conflicting pairs are all statically ordered cannot race.
        3. The remaining cells (ordered, if at all, only through messages via other ranks) are
           checked during the run with vector clocks restricted to their accessors.
        """
        nranks = len(self.gpus)
        cand: list[set[int]] = []
        for r in range(nranks):
            cand.append(self._shared_cells(r))
        self.race_cells = sum(len(c) for c in cand)
        self.shadow: list[dict[int, list]] = [{} for _ in range(nranks)]
        relevant: set[int] = set()
        for r in range(nranks):
            if not cand[r]:
                continue
            acc: dict[int, dict[tuple[int, int], bool]] = {x: {} for x in cand[r]}
            lo = self.rank_base[r]
            hi = self.rank_base[r + 1] if r + 1 < nranks else self.nb
            for b in range(lo, hi):
                for i, op in enumerate(self.ops[b]):
                    reads, writes = self._op_cells(op)
                    for rg in reads:
                        for x in rg:
                            a = acc.get(x)
                            if a is not None and (b, i) not in a:
                                a[(b, i)] = False
                    if writes is not None:
                        for x in writes:
                            a = acc.get(x)
                            if a is not None:
                                a[(b, i)] = True
            order = self._local_order(lo, hi)
            for x, a in acc.items():
                if not self._statically_ordered(a, order, lo):
                    self.shadow[r][x] = [-1, 0, -1, -1, {}]  # last write: comp, time, block, pos
                    relevant.update(b for b, _ in a)
        self.dynamic_cells = sum(len(sh) for sh in self.shadow)
        self.comp = [-1] * self.nb
        self.comp_block: list[int] = []
        for b in sorted(relevant):
            self.comp[b] = len(self.comp_block)
            self.comp_block.append(b)
        nc = len(self.comp_block)
        self.clocks_on = nc > 0
        self.clk = [np.zeros(nc, dtype=np.int64) for _ in range(self.nb)] if nc else []

    def _shared_cells(self, r: int) -> set[int]:
        lo = self.rank_base[r]
        hi = self.rank_base[r + 1] if r + 1 < len(self.gpus) else self.nb
        if hi - lo < 2:
            return set()
        size = len(self.mem[r])
        owner = [-1] * size
        multi = bytearray(size)
        written = bytearray(size)
        for b in range(lo, hi):
            for op in self.ops[b]:
                reads, writes = self._op_cells(op)
                if writes is not None:
                    reads = [*reads, writes]
                    for x in writes:
                        written[x] = 1
                for rg in reads:
                    for x in rg:
                        o = owner[x]
                        if o == -1:
                            owner[x] = b
                        elif o != b:
                            multi[x] = 1
        return {x for x in range(size) if multi[x] and written[x]}

    _LOCAL_ORDER_BUDGET = 8_000_000

    def _local_order(self, lo: int, hi: int) -> list[np.ndarray] | None:
        """Per operation of each block of one rank, the latest operation of every block of that
        rank that precedes it through program order and dependency edges (None if too large)."""
        ntb = hi - lo
        nops = sum(len(self.ops[b]) for b in range(lo, hi))
        if ntb * nops > self._LOCAL_ORDER_BUDGET:
            return None
        lc = [np.full((len(self.ops[b]), ntb), -1, dtype=np.int32) for b in range(lo, hi)]
        ptr = [0] * ntb
        waiting: dict[tuple[int, int], list[int]] = {}
        stack = list(range(ntb))
        while stack:
            lb = stack.pop()
            ops = self.ops[lo + lb]
            rows = lc[lb]
            while ptr[lb] < len(ops):
                i = ptr[lb]
                blocked = False
                for gd, _k, pub in ops[i].waits:
                    d = gd - lo
                    if pub >= 0 and ptr[d] <= pub:
                        waiting.setdefault((d, pub), []).append(lb)
                        blocked = True
                        break
                if blocked:
                    break
                row = rows[i]
                if i:
                    row[:] = rows[i - 1]
                for gd, _k, pub in ops[i].waits:
                    if pub >= 0:
                        np.maximum(row, lc[gd - lo][pub], out=row)
                row[lb] = i
                ptr[lb] = i + 1
                stack.extend(waiting.pop((lb, i), ()))
        # operations in a dependency cycle are never processed (rows stay -1): unordered
        return lc

    _STATIC_PAIRS = 4096
    """Most (write, access) pairs of one cell checked statically; a cell with more is checked
    during the run (its accessors get clock components)."""

    @classmethod
    def _statically_ordered(cls, acc: dict[tuple[int, int], bool], order, lo: int) -> bool:
        """Whether every conflicting pair of accesses (two blocks, one a write) is ordered by the
        rank's program order and dependency edges. Only pairs with a write are looked at, so a
        cell written once and read by every peer's send block (an in-place allgather's own chunk
        on a 512-rank machine: 70 readers) costs 70 checks, not 70²."""
        if order is None:
            return False
        writes = [(b, i) for (b, i), w in acc.items() if w]
        if len(writes) * len(acc) > cls._STATIC_PAIRS:
            return False
        checked: set[tuple[int, int]] = set()      # writes whose pairs are all checked
        for b1, i1 in writes:
            for (b2, i2), w2 in acc.items():
                if b1 == b2 or (w2 and (b2, i2) in checked):
                    continue
                if order[b2 - lo][i2][b1 - lo] >= i1 or order[b1 - lo][i1][b2 - lo] >= i2:
                    continue
                return False
            checked.add((b1, i1))
        return True

    def _check(self, b: int, op: Any, sh: list, x: int, t: int, write: bool) -> None:
        cb = self.comp[b]
        vc = self.clk[b]
        wc, wt, wb, wpos, reads = sh
        if wc >= 0 and wc != cb and vc[wc] < wt:
            self._race(b, op, x, wb, wpos, "write", "write" if write else "read")
        if write:
            for rc, (rt, rb, rpos) in reads.items():
                if rc != cb and vc[rc] < rt:
                    self._race(b, op, x, rb, rpos, "read", "write")
            sh[0], sh[1], sh[2], sh[3] = cb, t, b, op.first
            reads.clear()
        else:
            reads[cb] = (t, b, op.first)

    def _race(self, b: int, op: Any, x: int, ob: int, opos: int, okind: str, kind: str) -> None:
        r = self.block_rank[b]
        other = self.block_tb[ob]
        raise self._fail("race", b, op, f"{kind}s {self._cell(r, x)}, which tb {other.id} step {opos} "
                         f"{'wrote' if okind == 'write' else 'read'}, with no dependency or message "
                         "chain ordering the two (add a depid/deps on a hasdep=1 step)", x)
