"""Solve: the library behind ``synth solve``, from a request to verified files on disk.

The pipeline, one call each::

    SolveRequest ─► solve (encodings ─► verify ─► lock-step costs)        synth.encodings, verify
                 ─► deciding_scorer (program model or lock-step)           synth.select.scorers
                 ─► prepare_winners (size ranges, each file compiled and   synth.select.ranking,
                                     proven by the interpreter, and vetoed synth.outputs
                                     where the program model puts it
                                     behind NCCL)
                 ─► time what is written, compare with NCCL               synth.timing, select.nccl
                 ─► commit (all files or none)                             synth.outputs

:func:`run` does all of it for one request; the CLI (:mod:`synth.cli.solve`) only builds the
request and prints the :class:`SolveOutcome`. Nothing is returned or written that has not passed
:func:`synth.verify.verify`, and every file is produced and verified in memory before any is
written.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import progress
from .bounds import lower_bound
from .calibrated import apply_calibration
from .calibration import calibration_of, load_calibration
from .closed.cost import hardware_of
from .closed.mesh import resolve_topology
from .closed.strategies import COLLECTIVES as CLOSED_KINDS
from .collectives import KINDS, Collective, load_collective
from .emit import XmlOptions
from .emit.program import PROTOCOLS
from .encodings import Options, run_encoding
from .errors import SynthError
from .files import check_writable_dir
from .groups import Group, rank_maps
from .guards import Budget, Sized, TooBig, check_request, check_sized
from .mscclpp.emit import PlanOptions
from .outputs import Written, commit, prepare_winners
from .outputs.layout import MAP_FOLDER
from .outputs.msccl import sm_count
from .outputs.mscclpp import PlanTarget
from .outputs.report import program_times, served_runtime
from .outputs.schedule_json import calibration_tag
from .schedule import Schedule
from .select.candidates import Candidate, SolveResult, cost_profile, nccl_points
from .select.nccl import NcclComparison, compare_with_nccl
from .select.program_veto import ProgramVeto
from .select.ranges import INSTANCES
from .select.ranking import splits_call_kinds
from .select.scorers import deciding_scorer, lockstep_scorer
from .sizes import DEFAULT_SIZES
from .solve_closed import ClosedOutcome, RefinementGate, platform_for, run_closed
from .timing.program import not_a_gpu
from .timing.protocol import RuntimeProfile
from .topology import Topology
from .topology_io import load_group
from .verify import verify


@dataclass(frozen=True)
class SolveRequest:
    """Everything ``synth solve`` can be asked, as values (the CLI's options, parsed).

    ``xml`` None: no XML (``--no-xml``); its ``proto`` and ``instances`` are set from the
    request's. ``instances`` None: the program model picks each range's
    instance count among :data:`synth.select.ranges.INSTANCES`; a number pins it. ``extra``: the
    encodings' own options by name (``steps``, ``rounds``, ``engine``, ``sketch``, ``solver``,
    ``least_steps``; :mod:`synth.encodings.options`)."""

    topo: str
    coll: str
    nodes: int = 1
    group: str | None = None
    partition: str | None = None
    encoding: str = "auto"
    algorithm: str | None = None
    chunks: int | None = None
    root: int | None = None
    inplace: bool | None = None
    sizes: tuple[int, ...] = DEFAULT_SIZES
    time_limit_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    xml: XmlOptions | None = field(default_factory=XmlOptions)
    proto: str | None = None
    """The protocol every file is compiled with; None: the program model times every candidate in
    Simple, LL and LL128 and each range's file is compiled in the fastest (Simple where the
    lock-step model decides)."""
    instances: int | None = None
    format: str = "auto"
    """``auto``: msccl where the ranks are GPUs, neuron on Trainium, jax on TPU
    (:func:`resolve_format`); or msccl | mscclpp | neuron | jax."""
    calibration: str | None = None
    out_dir: Path = Path("out")
    max_memory: str | None = None
    max_xml_steps: int | None = None
    """``--max-xml-steps``: None: :data:`synth.guards.MAX_XML_STEPS`; 0: no limit."""
    time_program: bool = True
    winners_by: str = "auto"
    nccl: bool = True
    """NCCL competes for every size (where it runs): sizes where its model is faster get no
    file. False: a file for every size, however it compares."""


@dataclass
class SolveOutcome:
    """What :func:`run` produced and wrote, and the predictions printed beside it."""

    result: SolveResult
    written: Written
    runtime: RuntimeProfile
    """The protocol model's time of what serves each size (``runtime_us``)."""
    program_us: list[float] | None
    """The written XML's time per size under the program model (None: not timed, or no XML)."""
    vs_nccl: list[NcclComparison] | None
    """Against NCCL's own model per size (None where NCCL does not run)."""
    texts: dict[str, str] = field(default_factory=dict)
    """Every file :func:`run` committed (path relative to ``written.out_dir`` -> text), the rank
    maps left out: what :mod:`synth.relabel` gives a concurrent group whose machine is this one's
    up to its name."""
    xml: XmlOptions | None = None
    """The options the range files were compiled from (in-place where a range has one file per
    kind of call; each range's own byte range, protocol and instances via
    :func:`synth.select.ranking.range_options`): what a relabelled XML is verified with again."""


