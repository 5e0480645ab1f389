"""The compiler's IRs: the Dag (per-rank send / receive / copy ops on buffer cells, built by
:mod:`.lower`, fusion marks on its ops), the Ir (instruction-level ops of one or more chunks, built
by :mod:`.aggregate`) and the threadblock being built (:class:`Tb`, filled by :mod:`.allocate`);
the cell encoding and the limits every pass shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...collectives import Collective

CELL = 1 << 24
"""A cell is ``buffer * CELL + offset`` with buffer 0 = ``i``, 1 = ``o``, 2 = ``s``."""
BUFFERS = "ios"
IN, OUT, SCRATCH = 0, 1, 2
MAX_COUNT = 71
"""cnt of one step: 1..71 (MSCCL_MAX_COUNT = 72, exclusive)."""
LOCAL_OPS = frozenset(("cpy", "re"))
"""Ops that neither send nor receive: placed in their anchor's block (``IOp.prev``)."""
MAX_REDUCE_FUSION = 16
"""Sources one fused ``re`` run may fold (``MSCCL_MAX_REDUCE_FUSION``, spec §4.1): a longer run
overflows the NVIDIA kernels' pointer array."""
INF = 1 << 60

OOP, INPLACE, BOTH = "outofplace", "inplace", "both"
MODES = (OOP, INPLACE, BOTH)
ALIASED_KINDS = ("allreduce", "broadcast", "reduce", "alltoall", "allgather", "reducescatter")
"""Collectives whose in-place aliasing the runtime defines (spec §3.4)."""


class Send:
    """Rank ``rank`` sends its current version of ``chunk`` to ``peer`` in ``step``."""

    __slots__ = ("absorbed", "chunk", "iop", "peer", "rank", "recv", "src", "step")

    def __init__(self, rank: int, step: int, peer: int, chunk: int, src: int) -> None:
        self.rank, self.step, self.peer, self.chunk, self.src = rank, step, peer, chunk, src
        self.recv: Recv | None = None
        self.absorbed = False
        """Fused into the receive that produced the value (its message leaves with that op)."""
        self.iop: IOp | None = None


class Recv:
    """Rank ``rank`` receives ``chunk`` from ``peer`` in ``step``; copy or reduce into ``dst``."""

    __slots__ = ("cands", "chunk", "dst", "fwd", "iop", "last", "nofuse", "operand", "peer", "rank",
                 "reduce", "send", "sole", "step", "store")

    def __init__(self, rank: int, step: int, peer: int, chunk: int, reduce: bool, operand: int,
                 dst: int, last: bool, sole: bool) -> None:
        self.rank, self.step, self.peer, self.chunk = rank, step, peer, chunk
        self.reduce, self.operand, self.dst = reduce, operand, dst
        self.last = last
        """The last of the step's writers of this slot: it completes the new version."""
        self.sole = sole
        """The new version's only use is one send in the next step (an rrs need not store it)."""
        self.send: Send | None = None
        self.cands: list[Send] = []
        """Sends of the new version in the next step (fusion candidates), by peer."""
        self.fwd: Send | None = None
        self.store = True
        self.nofuse = False
        self.iop: IOp | None = None


class Copy:
    """A local copy of ``chunk`` on ``rank`` at (``step``, ``phase``): initial (-1) or final (2)."""

    __slots__ = ("anchor", "chunk", "dst", "iop", "phase", "rank", "src", "step")

    def __init__(self, rank: int, step: int, phase: int, chunk: int, src: int, dst: int,
                 anchor: Send | Recv | Reduce | None) -> None:
        self.rank, self.step, self.phase, self.chunk = rank, step, phase, chunk
        self.src, self.dst, self.anchor = src, dst, anchor
        self.iop: IOp | None = None


class Reduce:
    """A local reduce on ``rank`` after ``step``'s receives: ``dst ⊕= srcs`` for ``chunk``.

    Made by ``lower(gather=True)`` where several ranks reduce into one chunk in one step: the first
    of them still arrives as a receive-reduce into ``dst``, the others land in scratch cells
    (``srcs``) through plain receives that all run at once, and this op folds them in (one ``re``
    run, which the runtime executes as one multi-source reduction). It is placed in the block of
    ``anchor``, one of those receives."""

    __slots__ = ("anchor", "chunk", "dst", "iop", "rank", "srcs", "step")

    def __init__(self, rank: int, step: int, chunk: int, dst: int, srcs: tuple[int, ...],
                 anchor: Recv) -> None:
        self.rank, self.step, self.chunk, self.dst, self.srcs = rank, step, chunk, dst, srcs
        self.anchor = anchor
        self.iop: IOp | None = None
        """The first ``re`` of the run (aggregate)."""


