"""The main job where the ranks are not GPUs: one Neuron (or JAX) program for every message size.

``synth solve`` on Trainium or a TPU mesh (:func:`synth.timing.program.not_a_gpu`) runs the same
encodings as on GPUs (:func:`synth.solve.solve` gives their verified schedules), then, instead of
MSCCL-IR that no runtime there loads, writes the program the platform's framework runs::

    verified schedules ─► lowered into ring permutes       synth.closed.lower
    + composed strategies of the vendor's own calls         synth.closed.strategies
    ─► unit programs (one per strategy, any size)           synth.closed.columns
    ─► priced at every size by the closed-stack model       synth.closed.cost (nccom-test fit)
    ─► fastest per size bucket, merged into ranges          synth.select.buckets / ranges.choose
    ─► one module: a function per range, run() dispatching  synth.closed.emit.emit_ranges
    ─► every range proven on the NumPy stand-in             synth.closed.standin
    ─► deployed under OUT/neuron (OUT/jax)                  synth.outputs.layout

Every candidate is priced with the same model, Neuron's own single call included (the ``flat``
strategy: one ``xm.all_gather`` over every rank), so a synthesized schedule serves a size only
where the model says it beats the runtime's own call; each range reports its speed-up over it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import progress
from .closed.columns import Unit, build_unit, columns_for, per_rank_elements
from .closed.constraints import violations
from .closed.cost import CostModel, estimate, hardware_of, load_model
from .closed.emit import RangeProgram, emit_ranges
from .closed.lower import LoweredPlan
from .closed.mesh import mesh_for_topology
from .closed.nki import emit_nki, nki_platform
from .closed.reference import expected, random_inputs
from .closed.standin import run_jax_standin, run_neuron_standin, run_nki_standin
from .closed.strategies import COLLECTIVES, all_plans
from .errors import SynthError, VerificationError
from .outputs import jax as jax_out
from .outputs import neuron as neuron_out
from .outputs.layout import REPORT_FOLDER, SCHEDULE_FOLDER, deploy, runtime_lines
from .outputs.schedule_json import schedule_file_name
from .select.buckets import make_buckets
from .select.candidates import SolveResult
from .select.ranges import NEAR_TIE, BucketTuning, Config, choose
from .sizes import format_size

PLATFORMS = ("neuron", "jax")
DTYPE = "float32"
"""The element type the strategies are priced and proven with (nccl-tests' default)."""
LOWER_MAX_TRANSFERS = 200_000
"""Schedules with more transfers are not lowered (their permute tables would make a module of
tens of MB); a note says which."""
PROVE_COLUMNS = (1, 3)
"""Column counts every range's program is run at on the stand-in, the second with a tensor that
does not fill its last column (so the padding is exercised)."""


@dataclass(frozen=True)
class SizeRow:
    """One swept size: what serves it and its time against the vendor's own call."""

    bytes: int
    strategy: str
    time_us: float
    vendor_us: float

    @property
    def speedup(self) -> float:
        return self.vendor_us / self.time_us if self.time_us > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "strategy": self.strategy, "time_us": round(self.time_us, 4),
                "vendor_us": round(self.vendor_us, 4), "speedup": round(self.speedup, 4)}


@dataclass(frozen=True)
class ClosedRange:
    """One size range of the module: its strategy and its times at the range's largest size."""

    lo: int
    hi: int
    strategy: str
    origin: str
    """``vendor`` (the runtime's own single call), ``composed`` or ``schedule <algorithm>``."""
    time_us: float
    vendor_us: float
    calls: int
    schedule_file: str | None = None

    @property
    def speedup(self) -> float:
        return self.vendor_us / self.time_us if self.time_us > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"min_bytes": self.lo, "max_bytes": self.hi, "strategy": self.strategy,
                "origin": self.origin, "time_us": round(self.time_us, 4),
                "vendor_us": round(self.vendor_us, 4), "speedup": round(self.speedup, 4),
                "calls": self.calls, "schedule_file": self.schedule_file}


@dataclass
class ClosedOutcome:
    """What the closed-stack main job produced and wrote, and what the CLI prints."""

    result: SolveResult
    platform: str
    vendor: str
    """The strategy that is the runtime's own single call (what speed-ups are against)."""
    cost_model: str
    ranges: list[ClosedRange]
    sizes: list[SizeRow]
    files: list[Path]
    launch: list[str]
    proven: list[str]
    """The stand-in runs every written program passed (one line per range)."""
    notes: list[str] = field(default_factory=list)
    candidates: int = 0
    seconds: float = 0.0