def checked(req: SolveRequest) -> SolveRequest:
    """``req`` with its values checked (one-line errors) and ``xml`` carrying the instance count
    the first files are compiled with."""
    if req.chunks is not None and req.chunks < 1:
        raise SynthError(f"--chunks must be at least 1, got {req.chunks}")
    if {"sketch", "solver"} & set(req.extra) and req.encoding not in ("milp", "auto"):
        raise SynthError(f"--sketch and --solver are options of the milp encoding, not of "
                         f"'{req.encoding}' (use --encoding milp or auto)")
    if req.instances is not None and req.instances < 1:
        raise SynthError(f"--instances must be at least 1, got {req.instances}")
    xml = req.xml
    if req.format == "mscclpp" and req.proto not in (None, "Simple", "LL"):
        raise SynthError(f"--format mscclpp emits the Simple or LL protocol, not {req.proto}")
    if xml is not None and xml.max_threadblocks < 1:
        raise SynthError(f"--max-threadblocks must be at least 1, got {xml.max_threadblocks}")
    if xml is not None:
        xml = replace(xml, proto=req.proto or "Simple", instances=req.instances or 1)
    return replace(req, xml=xml)


def check_byte_range(req: SolveRequest) -> None:
    """Refuse, before solving, an XML byte range no swept size lies in (rank_sizes would refuse
    it after the solve): no XML would serve any size."""
    xml = req.xml
    if req.format == "msccl" and xml is not None and not any(
            s >= xml.min_bytes and (not xml.max_bytes or s <= xml.max_bytes) for s in req.sizes):
        raise SynthError(f"no size of the sweep ({req.sizes[0]}..{req.sizes[-1]} bytes) lies in "
                         f"the XML's byte range {xml.min_bytes}..{xml.max_bytes or 'unbounded'} "
                         "(--min-bytes/--max-bytes)")


TPU_PREFIXES = ("tpu_v5e_", "tpu_v5e:")
FORMATS = ("auto", "msccl", "mscclpp", "neuron", "jax")
CLOSED_FORMATS = ("neuron", "jax")


def resolve_format(fmt: str, topology: Topology) -> str:
    """``auto`` made concrete for ``topology`` (msccl on GPUs, neuron on Trainium, jax on TPU);
    a closed format on GPU ranks is an input error (one line)."""
    if fmt not in FORMATS:
        from .errors import unknown_name
        raise unknown_name("format", fmt, FORMATS)
    why = not_a_gpu(topology)
    if fmt == "auto":
        if why is None:
            return "msccl"
        return "jax" if hardware_of(topology) == "tpu" else "neuron"
    if fmt in CLOSED_FORMATS:
        if why is None:
            raise SynthError(f"--format {fmt} writes programs for Trainium/TPU; {topology.name}'s "
                             "ranks are GPUs (use --format msccl or mscclpp)")
        platform_for(topology, fmt)
    return fmt


def machine_of(req: SolveRequest) -> tuple[Topology, Group | None]:
    """The machine ``req`` is solved on (its group's induced topology where it names one, with
    its calibration applied) and the group (None: the whole machine)."""
    if req.topo.startswith(TPU_PREFIXES) and req.group is None and req.partition is None:
        base, group = resolve_topology(req.topo, req.nodes), None  # TPU slices: synth.closed.mesh
    else:
        base, group = load_group(req.topo, req.nodes, req.group, req.partition)
    return (apply_calibration(base, req.calibration) if req.calibration else base), group


