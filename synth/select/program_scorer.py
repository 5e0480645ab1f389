"""The timed program model as a scorer: each candidate compiled to XML once, parsed, and simulated
at the sizes where a runtime selects it, within a budget of estimated work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence, Set
from dataclasses import replace
from typing import Any

import numpy as np

from .. import progress
from ..emit import (
    XmlOptions,
    compile_keywords,
    compiled_text,
    emit_verified_xml,
    verify_text,
    xml_unsupported_reason,
)
from ..emit.interpreter import LL128_CHUNK_BYTES, LL_CHUNK_BYTES, SIMPLE_CHUNK_BYTES
from ..emit.proto_twins import serves_twins, twin_protocol, with_proto
from ..emit.xml_parse import parse_program, remember_parsed
from ..errors import SynthError
from ..guards import xml_estimate
from ..timing.program import program_model, program_times_us, remember_times, slicing
from ..timing.program_bound import time_lower_bound
from ..topology import Topology
from .buckets import runs_at
from .candidates import Candidate, SolveResult
from .compile_ahead import CompileAhead, wanted

PROGRAM_COST_BUDGET = 5_000_000
"""Estimated program-model work :func:`deciding_scorer` ``auto`` spends before falling back to the
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
(:class:`ProgramScorer`, ``synth solve`` without ``--instances``) get this budget again, their
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


XmlCache = dict[Any, Any]
"""(candidate name, options) -> the verified XML text and interpreter reports, or why it cannot
be produced; (candidate name, options, ``COMPILED``) -> a text only compiled (and parsed), not yet
proven: shared by the program model and :func:`choose_ranges` so no file is compiled twice;
(candidate name, options, ``PARSED``) -> the program of a range's proven file, held where it costs
nothing (:func:`synth.select.ranking.ranged_xml`)."""
COMPILED = "compiled"
PARSED = "parsed"
UNPROVEN = "unproven"
"""(candidate name, options, ``UNPROVEN``) -> a full-range text the range-file worker compiled
and did not prove (:func:`synth.select.compile_ahead._range_file`: no range wrote it as it is)."""


def compiled_xml(cache: XmlCache, candidate: Candidate, options: XmlOptions,
                 ahead: CompileAhead | None = None) -> tuple[str, tuple[Any, ...]] | str:
    """``candidate``'s interpreter-verified XML under ``options`` (or why there is none), once.

    A text the program model already compiled (:func:`compiled_program`) is proven here rather
    than compiled again. Each compile is a progress phase naming the candidate and its form: at
    hundreds of ranks one takes minutes, and the display must say which file is being made. (Its
    label is no kind of :func:`benchmarks.speed.classify`'s: the compile, parse and interpreter
    inside count as their own spans.) ``ahead``: a worker that may have compiled it already (the
    same text, proven here as the inline compile's would be)."""
    key = (candidate.name, options)
    if key not in cache:
        made = cache.get((*key, COMPILED))
        if not isinstance(made, tuple) and (*key, UNPROVEN) in cache:   # the range-file worker's
            made = (cache[(*key, UNPROVEN)], None)
        if not isinstance(made, tuple) and ahead is not None \
                and not xml_unsupported_reason(candidate.schedule, options):
            text = ahead.take(candidate.name, options)
            if isinstance(text, tuple):     # the compiler refused, in the worker
                cache[key] = text[0]
                return cache[key]
            if text is not None:
                made = (text, None)
        try:
            with progress.phase(f"XML of {candidate.name} ({options.proto} x{options.instances}, "
                                f"{candidate.schedule.num_transfers:,} transfers): "
                                + ("prove" if isinstance(made, tuple) else "compile and prove")):
                if isinstance(made, tuple):
                    parsed, reports = verify_text(made[0], candidate.schedule, options)
                    text = made[0]
                    _keep_one(text, options.profile, made[1], parsed)
                else:
                    text, reports = emit_verified_xml(candidate.schedule, options)
            cache[key] = (text, tuple(reports))
        except SynthError as exc:
            cache[key] = exc.message
    return cache[key]


