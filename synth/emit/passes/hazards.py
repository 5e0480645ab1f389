"""The ``hazards`` pass: same-rank data dependencies (RAW, WAR, WAW) on physical cells."""

from __future__ import annotations

from .ir import CELL, IOp, Ir

_READS_SRC = frozenset(("s", "rrs", "rrc", "rrcs", "cpy", "re"))
_WRITES_DST = frozenset(("r", "rcs", "rrc", "rrcs", "cpy", "re"))
"""``re`` also reads its destination; its write orders it after that cell's last writer."""


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
    _wait_once(ir)


def _wait_once(ir: Ir) -> None:
    """A run of ``re`` ops into one cell (contiguous in the order, :func:`synth.emit.passes.order`)
    waits for everything it reads at its first op: the runtime folds the run into one reduction
    only when no later member carries a dependency (spec §4.1, §5.4), and the dependencies pass
    drops a later member's waits once the first covers them."""
    head: IOp | None = None
    for op in ir.ordered:
        if op.typ != "re":
            head = None
            continue
        if head is None or head.rank != op.rank or head.dst != op.dst or head.step != op.step:
            head = op
            continue
        extra = {p.ordinal: p for p in op.preds if p.typ != "re" or p.dst != head.dst}
        if extra:
            merged = {p.ordinal: p for p in head.preds}
            merged.update(extra)
            head.preds = [merged[k] for k in sorted(merged)]
