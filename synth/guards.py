"""Size guards: estimate a request before an expensive phase and refuse, in seconds, what cannot fit.

Checks, each before the phase it protects:

* :func:`check_request` -- before any encoding runs, from the request alone (collective, ranks,
  chunks per rank): every schedule of the collective moves at least :func:`min_transfers` chunks,
  so its memory has a floor, and when XML is asked for every chunk of the buffer must be
  addressable (spec §6: offsets are int16, at most 32767). A request over either is refused with
  the estimate and the fix named.
* :func:`check_encoding` -- before each encoding starts, with explicit chunks: its schedule's
  memory floor and, for the solver encodings (smt, milp), their model's (chunk, link) variables.
  Under ``auto`` an encoding that does not fit steps aside (the run says so).
* :func:`check_schedule` -- after an encoding, before verification, costing and compilation: the
  candidate's exact transfer count against the memory budget and, for XML, an estimate of the
  program's per-rank node count (receives and non-fusable sends after aggregation, one node per
  peer's threadblock) against the tokenizer limit, and the same count summed over every rank
  against the memory budget (:data:`XML_BYTES_PER_STEP`) and :data:`MAX_XML_STEPS` (the work of
  compiling the program and proving it in the interpreter: a 512-rank tree program would take
  tens of minutes). ``synth solve`` passes over a
  candidate that does not fit (and says so); when none fits it refuses, naming ``--no-xml``.

Memory figures are per transfer of a schedule, measured by ``benchmarks/guards_memory.py``
(peak RSS of ``synth solve --algo ring`` on dgx1 across chunk counts, ``results/guards_memory.json``):
about 0.3 KB per transfer to build, verify and cost a schedule (0.3 to 0.7 KB over two runs: the
allocator's arenas make small runs noisy), about 1.7 KB per transfer in all when it is also
compiled to XML and run in the interpreter. The guards use rounded-down figures, so they refuse
only what is over budget with a margin.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from .errors import SynthError

MB = 2**20
GB = 2**30

SCHEDULE_BYTES_PER_TRANSFER = 300
"""Build + verify + cost a schedule (measured 323 B per transfer; results/guards_memory.json)."""
XML_BYTES_PER_TRANSFER = 1000
"""On top: compile to MSCCL-IR + parse + interpreter (measured 1698 B per transfer in all)."""
BASE_BYTES = 64 * MB
"""Python with synth and its libraries imported (measured 54 to 94 MB)."""

MAX_NODES = 4095
"""Tokenizer nodes per rank: 1 algo + ngpus gpu + tbs + steps (spec §6 ``MAX_NODES``=4096, one
kept for the root)."""
MAX_COUNT = 71
"""``cnt`` of one step (spec §6 ``MSCCL_MAX_COUNT`` = 72, exclusive)."""
MAX_STEPS = 64
"""Steps per threadblock, nops included, of the exec runtime (spec §6 ``MSCCL_MAX_NUM_STEPS``, its
default build): the profile programs are written for unless told otherwise."""
MAX_OFFSET = 32767
"""``srcoff``/``dstoff`` are int16 (spec §6 field widths): no addressed chunk index above this."""
XML_BYTES_PER_STEP = 10_000
"""Compile + parse + interpreter, per estimated program step over all ranks
(:attr:`XmlEstimate.steps`): measured 13.7 KB (1.56 GB over 113,568 estimated steps,
``trees_striped`` on dgx_h100 x 8 allgather, ``emit_verified_xml``), rounded down. At hundreds of
ranks a program has far more steps per transfer than the ring :data:`XML_BYTES_PER_TRANSFER` was
measured on, so :func:`check_schedule` asks both."""
MAX_XML_STEPS = 300_000
"""Estimated MSCCL-IR steps, over all ranks (:attr:`XmlEstimate.steps`), that one candidate's
program may have: beyond it the compile and the interpreter's proof take longer than a run should
spend on one file, so the candidate steps aside before anything is compiled. A count, not a clock,
so every machine decides alike. Measured on the project's shared 2-core machine (compile, parse and
interpreter in every mode, ``emit_verified_xml``): ``trees_striped`` on dgx_h100 x 8 allgather,
113,568 estimated steps (130,048 compiled), 152 s and 1.6 GB, about 1.3 ms and 14 KB a step; so
this budget is about 7 minutes and 4 GB. It holds any 64-rank program within the tokenizer's
node limit and a 512-rank ring (about 263,000); dgx_h100 x 64's ``trees_striped`` (980,288
estimated, so about 22 minutes) is refused in the seconds its estimate takes."""
XML_SECONDS_PER_STEP = 0.0013
"""Compile and prove one estimated step, as measured for :data:`MAX_XML_STEPS` (only to word a
refusal: the decision is the count)."""
DEFAULT_MEMORY_FRACTION = 0.5
"""``--max-memory`` defaults to this share of the machine's physical memory."""