def full_range_text(cache: XmlCache, candidate: Candidate, options: XmlOptions,
                    ahead: CompileAhead | None = None) -> tuple[str, Any] | str:
    """``candidate``'s compile under ``options`` and the parse of its text, proven or not (or why
    there is none): what a range file whose bounds are not the compile's is made from
    (:func:`synth.select.ranking.ranged_xml`), which proves that file, the one written.

    Why not prove the compile itself (:func:`compiled_xml`): no file is written as it is, and its
    proof is an interpreter run of its own -- on ``synth solve --topo dgx_a100 --nodes 8 --coll
    allgather`` every range file was made so: its compile proven, then its ranged text proven
    again (the solving process's interpreter phase fell from 25.4 to 10.9 s without the first,
    ``results/speed.md``, before51 and stop51). The parse is of the text itself (the parse
    memo's where it has it: a proof or the worker made it), so the proof of the range's file
    reads what that file says; where it equals the program the scorer timed, the memo keeps that
    one object, as :func:`compiled_xml` does (:func:`_keep_one`)."""
    proven = cache.get((candidate.name, options))
    if isinstance(proven, str):
        return proven
    made = cache.get((candidate.name, options, COMPILED))
    if isinstance(proven, tuple):
        text = proven[0]
    elif (candidate.name, options, UNPROVEN) in cache:
        text = cache[(candidate.name, options, UNPROVEN)]
    else:
        got = compiled_program(cache, candidate, options, f"{candidate.name}.xml", ahead)
        if isinstance(got, str):
            return got
        made = cache[(candidate.name, options, COMPILED)]
        text = made[0]
    try:
        parsed = parse_program(text, f"{candidate.name}.xml", options.profile)
    except SynthError as exc:
        return exc.message
    if isinstance(made, tuple) and made[0] == text:
        parsed = _keep_one(text, options.profile, made[1], parsed)
    return text, parsed


def _keep_one(text: str, profile: str, timed: Any, parsed: Any) -> Any:
    """Where the program the scorer timed (``timed``; None: none) is the parse of its text, the
    parse memo holds that one object, not a copy of it; returns the object kept."""
    if timed is not None and timed is not parsed and timed == parsed:
        remember_parsed(text, profile, timed)
        return timed
    return parsed


def compiled_program(cache: XmlCache, candidate: Candidate, options: XmlOptions,
                     name: str, ahead: CompileAhead | None = None) -> Any | str:
    """``candidate``'s XML under ``options`` compiled, *not* proven (or why there is none), and its
    program: what the program model times. Where this process compiled it, the program the compiler
    wrote the text from (:func:`synth.emit.compiled_text`: what parsing the text gives); where the
    worker did, the worker's parse of it (made there, off this process's path, and a parse a proof
    here may take); else the text parsed. Why not parse what this process compiled: the texts run to
    tens of megabytes and most are only timed, while a written one is parsed where it is proven
    (:func:`compiled_xml`, :func:`full_range_text`); measured on ``synth solve --topo dgx_a100
    --nodes 8 --coll allgather`` (``results/speed.md``, before50 and stop50), this process's
    parsing fell from 13.2 to 7.5 s. Why
    not proven: the interpreter costs about as much as the compile, and only the files that win a
    range are written -- :func:`synth.select.ranking.ranged_xml` proves those (this text, or it
    with only its byte bounds set to the range's) before they are, and one that fails is passed
    over there, as a compile failure is. Measured on one group of ``solve
    --topo dgx1 --nodes 8 --concurrent stride:8 --coll allreduce`` under cProfile: 182 proofs, 90 of
    the solve's 540 s, for 14 written files. ``ahead``: a worker that may have compiled it already
    (the same text)."""
    verified = cache.get((candidate.name, options))
    if isinstance(verified, str):
        return verified
    key = (candidate.name, options, COMPILED)
    if key not in cache:
        reason = xml_unsupported_reason(candidate.schedule, options)
        if reason:
            cache[key] = f"cannot emit XML: {reason}"
        else:
            try:
                with progress.phase(f"XML of {candidate.name} ({options.proto} "
                                    f"x{options.instances}, {candidate.schedule.num_transfers:,} "
                                    "transfers): compile"):
                    made, program = _twin_in(cache, candidate.schedule, candidate.name, options)
                    if made is not None and ahead is not None:
                        ahead.done_inline(candidate.name, options)
                    elif ahead is not None:     # its parse, where it has one, is remembered
                        made = ahead.take(candidate.name, options)
                    if isinstance(made, tuple):     # the compiler refused, in the worker
                        raise SynthError(made[0])
                    if made is None:
                        made, program = compiled_text(candidate.schedule, options)
                    cache[key] = (made, program if program is not None
                                  else parse_program(made, name, options.profile))
            except SynthError as exc:
                cache[key] = exc.message
    got = cache[key]
    return got if isinstance(got, str) else got[1]