def platform_for(topology: Any, fmt: str) -> str:
    """The closed platform of a format on a topology, or a one-line error where it cannot run."""
    hw = hardware_of(topology)
    if fmt == "neuron" and hw != "trainium":
        raise SynthError(f"--format neuron writes torch-neuronx programs for Trainium; "
                         f"{topology.name} is a TPU mesh: use --format jax")
    return fmt


def run_closed(result: SolveResult, platform: str, sizes: Sequence[int], out_dir: Path,
               calibration: str | None = None, tag: str = "") -> ClosedOutcome:
    """Rank every candidate at every size, choose ranges, prove and write the module (module
    docstring); everything is produced and proven before any file is written."""
    start = time.perf_counter()
    topology, kind = result.topology, result.collective.kind
    if kind not in COLLECTIVES:
        raise SynthError(f"closed stacks run {', '.join(COLLECTIVES)}; '{kind}' has no "
                         f"{platform} program (use --format msccl for the schedule alone)")
    if result.collective.custom is not None:
        raise SynthError("a custom collective has no closed-stack program")
    mesh = mesh_for_topology(topology)
    model = load_model(topology, mesh, calibration)
    notes: list[str] = []
    with progress.phase(f"building {platform} programs"):
        units = _units(result, mesh, topology, platform, notes)
    vendor = next((u for u in units if _is_vendor(u)), None)
    if vendor is None:
        raise SynthError(f"the runtime's own {kind} call is not valid on {platform} here")
    buckets = make_buckets(sizes)
    item = np.dtype(DTYPE).itemsize
    with progress.phase(f"pricing {len(units)} programs at {len(buckets)} sizes"):
        tunings, times = _rank(units, buckets, kind, mesh.size, item, model, platform)
    by_config = {_config(u, platform): u for u in units}
    proven: dict[str, str] = {}

    def attempt(r) -> str | None:
        unit = by_config[r.config]
        if unit.name not in proven:
            try:
                proven[unit.name] = _prove(unit, platform, topology)
            except (SynthError, VerificationError) as exc:
                return f"not proven on the stand-in: {exc}"
        return None

    with progress.phase("choosing ranges and proving them on the stand-in"):
        choice = choose(tunings, attempt, NEAR_TIE)
    notes += [f"{c.family} passed over: {why}" for c, why in choice.excluded.items()]
    chosen = [by_config[r.config] for r in choice.ranges]
    rows = [SizeRow(b.size, u.name, times[u.name][b.index], times[vendor.name][b.index])
            for r, u in zip(choice.ranges, chosen, strict=True) for b in buckets
            if b.index in r.buckets]
    title = _title(result, platform, model, vendor)
    ranges_code = [RangeProgram(r.lo, r.hi, u.program, u.elements,
                                _range_notes(u, times, vendor, buckets[r.buckets[-1]]))
                   for r, u in zip(choice.ranges, chosen, strict=True)]
    text = emit_ranges(platform, ranges_code, title)
    checks = _prove_module(text, ranges_code, platform, topology)
    files, schedules = _files(result, platform, text, chosen, choice.ranges, tag, topology,
                             checks)
    report = _report(result, platform, vendor, choice.ranges, chosen, times, buckets, rows,
                     schedules, model)
    coll = result.collective
    files[f"{REPORT_FOLDER}/{neuron_out.module_stem(topology.name, coll.kind, tag)}.{platform}.md"] = report
    key = f"{platform}:{neuron_out.module_stem(topology.name, coll.kind, tag)}"
    written, deploy_notes = deploy(Path(out_dir), key, files)
    notes += deploy_notes
    out_ranges = [ClosedRange(r.lo, r.hi, u.name, _origin(u),
                              times[u.name][r.buckets[-1]], times[vendor.name][r.buckets[-1]],
                              len(u.program.calls), schedules.get(u.name))
                  for r, u in zip(choice.ranges, chosen, strict=True)]
    modules = [p for p in written if p.suffix == ".py"]
    per_node = topology.num_ranks // topology.num_nodes
    return ClosedOutcome(result, platform, vendor.name, model.source, out_ranges, rows, written,
                         runtime_lines(Path(out_dir), [], modules, per_node, topology.num_nodes),
                         checks, notes, len(units), time.perf_counter() - start)