class TooBig(SynthError):
    """A request or candidate that exceeds the memory budget or a runtime limit (exit code 2)."""


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (None where ``os.sysconf`` cannot tell)."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def default_max_memory() -> int:
    """Half the machine's RAM (8 GiB where it cannot be read)."""
    total = physical_memory()
    return int(total * DEFAULT_MEMORY_FRACTION) if total else 8 * GB


ADDRESS_SLACK = 4 * GB
"""Address space the backstop allows above ``--max-memory``: what the interpreter, NumPy, the
solver libraries and thread stacks map without using (measured: a `synth solve` process maps
about 1.5 GB of address space before its first allocation of its own)."""


def memory_backstop(max_memory: int) -> int | None:
    """Cap this process's address space at ``max_memory`` + :data:`ADDRESS_SLACK`
    (``RLIMIT_AS``), so an allocation the per-stage estimates missed fails as a MemoryError
    (which the command line reports in one line, naming the stage) instead of driving the
    machine into swap or the OOM killer. Only ever lowers the limit; returns it (None where the
    platform has no such limit)."""
    try:
        import resource
    except ImportError:     # not POSIX
        return None
    limit = int(max_memory + ADDRESS_SLACK)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        return int(soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, int(hard))
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        return None
    return limit


def parse_memory(text: str | None) -> int:
    """``--max-memory``: ``8GB``, ``512MB``, ``1.5GB`` (binary units); None: the default."""
    if text is None:
        return default_max_memory()
    from .sizes import parse_size

    value = parse_size(text, most=None)  # host memory, not a message size
    if value < 64 * MB:
        raise SynthError(f"--max-memory {text} is below 64MB; synth alone needs about 100MB")
    return value


def fmt_bytes(nbytes: float) -> str:
    return f"{nbytes / GB:.1f} GB" if nbytes >= GB else f"{nbytes / MB:.0f} MB"


def _over_memory(need: int, budget: Budget) -> str:
    """``about 12.0 GB with XML against --max-memory 8.0 GB``: a memory refusal's figures."""
    return (f"about {fmt_bytes(need)} {'with XML ' if budget.xml_profile else ''}against "
            f"--max-memory {fmt_bytes(budget.max_memory)}")


@dataclass(frozen=True)
class Budget:
    """What a run may use: memory, and (when XML is wanted) the runtime profile and instances."""

    max_memory: int
    xml_profile: str | None = "exec"
    """None: no XML is written (``--no-xml``)."""
    instances: int = 1
    max_threadblocks: int | None = None
    """Threadblocks per rank the XML may use (``--max-threadblocks``); None: the runtime's limit."""
    max_xml_steps: int | None = MAX_XML_STEPS
    """Estimated steps over all ranks one candidate's XML may have (:data:`MAX_XML_STEPS`);
    None: no such limit."""

    @classmethod
    def of(cls, max_memory: str | None, xml: Any = None, max_xml_steps: int | None = None
           ) -> Budget:
        """From ``--max-memory``, the solve's XmlOptions (None: ``--no-xml``) and
        ``--max-xml-steps`` (None: :data:`MAX_XML_STEPS`; 0: no limit)."""
        if max_xml_steps is not None and max_xml_steps < 0:
            raise SynthError(f"--max-xml-steps must be 0 (no limit) or more, got {max_xml_steps}")
        return cls(parse_memory(max_memory), None if xml is None else xml.profile,
                   1 if xml is None else xml.instances,
                   None if xml is None else getattr(xml, "max_threadblocks", None),
                   MAX_XML_STEPS if max_xml_steps is None else max_xml_steps or None)

    def memory_per_transfer(self) -> int:
        return SCHEDULE_BYTES_PER_TRANSFER + (XML_BYTES_PER_TRANSFER if self.xml_profile else 0)


