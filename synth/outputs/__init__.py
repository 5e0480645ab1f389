"""Outputs: everything synth writes, one module per format, and the one dispatch that produces them.

==================  =====================================  ===================================
format              module                                 read back by
==================  =====================================  ===================================
schedule JSON       :mod:`.schedule_json`                  ``synth verify``, ``synth simulate``
MSCCL-IR XML        :mod:`.msccl` (+ ``MSCCL_CONFIG``)      ``synth verify``, ``synth simulate``
MSCCL++ plan        :mod:`.mscclpp`                        ``synth verify``
range report        :mod:`.report`                         (a person)
==================  =====================================  ===================================

Where each goes under ``--out`` is :mod:`.layout`: one folder per runtime, holding only what that
runtime loads. Everything is produced and verified in memory first (``prepare_*``): the schedule
by :func:`synth.verify.verify`, each XML by the interpreter, each plan by the plan interpreter.
:func:`commit` then deploys it (:func:`.layout.deploy`), so a failure at any later stage leaves
nothing on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import progress
from ..emit import XmlOptions, emit_verified_xml, xml_unsupported_reason
from ..errors import SynthError
from ..mscclpp.emit import emit_verified_plan, plan_unsupported_reason
from ..schedule import Schedule
from ..select.candidates import Candidate, SolveResult
from ..select.program_veto import ProgramVeto
from ..select.ranking import SizeRange, choose_ranges, range_options
from ..select.scorers import Scorer, lockstep_scorer
from .layout import (
    PLAN_FOLDER,
    REPORT_FOLDER,
    SCHEDULE_FOLDER,
    XML_FOLDERS,
    LegacyEntry,
    deploy,
)
from .msccl import DEFAULT_XML, xml_file_name
from .mscclpp import PlanTarget, plan_file_name
from .report import ranges_markdown, ranges_table
from .schedule_json import _name_part, schedule_file_name, schedule_stem


@dataclass
class Written:
    """What a ``prepare_*`` function produced (in memory until :func:`commit` deploys it), and
    why an output was left out."""

    files: list[Path]
    """The files' paths (absolute; on disk once committed)."""
    xml_reports: list[Any]
    notes: list[str]
    plan_reports: list[Any] = field(default_factory=list)
    """MSCCL++ plan verification reports (``--format mscclpp``)."""
    ranges: list[SizeRange] = field(default_factory=list)
    range_files: list[str | None] = field(default_factory=list)
    """The file serving each range (absolute; None without one, or where NCCL serves it); the
    in-place one where a range has one file per call kind (:attr:`oop_files`)."""
    oop_files: list[str | None] = field(default_factory=list)
    """Per range, its out-of-place file where it has one file per call kind
    (:func:`synth.select.ranking.split_call_kinds`), else None."""
    winners_by: str = "lockstep"
    """The model that chose the ranges' winners (:func:`deciding_scorer`)."""
    pending: dict[str, str] = field(default_factory=dict)
    """Produced and verified, not yet on disk: path relative to ``out_dir`` -> text."""
    out_dir: Path | None = None
    key: str = ""
    """The run these files belong to (:func:`synth.outputs.layout.deploy`)."""
    legacy: list[LegacyEntry] = field(default_factory=list)
    """Legacy-profile files for ``MSCCL_CONFIG``."""

    @property
    def texts(self) -> dict[str, str]:
        """Absolute path -> text of what is pending."""
        assert self.out_dir is not None
        return {str(self.out_dir / rel): text for rel, text in self.pending.items()}

    @property
    def folders(self) -> list[str]:
        """The top folders under ``out_dir`` that hold this run's files."""
        assert self.out_dir is not None
        return sorted({f.relative_to(self.out_dir).parts[0] for f in self.files
                       if len(f.relative_to(self.out_dir).parts) > 1})


def commit(written: Written, extra: dict[str, str] | None = None) -> Written:
    """Deploy what a ``prepare_*`` function produced, plus ``extra`` files (path relative to
    ``out_dir``): :func:`synth.outputs.layout.deploy`; ``files`` then lists them on disk."""
    outputs = {**written.pending, **(extra or {})}
    if outputs or written.key:
        assert written.out_dir is not None
        _, notes = deploy(written.out_dir, written.key, outputs, written.legacy)
        written.files = [written.out_dir / rel for rel in outputs]     # in the order produced
        written.notes += notes
    written.pending = {}
    return written