# ------------------------------------------------------------------------------ candidates
def _units(result: SolveResult, mesh, topology, platform: str, notes: list[str]) -> list[Unit]:
    """Every single-tensor composed strategy, and every verified schedule lowered, that the
    platform accepts (a note on each schedule it does not)."""
    kind = result.collective.kind
    units = list(_composed_units(kind, mesh, topology, platform))
    for cand in result.candidates:
        sched = cand.schedule
        if sched.num_transfers > LOWER_MAX_TRANSFERS:
            notes.append(f"{cand.name} not lowered: {sched.num_transfers:,} transfers (more than "
                         f"{LOWER_MAX_TRANSFERS:,})")
            continue
        try:
            unit = build_unit(LoweredPlan(kind, sched, cand.name), mesh, topology, DTYPE)
        except SynthError as exc:
            notes.append(f"{cand.name} not lowered: {exc.message}")
            continue
        problems = violations(unit.program, platform, topology)
        if problems:
            notes.append(f"{cand.name} lowered is not valid on {platform}: "
                         + "; ".join(str(p) for p in problems[:2]))
            continue
        units.append(unit)
    return units


def _composed_units(kind: str, mesh, topology, platform: str):
    """Every single-tensor composition of the runtime's calls the platform accepts, in
    :func:`all_plans` order (the runtime's own call is the first :func:`_is_vendor` of them)."""
    for plan in all_plans(kind, mesh, 1):
        unit = build_unit(plan, mesh, topology, DTYPE)
        if not violations(unit.program, platform, topology):
            yield unit


def _is_vendor(unit: Unit) -> bool:
    """The runtime's own single call over every rank (nccom-test's measurement)."""
    plan = unit.plan
    return (not isinstance(plan, LoweredPlan) and "flat" in plan.families(unit.program.mesh)
            and plan.vendor_calls == 1 and plan.pieces == 1 and len(unit.program.calls) == 1)


def _origin(unit: Unit) -> str:
    if isinstance(unit.plan, LoweredPlan):
        return f"schedule {unit.plan.algorithm}"
    return "vendor" if _is_vendor(unit) else "composed"


def _config(unit: Unit, platform: str) -> Config:
    chunks = (unit.plan.schedule.collective.chunks_per_rank if isinstance(unit.plan, LoweredPlan)
              else unit.plan.pieces)
    return Config(unit.name, chunks, platform, 1)


def _times(program, elements: int, buckets, kind: str, world: int, item: int,
           model: CostModel) -> list[float]:
    """``program``'s time at every bucket's size: a unit of ``elements`` run at its column count
    there."""
    return [estimate(program, model, columns_for(
        kind, per_rank_elements(kind, b.size, world, item), elements, world)).time_us
        for b in buckets]


def _rank(units: list[Unit], buckets, kind: str, world: int, item: int, model: CostModel,
          platform: str) -> tuple[list[BucketTuning], dict[str, list[float]]]:
    """Each unit's time at every bucket's size (its column count there), and each bucket's
    ranking: fastest first, then fewer calls, then the name."""
    times: dict[str, list[float]] = {}
    calls = {u.name: len(u.program.calls) for u in units}
    for u in units:
        times[u.name] = _times(u.program, u.elements, buckets, kind, world, item, model)
    tunings = []
    for b in buckets:
        order = sorted(units, key=lambda u: (times[u.name][b.index], calls[u.name], u.name))
        ranking = [_config(u, platform) for u in order]
        tunings.append(BucketTuning(b, ranking, len(units), len(units), ranking[0],
                                    {_config(u, platform): times[u.name][b.index] for u in units}))
    return tunings, times