# ------------------------------------------------------------------------------------- request
def min_transfers(kind: str, n: int, chunks: int) -> int:
    """Chunk transfers every schedule of a standard collective needs (each missing chunk, or each
    reduction partner, arrives at least once)."""
    if kind in ("allgather", "reducescatter", "alltoall"):
        return n * (n - 1) * chunks
    if kind == "allreduce":
        return 2 * n * (n - 1) * chunks
    return (n - 1) * chunks        # broadcast, reduce, gather, scatter (root to/from each rank)


def buffer_chunks(kind: str, n: int, chunks: int) -> int:
    """Chunks in the largest buffer a rank addresses (collectives.make_collective's layout)."""
    if kind == "alltoall":
        return n * chunks
    if kind in ("broadcast", "reduce"):
        return chunks
    return n * chunks


def _max_chunks_for(limit: float, per_chunk: float) -> int:
    return max(0, int(limit // per_chunk)) if per_chunk > 0 else 0


def max_request_chunks(kind: str, n: int, budget: Budget) -> int:
    """The most chunks per rank :func:`check_request` lets through: the smallest of the limits that
    apply (memory; with XML also the int16 offsets), so a refusal that suggests it can be followed
    without meeting the next limit."""
    per_chunk = min_transfers(kind, n, 1) * budget.memory_per_transfer()
    fit = _max_chunks_for(budget.max_memory - BASE_BYTES, per_chunk)
    if budget.xml_profile is not None:
        fit = min(fit, _max_chunks_for(MAX_OFFSET + 1, buffer_chunks(kind, n, 1) * budget.instances))
    return fit


def check_request(kind: str, n: int, chunks: int | None, budget: Budget) -> None:
    """Refuse a standard collective whose every schedule is over the budget or the XML limits.

    Runs before the collective is even built (a 10^9-chunk collective does not fit in memory).
    The chunk count a refusal suggests is :func:`max_request_chunks`, which passes every check
    here, not just the one that refused."""
    if chunks is None or n < 2:
        return
    moves = min_transfers(kind, n, chunks)
    need = BASE_BYTES + moves * budget.memory_per_transfer()
    if need > budget.max_memory:
        fit = max_request_chunks(kind, n, budget)
        raise TooBig(f"{kind} with {chunks} chunks per rank on {n} ranks moves at least "
                     f"{moves:,} chunks: {_over_memory(need, budget)}; use fewer --chunks "
                     f"(at most {fit})"
                     + (" or --no-xml" if budget.xml_profile else "")
                     + " or raise --max-memory")
    if budget.xml_profile is None:
        return
    inst = budget.instances
    cells = buffer_chunks(kind, n, chunks) * inst
    if cells - 1 > MAX_OFFSET:
        fit = max_request_chunks(kind, n, budget)
        raise TooBig(f"MSCCL-IR addresses chunks with int16 offsets (at most {MAX_OFFSET}, spec §6) "
                     f"but {kind} with {chunks} chunks per rank on {n} ranks"
                     f"{f' x {inst} instances' if inst > 1 else ''} has {cells:,} chunks in one "
                     f"buffer; use --no-xml, or --chunks {fit} or fewer")
    # (the tokenizer's 4095 nodes cannot bind first: at most 71 chunks per instruction and at most
    # 32768 chunks in a buffer keep every standard collective's receive floor below ~930 nodes)


# ------------------------------------------------------------------------------------- schedule
@dataclass(frozen=True)
class XmlEstimate:
    """Per-rank size of the MSCCL-IR program a schedule compiles to (before compiling it)."""

    nodes: int
    """Largest estimated node count of a rank: 1 + ngpus + threadblocks + steps."""
    rank: int
    receives: int
    sends: int
    peers: int
    threadblocks: int = 0
    """Fewest threadblocks a rank needs: one per peer it sends to (resp. receives from), at least,
    on every instance (a threadblock has one send peer and one receive peer); its rank below."""
    tb_rank: int = 0
    steps: int = 0
    """Estimated steps summed over every rank (threadblocks, receives and unfused sends, the same
    counting; the per-rank header nodes left out): the work of compiling the program and proving
    it in the interpreter grows with it (:data:`MAX_XML_STEPS`)."""

    def describe(self) -> str:
        return (f"about {self.nodes:,} MSCCL-IR nodes on rank {self.rank} (1 + gpus + "
                f"{self.peers} peer threadblocks + {self.receives:,} receives + {self.sends:,} "
                f"unfused sends, after aggregation)")


def schedule_arrays(schedule: Any) -> Any:
    """(step, src, dst, chunk) int64 columns of every transfer."""
    import numpy as np

    total = schedule.num_transfers
    out = np.empty((4, total), dtype=np.int64)
    i = 0
    for t, step in enumerate(schedule.steps):
        m = len(step.transfers)
        if not m:
            continue
        out[0, i:i + m] = t
        out[1:, i:i + m] = np.array([(tr.src, tr.dst, tr.chunk) for tr in step.transfers],
                                    dtype=np.int64).T
        i += m
    return out


def _runs(group: Any, chunk: Any, span: int) -> Any:
    """Group ids of the aggregated ops: runs of consecutive chunks (at most MAX_COUNT) per group."""
    import numpy as np

    if group.size == 0:
        return group
    key = np.sort(group * span + chunk)
    g, c = key // span, key % span
    brk = np.ones(key.size, dtype=bool)
    brk[1:] = (g[1:] != g[:-1]) | (c[1:] != c[:-1] + 1)
    starts = np.flatnonzero(brk)
    pos = np.arange(key.size) - starts[np.cumsum(brk) - 1]
    brk |= pos % MAX_COUNT == 0
    return g[brk]


def _distinct(values: Any) -> Any:
    """Sorted distinct values (by sorting: numpy's hash-based ``unique`` is far slower here)."""
    import numpy as np

    v = np.sort(values)
    keep = np.ones(v.size, dtype=bool)
    keep[1:] = v[1:] != v[:-1]
    return v[keep]


def xml_estimate(schedule: Any, instances: int = 1) -> XmlEstimate:
    """Estimate the compiled program's largest per-rank node count from the schedule alone.

    Mirrors the compiler's counting rules (synth.emit.passes): a receive of a (step, peer) group
    aggregates consecutive chunks, at most 71 per instruction; a send fuses with a receive of the
    same chunk one step earlier (one send per receive), other sends are instructions of their own;
    a rank has a threadblock per peer at least. Nops, copies and channel spreading come on top, so
    this is an under-estimate: a schedule over the limit by it cannot be emitted.
    """
    import numpy as np

    n = schedule.collective.num_ranks
    arr = schedule_arrays(schedule)
    step, src, dst, chunk = arr
    if step.size == 0:
        return XmlEstimate(1 + n, 0, 0, 0, 0)
    steps = int(step.max()) + 1
    span = int(chunk.max()) + 2
    recv_g = _runs((dst * steps + step) * n + src, chunk, span)
    receives = np.bincount(recv_g // (steps * n), minlength=n)
    got = _distinct((dst * steps + step) * span + chunk)
    sent = (src * steps + step) * span + chunk
    at = np.minimum(np.searchsorted(got, sent - span), got.size - 1)
    fusable = (step > 0) & (got[at] == sent - span)
    order = np.argsort(sent, kind="stable")
    first = np.ones(order.size, dtype=bool)
    first[1:] = sent[order][1:] != sent[order][:-1]
    fused = np.zeros(order.size, dtype=bool)
    fused[order] = first & fusable[order]
    plain = ~fused
    send_g = _runs(((src * steps + step) * n + dst)[plain], chunk[plain], span)
    sends = np.bincount(send_g // (steps * n), minlength=n)
    pairs = _distinct(np.concatenate([dst * n + src, src * n + dst]))
    peers = np.bincount(pairs // n, minlength=n)
    recv_peers = np.bincount(_distinct(dst * n + src) // n, minlength=n)
    send_peers = np.bincount(_distinct(src * n + dst) // n, minlength=n)
    tbs = instances * np.maximum(recv_peers, send_peers)
    nodes = 1 + n + instances * (peers + receives + sends)
    r = int(np.argmax(nodes))
    t = int(np.argmax(tbs))
    return XmlEstimate(int(nodes[r]), r, int(receives[r]), int(sends[r]), int(peers[r]),
                       int(tbs[t]), t, int(nodes.sum()) - n * (1 + n))


def narrow_fits(num_ranks: int, ops: int, max_steps: int = MAX_STEPS) -> bool:
    """Whether a rank with ``ops`` sends and receives, one op per chunk (instances included), fits
    the tokenizer's node limit: those steps, the fewest blocks that hold them (``max_steps`` each),
    the gpu nodes and the algorithm node.

    The compiler asks it before building a program with one op per chunk
    (:func:`synth.emit.compile.narrow_fits`, with its profile's ``max_steps``), and an algorithm
    that picks its own chunk count asks it before it is built
    (:func:`synth.encodings.baseline.preferred_chunks`): both import it from here, below them."""
    return 1 + num_ranks + math.ceil(ops / max_steps) + ops <= MAX_NODES


@dataclass(frozen=True)
class Sized:
    """What :func:`check_schedule` reads of a candidate schedule, and nothing more: a process that
    built a candidate the guards will pass over sends this instead of the schedule
    (:mod:`synth.encodings.ahead`), and the solving process words the very refusal from it."""

    algorithm: str
    num_transfers: int
    num_steps: int
    num_ranks: int
    chunks_per_rank: int
    buffer_chunks: int
    custom: bool
    estimate: XmlEstimate | None
    """:func:`xml_estimate` at the budget's instances (None: no XML)."""


def sized(schedule: Any, budget: Budget) -> Sized:
    """``schedule`` as the guards see it under ``budget``."""
    coll = schedule.collective
    est = xml_estimate(schedule, budget.instances) if budget.xml_profile else None
    return Sized(schedule.algorithm, schedule.num_transfers, schedule.num_steps, coll.num_ranks,
                 coll.chunks_per_rank, coll.buffer_chunks, coll.custom is not None, est)


def check_schedule(schedule: Any, budget: Budget, held: int = 0) -> None:
    """Refuse one candidate schedule before it is verified, costed or compiled.

    ``held``: transfers of the candidates already kept (they share the memory budget)."""
    check_sized(schedule, budget, held)


def check_sized(candidate: Any, budget: Budget, held: int = 0) -> None:
    """:func:`check_schedule` of a schedule or of its :class:`Sized` (the same refusal, word for
    word). Every check is monotone in ``held``: a candidate refused at ``held`` 0 is refused at
    any ``held`` (with a memory message where that check now comes first)."""
    moves = candidate.num_transfers
    need = BASE_BYTES + (moves + held) * SCHEDULE_BYTES_PER_TRANSFER
    if budget.xml_profile:
        need += moves * XML_BYTES_PER_TRANSFER
    if need > budget.max_memory:
        raise TooBig(f"{candidate.algorithm}: {moves:,} transfers need "
                     f"{_over_memory(need, budget)}"
                     + ("; use --no-xml" if budget.xml_profile else "")
                     + ", fewer --chunks or raise --max-memory")
    if budget.xml_profile is None:
        return
    s = candidate if isinstance(candidate, Sized) else sized(candidate, budget)
    if not s.custom:
        cells = s.buffer_chunks * budget.instances
        if cells - 1 > MAX_OFFSET:
            raise TooBig(f"{s.algorithm}: {cells:,} chunks in one buffer exceed MSCCL-IR's "
                         f"int16 offsets (at most {MAX_OFFSET + 1}, spec §6); use --no-xml or "
                         "fewer --chunks")
    est = s.estimate
    assert est is not None  # sized under an XML budget
    if budget.max_threadblocks is not None and est.threadblocks > budget.max_threadblocks:
        raise TooBig(f"{s.algorithm}: rank {est.tb_rank} exchanges with "
                     f"{est.threadblocks // budget.instances} peers in one direction, so its program "
                     f"needs at least {est.threadblocks} threadblocks (one peer per direction "
                     f"each{f', x {budget.instances} instances' if budget.instances > 1 else ''}); "
                     f"--max-threadblocks is {budget.max_threadblocks}: raise it, use --no-xml, "
                     "or another --encoding")
    xml_need = BASE_BYTES + (moves + held) * SCHEDULE_BYTES_PER_TRANSFER + \
        est.steps * XML_BYTES_PER_STEP
    if xml_need > budget.max_memory:
        raise TooBig(f"{s.algorithm}: its program, estimated at {est.steps:,} MSCCL-IR steps "
                     f"over its {s.num_ranks} ranks, needs {_over_memory(xml_need, budget)} to "
                     "compile and prove; use --no-xml, fewer --chunks or raise --max-memory")
    if budget.max_xml_steps is not None and est.steps > budget.max_xml_steps:
        raise TooBig(f"{s.algorithm}: its program is estimated at {est.steps:,} MSCCL-IR "
                     f"steps over its {s.num_ranks} ranks (at least), over the "
                     f"{budget.max_xml_steps:,} one file may take to compile and prove (about "
                     f"{XML_SECONDS_PER_STEP * budget.max_xml_steps / 60:.0f} min); use --no-xml, "
                     "fewer --chunks, another --encoding, or raise --max-xml-steps")
    if est.nodes > MAX_NODES:
        raise TooBig(f"{s.algorithm} ({s.chunks_per_rank} chunks per rank, "
                     f"{s.num_steps} steps) needs {est.describe()}; the runtime's tokenizer "
                     f"holds {MAX_NODES} per rank (spec §6 MAX_NODES): use --no-xml, fewer "
                     "--chunks, or another --encoding")


# ------------------------------------------------------------------------------------- encodings
MODEL_BYTES_PER_VARIABLE = 200
"""A solver variable with its constraints' share, in the SMT and MILP models (an estimate: CP-SAT
and HiGHS keep tens to hundreds of bytes per variable and its rows)."""
MODEL_MAX_VARIABLES = 1_000_000
"""Beyond this many (chunk, link) variables the SMT and MILP models are not worth building: SCCL's
dgx1 instances that CP-SAT decides in about a second have a few hundred (ARCHITECTURE.md)."""
MODEL_ENCODINGS = ("smt", "milp")
"""Encodings whose model has a variable per (chunk, link) at least (SCCL, TACCL)."""


def encoding_memory(encoding: str, kind: str, n: int, links: int, chunks: int) -> int:
    """Estimated bytes an encoding needs for ``chunks`` chunks per rank (floors, not forecasts):
    the schedule it builds, and for the solver encodings their model's (chunk, link) variables."""
    moves = min_transfers(kind, n, chunks)
    need = moves * SCHEDULE_BYTES_PER_TRANSFER
    if encoding in MODEL_ENCODINGS:
        need += buffer_chunks(kind, n, chunks) * max(links, 1) * MODEL_BYTES_PER_VARIABLE
    return need


def check_encoding(encoding: str, kind: str, n: int, links: int, chunks: int | None,
                   budget: Budget, held: int = 0) -> None:
    """Refuse to start ``encoding`` when its floor does not fit what is left of the budget.

    ``held``: bytes the candidates already produced hold. Only requests with explicit chunks are
    sized here; an encoding choosing its own chunking keeps itself small (and every candidate is
    sized again by :func:`check_schedule`)."""
    if chunks is None or n < 2:
        return
    variables = buffer_chunks(kind, n, chunks) * max(links, 1)
    if encoding in MODEL_ENCODINGS and variables > MODEL_MAX_VARIABLES:
        fit = max(1, min(MODEL_MAX_VARIABLES // (buffer_chunks(kind, n, 1) * max(links, 1)),
                         max_request_chunks(kind, n, budget)))
        raise TooBig(f"{encoding} with {chunks} chunks per rank would build a model of at least "
                     f"{variables:,} (chunk, link) variables (practical up to "
                     f"{MODEL_MAX_VARIABLES:,}); use --chunks {fit} or fewer, or another --encoding")
    need = encoding_memory(encoding, kind, n, links, chunks)
    if BASE_BYTES + held + need > budget.max_memory:
        raise TooBig(f"{encoding} with {chunks} chunks per rank needs about {fmt_bytes(need)}"
                     f"{f' besides the {fmt_bytes(held)} held by other candidates' if held else ''}"
                     f", over --max-memory {fmt_bytes(budget.max_memory)}; use fewer --chunks, "
                     "another --encoding or raise --max-memory")
