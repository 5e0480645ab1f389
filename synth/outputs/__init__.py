"""Outputs: everything synth writes, one module per format, and the one dispatch that produces them.

==================  =====================================  ===================================
format              module                                 read back by
==================  =====================================  ===================================
schedule JSON       :mod:`.schedule_json`                  ``synth verify``, ``synth simulate``
MSCCL-IR XML        :mod:`.msccl` (+ ``MSCCL_CONFIG``)      ``synth verify``, ``synth simulate``
MSCCL++ plan        :mod:`.mscclpp`                        ``synth verify``
range report        :mod:`.report`                         (a person)
==================  =====================================  ===================================

Everything is produced and verified in memory first (``prepare_*``): the schedule by
:func:`synth.verify.verify`, each XML by the interpreter, each plan by the plan interpreter.
:func:`commit` then writes all of it or none (:func:`synth.files.write_all`), so a failure at any
later stage leaves nothing on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import progress
from ..emit import XmlOptions, emit_verified_xml, xml_unsupported_reason
from ..errors import SynthError
from ..files import write_all
from ..mscclpp.emit import emit_verified_plan, plan_unsupported_reason
from ..schedule import Schedule
from ..select.candidates import Candidate, SolveResult
from ..select.ranking import SizeRange, choose_ranges, range_options
from ..select.scorers import Scorer, lockstep_scorer
from .msccl import DEFAULT_XML, config_index, xml_file_name
from .mscclpp import PlanTarget, plan_file_name
from .report import ranges_markdown, ranges_table
from .schedule_json import _name_part, schedule_file_name


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
    """The model that chose the ranges' winners (:func:`deciding_scorer`)."""
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


def write_winners(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                  model: Scorer = lockstep_scorer, tag: str = "",
                  winners_by: str = "lockstep") -> Written:
    """:func:`prepare_winners`, then write its files (all or none)."""
    return commit(prepare_winners(result, out_dir, xml, model, tag, winners_by))


def prepare_winners(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                    model: Scorer = lockstep_scorer, tag: str = "",
                    winners_by: str = "lockstep") -> Written:
    """Produce, for every size range, its winner's schedule JSON and verified XML; with more than one
    range also the ``MSCCL_CONFIG`` index and the range table (``<prefix>.ranges.md``).

    A range NCCL serves (it was faster there) gets no file at all; when NCCL serves every size,
    nothing is written. Everything is produced and verified in memory (:func:`choose_ranges`);
    :func:`commit` writes it. Names are :func:`schedule_file_name` and :func:`xml_file_name` (which
    carries the byte range of each file); ``tag`` as there. ``model`` decides the winners and
    ``winners_by`` names it in the range table (:func:`deciding_scorer` gives both).
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
        if r.candidate is None:     # left to NCCL: no file, no MSCCL_CONFIG entry
            range_files.append(None)
            continue
        sched = r.candidate.schedule
        outputs[out_dir / schedule_file_name(sched, tag)] = sched.to_json()
        if r.xml is None or xml is None:
            range_files.append(None)
            continue
        name = xml_file_name(sched, range_options(xml, r.lo, r.hi, r.instances), tag)
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