def run_key(result: SolveResult, folder: str) -> str:
    """A solve's identity in the manifest: the runtime folder, the machine, the collective (any
    options: a later solve of the same collective replaces the earlier one's files)."""
    coll = result.collective
    return (f"{folder}:{_name_part(result.topology.name)}_{coll.kind}"
            + (f"_root{coll.root}" if coll.root is not None else ""))


def write_outputs(schedule: Schedule, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                  plan: PlanTarget | None = None, tag: str = "") -> Written:
    """:func:`prepare_outputs`, then deploy its files."""
    return commit(prepare_outputs(schedule, out_dir, xml, plan, tag))


def prepare_outputs(schedule: Schedule, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                    plan: PlanTarget | None = None, tag: str = "") -> Written:
    """The schedule JSON and, where MSCCL-IR can express it, the verified XML (or, with ``plan``,
    the verified MSCCL++ execution plan instead), in memory (:func:`commit` deploys them).

    File names carry every option that changes the file (:func:`schedule_stem`,
    :func:`xml_file_name`). The run (:func:`synth.outputs.layout.deploy`) is this one schedule
    (its stem): another schedule written beside it is another run."""
    stem = schedule_stem(schedule, tag)
    outputs: dict[str, str] = {f"{SCHEDULE_FOLDER}/{schedule_file_name(schedule, tag)}":
                               schedule.to_json()}
    reports: list[Any] = []
    notes: list[str] = []
    legacy: list[LegacyEntry] = []
    folder = SCHEDULE_FOLDER
    if plan is not None:
        folder = PLAN_FOLDER
        reason = plan_unsupported_reason(schedule)
        if reason:
            notes.append(f"no MSCCL++ plan: {reason}")
            return _pending(out_dir, outputs, [], notes, key=f"{folder}:{stem}")
        text, report = emit_verified_plan(schedule, plan.topology, plan.options)
        outputs[f"{PLAN_FOLDER}/{plan_file_name(schedule, plan.options, tag)}"] = text
        return _pending(out_dir, outputs, [], notes, [report], key=f"{folder}:{stem}")
    if xml is not None:
        folder = XML_FOLDERS[xml.profile]
        reason = xml_unsupported_reason(schedule, xml)
        if reason:
            notes.append(f"no XML: {reason}")
        else:
            with progress.phase(f"compile {schedule.algorithm} to {xml.profile} XML and run "
                                "the interpreter"):
                text, reports = emit_verified_xml(schedule, xml)
            rel = f"{folder}/{xml_file_name(schedule, xml, tag)}"
            outputs[rel] = text
            if xml.profile == "legacy":
                legacy.append(LegacyEntry(rel, xml.min_bytes, max(0, xml.max_bytes - 1)
                                          if xml.max_bytes else 0, xml.proto))
    return _pending(out_dir, outputs, reports, notes, key=f"{folder}:{stem}", legacy=legacy)


def _pending(out_dir: Path, outputs: dict[str, str], reports: list[Any], notes: list[str],
             plan_reports: list[Any] | None = None, key: str = "",
             legacy: list[LegacyEntry] | None = None) -> Written:
    return Written([out_dir / rel for rel in outputs], reports, notes, plan_reports or [],
                   pending=dict(outputs), out_dir=out_dir, key=key, legacy=legacy or [])


def write_best(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
               plan: PlanTarget | None = None, tag: str = "") -> tuple[Candidate, Written]:
    """:func:`prepare_best`, then deploy its files."""
    best, written = prepare_best(result, out_dir, xml, plan, tag)
    return best, commit(written)