def _twin_in(cache: XmlCache, schedule: Any, name: str, options: XmlOptions
             ) -> tuple[str | None, Any]:
    """The file for ``options`` made from its twin's text where ``cache`` has that (compiled here
    or by the worker: :mod:`synth.emit.proto_twins`) -- its LL/LL128 twin's, or the Simple file's
    where that compile serves its twins (:func:`synth.emit.proto_twins.serves_twins`) -- and
    where the twin was parsed, its program with the protocol changed: what parsing the new text
    gives, so it is not parsed again (``tests/test_proto_twins.py``); (None, None) where there is
    no twin at hand."""
    other = twin_protocol(options.proto, options.max_bytes)
    if other is None:
        return None, None
    sources = [other]
    simple = replace(options, proto="Simple")
    if serves_twins(schedule, compile_keywords(simple)):
        sources.append("Simple")
    for source in sources:
        twin = replace(options, proto=source)
        for key in ((name, twin, COMPILED), (name, twin)):
            got = cache.get(key)
            if isinstance(got, tuple):
                text = with_proto(got[0], source, options.proto)
                if text is None:
                    return None, None
                parsed = got[1] if len(key) == 3 else None
                return text, None if parsed is None else replace(parsed, proto=options.proto)
    return None, None


def program_cost(program: Any, nbytes: int, profile: str = "exec") -> int:
    """Estimated simulation work of ``program`` at ``nbytes``: its steps (all threadblocks, all
    ranks) times the grid iterations the call takes (:func:`synth.timing.program.slicing`). The
    simulator's events scale with both; measured wall time is 8-16 µs per unit (dgx1, trn1_32),
    up to 1,226 where steps carry many chunks (:data:`PROGRAM_COST_BUDGET`)."""
    steps = sum(len(tb.steps) for g in program.gpus for tb in g.tbs)
    return steps * len(slicing(program, int(nbytes), profile).slices)


