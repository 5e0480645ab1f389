"""The ``order`` pass: one global, FIFO-consistent order of every op; threadblocks follow it."""

from __future__ import annotations

from .ir import IOp, Ir


def order(ir: Ir) -> None:
    """Give every op its place in one global order (``ordinal``); threadblocks follow it.

    Per step: initial copies, plain sends (by rank, peer, cell), receive-type ops (by rank, sending
    peer, then the order of the ops that sent them), gathered reductions, final copies. Messages
    of one connection are therefore sent and received in the same order: a fused op's message
    leaves in the phase after its receive, before the next step's plain sends, and is received in
    the next step.
    """
    T = max(ir.num_steps, 1)
    buckets: list[list[list[IOp]]] = [[[], [], [], []] for _ in range(T)]
    for chain in ir.chains:
        for op in chain:
            buckets[op.step][op.phase + 1].append(op)
    for op in ir.copies:
        buckets[op.step][op.phase + 1].append(op)
    ordered: list[IOp] = []
    for t in range(T):
        pre, snd, rcv, post = buckets[t]
        pre.sort(key=lambda o: (o.rank, o.src, o.dst))
        snd.sort(key=lambda o: (o.rank, o.sendp, o.src))
        post.sort(key=_post_key)
        for group in (pre, snd):
            for op in group:
                op.ordinal = len(ordered)
                ordered.append(op)
        rcv.sort(key=lambda o: (o.rank, o.recvp, o.prev.ordinal))
        for op in rcv:
            op.ordinal = len(ordered)
            ordered.append(op)
        for op in post:
            op.ordinal = len(ordered)
            ordered.append(op)
    ir.ordered = ordered


def _post_key(op: IOp) -> tuple[int, int, int, int]:
    """After a step's receives: its gathered reductions (each ``re`` run contiguous, sources in
    order, so a block holds the run unbroken and the runtime folds it), then its final copies
    (which may read what a reduction wrote)."""
    if op.typ == "re":
        return (0, op.rank, op.dst, op.src)
    return (1, op.rank, op.src, op.dst)