# ------------------------------------------------------------------------------ refinements
class RefinementGate:
    """Can reordering a candidate's last steps change the module :func:`run_closed` writes?

    The MILP's stage 3 reorders only the last steps of its plan, and on trn1_32 it was half of the
    main job's time. Here a candidate serves a size only where its lowered program is the fastest
    unit, or within :data:`NEAR_TIE` of the fastest (:func:`choose`). The cost model
    (:func:`synth.closed.cost.estimate`) times a program's ops in order, each op's end depending
    on earlier ops alone, so the program lowered from the steps a refinement keeps, cut where the
    first step it may change begins, is a lower bound on the refined program's time. Where that
    bound is over ``1 + NEAR_TIE`` times the runtime's own single call (the vendor unit, proven on
    the stand-in first, as :func:`run_closed` would) at every size, the vendor call ranks ahead
    of the refined candidate everywhere, no near tie can reach it, and no fallback needs it: the
    refinement cannot change a byte written, and is skipped
    (:attr:`synth.encodings.options.Options.refine_gate`). What it cannot decide (a program that
    does not lower or breaks a platform rule, an unproven vendor call) runs the refinement.
    """

    def __init__(self, topology, kind: str, platform: str, sizes: Sequence[int],
                 calibration: str | None = None) -> None:
        self.topology, self.kind, self.platform = topology, kind, platform
        self.buckets = make_buckets(sizes)
        self.calibration = calibration
        self._model: tuple[Any, CostModel] | None = None
        self._vendor: tuple[Unit, list[float]] | bool | None = False
        """The vendor unit and its time per bucket once built and proven; None: not proven."""

    def _mesh_model(self) -> tuple[Any, CostModel]:
        if self._model is None:
            mesh = mesh_for_topology(self.topology)
            self._model = mesh, load_model(self.topology, mesh, self.calibration)
        return self._model

    def _vendor_times(self) -> tuple[Unit, list[float]] | None:
        """The runtime's own call as :func:`run_closed` finds it (the first valid composed unit
        that is one), proven on the stand-in, and its times; None where it fails either."""
        if self._vendor is False:
            self._vendor = None
            topology, (mesh, _) = self.topology, self._mesh_model()
            vendor = next((u for u in _composed_units(self.kind, mesh, topology, self.platform)
                           if _is_vendor(u)), None)
            if vendor is not None:
                try:
                    _prove(vendor, self.platform, topology)
                except (SynthError, VerificationError):
                    return None
                self._vendor = vendor, self._times(vendor.program, vendor.elements)
        return self._vendor or None

    def _times(self, program, elements: int) -> list[float]:
        mesh, model = self._mesh_model()
        return _times(program, elements, self.buckets, self.kind, mesh.size,
                      np.dtype(DTYPE).itemsize, model)

    def __call__(self, schedule, kept: int) -> str | None:
        """None: a refinement of ``schedule`` that keeps its first ``kept`` steps may change what
        is written; else why it cannot."""
        if schedule.num_transfers > LOWER_MAX_TRANSFERS:
            return (f"{schedule.num_transfers:,} transfers are more than a lowered program takes "
                    f"({LOWER_MAX_TRANSFERS:,})")
        got = self._vendor_times()
        bound = self.kept_steps_us(schedule, kept) if got is not None else None
        if got is None or bound is None:
            return None
        vendor, vendor_us = got
        ratios = [b / v for b, v in zip(bound, vendor_us, strict=True) if v > 0]
        if len(ratios) != len(bound) or min(ratios) <= 1 + NEAR_TIE:
            return None
        return (f"its first {kept} steps alone take {min(ratios):.2f}x or more of the runtime's "
                f"own call ({vendor.name}) at every size under {self.platform}'s cost model "
                "(synth.closed.cost): it serves no size however its last steps are ordered")

    def kept_steps_us(self, schedule, kept: int) -> list[float] | None:
        """A lower bound on the time, at every size, of any schedule that begins with the first
        ``kept`` steps of ``schedule``, lowered: the lowered program cut where step ``kept``
        begins (class docstring). None where ``schedule`` does not lower validly here."""
        mesh, _ = self._mesh_model()
        try:
            unit = build_unit(LoweredPlan(self.kind, schedule, schedule.algorithm), mesh,
                              self.topology, DTYPE)
        except SynthError:
            return None
        if kept < 1 or violations(unit.program, self.platform, self.topology):
            return None
        ops = unit.program.ops
        cut = next((i for i, op in enumerate(ops) if op.stage in (f"step {kept}", "output")),
                   len(ops))
        specs = unit.program.meta.get("specs") or unit.program.specs()
        return self._times(replace(unit.program, ops=ops[:cut], meta={"specs": specs}),
                           unit.elements)


# ------------------------------------------------------------------------------ proofs
def _prove(unit: Unit, platform: str, topology) -> str:
    """Run the unit's program alone (a one-range module) on the stand-in (:func:`_check`)."""
    text = emit_ranges(platform, [RangeProgram(0, 0, unit.program, unit.elements)], [unit.name])
    return _check(text, 0, unit.program, unit.elements, platform, topology)


def _check(text: str, index: int, program, elements: int, platform: str, topology) -> str:
    """Run range ``index`` of module ``text`` on the stand-in at every column count of
    :data:`PROVE_COLUMNS` (one element short of full after the first, so the padding runs too);
    every rank must get the collective's exact result."""
    kind, world = program.collective, program.mesh.size
    shapes = [(elements * c - (1 if c > 1 else 0),) for c in PROVE_COLUMNS]
    for seed, shape in enumerate(shapes):
        xs = random_inputs([shape], DTYPE, world, seed=seed)
        if platform == "nki":
            got = run_nki_standin(text, xs, topology=topology, program_index=index)
        elif platform == "neuron":
            got = run_neuron_standin(text, xs, topology=topology, program_index=index)
        else:
            got = run_jax_standin(text, xs, program_index=index)
        want = expected(kind, xs[0], program.reduce_op)
        if got[0].shape != want.shape or not np.array_equal(got[0], want):
            raise VerificationError("postcondition", f"{program.name} gives a wrong result on the "
                                    f"{platform} stand-in for a {shape} tensor per rank")
    return (f"{program.name}: exact on all {world} ranks of the {platform} stand-in "
            f"(tensors of {' and '.join(str(s[0]) for s in shapes)} elements per rank)")


