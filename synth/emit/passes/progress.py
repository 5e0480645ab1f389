"""The ``progress`` pass: a sufficient deadlock-freedom check of the global order under the
runtime's FIFO model (spec §5.3), and the model's parameters (:func:`units_params`)."""

from __future__ import annotations

from collections import defaultdict, deque
from math import ceil

from .ir import MAX_COUNT, IOp, Ir, Tb


def progress(ir: Ir, max_count: int, capacity: int) -> list[IOp]:
    """Execute the global order abstractly; return the ops that could not run when their turn came.

    Each op runs atomically when its predecessor in its tb and its data predecessors are done, its
    incoming message is there and, for a send part, ``ceil(cnt / max_count)`` messages fit in the
    connection's FIFO of ``capacity`` messages. A plain send whose receiver (a plain receive) can
    run at that moment streams into it instead and needs no FIFO space. The check is sufficient:
    when it passes, this order is an execution of the program, so the runtime cannot deadlock.
    """
    occ: dict[tuple[int, int, int], int] = defaultdict(int)
    bad: list[IOp] = []
    for op in ir.ordered:
        op.done = False

    def ready(op: IOp) -> bool:
        if op.tbidx > 0 and not op.tb.ops[op.tbidx - 1].done:
            return False
        return all(p.done for p in op.preds)

    for op in ir.ordered:
        if op.done:
            continue
        ok = (op.tbidx == 0 or op.tb.ops[op.tbidx - 1].done) and \
            (not op.preds or all(p.done for p in op.preds))
        units = -(-op.cnt // max_count)
        if op.recvp >= 0 and not op.prev.done:
            ok = False
        paired = None
        if op.sendp >= 0:
            conn = (op.rank, op.sendp, op.chan)
            y = op.nxt
            if op.typ == "s" and y.sendp < 0 and not y.done and ready(y):
                paired = y
            elif occ[conn] + units > capacity:
                ok = False
        if not ok:
            bad.append(op)
        op.done = True
        if op.recvp >= 0:
            occ[(op.recvp, op.rank, op.chan)] -= units
        if op.sendp >= 0:
            if paired is not None:
                paired.done = True
            else:
                occ[(op.rank, op.sendp, op.chan)] += units
    return bad


def progress_any_order(ir: Ir, max_count: int, capacity: int) -> list[IOp]:
    """Like :func:`progress`, but not tied to the global order: any block whose next op can run
    runs it, until none can; returns, for each block that cannot finish, the op it is stuck at
    (empty: no deadlock).

    Blocks run their ops in order; an op runs when its predecessors are done, its incoming message
    was sent and, for a send part, ``ceil(cnt / max_count)`` messages fit in the connection's FIFO
    (a plain send streams into a plain receive that is its block's next op instead). Every wait is
    for something no other block can take away (each FIFO has one sending block), so when one
    interleaving finishes every fair one does. Blocks that share a send side and a receive side
    (:func:`pack`) need this: in the global order such a block's send can come while the FIFO
    holds messages its receiver drains only later in the same step, which :func:`progress`
    reports as blocked though the runtime only waits for that receiver."""
    for op in ir.ordered:
        op.done = False
    blocks: list[Tb] = []
    seen: set[int] = set()
    for op in ir.ordered:
        if id(op.tb) not in seen:
            seen.add(id(op.tb))
            blocks.append(op.tb)
    pos = {id(tb): 0 for tb in blocks}
    waiters: dict[int, list[Tb]] = defaultdict(list)
    for op in ir.ordered:
        for p in op.preds:
            waiters[id(p)].append(op.tb)
    occ: dict[tuple[int, int, int], int] = defaultdict(int)
    queue = deque(blocks)
    queued = set(seen)

    def wake(tb: Tb | None) -> None:
        if tb is not None and id(tb) not in queued:
            queued.add(id(tb))
            queue.append(tb)

    def head(tb: Tb) -> IOp | None:
        i = pos[id(tb)]
        return tb.ops[i] if i < len(tb.ops) else None

    def finish(op: IOp) -> None:
        op.done = True
        pos[id(op.tb)] += 1
        for tb in waiters.get(id(op), ()):
            wake(tb)
        if op.nxt is not None:
            wake(op.nxt.tb)
        if op.prev is not None and op.recvp >= 0:
            wake(op.prev.tb)
        nxt = head(op.tb)
        if nxt is not None and nxt.recvp >= 0 and nxt.prev is not None:
            wake(nxt.prev.tb)
        wake(op.tb)

    while queue:
        tb = queue.popleft()
        queued.discard(id(tb))
        op = head(tb)
        if op is None or not all(p.done for p in op.preds):
            continue
        if op.recvp >= 0 and not op.prev.done:
            continue
        units = -(-op.cnt // max_count)
        if op.sendp >= 0:
            conn = (op.rank, op.sendp, op.chan)
            y = op.nxt
            if occ[conn] + units <= capacity:
                occ[conn] += units
            elif op.typ == "s" and y.sendp < 0 and head(y.tb) is y and all(p.done for p in y.preds):
                finish(op)
                finish(y)
                continue
            else:
                continue
        if op.recvp >= 0:       # a streamed message finished with its send, above
            occ[(op.recvp, op.rank, op.chan)] -= units
        finish(op)
    return [op for tb in blocks if (op := head(tb)) is not None]


def units_params(proto: str, max_bytes: int, nchunksperloop: int, coll: str, profile: str
                 ) -> tuple[int, int]:
    """(M, capacity): chunks per message at ``max_bytes`` (1 if unbounded) and FIFO messages."""
    if proto == "Simple":
        eff = 512 * 1024 if profile in ("exec", "rccl") and coll in ("reduce", "broadcast") \
            else 2 * 1024 * 1024
    elif proto == "LL":
        eff = 32 * 1024
    else:
        eff = 576000
    if max_bytes <= 0:
        m = 1
    else:
        per_chunk = ceil(max_bytes / nchunksperloop)
        m = max(1, min(MAX_COUNT, eff // per_chunk))
    return m, (2 if proto == "Simple" else 8)
