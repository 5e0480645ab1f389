"""Solve = run an encoding, verify every candidate, cost it against the bound, pick the best.

This is the library entry point behind ``synth solve``; the CLI only parses and prints. Nothing is
returned (or written) that has not passed :func:`synth.verify.verify`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import progress
from .bounds import Bound, lower_bound
from .catalog.select import BucketTuning, Config, Range, choose, make_buckets, runs_at
from .collectives import Collective
from .emit import XmlOptions, emit_verified_xml, xml_unsupported_reason
from .encodings import Options, run_encoding
from .errors import SynthError
from .files import atomic_write, ensure_writable_dir, write_all
from .guards import Budget, TooBig, check_schedule
from .mscclpp.emit import PlanOptions, emit_verified_plan, plan_unsupported_reason
from .schedule import Schedule
from .sizes import DEFAULT_SIZES, algbw_GBps
from .timing.lockstep import schedule_times_us
from .topology import Topology
from .verify import VerifyReport, verify


@dataclass(frozen=True)
class CostPoint:
    """Predicted performance at one message size, and how close it is to the physical limit."""

    bytes: int
    time_us: float
    algbw_GBps: float
    bound_us: float
    pct_of_bound: float

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "time_us": round(self.time_us, 6),
                "algbw_GBps": round(self.algbw_GBps, 6), "bound_us": round(self.bound_us, 6),
                "pct_of_bound": round(self.pct_of_bound, 4)}


def schedule_time_model(schedule: Schedule) -> str:
    """``nccl`` for the ``nccl`` baseline (priced by NCCL's tuning model), else ``step``."""
    return "nccl" if schedule.meta.get("time_model") == "nccl" else "step"


def cost_profile(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                 bound: Bound | None = None, nccl_calibration: Any = None) -> list[CostPoint]:
    """Time, algorithm bandwidth and % of the lower bound at every size.

    The ``nccl`` baseline is priced as NCCL prices itself (:mod:`synth.timing.nccl`: its tuner's
    algorithm, protocol and channels, with its latency floors), every other schedule by the α-β
    step model (:func:`synth.timing.lockstep.schedule_times_us`).
    """
    bound = bound or lower_bound(topology, schedule.collective)
    if schedule_time_model(schedule) == "nccl":
        from .timing.nccl import times_us as nccl_times_us
        times = nccl_times_us(topology, schedule.collective.kind, sizes, nccl_calibration)
    else:
        times = schedule_times_us(schedule, topology, sizes)
    bws = algbw_GBps(sizes, times)
    points = []
    for size, t, bw in zip(sizes, times, bws, strict=True):
        b = bound.time_us(size)
        points.append(CostPoint(int(size), float(t), float(bw), float(b),
                                100.0 * b / float(t) if t > 0 else 100.0))
    return points


@dataclass(frozen=True)
class Candidate:
    name: str
    schedule: Schedule
    report: VerifyReport
    costs: list[CostPoint]

    @property
    def score(self) -> float:
        """Geometric-mean fraction of the bound over the size sweep (1.0 = optimal everywhere)."""
        return math.exp(sum(math.log(max(p.pct_of_bound, 1e-9) / 100) for p in self.costs)
                        / len(self.costs))


@dataclass
class SolveResult:
    topology: Topology
    collective: Collective
    encoding: str
    best: Candidate
    candidates: list[Candidate]
    bound: Bound
    seconds: float
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Candidates passed over before verification (size guards), and why."""


def solve(topology: Topology, collective: Collective, *, encoding: str = "auto",
          algorithm: str | None = None, sizes: Sequence[int] = DEFAULT_SIZES,
          time_limit_s: float | None = None, chunks: int | None = None,
          extra: dict[str, Any] | None = None, nccl_calibration: Any = None,
          budget: Budget | None = None) -> SolveResult:
    """Produce, verify and rank schedules; the best is the one closest to the bound overall.

    With a ``budget`` (:mod:`synth.guards`) every candidate is sized before it is verified: one
    over the memory budget or, when XML is wanted, over the runtime's limits is passed over with a
    note; when none is left the run is refused with every candidate's reason.
    """
    if time_limit_s is not None and not (time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise SynthError(f"--time-limit must be a positive number of seconds, got {time_limit_s:g}")
    start = time.perf_counter()
    notes: list[str] = []
    extra = dict(extra or {})
    with progress.phase(f"encoding {encoding}"):
        found = run_encoding(encoding, topology, collective,
                             Options(algorithm=algorithm, chunks=chunks, time_limit_s=time_limit_s,
                                     extra=extra, budget=budget, notes=notes), notes)
    if budget is not None:
        found, passed = within_budget(found, budget)
        notes += passed
    bound = lower_bound(topology, collective)
    candidates = []
    for name in sorted(found):
        schedule = found[name]
        with progress.phase(f"verify and cost {name} ({schedule.num_transfers:,} transfers)"):
            report = verify(schedule, topology)
            candidates.append(Candidate(name, schedule, report,
                                        cost_profile(schedule, topology, sizes, bound,
                                                     nccl_calibration)))
    candidates.sort(key=lambda c: (-c.score, c.report.steps, c.name))
    ran = "baseline" if encoding == "auto" and algorithm else encoding  # --algo: baseline only
    return SolveResult(topology, collective, ran, candidates[0], candidates, bound,
                       time.perf_counter() - start, notes=notes)


def within_budget(found: dict[str, Schedule], budget: Budget
                   ) -> tuple[dict[str, Schedule], list[str]]:
    """The candidates that fit ``budget`` (smallest first share the memory) and notes on the rest."""
    kept: dict[str, Schedule] = {}
    notes: list[str] = []
    held = 0
    with progress.phase("sizing candidates"):
        for name in sorted(found, key=lambda k: (found[k].num_transfers, k)):
            try:
                check_schedule(found[name], budget, held)
            except TooBig as exc:
                notes.append(f"{name} passed over: {exc.message}")
                progress.note(notes[-1])
                continue
            kept[name] = found[name]
            held += found[name].num_transfers
    if not kept:
        raise TooBig("no candidate fits: " + "; ".join(notes))
    return kept, notes


@dataclass(frozen=True)
class NcclComparison:
    """The candidate against NCCL at one size, both with their runtime floors.

    ``runtime_us`` is the candidate as the MSCCL runtime runs it: the written XML under the timed
    program model (:mod:`synth.timing.program`, ``runtime_proto`` = ``program``) where it was timed,
    else the protocol model (:mod:`synth.timing.protocol`: the step model plus the protocol's launch floor
    and per-step synchronisation, best of Simple / LL / LL128, one instance). ``nccl_us`` is NCCL's
    own tuning-model time of what NCCL would run (:mod:`synth.timing.nccl`). ``speedup`` =
    nccl_us / runtime_us (> 1: the candidate is faster).
    """

    bytes: int
    nccl_algo: str
    nccl_proto: str
    nccl_channels: int
    nccl_us: float
    runtime_us: float
    runtime_proto: str

    @property
    def speedup(self) -> float:
        return self.nccl_us / self.runtime_us if self.runtime_us > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "nccl": {"algo": self.nccl_algo, "proto": self.nccl_proto,
                                              "channels": self.nccl_channels,
                                              "time_us": round(self.nccl_us, 6)},
                "runtime_us": round(self.runtime_us, 6), "runtime_proto": self.runtime_proto,
                "speedup_vs_nccl": round(self.speedup, 6)}


def compare_with_nccl(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                      nccl_calibration: Any = None, calibration: Any = None,
                      program_us: Sequence[float] | None = None) -> list[NcclComparison] | None:
    """The candidate's floored runtime time against NCCL's, per size; None where NCCL has no
    such collective (gather, scatter, custom) or does not run (no NVIDIA GPU).

    ``program_us``: the written XML's time per size under the timed program model, used where
    finite (the file runs at that size)."""
    from .errors import NotApplicable
    from .timing.nccl import predict
    from .timing.protocol import PROTOCOLS, predict_times_us

    coll = schedule.collective
    if coll.custom is not None:
        return None
    try:
        nccl = predict(topology, coll.kind, sizes, nccl_calibration)
    except NotApplicable:
        return None
    if schedule_time_model(schedule) == "nccl":
        runtime = {"NCCL": [c.time_us for c in nccl]}
    else:
        runtime = {p: predict_times_us(schedule, topology, sizes, p, 1, calibration)
                   for p in PROTOCOLS}
    out = []
    for i, c in enumerate(nccl):
        if program_us is not None and math.isfinite(program_us[i]) \
                and schedule_time_model(schedule) != "nccl":
            out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                      float(program_us[i]), "program"))
            continue
        proto = min(runtime, key=lambda p: (runtime[p][i], p))
        out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                  runtime[proto][i], proto))
    return out


@dataclass(frozen=True)
class RuntimePoint:
    """The predicted time of the emitted file at one size, as the MSCCL runtime would run it."""

    bytes: int
    time_us: float
    """``inf`` beyond the largest message the file can run (``MSCCL_MAX_ITER``)."""

    @property
    def algbw_GBps(self) -> float:
        return self.bytes / (self.time_us * 1e3) if 0 < self.time_us < math.inf else 0.0

    def to_dict(self) -> dict[str, Any]:
        finite = math.isfinite(self.time_us)
        return {"bytes": self.bytes, "time_us": round(self.time_us, 6) if finite else None,
                "algbw_GBps": round(self.algbw_GBps, 6) if finite else None}


@dataclass(frozen=True)
class RuntimeProfile:
    """:func:`runtime_profile`: one (protocol, instances) pair's predicted times over the sizes."""

    proto: str
    instances: int
    max_bytes: int
    """The largest message the file runs with this protocol and instance count."""
    source: str
    points: list[RuntimePoint]

    def to_dict(self) -> dict[str, Any]:
        return {"proto": self.proto, "instances": self.instances, "max_bytes": self.max_bytes,
                "model": "synth.timing.protocol: step model + protocol launch, per-step "
                         "synchronisation, channel caps, instances; " + self.source,
                "costs": [p.to_dict() for p in self.points]}


def runtime_profile(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                    proto: str = "Simple", instances: int = 1, calibration: Any = None
                    ) -> RuntimeProfile:
    """What ``--proto`` and ``--instances`` do to the time: the schedule run by the MSCCL runtime
    with that protocol over that many channel sets (:func:`synth.timing.protocol.predict_times_us`, the
    model catalogs tune with). The step model alone (:func:`cost_profile`) is the wire: the same
    for every protocol, and what the lower bound is compared with."""
    from .timing.protocol import default_model, max_message_bytes, predict_times_us

    times = predict_times_us(schedule, topology, sizes, proto, instances, calibration)
    model = default_model(topology)
    limit = max_message_bytes(schedule.collective.buffer_chunks, model.get(proto), instances)
    source = model.source + ("; calibration file applied" if calibration is not None else "")
    return RuntimeProfile(proto, instances, limit, source,
                          [RuntimePoint(int(z), float(t)) for z, t in zip(sizes, times, strict=True)])


def _name_part(text: str) -> str:
    """A file-name-safe rendering of an option value."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(text)).strip("-") or "x"


def _exact_size(nbytes: int) -> str:
    """1048576 -> 1MB, 1536 -> 1536B: exact, so two byte ranges never share a name."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def schedule_stem(schedule: Schedule, tag: str = "") -> str:
    """The name every output of ``schedule`` starts with: each input that changes the schedule.

    Topology (with its node count), collective and root, chunks per rank, ``inplace`` when the
    collective was solved in place, the algorithm (which names the encoding and its own knobs:
    SMT steps/rounds, the size trees were planned for), a MILP's sketch and solver, and ``tag``
    (the CLI's ``cal-<digest>`` for a calibrated topology).
    """
    coll = schedule.collective
    parts = [f"{_name_part(schedule.topology)}_{coll.kind}"
             + (f"_root{coll.root}" if coll.root is not None else ""),
             f"c{coll.chunks_per_rank}"]
    if coll.inplace:
        parts.append("inplace")
    parts.append(_name_part(schedule.algorithm))
    for key in ("sketch", "solver"):
        if schedule.meta.get(key):
            parts.append(_name_part(schedule.meta[key]))
    if tag:
        parts.append(_name_part(tag))
    return "_".join(parts)


def schedule_file_name(schedule: Schedule, tag: str = "") -> str:
    return f"{schedule_stem(schedule, tag)}.schedule.json"


def xml_file_name(schedule: Schedule, xml: XmlOptions, tag: str = "") -> str:
    """The schedule's stem plus every XML option that changes the file: protocol, instances,
    ``oop`` for an out-of-place-only file (``--outofplace``; the default declares both modes where
    the runtime allows it), the byte range when one is set, and the runtime profile."""
    parts = [schedule_stem(schedule, tag), xml.proto, f"x{xml.instances}"]
    if xml.inplace is False:
        parts.append("oop")
    if xml.min_bytes or xml.max_bytes:
        parts.append(f"{_exact_size(xml.min_bytes)}-"
                     f"{_exact_size(xml.max_bytes) if xml.max_bytes else 'max'}")
    return "_".join(parts) + f".{xml.profile}.xml"


def plan_file_name(schedule: Schedule, options: PlanOptions, tag: str = "") -> str:
    """The schedule's stem plus every plan option that changes the file (protocol, instances, the
    byte range when one is set), as :func:`xml_file_name` does for the XML: ``--proto LL`` no
    longer overwrites the Simple plan."""
    parts = [schedule_stem(schedule, tag), options.proto, f"x{options.instances}"]
    if options.min_bytes or options.max_bytes:
        parts.append(f"{_exact_size(options.min_bytes)}-"
                     f"{_exact_size(options.max_bytes) if options.max_bytes else 'max'}")
    return "_".join(parts) + ".mscclpp.json"


def write_schedule(schedule: Schedule, out_dir: Path, tag: str = "") -> Path:
    """Write the (already verified) schedule's canonical JSON atomically."""
    ensure_writable_dir(out_dir)
    return atomic_write(out_dir / schedule_file_name(schedule, tag), schedule.to_json())


DEFAULT_XML = XmlOptions()
"""The exec runtime, Simple protocol, one instance, all sizes."""


# ------------------------------------------------------------------------ winners per size range
TimeModel = Callable[[Candidate], Sequence[float]]
"""Predicted µs of a candidate at each of the solve's sizes (``Candidate.costs`` order).

This is the one seam where the model that decides the winners plugs in (:func:`choose_ranges`,
:func:`prepare_winners`): :func:`lockstep_model`, or a :class:`ProgramTimeModel` (the written
file's own model), chosen by :func:`winners_model`."""

WINNERS_BY = ("auto", "program", "lockstep")
"""``synth solve --winners-by``: auto = the timed program model where the ranks are GPUs
(:func:`synth.timing.program.not_a_gpu`) and its estimated cost fits :data:`PROGRAM_COST_BUDGET`,
else the lock-step model (with a note saying why)."""

PROGRAM_COST_BUDGET = 5_000_000
"""Estimated program-model work :func:`winners_model` ``auto`` spends before falling back to the
lock-step model, in op-iterations (:func:`program_cost`: one XML step of one threadblock walked
once per grid iteration). Measured at 8-16 µs of simulation each (dgx1 and trn1_32 allgather,
1 KB..1 GB), so about 40-80 s: a small fraction of a MILP solve, and a count, so the decision is
the same on every machine. It was 3,000,000 until files were compiled one op per chunk where that
lightens their busiest block (:func:`synth.emit.compile._build`): their simulations cost more,
trn1_32 allgather's first instance count then measured 3,495,974 (171 simulations), and at
4,000,000 dgx_a100 x 4 allreduce ran out at 4 KiB (3,962,082 spent) and fell back to lock-step,
whose pick runs 1 GiB at 45.79% of the bound by the program model, where the program
model's own pick had run at 68.32% before the change. Before anything is compiled,
:func:`estimated_program_work` (compiles at :data:`COMPILE_WEIGHT` per step, plus one timing
per candidate at the largest size) must fit it too; during the timing only simulations are
counted (the whole program-model phase, compiles included, measured 4.5 s on dgx_a100 x2, 10 s on
dgx1 and 44 s on trn1_32 allgather at one instance count). The higher instance counts
(:class:`ProgramTimeModel`, ``synth solve`` without ``--instances``) get this budget again, their
own: where it runs out they stop with a note and the winners are still the program model's.

What the count leaves out: a step of ``cnt`` chunks is ``ceil(cnt / M)`` messages, each a flow with
its own events, and at large sizes ``M`` is 1-2, so a schedule with many chunks per step costs far
more per op-iteration than the figures above. Measured on the imported IBM 8xH100 machine x 2
(``tests/data/topo-dumps``), allreduce, 1 KB..1 GB at x1..x8: 2,950,322 estimated (inside the
budget), 222 s of simulation over 526 triples, 12-1,226 µs per op-iteration (median 32), the
`trees` candidate (128 chunks per rank) 124 s of it; the whole solve 290 s. Counting messages
would make the budget a truer clock, but it moves the point where ``auto`` falls back to lock-step
for cases ``results/emit.md`` records, so it waits for a re-run of that benchmark."""

PRUNE_FACTOR = 2.0
"""At each size a candidate is simulated only if its lock-step time is at most this many times
the best program-model time already found there (candidates are tried fastest lock-step first).

Why it is safe: the program model runs the same transfers as the lock-step model plus the
runtime's floors (launch, per-step synchronisation, FIFO slots, shared links), so it is rarely
faster than lock-step: the lowest ratio measured is 0.80 (recursive doubling on dgx1 at 1 GB, whose
steps the runtime pipelines while lock-step serialises them); most are 1.3-14. A skipped candidate
could only have won if the program model found it more than twice as fast as lock-step does. What
it risks: such a candidate is ranked after every simulated one at that size."""


NEAR_TIE = 0.01
"""Near ties do not split ranges: a bucket takes an adjacent range's configuration when that is
within this fraction (1%) of its own winner's time and a range is saved
(:func:`synth.catalog.select.settle_near_ties`). Why 1%: the models are not that precise (the
program model is validated to a few percent, results/reality_msccl.md), and every extra range is
one more file to compile, verify, ship and select."""


def lockstep_model(candidate: Candidate) -> list[float]:
    """The synchronous-step α-β model the candidates were costed with (:func:`cost_profile`)."""
    return [p.time_us for p in candidate.costs]


XmlCache = dict[tuple[str, XmlOptions], tuple[str, tuple[Any, ...]] | str]
"""(candidate name, options) -> the verified XML text and interpreter reports, or why it cannot
be produced: shared by the program model and :func:`choose_ranges` so no file is compiled twice."""


def compiled_xml(cache: XmlCache, candidate: Candidate, options: XmlOptions
                 ) -> tuple[str, tuple[Any, ...]] | str:
    """``candidate``'s interpreter-verified XML under ``options`` (or why there is none), once."""
    key = (candidate.name, options)
    if key not in cache:
        try:
            text, reports = emit_verified_xml(candidate.schedule, options)
            cache[key] = (text, tuple(reports))
        except SynthError as exc:
            cache[key] = exc.message
    return cache[key]


def program_cost(program: Any, nbytes: int, profile: str = "exec") -> int:
    """Estimated simulation work of ``program`` at ``nbytes``: its steps (all threadblocks, all
    ranks) times the grid iterations the call takes (:func:`synth.timing.program.slicing`). The
    simulator's events scale with both; measured wall time is 8-16 µs per unit (dgx1, trn1_32),
    up to 1,226 where steps carry many chunks (:data:`PROGRAM_COST_BUDGET`)."""
    from .timing.program import slicing

    steps = sum(len(tb.steps) for g in program.gpus for tb in g.tbs)
    return steps * len(slicing(program, int(nbytes), profile).slices)


class ProgramTimeModel:
    """The timed program model (:mod:`synth.timing.program`) as a :data:`TimeModel`: each candidate
    compiled once to XML with the solve's options (its whole byte range), parsed, and simulated at
    the sizes where a runtime selects it (:func:`synth.catalog.select.runs_at`); ``inf`` elsewhere,
    where the file deadlocks, where its XML cannot be produced (the reason goes to ``notes``, as
    :func:`synth.catalog.select.choose` words its exclusions), and where :data:`PRUNE_FACTOR`
    skipped it.

    ``instances``: the instance counts each candidate may compete at (``synth solve`` without
    ``--instances``: :data:`synth.catalog.select.INSTANCES`), the first being the solve's own
    (``xml.instances``). Why: the runtime caps every flow at one threadblock's copy rate, so a file
    with one block per connection is far from the link rate at large sizes (mi300x allgather at
    1 GiB: 18% of the bound at x1, 66% at x8); more instances cost threadblocks and latency, so
    they are a per-size choice. Each candidate is timed at the first count as before, then at each
    higher count (doubling) only where it may matter (:meth:`run`); :meth:`at` gives the times of
    one count, ``__call__`` those of the first.

    The file that serves a range is compiled again with that range's byte bounds (as the lock-step
    path does), which can change its messages per step; ``compiled`` is shared with
    :func:`choose_ranges`, so a range whose options equal the solve's reuses the compile here.
    Simulation runs in :meth:`run`, which stops with :class:`ProgramBudgetExceeded` before the
    first count's timing would spend more than ``budget`` estimated work (:func:`program_cost`);
    the higher counts have a ``budget`` of their own (so the first count's timing, which decides
    whether the program model decides at all, is as before), spent largest size first, and stop
    with a note where it runs out.
    """

    name = "program"

    def __init__(self, result: SolveResult, topology: Topology, xml: XmlOptions,
                 calibration: Any = None, budget: float = math.inf,
                 prune_factor: float = PRUNE_FACTOR, instances: Sequence[int] | None = None
                 ) -> None:
        self.result = result
        self.topology = topology
        self.xml = xml
        self.calibration = calibration
        self.budget = budget
        self.prune_factor = prune_factor
        self.instances = tuple(dict.fromkeys([xml.instances, *sorted(
            i for i in (instances or ()) if i > xml.instances)]))
        """Instance counts timed: the solve's own first, then the higher ones tried."""
        self.compiled: XmlCache = {}
        self.notes: list[str] = []
        self.cost = 0
        """Estimated work spent so far (:func:`program_cost` units)."""
        self.instances_cost = 0
        """The part of ``cost`` spent on the higher instance counts (their own ``budget``)."""
        self.simulated = 0
        """(candidate, instances, size) triples simulated."""
        self.skipped = 0
        """(candidate, instances, size) triples the prunes skipped."""
        self.stopped: str | None = None
        """Why the higher instance counts were not all tried (the budget), else None."""
        self.cut: tuple[int, str] | None = None
        """Where the first count's timing ran out of budget after deciding some sizes: the
        smallest size it decided, and why it stopped (None when it decided every size)."""
        self.decided: frozenset[int] = frozenset()
        """The sizes the program model decides; the others are ranked by lock-step."""
        self._programs: dict[tuple[str, int], Any] = {}
        self._times: dict[tuple[str, int], list[float]] | None = None

    def _program(self, c: Candidate, instances: int) -> Any | None:
        """The candidate's parsed full-range XML at ``instances``, or None (with a note) when it
        has none."""
        from .emit.xml_parse import parse_program

        key = (c.name, instances)
        if key not in self._programs:
            got = compiled_xml(self.compiled, c, replace(self.xml, instances=instances))
            if isinstance(got, str):
                at = f" at x{instances}" if instances != self.xml.instances else ""
                self.notes.append(f"{c.name} passed over by the program model{at}: {got}")
                progress.note(self.notes[-1])
                self._programs[key] = None
            else:
                self._programs[key] = parse_program(got[0], f"{c.name}.xml", self.xml.profile)
        return self._programs[key]

    def run(self) -> dict[tuple[str, int], list[float]]:
        """Every (candidate, instance count)'s time at every size.

        The first count: largest size first, so the most expensive sizes meet the budget first,
        and at each size the candidates fastest by lock-step first, pruned by lock-step
        (:data:`PRUNE_FACTOR`). Then, largest size first, each higher count ``2i``: a candidate
        is compiled and simulated at a size only where, at the count before, it ran within
        ``2i / i`` times the prune factor of the fastest candidate at that count and, from the
        third count on, that count beat the one before it
        (once doubling stops paying, doubling again is not tried). All counts, no clock, so two
        runs decide alike.

        Where the first count's budget runs out after some sizes were timed, those sizes keep the
        program model's ranking and the smaller ones are ranked by lock-step (:attr:`cut`,
        :meth:`decided_by`); the higher counts are tried at the timed sizes only. Before, one
        size over budget sent every size back to lock-step: dgx_h100 x 8 allreduce ran out at
        1 MiB, and its 1 GiB file was lock-step's pick.

        Measured (1 KB..1 GB, shared 2-core machine): the phase takes 2-4x the single-count one
        (mi300x allgather 584 simulations, 4.5 s; dgx_a100 x2 allgather 446, 21 s), because in
        this model more instances pay at nearly every size (mi300x direct x8 is faster than x1
        from 1 KB: 0.1% there, 72% at 1 GB). A rule that stopped trying a count below the size
        where it gained under 1% cut only 16% of the simulations (mi300x) and wrote three files
        (x1, x2, x8) where one x8 file is at least as fast everywhere, so it was not kept; the
        budget bounds the work either way.

        Why the count ratio widens the prune: doubling the instances can speed a file up by more
        than the prune factor, while the fastest file at the count before gains less, so their
        order at ``i`` does not predict it at ``2i``. Measured on trn1_32 allgather at 1 GiB: milp
        took 7,699 µs at x1 against trees_aligned's 3,776 (2.04 times) and 2,863 µs at x2, the
        fastest file; a prune by the plain factor never timed it at x2."""
        from .timing.program import program_model, program_times_us

        if self._times is not None:
            return self._times
        cands = self.result.candidates
        sizes = [p.bytes for p in self.result.best.costs]
        times = {(c.name, i): [math.inf] * len(sizes) for c in cands for i in self.instances}
        models: dict[str, Any] = {}
        largest_first = sorted(range(len(sizes)), key=lambda i: -sizes[i])

        def runs(c: Candidate, inst: int, i: int) -> bool:
            return bool(runs_at(np.array([sizes[i]]), c.schedule.collective.buffer_chunks,
                                inst)[0])

        def simulate(c: Candidate, inst: int, i: int, first: bool) -> float:
            program = self._program(c, inst)
            if program is None:
                return math.inf
            cost = program_cost(program, sizes[i], self.xml.profile)
            if first and self.cost + cost > self.budget:
                raise ProgramBudgetExceeded(self.cost, cost, self.budget, sizes[i], c.name)
            if not first and self.instances_cost + cost > self.budget:
                raise _StopInstances(f"{c.name} x{inst} on {sizes[i]} bytes would pass their "
                                     f"budget ({self.budget:,.0f} op-iterations)")
            if not first:
                self.instances_cost += cost
            self.cost += cost
            self.simulated += 1
            if program.proto not in models:
                models[program.proto] = program_model(self.topology, program.proto,
                                                      self.calibration)
            t = program_times_us(program, self.topology, [sizes[i]],
                                 model=models[program.proto], profile=self.xml.profile)[0]
            times[(c.name, inst)][i] = t
            return t

        base = self.instances[0]
        decided: list[int] = []
        try:
            for i in largest_first:
                order = sorted((c for c in cands if runs(c, base, i)),
                               key=lambda c: (c.costs[i].time_us, c.report.steps, c.name))
                best = math.inf
                for c in order:
                    if c.costs[i].time_us > self.prune_factor * best:
                        self.skipped += 1
                        continue
                    best = min(best, simulate(c, base, i, True))
                decided.append(i)
        except ProgramBudgetExceeded as exc:
            if not decided:
                raise
            # the sizes timed so far keep the program model's verdict; below them (the cheaper
            # sizes, where files differ least) every candidate is ranked by lock-step
            self.cut = (sizes[min(decided, key=lambda i: sizes[i])], str(exc))
            for i in range(len(sizes)):
                if i not in decided:
                    for c in cands:
                        times[(c.name, base)][i] = c.costs[i].time_us
        self.decided = frozenset(sizes[i] for i in decided)
        try:
            for i in largest_first:     # sizes outer: the budget goes to the largest sizes first
                if i not in decided:
                    continue
                for k, inst in enumerate(self.instances[1:], start=1):
                    prev = self.instances[k - 1]
                    before = self.instances[k - 2] if k >= 2 else None
                    ref = min(times[(c.name, prev)][i] for c in cands)
                    order = sorted(cands, key=lambda c: (times[(c.name, prev)][i], c.name))
                    for c in order:
                        t = times[(c.name, prev)][i]
                        if not math.isfinite(t) or not runs(c, inst, i):
                            continue
                        if t > self.prune_factor * (inst / prev) * ref or (
                                before is not None and not t < times[(c.name, before)][i]):
                            self.skipped += 1
                            continue
                        simulate(c, inst, i, False)
        except _StopInstances as exc:
            self.stopped = str(exc)
        self._times = times
        return times

    def decided_by(self, nbytes: int) -> str:
        """Which model ranks the candidates at ``nbytes``: ``program``, or ``lockstep`` below
        the sizes the budget let it time (:attr:`cut`)."""
        self.run()
        return "program" if nbytes in self.decided else "lockstep"

    def at(self, candidate: Candidate, instances: int) -> list[float]:
        """The candidate's times compiled with ``instances`` (``inf`` where it was not timed)."""
        run = self.run()
        key = (candidate.name, instances)
        return run[key] if key in run else [math.inf] * len(self.result.best.costs)

    def __call__(self, candidate: Candidate) -> list[float]:
        return self.at(candidate, self.instances[0])


COMPILE_WEIGHT = 4
"""Op-iterations one compiled and verified XML step is worth in :func:`estimated_program_work`
(compile + interpreter about 60 µs a step on trn1_32, simulation 8-16 µs an op-iteration)."""


def estimated_program_work(result: SolveResult, xml: XmlOptions) -> int:
    """Work the program model cannot avoid, estimated from the schedules before anything is
    compiled: every candidate compiled once (:data:`COMPILE_WEIGHT` per step) and timed once at the
    largest size. Steps per rank come from :func:`synth.guards.xml_estimate` (an under-estimate:
    nops, copies and unfused sends come on top), grid iterations from the chunk size against the
    protocol's slice (spec §3.5). A 512-rank machine's candidates are far over the budget here,
    so ``auto`` decides by lock-step without spending minutes compiling files it cannot time."""
    from .emit.interpreter import LL128_CHUNK_BYTES, LL_CHUNK_BYTES, SIMPLE_CHUNK_BYTES
    from .guards import xml_estimate

    slice_bytes = {"Simple": SIMPLE_CHUNK_BYTES, "LL": LL_CHUNK_BYTES,
                   "LL128": LL128_CHUNK_BYTES}.get(xml.proto, SIMPLE_CHUNK_BYTES)
    largest = max(p.bytes for p in result.best.costs)
    total = 0
    for c in result.candidates:
        est = xml_estimate(c.schedule, xml.instances)
        steps = (est.receives + est.sends) * xml.instances * c.schedule.collective.num_ranks
        chunk = largest / max(1, c.schedule.collective.buffer_chunks * xml.instances)
        total += steps * (COMPILE_WEIGHT + max(1, math.ceil(chunk / slice_bytes)))
    return int(total)


class _StopInstances(Exception):
    """The higher instance counts would pass the budget: they stop where they are."""


class ProgramBudgetExceeded(Exception):
    """:meth:`ProgramTimeModel.run` would pass its budget (not an error: ``auto`` falls back)."""

    def __init__(self, spent: int, next_cost: int, budget: float, size: int, name: str) -> None:
        super().__init__(f"the program model's estimated cost passed its budget ({budget:,.0f} "
                         f"op-iterations) after {spent:,}, at {name} on {size} bytes "
                         f"({next_cost:,} more)")


def winners_model(result: SolveResult, topology: Topology, xml: XmlOptions | None,
                  winners_by: str = "auto", calibration: Any = None,
                  budget: float = PROGRAM_COST_BUDGET, instances: Sequence[int] | None = None
                  ) -> tuple[TimeModel, str, list[str]]:
    """The model that decides the winners, its name (``program`` or ``lockstep``) and notes.

    ``instances``: the instance counts the program model lets each candidate compete at
    (:class:`ProgramTimeModel`; ``synth solve`` passes :data:`synth.catalog.select.INSTANCES`
    when ``--instances`` is not given); None: ``xml.instances`` alone. The lock-step model has no
    notion of instances (it times the wire), so with it every file has ``xml.instances``.

    The program model times what is written (threadblocks, grid iterations, FIFO slots, shared
    links), so it decides wherever it can: ``program`` always (no budget), ``auto`` when the ranks
    are GPUs and its estimated work fits ``budget`` (:data:`PROGRAM_COST_BUDGET`; a count, not a
    clock, so two runs decide alike). Without XML there is no program to time, and ``lockstep``
    is asked for: both use the lock-step model. A note says why whenever ``auto`` falls back.

    Why not on other accelerators (:func:`synth.timing.program.not_a_gpu`): its figures are a GPU's,
    and they decide close calls. On trn1_32 allgather at 1 GiB it ranked ``milp_coarse`` x2
    (2,865.1 µs; 94.54% of the bound by lock-step) above ``trees_aligned`` x1 (2,894.4 µs;
    95.35%): 1% apart, a gap that rests on NCCL's Ampere figures (a threadblock capped at 24 GB/s
    for Simple: in the first tenth of the run the 48 GB/s ring links averaged 38.4) and on where
    the compiler puts the first local copies, in blocks a NeuronCore does not have. There the
    lock-step model, priced with the machine's own link figures, decides; ``--winners-by
    program`` still asks for the GPU model.
    """
    if winners_by not in WINNERS_BY:
        raise SynthError(f"winners_by must be one of {', '.join(WINNERS_BY)}, got '{winners_by}'")
    if winners_by == "lockstep":
        return lockstep_model, "lockstep", []
    if xml is None or xml_unsupported_reason(result.best.schedule, xml):
        return lockstep_model, "lockstep", ["winners by the lock-step model: no XML to time "
                                            "with the program model"]
    if winners_by == "auto":
        from .timing.program import not_a_gpu

        why = not_a_gpu(topology)
        if why:
            return lockstep_model, "lockstep", [f"winners by the lock-step model: {why} "
                                                "(--winners-by program times them anyway)"]
        ahead = estimated_program_work(result, xml)
        if ahead > budget:
            return lockstep_model, "lockstep", [
                f"winners by the lock-step model: compiling and timing the {len(result.candidates)}"
                f" candidates once at the largest size is estimated at {ahead:,} op-iterations "
                f"before any is compiled, over the program model's budget ({budget:,.0f}; "
                "--winners-by program times them all)"]
    model = ProgramTimeModel(result, topology, xml, calibration,
                             math.inf if winners_by == "program" else budget,
                             instances=instances)
    counts = "/".join(f"x{i}" for i in model.instances)
    with progress.phase(f"program model: timing {len(result.candidates)} candidates "
                        f"({counts})"):
        try:
            model.run()
        except ProgramBudgetExceeded as exc:
            return lockstep_model, "lockstep", [
                *model.notes, f"winners by the lock-step model: {exc} (--winners-by program "
                "times them all)"]
    stopped = ([f"instance counts above x{model.instances[0]} not all tried: {model.stopped}"]
               if model.stopped else [])
    if model.cut is not None:
        stopped.append(f"winners by the lock-step model below {model.cut[0]} bytes: {model.cut[1]}"
                       " (--winners-by program times them all)")
    return model, "program", [*model.notes, *stopped,
                              f"winners by the program model at instances {counts}: "
                              f"{model.simulated} (candidate, instances, size) triples simulated "
                              f"({model.cost:,} op-iterations estimated), {model.skipped} skipped "
                              f"by the prunes (factor {model.prune_factor:g})"]


@dataclass(frozen=True)
class SizeRange:
    """Message sizes ``lo..hi`` (inclusive; ``hi`` 0 = unbounded) and the candidate serving them."""

    lo: int
    hi: int
    candidate: Candidate
    sizes: tuple[int, ...]
    """The requested sizes that fall in the range (where its time and % of bound are reported)."""
    xml: str | None = None
    reports: tuple[Any, ...] = ()
    model_us: tuple[float, ...] = ()
    """The deciding model's time at each of ``sizes`` (:data:`TimeModel`)."""
    instances: int = 1
    """The instance count its file is compiled with (:class:`ProgramTimeModel` chooses it)."""
    decided_by: str | None = None
    """The model that ranked the range's largest size, where it differs by size
    (:meth:`ProgramTimeModel.decided_by`); None: the solve's ``winners_by``."""

    def to_dict(self, file: str | None) -> dict[str, Any]:
        return {"min_bytes": self.lo, "max_bytes": self.hi,
                "algorithm": self.candidate.schedule.algorithm, "candidate": self.candidate.name,
                "instances": self.instances, "file": file}


def _config(c: Candidate, xml: XmlOptions | None, instances: int | None = None) -> Config:
    return Config(c.name, c.schedule.collective.chunks_per_rank, xml.proto if xml else "Simple",
                  instances if instances is not None else xml.instances if xml else 1)


def model_instances(model: TimeModel, xml: XmlOptions | None) -> tuple[int, ...]:
    """The instance counts ``model`` times (the first is the solve's own): a
    :class:`ProgramTimeModel`'s, else ``xml.instances`` alone."""
    return tuple(getattr(model, "instances", ())) or ((xml.instances,) if xml else (1,))


def config_times(model: TimeModel, candidate: Candidate, instances: int) -> Sequence[float]:
    """``candidate``'s times under ``model`` compiled with ``instances`` (a model without a notion
    of instances, such as :func:`lockstep_model`, gives its one profile)."""
    at = getattr(model, "at", None)
    return at(candidate, instances) if at is not None else model(candidate)


def rank_sizes(result: SolveResult, xml: XmlOptions | None, model: TimeModel = lockstep_model
               ) -> tuple[list[BucketTuning], dict[Config, Candidate]]:
    """Per size bucket (:func:`synth.catalog.select.make_buckets` over the sizes inside the XML's
    byte range), the candidates fastest first under ``model``.

    The configurations are (candidate, instance count) for every count ``model`` times
    (:func:`model_instances`; a higher count only where it was timed somewhere). Where a file is
    written, a configuration whose ``nchunksperloop`` does not divide a size's element count is
    never selected there by the runtime (:func:`synth.catalog.select.runs_at`), so it ranks after
    every one that runs there; ties go to fewer instances, then the faster by lock-step
    (``model`` may leave several at ``inf``: :class:`ProgramTimeModel`), then fewer steps, then
    the name. Each bucket carries its configurations' times (``inf`` where they do not run) for
    the near-tie settling (:data:`NEAR_TIE`).
    """
    sizes = [p.bytes for p in result.best.costs]
    lo = xml.min_bytes if xml else 0
    hi = xml.max_bytes if xml and xml.max_bytes else None
    inside = [s for s in sizes if s >= lo and (hi is None or s <= hi)]
    if not inside:
        raise SynthError(f"no size of the sweep ({sizes[0]}..{sizes[-1]} bytes) lies in the XML's "
                         f"byte range {lo}..{hi or 'unbounded'} (--min-bytes/--max-bytes)")
    buckets = make_buckets(inside)
    # the outer buckets reach the file's byte range: sizes outside the sweep go to its ends
    buckets[0] = replace(buckets[0], lo=lo)
    buckets[-1] = replace(buckets[-1], hi=hi or 0)
    levels = model_instances(model, xml)
    times: dict[Config, dict[int, float]] = {}
    lookup: dict[Config, Candidate] = {}
    for c in result.candidates:
        for k, inst in enumerate(levels):
            t = list(config_times(model, c, inst))
            if k and not any(math.isfinite(x) for x in t):
                continue    # a higher count never timed: not a configuration
            cfg = _config(c, xml, inst)
            lookup[cfg] = c
            times[cfg] = dict(zip(sizes, t, strict=True))
    wire = {c.name: {p.bytes: p.time_us for p in c.costs} for c in result.candidates}
    out = []
    for b in buckets:
        def runs(cfg: Config, size: int = b.size) -> bool:
            return xml is None or bool(runs_at(np.array([size]),
                                               lookup[cfg].schedule.collective.buffer_chunks,
                                               cfg.instances)[0])

        def key(cfg: Config, size: int = b.size) -> tuple:
            c = lookup[cfg]
            return (not runs(cfg), times[cfg][size], cfg.instances, wire[c.name][size],
                    c.report.steps, c.name)
        ranking = sorted(lookup, key=key)
        at = {cfg: times[cfg][b.size] if runs(cfg) else math.inf for cfg in ranking}
        out.append(BucketTuning(b, ranking, len(ranking), len(ranking), ranking[0], at))
    return out, lookup


def _range_options(xml: XmlOptions, lo: int, hi: int, instances: int | None = None
                   ) -> XmlOptions:
    """The file's byte range: inclusive ``hi`` (exec, rccl) or exclusive ``hi + 1`` (legacy,
    spec §2.1); 0 stays unbounded. ``instances``: the range's own count (default the solve's)."""
    top = hi + 1 if hi and xml.profile == "legacy" else hi
    return replace(xml, min_bytes=lo, max_bytes=top,
                   instances=xml.instances if instances is None else instances)


def choose_ranges(result: SolveResult, xml: XmlOptions | None, model: TimeModel = lockstep_model
                  ) -> tuple[list[SizeRange], list[str]]:
    """The winner of every size range, each with its interpreter-verified XML (when ``xml``).

    Selection is the catalog's (:func:`synth.catalog.select.choose`): adjacent buckets with one
    winner merge into one range, one file, and near ties (:data:`NEAR_TIE`) do not split ranges;
    a configuration (candidate, instances) whose file cannot be produced (a hard limit
    of the runtime, named with its excess by the compiler) is excluded with that reason and its
    buckets go to their next-best candidate. Returns the ranges and the notes on exclusions.

    Each range's file is compiled with that range's byte bounds; a model that already compiled
    the candidates (:class:`ProgramTimeModel`, its ``compiled`` cache) lends them, so a range whose
    options equal the ones it compiled with is not compiled again.
    """
    notes: list[str] = []
    if xml is not None:
        why = xml_unsupported_reason(result.best.schedule, xml)
        if why:     # the collective has no MSCCL-IR form: the same for every candidate
            notes.append(f"no XML: {why}")
            xml = None
    tunings, lookup = rank_sizes(result, xml, model)
    made: XmlCache = getattr(model, "compiled", {})

    def attempt(r: Range) -> str | None:
        if xml is None:
            return None
        got = compiled_xml(made, lookup[r.config],
                           _range_options(xml, r.lo, r.hi, r.config.instances))
        return got if isinstance(got, str) else None

    choice = choose(tunings, attempt, NEAR_TIE)
    sizes = [p.bytes for p in result.best.costs]
    ranges = []
    for r in choice.ranges:
        inside = tuple(s for s in sizes if s >= r.lo and (not r.hi or s <= r.hi))
        cand = lookup[r.config]
        got = (made.get((cand.name, _range_options(xml, r.lo, r.hi, r.config.instances)))
               if xml is not None else None)
        text, reports = got if isinstance(got, tuple) else (None, ())
        at = dict(zip(sizes, config_times(model, cand, r.config.instances), strict=True))
        by = getattr(model, "decided_by", None)
        ranges.append(SizeRange(r.lo, r.hi, cand, inside, text, reports,
                                tuple(at[s] for s in inside), r.config.instances,
                                by(inside[-1]) if by is not None and inside else None))
    several = len(model_instances(model, xml)) > 1
    notes += [f"{cfg.family}{f' x{cfg.instances}' if several else ''} passed over: {why}"
              for cfg, why in choice.excluded.items()]
    if xml is not None:
        # a runtime never selects a file where it does not run, so the deciding model may not
        # time it there (ProgramTimeModel: inf); the missed chance is judged by lock-step
        notes += _never_selected(result, tunings, choice, lookup, lockstep_model,
                                 "" if model is lockstep_model else " by the lock-step model")
    return ranges, notes


def _never_selected(result: SolveResult, tunings: Sequence[BucketTuning], choice: Any,
                    lookup: dict[Config, Candidate], model: TimeModel, by: str = "") -> list[str]:
    """Notes on candidates faster than a bucket's winner whose file a runtime would not select
    there (``nchunksperloop`` does not divide the element count, spec §3.1)."""
    sizes = [p.bytes for p in result.best.costs]
    times = {cfg: dict(zip(sizes, config_times(model, c, cfg.instances), strict=True))
             for cfg, c in lookup.items()}
    winner = {b: r.config for r in choice.ranges for b in r.buckets}
    missed: dict[str, list[int]] = {}
    chunks = {c.name: c.schedule.collective.buffer_chunks for c in result.candidates}
    for t in tunings:
        size = t.bucket.size
        won = times[winner[t.bucket.index]][size]
        for cfg in t.ranking:
            c = lookup[cfg]
            if times[cfg][size] < won and not runs_at(
                    np.array([size]), c.schedule.collective.buffer_chunks, cfg.instances)[0] \
                    and size not in missed.get(c.name, ()):
                missed.setdefault(c.name, []).append(size)
    return [f"{name} would be faster{by} at {len(at)} size(s) ({at[0]}..{at[-1]} bytes) but its "
            f"nchunksperloop ({chunks[name]}) "
            f"does not divide their fp32 element counts, so no runtime selects it there (spec §3.1)"
            for name, at in missed.items()]


@dataclass
class Written:
    """What :func:`write_outputs` put on disk (or, from a ``prepare_*`` function, will put there
    once :func:`commit` runs), and why an output was left out."""

    files: list[Path]
    xml_reports: list[Any]
    notes: list[str]
    plan_reports: list[Any] = field(default_factory=list)
    """MSCCL++ plan verification reports (``--format mscclpp``)."""
    ranges: list[SizeRange] = field(default_factory=list)
    range_files: list[str | None] = field(default_factory=list)
    """The XML serving each range (None without XML)."""
    winners_by: str = "lockstep"
    """The model that chose the ranges' winners (:func:`winners_model`)."""
    pending: dict[Path, str] = field(default_factory=dict)
    """Produced and verified in memory, not yet on disk: path -> text (empty once committed)."""
    out_dir: Path | None = None


def commit(written: Written, extra: dict[Path, str] | None = None) -> Written:
    """Write what a ``prepare_*`` function produced, plus ``extra`` files, all or none
    (:func:`synth.files.write_all`); ``files`` then lists everything written."""
    outputs = {**written.pending, **(extra or {})}
    if outputs:
        assert written.out_dir is not None
        written.files = write_all(written.out_dir, list(outputs.items()))
    written.pending = {}
    return written


@dataclass(frozen=True)
class PlanTarget:
    """Write an MSCCL++ execution plan instead of the XML: its options and the topology whose
    nodes decide memory (same node) versus port (across NICs) channels."""

    topology: Topology
    options: PlanOptions = field(default_factory=PlanOptions)


def write_outputs(schedule: Schedule, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                  plan: PlanTarget | None = None, tag: str = "") -> Written:
    """:func:`prepare_outputs`, then write its files (all or none)."""
    return commit(prepare_outputs(schedule, out_dir, xml, plan, tag))


def prepare_outputs(schedule: Schedule, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                    plan: PlanTarget | None = None, tag: str = "") -> Written:
    """Write the schedule JSON and, where MSCCL-IR can express it, the verified XML beside it
    (or, with ``plan``, the verified MSCCL++ execution plan instead of the XML).

    Everything is produced and verified in memory; nothing is written here (:func:`commit` writes
    it), so the caller can run its own late checks first and a failure leaves nothing behind. File
    names carry every option that changes the file (:func:`schedule_stem`, :func:`xml_file_name`),
    so runs with other options write beside each other instead of over each other.
    """
    outputs: list[tuple[Path, str]] = [(out_dir / schedule_file_name(schedule, tag),
                                        schedule.to_json())]
    reports: list[Any] = []
    notes: list[str] = []
    if plan is not None:
        reason = plan_unsupported_reason(schedule)
        if reason:
            notes.append(f"no MSCCL++ plan: {reason}")
            return _pending(out_dir, outputs, [], notes)
        text, report = emit_verified_plan(schedule, plan.topology, plan.options)
        outputs.append((out_dir / plan_file_name(schedule, plan.options, tag), text))
        return _pending(out_dir, outputs, [], notes, [report])
    if xml is not None:
        reason = xml_unsupported_reason(schedule, xml)
        if reason:
            notes.append(f"no XML: {reason}")
        else:
            with progress.phase(f"compile {schedule.algorithm} to {xml.profile} XML and run "
                                "the interpreter"):
                text, reports = emit_verified_xml(schedule, xml)
            outputs.append((out_dir / xml_file_name(schedule, xml, tag), text))
    return _pending(out_dir, outputs, reports, notes)


def _pending(out_dir: Path, outputs: list[tuple[Path, str]], reports: list[Any], notes: list[str],
             plan_reports: list[Any] | None = None) -> Written:
    return Written([path for path, _ in outputs], reports, notes, plan_reports or [],
                   pending=dict(outputs), out_dir=out_dir)


def write_best(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
               plan: PlanTarget | None = None, tag: str = "") -> tuple[Candidate, Written]:
    """:func:`prepare_best`, then write its files (all or none)."""
    best, written = prepare_best(result, out_dir, xml, plan, tag)
    return best, commit(written)


def prepare_best(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                 plan: PlanTarget | None = None, tag: str = "") -> tuple[Candidate, Written]:
    """The best candidate whose outputs can all be produced and verified, and those outputs, in
    memory (:func:`commit` writes them).

    A schedule can be correct yet not fit a runtime's hard limits (threadblocks, steps, depid):
    then the next candidate is tried, and the notes say what was passed over and why.
    """
    skipped: list[str] = []
    for candidate in result.candidates:
        try:
            written = prepare_outputs(candidate.schedule, out_dir, xml, plan, tag)
        except SynthError as exc:
            if (xml is None and plan is None) or (len(result.candidates) == 1
                                                   and not result.notes):
                raise
            skipped.append(f"{candidate.name} passed over: {exc.message}")
            progress.note(skipped[-1])
            continue
        written.notes[:0] = [*result.notes, *skipped]
        return candidate, written
    raise SynthError("no candidate could be emitted: " + "; ".join([*result.notes, *skipped])
                     + ("; --no-xml writes the schedule alone" if xml is not None else ""))


def config_index(entries: Sequence[tuple[Path, int, int, str]]) -> str:
    """``MSCCL_CONFIG`` for microsoft/msccl (spec §0): one ``<load>`` per file with its byte range
    (``maxbytes`` exclusive, ``-1`` unbounded) and protocol; absolute paths, because the runtime
    opens them relative to the job's working directory otherwise."""
    for path, *_ in entries:
        if any(ch in str(path) for ch in '"<>&\t\n\r'):
            raise SynthError(f"the path '{path}' contains a character MSCCL_CONFIG cannot hold")
    lines = [f'  <load path="{path}" minbytes="{lo}" maxbytes="{hi + 1 if hi else -1}" '
             f'proto="{proto}"/>\n' for path, lo, hi, proto in entries]
    return "<msccl_algos>\n" + "".join(lines) + "</msccl_algos>\n"


def ranges_table(result: SolveResult, ranges: Sequence[SizeRange], files: Sequence[str | None],
                 winners_by: str = "lockstep") -> list[dict[str, Any]]:
    """One row per range: the algorithm, and at the largest requested size in the range (the one
    the row's bandwidth is quoted at) its lock-step time and % of bound (the bound is a wire
    bound: lock-step is the model comparable with it) and ``decided_us``, the time under the model
    that chose it (``winners_by``; null where that model gives none)."""
    rows = []
    for r, f in zip(ranges, files, strict=True):
        at = {p.bytes: p for p in r.candidate.costs}
        p = at[r.sizes[-1]] if r.sizes else None
        decided = r.model_us[-1] if r.sizes and r.model_us else None
        rows.append({"min_bytes": r.lo, "max_bytes": r.hi, "algorithm": r.candidate.name,
                     "instances": r.instances, "at_bytes": p.bytes if p else None,
                     "time_us": round(p.time_us, 6) if p else None,
                     "pct_of_bound": round(p.pct_of_bound, 4) if p else None,
                     "winners_by": r.decided_by or winners_by,
                     "decided_us": round(decided, 6) if decided is not None
                     and math.isfinite(decided) else None, "file": f})
    return rows


def ranges_markdown(result: SolveResult, rows: Sequence[dict[str, Any]]) -> str:
    from .sizes import format_size

    models = list(dict.fromkeys(r["winners_by"] for r in rows)) or ["lockstep"]
    by = "program" if "program" in models else models[0]
    mixed = (" (lock-step in the rows it names: the program model's budget ran out before "
             "their sizes, so `program µs` is lock-step's time there)" if len(models) > 1 else "")
    head = (f"# {result.collective.name} on {result.topology.name} ({result.topology.num_ranks} "
            f"ranks): the file serving each message size\n\nWinners chosen by the {by} model"
            f"{mixed}. At the largest swept size of the range: the {by} model's time, and the lock-step "
            f"time and % of bound (bound: {result.bound.method}); `max` is inclusive, "
            f"0 = unbounded; instances: the channel sets the file runs on.\n\n| min bytes | "
            f"max bytes | algorithm | instances | at | {by} µs | lock-step µs | % of bound | file |"
            f"\n|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['min_bytes']} | {r['max_bytes']} | "
        f"{r['algorithm']}{' (lock-step)' if r['winners_by'] != by else ''} | {r['instances']} | "
        f"{format_size(r['at_bytes']) if r['at_bytes'] else '—'} | "
        f"{r['decided_us'] if r['decided_us'] is not None else '—'} | "
        f"{r['time_us'] if r['time_us'] is not None else '—'} | "
        f"{r['pct_of_bound'] if r['pct_of_bound'] is not None else '—'} | "
        f"{Path(r['file']).name if r['file'] else '—'} |\n" for r in rows)
    return head + body


def write_winners(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                  model: TimeModel = lockstep_model, tag: str = "",
                  winners_by: str = "lockstep") -> Written:
    """:func:`prepare_winners`, then write its files (all or none)."""
    return commit(prepare_winners(result, out_dir, xml, model, tag, winners_by))


def prepare_winners(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                    model: TimeModel = lockstep_model, tag: str = "",
                    winners_by: str = "lockstep") -> Written:
    """Produce, for every size range, its winner's schedule JSON and verified XML; with more than one
    range also the ``MSCCL_CONFIG`` index and the range table (``<prefix>.ranges.md``).

    Everything is produced and verified in memory (:func:`choose_ranges`); :func:`commit` writes
    it. Names are :func:`schedule_file_name` and :func:`xml_file_name` (which
    carries the byte range of each file); ``tag`` as there. ``model`` decides the winners and
    ``winners_by`` names it in the range table (:func:`winners_model` gives both).
    """
    try:
        ranges, notes = choose_ranges(result, xml, model)
    except SynthError as exc:
        if not result.notes:
            raise
        raise SynthError(f"{exc.message}; passed over before: {'; '.join(result.notes)}"
                         + ("; --no-xml writes the schedule alone" if xml is not None else ""),
                         exit_code=exc.exit_code) from None
    notes = [*result.notes, *notes]  # candidates the size guards passed over, first
    outputs: dict[Path, str] = {}
    range_files: list[str | None] = []
    reports: list[Any] = []
    entries: list[tuple[Path, int, int, str]] = []
    single = len(ranges) == 1
    for r in ranges:
        sched = r.candidate.schedule
        outputs[out_dir / schedule_file_name(sched, tag)] = sched.to_json()
        if r.xml is None or xml is None:
            range_files.append(None)
            continue
        name = xml_file_name(sched, _range_options(xml, r.lo, r.hi, r.instances), tag)
        outputs[out_dir / name] = r.xml
        range_files.append(str(out_dir / name))
        entries.append((Path(out_dir / name).resolve(), r.lo, r.hi, xml.proto))
        reports.extend(rep for rep in r.reports if rep.mode not in {x.mode for x in reports})
    if not single:
        coll = result.collective
        prefix = f"{_name_part(result.topology.name)}_{coll.kind}" + \
            (f"_root{coll.root}" if coll.root is not None else "") + (f"_{_name_part(tag)}" if tag else "")
        rows = ranges_table(result, ranges, range_files, winners_by)
        outputs[out_dir / f"{prefix}.ranges.md"] = ranges_markdown(result, rows)
        if entries:
            outputs[out_dir / f"{prefix}.msccl_config"] = config_index(entries)
    return Written(list(outputs), reports, notes, ranges=ranges, range_files=range_files,
                   winners_by=winners_by, pending=outputs, out_dir=out_dir)
