"""Per-cluster catalogs: for every collective and message-size range, the best verified algorithm
with its protocol, chunking and instances, written as a folder the MSCCL runtimes load as is.

Pipeline (one module each)::

    candidates.plan_jobs ──► cache (hit) ─┐
                         └─► executor ────┴─► candidates.candidates_from (verify every schedule)
        ──► select.Table (protocols: predicted µs per config and size)
        ──► select.tune_buckets (synth.tuning, per size bucket) ──► select.nccl.choose_with_nccl
            (NCCL competes; select.choose: merge + fallback, emit.Emitter: compiled XML;
            emit.program_times: the program model's veto, repeated until no file is vetoed;
            then the interpreter proves the chosen files, choosing again past one it fails)
        ──► output.write_catalog (atomic folder swap: XML, MSCCL_CONFIG, catalog.json, catalog.md,
            plots)

**NCCL competes** as in ``synth solve`` (:func:`synth.select.nccl.with_nccl`): where NCCL runs
(an NVIDIA GPU; the calibration's ``nccl_model`` section applies), a configuration whose
protocol-model time at a bucket is not below NCCL's modelled time there ranks after NCCL, and a
bucket NCCL wins gets no file: no XML, no ``MSCCL_CONFIG`` entry, so the runtime falls back to
NCCL at those sizes. The written files are then run by the timed program model at their buckets
(:func:`synth.catalog.emit.program_times`, the report's ``program_us``), and a configuration whose
file is not faster than NCCL there under that model is vetoed at that bucket and the ranges are
chosen again (:func:`synth.select.nccl.choose_with_nccl`), so no bucket is served by a file either
model puts behind NCCL. Elsewhere (Trainium, MI300X, builder topologies) nothing changes.

:func:`build_catalog` does everything up to the verified files in memory and returns a
:class:`CatalogResult`; :func:`synth.catalog.output.write_catalog` writes it. Nothing touches the
output folder before every file exists and has been verified.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..calibrated import apply_calibration, class_overrides
from ..calibration import Calibration, calibration_of
from ..collectives import KINDS, make_collective
from ..emit import XML_KINDS
from ..errors import SynthError, unknown_name
from ..guards import Budget
from ..select.buckets import Bucket, make_buckets
from ..select.nccl import NCCL, Veto, choose_with_nccl, nccl_choices
from ..select.ranges import BucketTuning, Choice
from ..select.tuned import Table, tune_buckets
from ..timing.program_store import TimingStore
from ..timing.protocol import ProtocolModel, default_model, model_with_calibration
from ..topology import Topology
from .cache import SolveCache, check_cache_dir
from .candidates import (
    CHUNK_GRID,
    Candidate,
    Rejected,
    SolveJob,
    applicable_pairs,
    candidates_from,
    plan_jobs,
)
from .emit import Emitted, Emitter, program_times
from .executor import check_executor, run_jobs

DEFAULT_COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
DEFAULT_SIZES = "1KB:4GB"
DEFAULT_TIME_LIMIT_S = 60.0


class Progress:
    """What :func:`build_catalog` reports while it works; the CLI draws bars from it."""

    def planned(self, totals: dict[str, int]) -> None:
        """Units of work per collective (solves + buckets; emissions are added as they start)."""

    def advance(self, kind: str, what: str, count: int = 1) -> None:
        """``count`` units of ``kind`` done; ``what`` is "solve", "tune" or "emit"."""

    def more(self, kind: str, count: int) -> None:
        """``count`` more units for ``kind`` (the emissions, once the ranges are known)."""


def check_collectives(kinds: Sequence[str]) -> tuple[str, ...]:
    """The requested collectives, checked against what MSCCL-IR can express (spec §3.3)."""
    out: list[str] = []
    for k in kinds:
        k = k.strip().lower()
        if not k:
            continue
        if k not in KINDS:
            raise unknown_name("collective", k, XML_KINDS)
        if k not in XML_KINDS:
            raise SynthError(f"MSCCL-IR defines no buffer layout for {k} (spec §3.3); a catalog "
                             f"can hold {', '.join(XML_KINDS)}")
        if k not in out:
            out.append(k)
    if not out:
        raise SynthError("no collective given (e.g. --collectives allgather,allreduce)")
    return tuple(out)


@dataclass
class CollectiveResult:
    kind: str
    candidates: list[Candidate]
    rejected: list[Rejected]
    table: Table
    tunings: list[BucketTuning]
    """The tuner's rankings per bucket (its record: NCCL is not in them)."""
    choice: Choice
    emitted: list[Emitted]
    """The files, one per range synth serves, in range order (a range left to NCCL has none)."""
    xml_verified: int = 0
    """Emissions compiled and executed by the interpreter in this run."""
    xml_reused: int = 0
    """Emissions whose verified result was reused from the cache."""
    nccl: list[Any] | None = None
    """What NCCL runs at each bucket's size and its time (:class:`synth.timing.nccl.Choice`),
    the times it competed with; None where NCCL does not run."""
    program_us: dict[int, float] = field(default_factory=dict)
    """Per bucket a file serves, that file under the timed program model (µs; ``inf`` where it
    deadlocks there): the report's ``program_us``, and what NCCL's veto compared."""
    vetoes: list[Veto] = field(default_factory=list)
    """The (configuration, bucket) pairs the program model put behind NCCL, in the order found."""
    rounds: int = 1
    """How many times the ranges were chosen (1: no veto)."""