def run(req: SolveRequest) -> SolveOutcome | ClosedOutcome:
    """Solve one request, write its files (all or none) and return what was done: a
    :class:`SolveOutcome`, or on Trainium/TPU formats a :class:`synth.solve_closed.ClosedOutcome`."""
    req = checked(req)
    topology, group = machine_of(req)
    fmt = resolve_format(req.format, topology)
    if fmt in CLOSED_FORMATS:
        return run_closed_request(req, topology, group, fmt)
    req = replace(req, format=fmt)
    check_byte_range(req)
    xml = req.xml
    budget = Budget.of(req.max_memory, None if req.format == "mscclpp" else xml,
                       req.max_xml_steps)
    if req.coll in KINDS:  # sized before the collective is built (10^9 chunks do not fit)
        check_request(req.coll, topology.num_ranks, req.chunks, budget)
    collective = load_collective(req.coll, topology.num_ranks, req.chunks or 1, req.root,
                                 bool(req.inplace))
    out_dir = check_writable_dir(Path(req.out_dir))  # created when the first file is written
    tag = calibration_tag(req.calibration)
    nccl_cal = calibration_of(load_calibration(req.calibration)) if req.calibration else None
    with progress.phase(f"solving {collective.name} on {topology.name} ({req.encoding})"):
        result = solve(topology, collective, encoding=req.encoding, algorithm=req.algorithm,
                       sizes=req.sizes, time_limit_s=req.time_limit_s, chunks=req.chunks,
                       extra=req.extra, nccl_calibration=nccl_cal, budget=budget, nccl=req.nccl)
        result.calibration = req.calibration
        if req.format == "mscclpp":
            plan = PlanTarget(topology, PlanOptions(
                proto=req.proto or "Simple", instances=req.instances or 1,
                max_threadblocks=sm_count(topology),
                min_bytes=xml.min_bytes if xml else 0, max_bytes=xml.max_bytes if xml else 0))
            ranges_of = xml or XmlOptions()
            written = prepare_winners(result, out_dir, ranges_of, lockstep_scorer, tag,
                                      "lockstep", plan)
            mine = [r.candidate for r in written.ranges if r.candidate is not None]
            if mine:
                result.best = mine[-1]
        else:
            # one file per kind of call where a file could declare both: the in-place one
            # ranked and written, its out-of-place twin beside it (out_of_place_companion)
            split = splits_call_kinds(result.collective, xml)
            if split:
                xml = replace(xml, inplace=True)
            tried = None if req.instances is not None else INSTANCES
            protocols = PROTOCOLS if req.proto is None else None
            scorer, decided_by, notes = deciding_scorer(result, topology, xml, req.winners_by,
                                                        req.calibration, instances=tried,
                                                        protocols=protocols)
            result.notes += notes
            # the files are timed by the program model before they are written, where it runs
            veto = (ProgramVeto(topology, req.calibration, xml.profile)
                    if req.time_program and xml is not None and not_a_gpu(topology) is None
                    else None)
            written = prepare_winners(result, out_dir, xml, scorer, tag, decided_by, split=split,
                                      veto=veto)
            mine = [r.candidate for r in written.ranges if r.candidate is not None]
            if mine:
                result.best = mine[-1]  # the one serving the largest size synth serves
    abs_texts = written.texts
    rank_files = ({f"{MAP_FOLDER}/{name}": text for name, text in
                   rank_maps(written.files, group).items()} if group is not None else {})
    runtime = served_runtime(result, written, topology, list(req.sizes), req.proto or "Simple",
                             req.instances or 1, req.calibration)
    program_us = (program_times(written, result, abs_texts, topology, list(req.sizes), xml.profile,
                                req.calibration)
                  if req.time_program and req.format == "msccl" and xml is not None else None)
    vs_nccl = compare_with_nccl(result, written.ranges, req.sizes, req.proto or "Simple",
                                req.instances or 1,
                                nccl_cal, program_us)
    why = not_a_gpu(topology)
    if why is not None:
        written.notes.append(f"no {topology.name} runtime loads MSCCL-IR: {why}; the program it "
                             f"runs is --format {'jax' if hardware_of(topology) == 'tpu' else 'neuron'}"
                             " (the default there)")
    texts = dict(written.pending)
    commit(written, rank_files)
    return SolveOutcome(result, written, runtime, program_us, vs_nccl, texts,
                        xml if req.format == "msccl" else None)