class ProgramScorer:
    """The timed program model (:mod:`synth.timing.program`) as a :data:`Scorer`: each candidate
    compiled once to XML with the solve's options (its whole byte range), parsed, and simulated at
    the sizes where a runtime selects it (:func:`synth.select.runs_at`); ``inf`` elsewhere,
    where the file deadlocks, where its XML cannot be produced (the reason goes to ``notes``, as
    :func:`synth.select.choose` words its exclusions), and where :data:`PRUNE_FACTOR`
    skipped it.

    ``instances``: the instance counts each candidate may compete at (``synth solve`` without
    ``--instances``: :data:`synth.select.INSTANCES`), the first being the solve's own
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
                 prune_factor: float = PRUNE_FACTOR, instances: Sequence[int] | None = None,
                 protocols: Sequence[str] | None = None) -> None:
        self.result = result
        self.topology = topology
        self.xml = xml
        self.calibration = calibration
        self.budget = budget
        self.prune_factor = prune_factor
        self.instances = tuple(dict.fromkeys([xml.instances, *sorted(
            i for i in (instances or ()) if i > xml.instances)]))
        """Instance counts timed: the solve's own first, then the higher ones tried."""
        self.protocols = tuple(dict.fromkeys([xml.proto, *(protocols or ())]))
        """Protocols timed: the solve's own first (the first count's timing), then the others."""
        self.compiled: XmlCache = {}
        self.notes: list[str] = []
        self.cost = 0
        """Estimated work spent so far (:func:`program_cost` units)."""
        self.instances_cost = 0
        """The part of ``cost`` spent on the forms after the first (their own ``budget``)."""
        self.simulated = 0
        """(candidate, form, size) triples simulated."""
        self.skipped = 0
        """(candidate, form, size) triples the prunes skipped."""
        self.bounded = 0
        """Of ``skipped``, those the sound lower bound skipped (:func:`time_lower_bound`)."""
        self.stopped: str | None = None
        """Why the other forms were not all tried (the budget), else None."""
        self.cut: tuple[int, str] | None = None
        """Where the first count's timing ran out of budget after deciding some sizes: the
        smallest size it decided, and why it stopped (None when it decided every size)."""
        self.decided: frozenset[int] = frozenset()
        """The sizes the program model decides; the others are ranked by lock-step."""
        self._programs: dict[tuple[str, str, int], Any] = {}
        self._options: dict[tuple[str, int], XmlOptions] = {}
        self._times: dict[tuple[str, str, int], list[float]] | None = None
        self._ahead: CompileAhead | None = None
        self.compiled_ahead = 0
        """Compiles the spare core made (:mod:`.compile_ahead`); the rest were made inline."""
        self.timed_ahead = 0
        """Simulations the spare core made (:mod:`.compile_ahead`); the rest were made inline."""

    @property
    def forms(self) -> tuple[tuple[str, int], ...]:
        """Every (protocol, instances) a candidate may be compiled with, the solve's own first."""
        return tuple((p, i) for p in self.protocols for i in self.instances)

    def options(self, proto: str, instances: int) -> XmlOptions:
        """The full-range compile options of one form (what is timed, and what is written)."""
        key = (proto, instances)
        if key not in self._options:
            self._options[key] = replace(self.xml, proto=proto, instances=instances)
        return self._options[key]

    def _program(self, c: Candidate, proto: str, instances: int) -> Any | None:
        """The candidate's parsed full-range XML in one form, or None (with a note) when it has
        none."""
        key = (c.name, proto, instances)
        if key not in self._programs:
            got = compiled_program(self.compiled, c, self.options(proto, instances), f"{c.name}.xml",
                                   self._ahead)
            if isinstance(got, str):
                form = "" if (proto, instances) == self.forms[0] else f" as {proto} x{instances}"
                self.notes.append(f"{c.name} passed over by the program model{form}: {got}")
                progress.note(self.notes[-1])
                self._programs[key] = None
            else:
                self._programs[key] = got
        return self._programs[key]

    def _text_of(self, name: str, options: XmlOptions) -> str | None:
        """The text this scorer compiled (or proved) for (name, options), if it has one."""
        for key in ((name, options, COMPILED), (name, options)):
            got = self.compiled.get(key)
            if isinstance(got, tuple):
                return got[0]
        return None

    def _time_ahead(self, jobs: Sequence[tuple[Candidate, str, int, int]]) -> None:
        """Tell the spare core which (candidate, protocol, instances, size) :meth:`_run` may
        simulate next, in that order: it times them while this process times the current one
        (:mod:`.compile_ahead`; the same program, model and size, so the same time)."""
        if self._ahead is not None:
            self._ahead.plan_times((c.name, c.schedule, self.options(p, inst), size,
                                    f"{c.name}.xml") for c, p, inst, size in jobs)

    def planned_forms(self) -> list[tuple[Candidate, str, int]]:
        """The (candidate, protocol, instances) compiles :meth:`run` will most likely ask for, in
        that order: form by form (:attr:`forms`), and within a form the candidates fastest by
        lock-step at the largest size first. What :mod:`.compile_ahead` makes on a spare core."""
        sizes = [p.bytes for p in self.result.best.costs]
        if not sizes:
            return []
        i = max(range(len(sizes)), key=lambda j: sizes[j])
        order = sorted(self.result.candidates,
                       key=lambda c: (c.costs[i].time_us, c.report.steps, c.name))
        return [(c, p, inst) for p, inst in self.forms for c in order]

    def run(self) -> dict[tuple[str, str, int], list[float]]:
        """Every (candidate, protocol, instance count)'s time at every size (:meth:`_run`), with
        the compiles it is about to need made on a spare core where there is one
        (:mod:`.compile_ahead`: the same texts, so the same times)."""
        if self._times is not None:
            return self._times
        if wanted(len(self.forms) * sum(c.schedule.num_transfers for c in self.result.candidates)):
            self._ahead = CompileAhead(self.topology, self.calibration, self.xml.profile,
                                       self._text_of)
            self._ahead.plan((c.name, c.schedule, self.options(p, inst))
                             for c, p, inst in self.planned_forms())
        try:
            return self._run()
        finally:
            if self._ahead is not None:
                self.compiled_ahead = self._ahead.compiled
                self.timed_ahead = self._ahead.timed
                self._ahead.close()
                self._ahead = None

    def _run(self) -> dict[tuple[str, str, int], list[float]]:
        """Every (candidate, protocol, instance count)'s time at every size.

        The first form (the solve's protocol and instance count): largest size first, so the most
        expensive sizes meet the budget first, and at each size the candidates fastest by
        lock-step first, pruned by lock-step (:data:`PRUNE_FACTOR`). Then the other forms, each
        protocol's instance counts doubling: the solve's protocol largest size first (its higher
        counts pay at large sizes), the others smallest size first (LL and LL128 pay at small
        ones). A form is simulated at a size only where it may win there:

        * a higher count ``2i`` where, at the count before, the candidate ran within ``2i / i``
          times the prune factor of the fastest at that count and, from the third count on, that
          count beat the one before it (once doubling stops paying, doubling again is not tried);
          another protocol's every count where the candidate's lock-step time is within the prune
          factor of the fastest time found at that size, up to the first count the compiler
          refuses (the limits it breaks grow with the count: a higher one is refused too);
        * and never where :func:`synth.timing.program_bound.time_lower_bound` (a sound bound:
          the simulation cannot go below it) is already at or above the fastest time found there,
          or above NCCL's there (a configuration slower than NCCL never serves a size).

        The first form uses the bound too, more narrowly (:func:`hopeless`): a candidate whose
        bound is at or above NCCL's time and more than the ladder's factor over the fastest time
        found there is charged to the budget and left at ``inf`` (a time nothing that decides
        reads). On ``synth solve --topo dgx_a100 --nodes 8 --coll allgather``, 164 of the 303
        simulations were at least twice the fastest time at their size; ``rail_blocks`` at 4 KB
        has a bound 39 times the fastest there.

        All counts, no clock, so two runs decide alike. Where the first form's budget runs out
        after some sizes were timed, those sizes keep the program model's ranking and the smaller
        ones are ranked by lock-step (:attr:`cut`, :meth:`decided_by`); the other forms are tried
        at the timed sizes only, within a budget of their own (:attr:`stopped` says where it ran
        out).

        Measured before the protocols were added (1 KB..1 GB, shared 2-core machine): the instance
        counts take 2-4x the single-count phase (mi300x allgather 584 simulations, 4.5 s;
        dgx_a100 x2 allgather 446, 21 s), because more instances pay at nearly every size in this
        model (mi300x direct x8 is faster than x1 from 1 KB: 0.1% there, 72% at 1 GB).

        Why the count ratio widens the prune: doubling the instances can speed a file up by more
        than the prune factor, while the fastest file at the count before gains less, so their
        order at ``i`` does not predict it at ``2i``. Measured on trn1_32 allgather at 1 GiB: milp
        took 7,699 µs at x1 against trees_aligned's 3,776 (2.04 times) and 2,863 µs at x2, the
        fastest file; a prune by the plain factor never timed it at x2."""
        cands = self.result.candidates
        sizes = [p.bytes for p in self.result.best.costs]
        times = {(c.name, p, i): [math.inf] * len(sizes) for c in cands for p, i in self.forms}
        nccl = ([p.time_us for p in self.result.nccl] if self.result.nccl is not None
                else [math.inf] * len(sizes))
        models: dict[str, Any] = {}
        largest_first = sorted(range(len(sizes)), key=lambda i: -sizes[i])

        def model_of(proto: str) -> Any:
            if proto not in models:
                models[proto] = program_model(self.topology, proto, self.calibration)
            return models[proto]

        def time_parsed(name: str, options: XmlOptions, size: int) -> float | None:
            """A planned timing made here while the worker makes another (the time
            :func:`simulate` would find), or None where the program is not parsed yet."""
            program = self._programs.get((name, options.proto, options.instances))
            if program is None:
                return None
            return program_times_us(program, self.topology, [size], model=model_of(options.proto),
                                    profile=self.xml.profile)[0]

        def runs(c: Candidate, inst: int, i: int) -> bool:
            return bool(runs_at(np.array([sizes[i]]), c.schedule.collective.buffer_chunks,
                                inst)[0])

        def best_at(i: int) -> float:
            return min(t[i] for t in times.values())

        # the first form's hopeless test (below): how far over the fastest time a count's time
        # must be for the next count not to be tried (the ladder's widened prune, listed())
        ladder = (self.prune_factor * self.instances[1] / self.instances[0]
                  if len(self.instances) > 1 else 1.0)
        bounds: dict[tuple[str, str, int, int], float] = {}

        def lower_bound(c: Candidate, proto: str, inst: int, i: int, program: Any) -> float:
            """:func:`time_lower_bound` of the candidate's form at size i, once (the first
            form's is asked for both when planning the spare core and before simulating)."""
            key = (c.name, proto, inst, i)
            if key not in bounds:
                bounds[key] = time_lower_bound(program, self.topology, sizes[i], model_of(proto),
                                               self.xml.profile)
            return bounds[key]

        def hopeless(c: Candidate, i: int, program: Any) -> bool:
            """Whether a first-form simulation can be skipped without changing any answer: its
            sound lower bound is at or above NCCL's time there and more than ``ladder`` times
            the fastest time found there. Its time (``inf`` instead) is then read nowhere that
            decides: a configuration not faster than NCCL never serves a size, is never a
            fallback (:func:`synth.select.nccl.with_nccl` drops it from the size's ranking) and
            never a near tie; the fastest time at the size, every later form's prune and the
            next count's ladder (:func:`listed`: a time more than ``ladder`` times the fastest
            does not try the next count, nor does ``inf``) come out the same; and the budget is
            charged as if it ran. The first form has no other prune than lock-step's, because
            its times are what the later forms are tried by."""
            best = best_at(i)
            if not math.isfinite(nccl[i]) or not math.isfinite(best):
                return False    # nothing to be over (the size's first candidate is never skipped)
            bound = lower_bound(c, proto0, base, i, program)
            return bound >= nccl[i] and bound > ladder * best

        def simulate(c: Candidate, proto: str, inst: int, i: int, first: bool) -> float:
            program = self._program(c, proto, inst)
            ahead = self._ahead
            if program is None or (not first and lower_bound(c, proto, inst, i, program)
                                   >= min(best_at(i), nccl[i])):
                if program is not None:
                    self.skipped += 1
                    self.bounded += 1
                if ahead is not None:
                    ahead.pump()
                return math.inf
            cost = program_cost(program, sizes[i], self.xml.profile)
            if first and self.cost + cost > self.budget:
                raise ProgramBudgetExceeded(self.cost, cost, self.budget, sizes[i], c.name)
            if not first and self.instances_cost + cost > self.budget:
                raise _StopInstances(f"{c.name} {proto} x{inst} on {sizes[i]} bytes would pass "
                                     f"their budget ({self.budget:,.0f} op-iterations)")
            if not first:
                self.instances_cost += cost
            self.cost += cost
            if first and hopeless(c, i, program):
                self.skipped += 1
                self.bounded += 1
                if ahead is not None:
                    ahead.pump()
                return math.inf
            self.simulated += 1
            t = None
            if ahead is not None:
                # the worker's time if it made it (waited for if it is making it); an idle
                # worker is started on its next planned job (it then keeps itself busy)
                t = ahead.take_time(c.name, self.options(proto, inst), sizes[i], time_parsed)
                ahead.pump()
            if t is None:
                t = program_times_us(program, self.topology, [sizes[i]], model=model_of(proto),
                                     profile=self.xml.profile)[0]
            times[(c.name, proto, inst)][i] = t
            text = self._text_of(c.name, self.options(proto, inst))
            if text is not None:    # a range's file is this text with its bounds set: its time
                remember_times(text, self.topology, [sizes[i]], [t], model=model_of(proto),
                               profile=self.xml.profile)
            return t

        proto0, base = self.forms[0]
        decided: list[int] = []
        first_done: list[bool] = []
        by_name = {c.name: c for c in cands}

        def refused_below(name: str, proto: str, inst: int,
                          refused: Set[tuple[str, XmlOptions]] = frozenset()) -> bool:
            """Whether the compiler refused ``name`` in ``proto`` at a count below ``inst``
            (here: :attr:`_programs` holds None; in the worker: ``refused``). Such a count is
            never tried, as the solve's protocol's ladder never tried one: a count places the
            per-copy program under budgets divided by it and repeats it that many times (from x2
            on the same per-copy ops; x2 also splits bundles x1 keeps whole), so what a refusal
            measures (blocks, steps and tokenizer nodes per rank, depids, channels) grows with
            it. An argument, not a proof (a tighter budget can merge blocks), checked instead:
            no count accepted above a refused one in 528 forms of 6 machines' baselines and
            dgx_a100 x 8's candidates, x1 to x8, Simple and LL."""
            for lower in self.instances:
                if lower >= inst:
                    return False
                if self._programs.get((name, proto, lower), True) is None \
                        or (name, self.options(proto, lower)) in refused:
                    return True
            return False

        def may_want(name: str, options: XmlOptions, refused: Set[tuple[str, XmlOptions]]) -> bool:
            """False where this run will never ask for the compile of ``name`` in ``options``
            (what :mod:`.compile_ahead` need not make); True where it may. Called from the
            compile-ahead thread while this run goes on, so it rests only on facts that, once
            they hold, hold for the rest of the run (a stale read only makes it say True):

            * no count is tried once a lower count's compile in its protocol was refused
              (:func:`refused_below`; for the solve's protocol a higher count is tried at a size
              only where the count before it has a finite time there, too);
            * another protocol is tried only at the sizes the first form decided, where the
              candidate's lock-step time is within the prune factor of the fastest time found
              there, which only falls (:func:`listed`)."""
            c = by_name.get(name)
            if c is None:
                return True
            if refused_below(name, options.proto, options.instances, refused):
                return False
            if options.proto == proto0:
                return True
            if not first_done:
                return True
            return any(runs(c, options.instances, i)
                       and c.costs[i].time_us <= self.prune_factor * best_at(i) for i in decided)

        if self._ahead is not None:
            self._ahead.wanted = may_want

        def first_order(i: int) -> list[Candidate]:
            return sorted((c for c in cands if runs(c, base, i)),
                          key=lambda c: (c.costs[i].time_us, c.report.steps, c.name))

        def planned_hopeless(c: Candidate, i: int) -> bool:
            """:func:`hopeless` now, for a candidate whose program is parsed already (a first
            form found hopeless stays so: the fastest time only falls), so the spare core is not
            planned a simulation this process will skip."""
            program = self._programs.get((c.name, proto0, base))
            return program is not None and hopeless(c, i, program)

        try:
            for n, i in enumerate(largest_first):
                order = first_order(i)
                # after this size, the worker may time each following size's first candidate
                # (the fastest by lock-step there: never pruned)
                following = [(firsts[0], proto0, base, sizes[j]) for j in largest_first[n + 1:]
                             for firsts in (first_order(j),) if firsts and self._ahead is not None]
                best = math.inf
                for k, c in enumerate(order):
                    if c.costs[i].time_us > self.prune_factor * best:
                        self.skipped += 1
                        continue
                    # the worker's plan: the rest of this size not yet pruned (the best only
                    # falls, so one pruned now stays pruned), then the following sizes' firsts
                    self._time_ahead([(d, proto0, base, sizes[i]) for d in order[k + 1:]
                                      if d.costs[i].time_us <= self.prune_factor * best
                                      and not planned_hopeless(d, i)]
                                     + following)
                    best = min(best, simulate(c, proto0, base, i, True))
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
                        times[(c.name, proto0, base)][i] = c.costs[i].time_us
        self.decided = frozenset(sizes[i] for i in decided)
        first_done.append(True)

        def listed(proto: str, k: int, i: int) -> list[tuple[Candidate, bool | None]]:
            """The candidates of form (proto, instances[k]) at size i in the order they are
            tried, each True (timed), False (pruned: counted as skipped) or None (not timed
            here), from the times found so far."""
            inst = self.instances[k]
            if proto != proto0:     # another protocol: every count, by lock-step
                # (not a ladder of times: LL at x1 runs a block at a third of Simple's copy rate,
                # so its x1 time says little of x8; the sound bound keeps the large sizes, where
                # LL cannot win, from being simulated); a count above a refused one is not timed
                # (None: a refused compile was never counted as a prune's)
                ref = best_at(i)
                order: list[tuple[Candidate, bool | None]] = []
                for c in sorted(cands, key=lambda c: (c.costs[i].time_us, c.name)):
                    tried = runs(c, inst, i) and c.costs[i].time_us <= self.prune_factor * ref
                    order.append((c, None if tried and refused_below(c.name, proto, inst)
                                  else tried))
                return order
            prev = self.instances[k - 1]
            before = self.instances[k - 2] if k >= 2 else None
            ref = min(times[(c.name, proto, prev)][i] for c in cands)
            out: list[tuple[Candidate, bool | None]] = []
            for c in sorted(cands, key=lambda c: (times[(c.name, proto, prev)][i], c.name)):
                t = times[(c.name, proto, prev)][i]
                if not math.isfinite(t) or not runs(c, inst, i):
                    out.append((c, None))
                else:
                    out.append((c, not (t > self.prune_factor * (inst / prev) * ref
                                        or (before is not None
                                            and not t < times[(c.name, proto, before)][i]))))
            return out

        # the other forms, batch by batch: each protocol's sizes (the solve's largest first, the
        # others smallest first), each size's counts doubling (the first form's skipped)
        batches = [(proto, k, i) for proto in self.protocols
                   for i in (largest_first if proto == proto0 else largest_first[::-1])
                   if i in decided for k in range(len(self.instances))
                   if not (proto == proto0 and k == 0)]
        try:
            for n, (proto, k, i) in enumerate(batches):
                inst = self.instances[k]
                now = listed(proto, k, i)
                # what the next batches would time by the times found so far (a guess: the
                # times still to come may change it), once per batch
                future = [(d, p2, self.instances[k2], sizes[i2])
                          for p2, k2, i2 in (batches[n + 1:n + 1 + LOOKAHEAD_BATCHES]
                                             if self._ahead is not None else ())
                          for d, ok in listed(p2, k2, i2) if ok]
                for j, (c, tried) in enumerate(now):
                    if not tried:
                        self.skipped += tried is False
                        continue
                    # the worker's plan: the rest of this batch, then the next batches'
                    self._time_ahead([(d, proto, inst, sizes[i]) for d, ok in now[j + 1:] if ok]
                                     + future)
                    simulate(c, proto, inst, i, False)
        except _StopInstances as exc:
            self.stopped = str(exc)
        self._times = times
        return times

    def decided_by(self, nbytes: int) -> str:
        """Which model ranks the candidates at ``nbytes``: ``program``, or ``lockstep`` below
        the sizes the budget let it time (:attr:`cut`)."""
        self.run()
        return "program" if nbytes in self.decided else "lockstep"

    def at(self, candidate: Candidate, instances: int, proto: str | None = None) -> list[float]:
        """The candidate's times compiled with ``proto`` (default the solve's) and ``instances``
        (``inf`` where it was not timed)."""
        run = self.run()
        key = (candidate.name, proto or self.xml.proto, instances)
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


LOOKAHEAD_BATCHES = 6
"""How many batches (form and size) past the current one the spare core's timing plan reaches
(:meth:`ProgramScorer._time_ahead`)."""


class _StopInstances(Exception):
    """The higher instance counts would pass the budget: they stop where they are."""


class ProgramBudgetExceeded(Exception):
    """:meth:`ProgramScorer.run` would pass its budget (not an error: ``auto`` falls back)."""

    def __init__(self, spent: int, next_cost: int, budget: float, size: int, name: str) -> None:
        super().__init__(f"the program model's estimated cost passed its budget ({budget:,.0f} "
                         f"op-iterations) after {spent:,}, at {name} on {size} bytes "
                         f"({next_cost:,} more)")
