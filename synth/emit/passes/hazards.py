"""The ``hazards`` pass: same-rank data dependencies (RAW, WAR, WAW) on physical cells."""

from __future__ import annotations

from .ir import CELL, IOp, Ir

_READS_SRC = frozenset(("s", "rrs", "rrc", "rrcs", "cpy"))
_WRITES_DST = frozenset(("r", "rcs", "rrc", "rrcs", "cpy"))


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