def _prove_module(text: str, ranges: list[RangeProgram], platform: str, topology) -> list[str]:
    """Every range of the module as written, on the stand-in (:func:`_check`); ``platform``
    ``nki``: a kernel module (:mod:`synth.closed.nki`) on the nki stand-in."""
    compile(text, "<module>", "exec")
    return [_check(text, i, r.program, r.unit, platform, topology) for i, r in enumerate(ranges)]


# ------------------------------------------------------------------------------ files
def _files(result: SolveResult, platform: str, text: str, chosen: list[Unit], ranges, tag: str,
           topology, checks: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The module (and, for synthesized schedules on Trn2/Trn3, its NKI kernel) and the schedule
    JSON of every schedule that serves a range."""
    coll = result.collective
    files: dict[str, str] = {}
    schedules: dict[str, str] = {}
    if platform == "neuron":
        files[neuron_out.module_path(topology.name, coll.kind, tag)] = text
    else:
        files[jax_out.module_path(topology.name, coll.kind, tag)] = text
    lowered = [(r, u) for r, u in zip(ranges, chosen, strict=True) if isinstance(u.plan, LoweredPlan)]
    for _, u in lowered:
        rel = f"{SCHEDULE_FOLDER}/{schedule_file_name(u.plan.schedule, tag)}"
        files[rel] = u.plan.schedule.to_json()
        schedules[u.name] = rel
    if platform == "neuron" and lowered and nki_platform(topology):
        code = [RangeProgram(r.lo, r.hi, u.program, u.elements) for r, u in lowered]
        kernel = emit_nki(code, topology)
        checks.extend(f"NKI {line}" for line in _prove_module(kernel, code, "nki", topology))
        files[neuron_out.kernel_path(topology.name, coll.kind, tag)] = kernel
    return files, schedules


def _title(result: SolveResult, platform: str, model: CostModel, vendor: Unit) -> list[str]:
    t, c = result.topology, result.collective
    runtime = "torch-neuronx" if platform == "neuron" else "JAX"
    return [f"Generated by synth solve: {c.kind} on {t.name} ({t.num_ranks} ranks) for {runtime}. "
            "Do not edit by hand.", "",
            "Each size range runs the strategy the closed-stack cost model predicts fastest there "
            f"({model.source};\nsynth.closed.cost), against the runtime's own call "
            f"({vendor.name}); the times are predictions.",
            "Every range's program was run on synth's NumPy stand-in of the vendor primitives "
            "before this\nfile was written: every rank got the collective's exact result."]


def _range_notes(unit: Unit, times: dict[str, list[float]], vendor: Unit, bucket) -> tuple[str, ...]:
    t, v = times[unit.name][bucket.index], times[vendor.name][bucket.index]
    return (f"Predicted {t:.2f} us at {format_size(bucket.size)} "
            f"({v / t:.2f}x the runtime's own call, {v:.2f} us); {len(unit.program.calls)} call(s).",)


def _report(result, platform, vendor, ranges, chosen, times, buckets, rows, schedules,
            model) -> str:
    t, c = result.topology, result.collective
    lines = [f"# {c.kind} on {t.name}: {platform} program per size range", "",
             f"Cost model: {model.source} (synth.closed.cost); speed-up against the runtime's own "
             f"call `{vendor.name}`. Every time is a prediction.", "",
             "| min bytes | max bytes | strategy | from | µs (largest size) | own call µs | speed-up |",
             "|---:|---:|---|---|---:|---:|---:|"]
    for r, u in zip(ranges, chosen, strict=True):
        last = r.buckets[-1]
        tu, tv = times[u.name][last], times[vendor.name][last]
        src = schedules.get(u.name) or _origin(u)
        lines.append(f"| {r.lo} | {r.hi} | `{u.name}` | {src} | {tu:.2f} | {tv:.2f} | "
                     f"{tv / tu:.2f}x |")
    lines += ["", "| size | strategy | µs | own call µs | speed-up |", "|---:|---|---:|---:|---:|"]
    lines += [f"| {format_size(row.bytes)} | `{row.strategy}` | {row.time_us:.2f} | "
              f"{row.vendor_us:.2f} | {row.speedup:.2f}x |" for row in rows]
    return "\n".join(lines) + "\n"


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0
