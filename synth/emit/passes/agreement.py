"""The ``agreement`` pass: fused ops whose two message ends could not name the same transfer
(spec E2) are found so the driver splits them again."""

from __future__ import annotations

from itertools import pairwise

from .ir import IOp, Ir

_COPY_RECEIVES = frozenset(("r", "rcs"))


def disagreements(ir: Ir) -> list[IOp]:
    """Fused ops to split so that both ends of every copy message name the same location.

    The runtimes read only the sender's source and the receiver's destination, but checkers pair
    a message's two ends and compare all their fields (spec E2, the VERIFIER's rule): a receive
    (``r`` or ``rcs``) must carry the ``srcbuf/srcoff/dstbuf/dstoff/cnt`` of the step that sent
    the message, and an ``rcs`` names one location for both (``src == dst``) because it forwards
    from where it stored. A message carries its sender's location and the landing location: for
    ``s`` its ``src`` and ``dst``; a forwarding op (``rcs``, ``rrs``, ``rrcs``) sends the value it
    stored (``rrs``: would store) at its ``dst``, so its messages carry ``dst`` twice (the
    VERIFIER forwards an ``rcs`` message exactly so). An ``rcs`` therefore agrees only when the
    incoming message comes from a cell of its own name, and a copy receive behind a forwarding op
    only when it lands where that op stored. Reduce receives are outside the rule: their ``src``
    is the local operand the runtime reads (spec §4.1). Splitting an op turns its forward into a
    plain send from its own cell, which agrees by construction, so one pass finds every op to
    split.
    """
    out: dict[int, IOp] = {}
    for chain in ir.chains:
        for prev, op in pairwise(chain):
            if op.typ not in _COPY_RECEIVES:
                continue
            if prev.typ == "s":
                if op.typ == "rcs" and prev.src != op.dst:
                    out[id(op)] = op              # the message's source is not the rcs's cell
            elif prev.dst != op.dst:
                out[id(prev)] = prev              # a forward lands elsewhere than it stored
                if op.typ == "rcs":
                    out[id(op)] = op              # ... and then comes from another cell
    return list(out.values())