@dataclass
class CatalogResult:
    topology: Topology
    topo_spec: str
    nodes: int
    kinds: tuple[str, ...]
    sizes: tuple[int, ...]
    buckets: list[Bucket]
    tuner: str
    model: ProtocolModel
    calibration: str | None
    calibration_notes: list[str]
    results: list[CollectiveResult]
    solved: int
    cached: int
    crashes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    nccl_calibration: Any = None
    """The calibration's ``nccl_model`` section (:mod:`synth.timing.nccl`), for the NCCL column."""
    timings: TimingStore | None = None
    """Where the report's program-model times are kept across runs (beside the solve cache;
    None with ``--no-xml-cache``, which asks for everything to be run again)."""


def build_catalog(topology: Topology, *, topo_spec: str, nodes: int, kinds: Sequence[str],
                  sizes: Sequence[int], tuner: str = "cd", workers: int = 1,
                  executor: str = "local", time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
                  cache_dir: Path, calibration: Calibration | None = None, seed: int = 0,
                  xml_cache: bool = True, progress: Progress | None = None,
                  plans: bool = False, budget: Budget | None = None) -> CatalogResult:
    """Solve (or reuse), verify, tune and emit a catalog in memory (module docstring).

    ``budget`` (:mod:`synth.guards`): a candidate estimated over its memory, or over the exec
    runtime's XML limits, is rejected before it is verified."""
    from ..tuning import TUNERS

    start = time.perf_counter()
    progress = progress or Progress()
    kinds = check_collectives(kinds)
    if tuner not in TUNERS:
        raise unknown_name("tuner", tuner, TUNERS)
    check_executor(executor, workers)
    if time_limit_s is not None and not (time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise SynthError(f"--time-limit must be a positive number of seconds, got {time_limit_s:g}")
    buckets = make_buckets(sizes)
    if topology.num_ranks < 2:
        raise SynthError(f"'{topology.name}' has {topology.num_ranks} rank; MSCCL-IR needs at least 2")
    cal_notes: list[str] = []
    if calibration is not None:
        _, cal_notes = class_overrides(topology, calibration)
        topology = apply_calibration(topology, calibration)
    model = model_with_calibration(default_model(topology), calibration,
                                   calibration.source if calibration is not None else "calibration")
    cache = SolveCache(check_cache_dir(cache_dir))

    # phase 1: every encoding with its own chunking; phase 2: the chunk grid where phase 1 answered
    first = plan_jobs(topology, kinds, time_limit_s, (None,))
    grid_per_pair = len(CHUNK_GRID)
    per_kind = {k: sum(1 for j in first if j.kind == k) * (1 + grid_per_pair) + len(buckets)
                for k in kinds}
    progress.planned(per_kind)
    counts = {"solved": 0, "cached": 0}
    crashes: list[str] = []
    records = _resolve(first, cache, executor, workers, progress, counts, crashes)
    pairs = applicable_pairs(first, records)
    second = plan_jobs(topology, kinds, time_limit_s, CHUNK_GRID, only=pairs)
    for j in first:
        if (j.kind, j.encoding) not in pairs:
            progress.advance(j.kind, "solve", grid_per_pair)  # not asked again (docstring)
    records += _resolve(second, cache, executor, workers, progress, counts, crashes)
    jobs = first + second
    nccl_cal = calibration_of(calibration)
    timings = TimingStore.beside(cache.root) if xml_cache else None
    results = [_collective(topology, kind, jobs, records, buckets, model, tuner, seed,
                           progress, cache if xml_cache else None, plans, budget, nccl_cal,
                           timings)
               for kind in kinds]
    return CatalogResult(topology, topo_spec, nodes, kinds, tuple(sorted(set(sizes))), buckets,
                         tuner, model, calibration.source if calibration is not None else None,
                         cal_notes, results, counts["solved"], counts["cached"], crashes,
                         time.perf_counter() - start, nccl_cal, timings)


def _resolve(jobs: list[SolveJob], cache: SolveCache, executor: str, workers: int,
             progress: Progress, counts: dict[str, int], crashes: list[str]) -> list[dict[str, Any]]:
    """The records of ``jobs``: from the cache, or solved (and stored when deterministic)."""
    records: list[dict[str, Any] | None] = [cache.get(j.key) for j in jobs]
    for j, rec in zip(jobs, records, strict=True):
        if rec is not None:
            progress.advance(j.kind, "solve")
    todo = [i for i, r in enumerate(records) if r is None]
    counts["cached"] += len(jobs) - len(todo)
    counts["solved"] += len(todo)

    def done(n: int, rec: dict[str, Any]) -> None:
        job = jobs[todo[n]]
        records[todo[n]] = rec
        if rec.get("cacheable"):
            cache.put(job.key, {k: v for k, v in rec.items() if k != "cacheable"})
        else:
            crashes.append(f"{job.label}: {rec['message']}")
        progress.advance(job.kind, "solve")

    run_jobs([jobs[i] for i in todo], executor=executor, workers=workers, on_done=done)
    return records  # type: ignore[return-value]


def _collective(topology: Topology, kind: str, jobs: list[SolveJob], records: list[dict[str, Any]],
                buckets: list[Bucket], model: ProtocolModel, tuner: str, seed: int,
                progress: Progress, cache: SolveCache | None, plans: bool = False,
                budget: Budget | None = None, nccl_calibration: Any = None,
                timings: TimingStore | None = None) -> CollectiveResult:
    coll = make_collective(kind, topology.num_ranks)
    cands, rejected = candidates_from(jobs, records, topology, coll, budget)
    if not cands:
        why = "; ".join(f"{r.encoding}: {r.message}" for r in rejected[:6])
        raise SynthError(f"no encoding produced a schedule for {kind} on '{topology.name}' ({why})")
    table = Table(cands, buckets, model)
    tunings = tune_buckets(table, tuner, seed, progress=lambda b: progress.advance(kind, "tune"))
    # NCCL competes (module docstring): against each configuration's protocol-model time, the
    # MSCCL runtime's floors included, as the tuner ranked it; then the written files' program
    # times veto any (configuration, bucket) they put behind NCCL
    nccl = nccl_choices(topology, kind, [b.size for b in buckets], nccl_calibration)
    lookup = {cfg: table.candidate(cfg) for t in tunings for cfg in t.ranking}
    emitter = Emitter(topology, lookup, cache, plans)

    def attempt(r: Any) -> str | None:
        if r.config == NCCL:
            return None     # left to NCCL: no file to produce
        fresh = (r.config, r.lo, r.hi) not in emitter.done
        if fresh:
            progress.more(kind, 1)
        why = emitter.attempt(r)
        if fresh:
            progress.advance(kind, "emit")
        return why

    def timed(choice: Choice) -> dict[int, float]:
        return program_times([emitter.executor_file(r) for r in choice.ranges if r.config != NCCL],
                             buckets, topology, model, timings,
                             [c.time_us for c in nccl] if nccl is not None else None)

    # the ranges are chosen on compiled files; the interpreter proves the chosen ones, and one it
    # fails is excluded (its attempt fails from then on) and the ranges are chosen again
    rounds = 0
    while True:
        vetted = choose_with_nccl(
            tunings, [c.time_us for c in nccl] if nccl is not None else None,
            lambda cfg, t: table.time(cfg, t.bucket.index), attempt, timed)
        rounds += vetted.rounds
        failed = [r for r in vetted.choice.ranges if r.config != NCCL
                  and emitter.verify(r) is not None]
        if not failed:
            break
    emitted = [emitter.result(r) for r in vetted.choice.ranges if r.config != NCCL]
    return CollectiveResult(kind, cands, rejected, table, tunings, vetted.choice,
                            emitted, emitter.verified, emitter.reused, nccl,
                            vetted.program_us, vetted.vetoes, rounds)