@dataclass
class Dag:
    """Per-rank ops of a schedule with their cells; fusion marks live on the ops."""

    collective: Collective
    mode: str
    num_steps: int
    sends: list[Send]
    recvs: list[Recv]
    copies: list[Copy]
    scratch: list[int]
    """Scratch cells used per rank."""
    alias: list[tuple[int, int, int]]
    """Per rank (from_buffer, to_buffer, offset shift) of the in-place aliasing, or (-1, -1, 0)."""
    reductions: list[Reduce] = field(default_factory=list)
    """Local multi-source reduces (``lower(gather=True)`` only)."""

def physical(alias: tuple[int, int, int], cell: int) -> int:
    """The cell's identity under the aliasing (the cell itself when nothing aliases)."""
    frm, to, shift = alias
    if cell // CELL == frm:
        return cell + (to - frm) * CELL + shift
    return cell


class IOp:
    """One instruction-level op (an MSCCL ``<step>`` before dependencies): a group of chunks."""

    __slots__ = ("chan", "chunks", "cnt", "deps", "done", "dst", "hasdep", "nxt", "ordinal", "phase",
                 "pos", "preds", "prev", "rank", "recvp", "sendp", "src", "step", "tb", "tbidx",
                 "typ")

    def __init__(self, rank: int, typ: str, step: int, phase: int, sendp: int, recvp: int, cnt: int,
                 src: int, dst: int, chunks: tuple[int, ...]) -> None:
        self.rank, self.typ, self.step, self.phase = rank, typ, step, phase
        self.sendp, self.recvp, self.cnt, self.src, self.dst = sendp, recvp, cnt, src, dst
        self.chunks = chunks
        self.prev: IOp | None = None     # the op whose message this op receives
        self.nxt: IOp | None = None      # the op that receives this op's message
        self.ordinal = -1
        self.preds: list[IOp] = []
        self.chan = 0
        self.tb: Tb | None = None
        self.tbidx = -1
        self.done = False
        self.deps: list[tuple[Tb, int]] = []
        self.pos = -1
        self.hasdep = 0


@dataclass
class Ir:
    collective: Collective
    num_steps: int
    chains: list[list[IOp]]
    """Routes: a head ``s`` followed by its receive ops (all fused but the last)."""
    copies: list[IOp]
    """Local ops: ``cpy`` and ``re`` (each placed in its anchor's block, ``prev``)."""
    ordered: list[IOp]
    """All ops in the global order (set by :func:`order`)."""


class Tb:
    """A threadblock being built: its peers, channel and ops in order."""

    __slots__ = ("chan", "id", "ops", "rank", "recv", "send")

    def __init__(self, rank: int, chan: int, send: int, recv: int) -> None:
        self.rank, self.chan, self.send, self.recv = rank, chan, send, recv
        self.ops: list[IOp] = []
        self.id = -1

    def sort_key(self, n: int) -> tuple[int, int, int]:
        return (self.chan, self.send if self.send >= 0 else n, self.recv if self.recv >= 0 else n)


class Graphs:
    """The op graphs one build makes (its :class:`Dag`, every :class:`Ir`), whose reference
    cycles :meth:`release` breaks once the build is over.

    Why: a build makes millions of linked objects (``prev``/``nxt``, a block's ops and each op's
    block, a send and its receive) with the cyclic collector paused
    (:func:`synth.emit.compile._build`); left to the collector, they are all traced in one
    collection when it is back on (2.8 s of a 21 s compile of dgx_a100 x 8's ``trees``, 4.2
    million objects). Without their cycles, reference counting frees them as the build lets go."""

    def __init__(self) -> None:
        self.dags: list[Dag] = []
        self.irs: list[Ir] = []

    def dag(self, dag: Dag) -> Dag:
        self.dags.append(dag)
        return dag

    def ir(self, ir: Ir) -> Ir:
        self.irs.append(ir)
        return ir

    def release(self) -> None:
        """Unlink every op of the graphs made (none may be used after). An Ir registered twice
        (a pass that returned the one it was given) is unlinked once, and its ``ordered`` is not
        walked: :func:`synth.emit.passes.order` fills it with the very ops of its chains and
        copies (on dgx_h100 x 64 ``hierarchical`` x4, 13 of 183 s under cProfile went here)."""
        seen: set[int] = set()
        for ir in self.irs:
            if id(ir) in seen:
                continue
            seen.add(id(ir))
            for ops in (*ir.chains, ir.copies):
                for op in ops:
                    op.prev = op.nxt = op.tb = None
                    op.preds = op.deps = []
        for dag in self.dags:
            for s in dag.sends:
                s.recv = s.iop = None
            for rv in dag.recvs:
                rv.send = rv.fwd = rv.iop = None
                rv.cands = []
            for x in (*dag.copies, *dag.reductions):
                x.anchor = x.iop = None
        self.dags.clear()
        self.irs.clear()
