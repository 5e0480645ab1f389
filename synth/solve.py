"""Solve = run an encoding, verify every candidate, cost it against the bound, pick the best.

This is the library entry point behind ``synth solve``; the CLI only parses and prints. Nothing is
returned (or written) that has not passed :func:`synth.verify.verify`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import progress
from .bounds import Bound, lower_bound
from .collectives import Collective
from .cost import DEFAULT_SIZES, algbw_GBps, schedule_times_us
from .emit import XmlOptions, emit_verified_xml, xml_unsupported_reason
from .encodings import Options, run_encoding
from .errors import SynthError
from .files import atomic_write, ensure_writable_dir
from .guards import Budget, TooBig, check_schedule
from .mscclpp.emit import PlanOptions, emit_verified_plan, plan_unsupported_reason
from .schedule import Schedule
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

    The ``nccl`` baseline is priced as NCCL prices itself (:mod:`synth.nccl_model`: its tuner's
    algorithm, protocol and channels, with its latency floors), every other schedule by the α-β
    step model (:func:`synth.cost.schedule_times_us`).
    """
    bound = bound or lower_bound(topology, schedule.collective)
    if schedule_time_model(schedule) == "nccl":
        from .nccl_model import times_us as nccl_times_us
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
    if budget is not None:
        extra["budget"] = budget
    with progress.phase(f"encoding {encoding}"):
        found = run_encoding(encoding, topology, collective,
                             Options(algorithm=algorithm, chunks=chunks, time_limit_s=time_limit_s,
                                     extra=extra), notes)
    if budget is not None:
        found, passed = _within_budget(found, budget)
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
    return SolveResult(topology, collective, encoding, candidates[0], candidates, bound,
                       time.perf_counter() - start, notes=notes)


def _within_budget(found: dict[str, Schedule], budget: Budget
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
    program model (:mod:`synth.program_model`, ``runtime_proto`` = ``program``) where it was timed,
    else the protocol model (:mod:`synth.protocols`: the step model plus the protocol's launch floor
    and per-step synchronisation, best of Simple / LL / LL128, one instance). ``nccl_us`` is NCCL's
    own tuning-model time of what NCCL would run (:mod:`synth.nccl_model`). ``speedup`` =
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
    from .nccl_model import predict
    from .protocols import PROTOCOLS, predict_times_us

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
                "model": "synth.protocols: step model + protocol launch, per-step "
                         "synchronisation, channel caps, instances; " + self.source,
                "costs": [p.to_dict() for p in self.points]}


def runtime_profile(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                    proto: str = "Simple", instances: int = 1, calibration: Any = None
                    ) -> RuntimeProfile:
    """What ``--proto`` and ``--instances`` do to the time: the schedule run by the MSCCL runtime
    with that protocol over that many channel sets (:func:`synth.protocols.predict_times_us`, the
    model catalogs tune with). The step model alone (:func:`cost_profile`) is the wire: the same
    for every protocol, and what the lower bound is compared with."""
    from .protocols import default_model, max_message_bytes, predict_times_us

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


def write_schedule(schedule: Schedule, out_dir: Path, tag: str = "") -> Path:
    """Write the (already verified) schedule's canonical JSON atomically."""
    ensure_writable_dir(out_dir)
    return atomic_write(out_dir / schedule_file_name(schedule, tag), schedule.to_json())


DEFAULT_XML = XmlOptions()
"""The exec runtime, Simple protocol, one instance, all sizes."""


@dataclass
class Written:
    """What :func:`write_outputs` put on disk, and why an output was left out."""

    files: list[Path]
    xml_reports: list[Any]
    notes: list[str]
    plan_reports: list[Any] = field(default_factory=list)
    """MSCCL++ plan verification reports (``--format mscclpp``)."""


@dataclass(frozen=True)
class PlanTarget:
    """Write an MSCCL++ execution plan instead of the XML: its options and the topology whose
    nodes decide memory (same node) versus port (across NICs) channels."""

    topology: Topology
    options: PlanOptions = field(default_factory=PlanOptions)


def write_outputs(schedule: Schedule, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                  plan: PlanTarget | None = None, tag: str = "") -> Written:
    """Write the schedule JSON and, where MSCCL-IR can express it, the verified XML beside it
    (or, with ``plan``, the verified MSCCL++ execution plan instead of the XML).

    Everything is produced and verified in memory first; only then is anything written, each file
    atomically, so a failure leaves nothing half-written. File names carry every option that
    changes the file (:func:`schedule_stem`, :func:`xml_file_name`), so runs with other options
    write beside each other instead of over each other.
    """
    outputs: list[tuple[Path, str]] = [(out_dir / schedule_file_name(schedule, tag),
                                        schedule.to_json())]
    reports: list[Any] = []
    notes: list[str] = []
    stem = schedule_stem(schedule, tag)
    if plan is not None:
        reason = plan_unsupported_reason(schedule)
        if reason:
            notes.append(f"no MSCCL++ plan: {reason}")
            return Written(_write_all(out_dir, outputs), [], notes)
        text, report = emit_verified_plan(schedule, plan.topology, plan.options)
        outputs.append((out_dir / f"{stem}.mscclpp.json", text))
        return Written(_write_all(out_dir, outputs), [], notes, [report])
    if xml is not None:
        reason = xml_unsupported_reason(schedule, xml)
        if reason:
            notes.append(f"no XML: {reason}")
        else:
            with progress.phase(f"compile {schedule.algorithm} to {xml.profile} XML and run "
                                "the interpreter"):
                text, reports = emit_verified_xml(schedule, xml)
            outputs.append((out_dir / xml_file_name(schedule, xml, tag), text))
    return Written(_write_all(out_dir, outputs), reports, notes)


def _write_all(out_dir: Path, outputs: list[tuple[Path, str]]) -> list[Path]:
    """Create ``out_dir`` only now -- a failure while producing leaves no empty folder -- and write
    each file atomically."""
    ensure_writable_dir(out_dir)
    return [atomic_write(path, text) for path, text in outputs]


def write_best(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
               plan: PlanTarget | None = None, tag: str = "") -> tuple[Candidate, Written]:
    """Write the best candidate whose outputs can all be produced and verified.

    A schedule can be correct yet not fit a runtime's hard limits (threadblocks, steps, depid):
    then the next candidate is tried, and the notes say what was passed over and why.
    """
    skipped: list[str] = []
    for candidate in result.candidates:
        try:
            written = write_outputs(candidate.schedule, out_dir, xml, plan, tag)
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
