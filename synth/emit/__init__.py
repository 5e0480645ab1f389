"""Emitters: Schedule -> runtime programs, each proven before it leaves memory.

:func:`emit_verified_xml` is the one way synth produces MSCCL-IR text: compile, print, parse the
*text* back with the runtimes' lexical rules and run it through the interpreter in every mode the
file declares, and check that both ends of every message name the same transfer (spec E2,
:mod:`synth.emit.agreement`). A file that fails is never returned, so it is never written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import collector, progress
from ..collectives import make_collective
from ..errors import SynthError, VerificationError
from ..schedule import Schedule
from .compile import DEFAULT_MAX_THREADBLOCKS
from .program import Program

XML_KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
"""Collectives MSCCL-IR gives a buffer layout for (spec §3.3)."""


@dataclass(frozen=True)
class XmlOptions:
    profile: str = "exec"
    proto: str = "Simple"
    instances: int = 1
    min_bytes: int = 0
    max_bytes: int = 0
    inplace: bool | None = None
    """None: one file for both modes where the runtime allows it."""
    max_threadblocks: int = DEFAULT_MAX_THREADBLOCKS
    """Threadblocks per rank the file may use (the default's reasons are at its definition)."""
    gather: bool = False
    """Several ranks reducing into one chunk in one step: receives into scratch folded by one
    multi-source ``re`` instead of a chain of receive-reduces (:func:`synth.emit.compile.
    compile_schedule`)."""
    channels: int = 0
    """Least channels one instance spreads its routes over, by chunk (0: as few as needed)."""
    aggregate: bool | None = None
    """True: contiguous chunks bundled into one op; False: one op per chunk; None: the compiler
    weighs both (:func:`synth.emit.compile.compile_schedule`)."""


def xml_unsupported_reason(schedule: Schedule, options: XmlOptions) -> str | None:
    """Why this schedule has no MSCCL-IR form (None when it has one)."""
    coll = schedule.collective
    if coll.custom is not None and options.profile != "legacy":
        return f"custom collectives exist only in the legacy profile, not '{options.profile}'"
    if coll.custom is not None and options.instances != 1:
        return "a custom collective compiles with instances=1 only: its chunks cannot be split "\
            "without a new pre/postcondition"
    if coll.custom is None and coll.kind not in XML_KINDS:
        return f"MSCCL-IR defines no buffer layout for {coll.kind}"
    return None


def emit_verified_xml(schedule: Schedule, options: XmlOptions = XmlOptions()) -> tuple[str, list]:
    """MSCCL-IR text for ``schedule`` plus the interpreter's reports (one per declared mode)."""
    text, _, reports = emit_verified_program(schedule, options)
    return text, reports


def emit_verified_program(schedule: Schedule, options: XmlOptions = XmlOptions()
                          ) -> tuple[str, Program, list]:
    """:func:`emit_verified_xml` plus the program parsed back from the text (what the interpreter
    proved, and what :mod:`synth.timing.program` times)."""
    reason = xml_unsupported_reason(schedule, options)
    if reason:
        raise SynthError(f"cannot emit XML: {reason}")
    text = emit_xml_text(schedule, options)
    program, reports = verify_text(text, schedule, options)
    return text, program, reports


def emit_xml_text(schedule: Schedule, options: XmlOptions) -> str:
    """The compiler's MSCCL-IR text for ``schedule``, not yet proven (:func:`verify_text` proves
    it; nothing is written unproven)."""
    return compiled_text(schedule, options)[0]


def compiled_text(schedule: Schedule, options: XmlOptions) -> tuple[str, Program | None]:
    """:func:`emit_xml_text` and the program the compiler wrote it from (None where the text is a
    protocol twin's: :func:`synth.emit.compile.emit_xml_program`): what parsing the text gives,
    for a caller that only times it. Not proven, and not what a proof reads: :func:`verify_text`
    parses the text itself."""
    from .compile import emit_xml_program

    with progress.span("compile"):
        return emit_xml_program(schedule, **compile_keywords(options))


def compile_keywords(options: XmlOptions) -> dict[str, Any]:
    """``options`` as :func:`synth.emit.compile.emit_xml`'s keywords (how :mod:`.proto_twins`
    keys a compile)."""
    return dict(profile=options.profile, proto=options.proto, instances=options.instances,
                min_bytes=options.min_bytes, max_bytes=options.max_bytes, inplace=options.inplace,
                max_threadblocks=options.max_threadblocks, gather=options.gather,
                channels=options.channels, aggregate=options.aggregate)


def verify_text(text: str, schedule: Schedule, options: XmlOptions) -> tuple[Program, list]:
    """Parse ``text`` (compiled from ``schedule`` with ``options``) with the runtimes' lexical
    rules and prove it: the interpreter in every declared mode against the schedule's collective
    (its chunks split ``options.instances`` ways), and message agreement (spec E2). Returns the
    parsed program and the interpreter's reports; raises VerificationError."""
    with collector.paused():    # the parse, the lint and the runs: see synth.collector
        return _verify_text(text, schedule, options)


def _verify_text(text: str, schedule: Schedule, options: XmlOptions) -> tuple[Program, list]:
    from .agreement import disagreements
    from .interpreter import verify_program
    from .xml_parse import parse_program

    program = parse_program(text, f"{schedule.algorithm}.xml", options.profile)
    coll = schedule.collective
    expected = coll  # a custom collective: its own pre/postcondition (coll="custom" has none)
    if coll.custom is None:
        # instances split every chunk further: the program's collective has that many more chunks
        expected = make_collective(coll.kind, coll.num_ranks,
                                   coll.chunks_per_rank * options.instances, coll.root,
                                   coll.inplace)
    reports = verify_program(program, collective=expected, profile=options.profile)
    with progress.span("interpret"):
        issues = disagreements(program)
    if issues:      # the compiler makes both ends agree (passes.disagreements): a bug if not
        raise VerificationError("agreement", f"{len(issues)} message(s) whose two ends disagree "
                                f"(spec E2): {issues[0]}")
    return program, reports