def run_closed_request(req: SolveRequest, topology: Topology, group: Any, fmt: str) -> ClosedOutcome:
    """The main job on Trainium/TPU: the encodings' verified schedules, then the closed-stack
    driver (:func:`synth.solve_closed.run_closed`) ranks, proves and writes the program."""
    if group is not None:
        raise SynthError("--group applies to --format msccl/mscclpp (a neuron/jax program runs on "
                         "the framework's own groups)")
    if req.coll not in CLOSED_KINDS:
        raise SynthError(f"closed stacks run {', '.join(CLOSED_KINDS)}; '{req.coll}' has no "
                         f"{fmt} program (--format msccl writes its schedule)")
    budget = Budget.of(req.max_memory, None)
    check_request(req.coll, topology.num_ranks, req.chunks, budget)
    collective = load_collective(req.coll, topology.num_ranks, req.chunks or 1, req.root,
                                 bool(req.inplace))
    out_dir = check_writable_dir(Path(req.out_dir))
    with progress.phase(f"solving {collective.name} on {topology.name} ({req.encoding})"):
        # a refinement that cannot change the program written is skipped (RefinementGate)
        gate = RefinementGate(topology, collective.kind, fmt, req.sizes, req.calibration)
        result = solve(topology, collective, encoding=req.encoding, algorithm=req.algorithm,
                       sizes=req.sizes, time_limit_s=req.time_limit_s, chunks=req.chunks,
                       extra=req.extra, budget=budget, nccl=False, refine_gate=gate)
        result.calibration = req.calibration
        return run_closed(result, fmt, req.sizes, out_dir, req.calibration,
                          calibration_tag(req.calibration))


def solve(topology: Topology, collective: Collective, *, encoding: str = "auto",
          algorithm: str | None = None, sizes: Sequence[int] = DEFAULT_SIZES,
          time_limit_s: float | None = None, chunks: int | None = None,
          extra: dict[str, Any] | None = None, nccl_calibration: Any = None,
          budget: Budget | None = None, nccl: bool = True,
          refine_gate: Any = None) -> SolveResult:
    """Produce, verify and cost schedules; the best is the one closest to the bound overall.
    NCCL's own times come along (``SolveResult.nccl``; ``nccl`` False: not): it competes in
    every selection. ``refine_gate``: :attr:`synth.encodings.options.Options.refine_gate`.

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
                                     extra=extra, budget=budget, notes=notes,
                                     refine_gate=refine_gate), notes)
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
                                        cost_profile(schedule, topology, sizes, bound)))
    candidates.sort(key=lambda c: (-c.score, c.report.steps, c.name))
    ran = "baseline" if encoding == "auto" and algorithm else encoding  # --algo: baseline only
    return SolveResult(topology, collective, ran, candidates[0], candidates, bound,
                       time.perf_counter() - start, notes=notes,
                       nccl=nccl_points(topology, collective, sizes, bound, nccl_calibration)
                       if nccl else None)


def within_budget(found: dict[str, Schedule | Sized], budget: Budget
                  ) -> tuple[dict[str, Schedule], list[str]]:
    """The candidates that fit ``budget`` (smallest first share the memory) and notes on the rest.

    A :class:`~synth.guards.Sized` in ``found`` stands for a candidate built in another process
    that the guards refuse whatever is held (:mod:`synth.encodings.ahead`): it is refused here, in
    its place in the order, with the words its schedule would have had."""
    kept: dict[str, Schedule] = {}
    notes: list[str] = []
    held = 0
    with progress.phase("sizing candidates"):
        for name in sorted(found, key=lambda k: (found[k].num_transfers, k)):
            candidate = found[name]
            try:
                check_sized(candidate, budget, held)
            except TooBig as exc:
                notes.append(f"{name} passed over: {exc.message}")
                progress.note(notes[-1])
                continue
            if isinstance(candidate, Sized):   # cannot happen: refused at held 0, so at any
                raise AssertionError(f"{name} was sent as refused but fits")
            kept[name] = candidate
            held += candidate.num_transfers
    if not kept:
        raise TooBig("no candidate fits: " + "; ".join(notes))
    return kept, notes