def prepare_best(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                 plan: PlanTarget | None = None, tag: str = "") -> tuple[Candidate, Written]:
    """The best candidate whose outputs can all be produced and verified, and those outputs, in
    memory (:func:`commit` deploys them).

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
                  model: Scorer = lockstep_scorer, tag: str = "", winners_by: str = "lockstep",
                  plan: PlanTarget | None = None, split: bool = False) -> Written:
    """:func:`prepare_winners`, then deploy its files."""
    return commit(prepare_winners(result, out_dir, xml, model, tag, winners_by, plan, split))


def prepare_winners(result: SolveResult, out_dir: Path, xml: XmlOptions | None = DEFAULT_XML,
                    model: Scorer = lockstep_scorer, tag: str = "",
                    winners_by: str = "lockstep", plan: PlanTarget | None = None,
                    split: bool = False, veto: ProgramVeto | None = None) -> Written:
    """Produce, for every size range, its winner's schedule JSON and verified XML (with ``plan``:
    its verified MSCCL++ plan, ``min/max_message_size`` the range's bounds); with more than one
    range also the range table (``reports/<prefix>.ranges.md``).

    A range NCCL serves (it was faster there) gets no file at all; when NCCL serves every size,
    nothing but the report is written. Everything is produced and verified in memory
    (:func:`choose_ranges`); :func:`commit` deploys it. Names are :func:`schedule_file_name` and
    :func:`xml_file_name` (which carries the byte range of each file); ``tag`` as there. ``model``
    decides the winners and ``winners_by`` names it in the range table (:func:`deciding_scorer`
    gives both). ``split``: ``xml`` is in-place only and each range also gets its out-of-place
    file where that one is faster than NCCL (:func:`synth.select.ranking.out_of_place_companion`).
    ``veto``: the program model's veto of files behind NCCL (:mod:`synth.select.program_veto`).
    """
    try:
        ranges, notes = choose_ranges(result, xml, model, plan, split, veto)
    except SynthError as exc:
        if not result.notes:
            raise
        raise SynthError(f"{exc.message}; passed over before: {'; '.join(result.notes)}"
                         + ("; --no-xml writes the schedule alone" if xml is not None else ""),
                         exit_code=exc.exit_code) from None
    notes = [*result.notes, *notes]  # candidates the size guards passed over, first
    folder = (PLAN_FOLDER if plan is not None else XML_FOLDERS[xml.profile] if xml is not None
              else SCHEDULE_FOLDER)
    outputs: dict[str, str] = {}
    range_files: list[str | None] = []
    oop_files: list[str | None] = []
    reports: list[Any] = []
    plan_reports: list[Any] = []
    legacy: list[LegacyEntry] = []
    for r in ranges:
        oop_files.append(None)
        if r.candidate is None:     # left to NCCL: no file, no MSCCL_CONFIG entry
            range_files.append(None)
            continue
        sched = r.candidate.schedule
        outputs[f"{SCHEDULE_FOLDER}/{schedule_file_name(sched, tag)}"] = sched.to_json()
        if r.text is None or (xml is None and plan is None):
            range_files.append(None)
            continue
        if plan is not None:
            name = plan_file_name(sched, replace(plan.options, min_bytes=r.lo, max_bytes=r.hi,
                                                 instances=r.instances), tag)
            plan_reports.extend(r.reports[:1] if not plan_reports else ())
        else:
            assert xml is not None
            opts = range_options(xml, r.lo, r.hi, r.instances, r.proto)
            if r.oop is not None:       # one file per call kind: this one in-place
                oop_rel = f"{folder}/{xml_file_name(sched, replace(opts, inplace=False), tag)}"
                outputs[oop_rel] = r.oop.text
                oop_files[-1] = str(out_dir / oop_rel)
            name = xml_file_name(sched, opts, tag)
            reports.extend(rep for rep in (*r.reports, *(r.oop.reports if r.oop else ()))
                           if rep.mode not in {x.mode for x in reports})
        rel = f"{folder}/{name}"
        outputs[rel] = r.text
        range_files.append(str(out_dir / rel))
        if xml is not None and plan is None and xml.profile == "legacy":
            legacy.append(LegacyEntry(rel, r.lo, r.hi, r.proto))
    if len(ranges) > 1:
        coll = result.collective
        prefix = f"{_name_part(result.topology.name)}_{coll.kind}" + \
            (f"_root{coll.root}" if coll.root is not None else "") + (f"_{_name_part(tag)}" if tag else "")
        rows = ranges_table(result, ranges, range_files, winners_by, oop_files)
        outputs[f"{REPORT_FOLDER}/{prefix}.ranges.md"] = ranges_markdown(result, rows)
    return Written([out_dir / rel for rel in outputs], reports, notes, plan_reports,
                   ranges=ranges, range_files=range_files, oop_files=oop_files,
                   winners_by=winners_by,
                   pending=outputs, out_dir=out_dir, key=run_key(result, folder), legacy=legacy)
