"""Candidates ranked per size bucket by a scorer, and the winning configuration of every size range
with its interpreter-verified file.

Both ``synth solve`` and ``synth catalog`` end in :func:`synth.select.ranges.choose`; this module is
how ``solve`` gets there from its candidates and a scorer (:mod:`synth.select.scorers`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from .. import progress
from ..emit import XmlOptions, xml_unsupported_reason
from ..emit.passes import ALIASED_KINDS
from ..emit.variants import program_for_sizes
from ..emit.xml_parse import parse_program
from ..errors import SynthError
from ..mscclpp.emit import emit_verified_plan
from ..timing.program import cached_times, program_model
from .buckets import make_buckets, runs_at
from .candidates import Candidate, SolveResult
from .compile_ahead import CompileAhead, wanted
from .nccl import NCCL, Timed, Vetted, choose_with_nccl, runtime_times, with_nccl
from .program_scorer import COMPILED, PARSED, UNPROVEN, XmlCache, compiled_xml, full_range_text
from .program_veto import ProgramVeto
from .ranges import NEAR_TIE, BucketTuning, Choice, Config, Range, choose
from .scorers import Scorer, lockstep_scorer

MIN_FILE_TRANSFERS = 20_000
"""Make the range files on a spare core (:func:`_files_ahead`) only when their schedules' transfers
reach this: making a file took about 0.13 ms per transfer of its schedule (the dgx1 x 8 group of
:func:`_files_ahead`: 19 s under py-spy for 14 files whose schedules total 147,840 transfers), a
spawned worker about a second to start."""


@dataclass(frozen=True)
class CallKindFile:
    """The out-of-place file of a range served by one file per call kind."""

    text: str
    reports: tuple[Any, ...]
    model_us: tuple[float, ...]
    """Its program-model time at each of the range's sizes."""


@dataclass(frozen=True)
class SizeRange:
    """Message sizes ``lo..hi`` (inclusive; ``hi`` 0 = unbounded) and the candidate serving them,
    or None where NCCL serves them with no file (it was faster there)."""

    lo: int
    hi: int
    candidate: Candidate | None
    sizes: tuple[int, ...]
    """The requested sizes that fall in the range (where its time and % of bound are reported)."""
    text: str | None = None
    """The range's verified file: MSCCL-IR XML, or an MSCCL++ plan (None: no file)."""
    reports: tuple[Any, ...] = ()
    model_us: tuple[float, ...] = ()
    """The deciding model's time at each of ``sizes`` (:data:`Scorer`)."""
    instances: int = 1
    """The instance count its file is compiled with (:class:`ProgramScorer` chooses it)."""
    proto: str = "Simple"
    """The protocol its file is compiled with (:class:`ProgramScorer` chooses it)."""
    decided_by: str | None = None
    """The model that ranked the range's largest size, where it differs by size
    (:meth:`ProgramScorer.decided_by`); None: the solve's ``winners_by``."""
    oop: CallKindFile | None = None
    """The range's out-of-place file, where it has one file per kind of call
    (:func:`out_of_place_companion`; ``text`` is then in-place only); else None."""

    @property
    def served_by(self) -> str:
        """``synth`` (a file) or ``nccl`` (no file: left to NCCL)."""
        return "nccl" if self.candidate is None else "synth"

    def to_dict(self, file: str | None, oop_file: str | None = None) -> dict[str, Any]:
        """``file``: the range's file (its in-place one where it has one per kind of call,
        ``oop_file`` then naming the out-of-place one)."""
        c = self.candidate
        return {"min_bytes": self.lo, "max_bytes": self.hi,
                "algorithm": "nccl" if c is None else c.schedule.algorithm,
                "candidate": "nccl" if c is None else c.name, "served_by": self.served_by,
                "proto": self.proto if c is not None else None,
                "instances": self.instances if c is not None else None, "file": file,
                "oop_file": oop_file if self.oop is not None else None}


def _config(c: Candidate, proto: str, instances: int) -> Config:
    return Config(c.name, c.schedule.collective.chunks_per_rank, proto, instances)


def model_forms(model: Scorer, xml: XmlOptions | None) -> tuple[tuple[str, int], ...]:
    """The (protocol, instances) forms ``model`` times, the solve's own first: a
    :class:`ProgramScorer`'s, else ``xml``'s alone."""
    forms = tuple(getattr(model, "forms", ()))
    return forms or (((xml.proto, xml.instances),) if xml else (("Simple", 1),))


def config_times(model: Scorer, candidate: Candidate, cfg: Config) -> Sequence[float]:
    """``candidate``'s times under ``model`` compiled as ``cfg`` (its protocol and instances; a
    model without forms, such as :func:`lockstep_scorer`, gives its one profile)."""
    at = getattr(model, "at", None)
    return at(candidate, cfg.instances, cfg.proto) if at is not None else model(candidate)


class Ranked(NamedTuple):
    """:func:`rank_sizes`' answer."""

    tunings: list[BucketTuning]
    """Per bucket, the configurations fastest first, NCCL among them where it runs."""
    lookup: dict[Config, Candidate | None]
    """Each configuration's candidate (:data:`NCCL`: None)."""
    nccl_us: list[float] | None
    """NCCL's time at each bucket's size (None: NCCL does not compete)."""
    runtime_us: Callable[[Config, BucketTuning], float]
    """``runtime_us(cfg, tuning)``: the configuration at the bucket as the runtime runs it (what
    NCCL's time was compared with; ``inf`` where the runtime would not select its file)."""


def rank_sizes(result: SolveResult, xml: XmlOptions | None, model: Scorer = lockstep_scorer
               ) -> Ranked:
    """Per size bucket (:func:`synth.select.make_buckets` over the sizes inside the XML's
    byte range), the candidates fastest first under ``model``.

    The configurations are (candidate, instance count) for every count ``model`` times
    (:func:`model_instances`; a higher count only where it was timed somewhere). Where a file is
    written, a configuration whose ``nchunksperloop`` does not divide a size's element count is
    never selected there by the runtime (:func:`synth.select.runs_at`), so it ranks after
    every one that runs there; ties go to fewer instances, then the faster by lock-step
    (``model`` may leave several at ``inf``: :class:`ProgramScorer`), then fewer steps, then
    the name. Each bucket carries its configurations' times (``inf`` where they do not run) for
    the near-tie settling (:data:`NEAR_TIE`).

    NCCL competes in every bucket where it runs (``result.nccl``; :data:`NCCL`, looked up as None)
    by :func:`synth.select.nccl.with_nccl`, the rule ``synth catalog`` applies too: a
    configuration not faster than NCCL there as the runtime runs it
    (:func:`synth.select.nccl.runtime_times`) ranks after NCCL, which always succeeds (no file), so
    no size is served slower than NCCL, and NCCL takes no part in near-tie settling.
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
    forms = model_forms(model, xml)
    times: dict[Config, dict[int, float]] = {}
    lookup: dict[Config, Candidate] = {}
    for c in result.candidates:
        for k, (proto, inst) in enumerate(forms):
            cfg = _config(c, proto, inst)
            t = list(config_times(model, c, cfg))
            if k and not any(math.isfinite(x) for x in t):
                continue    # another form never timed: not a configuration
            lookup[cfg] = c
            times[cfg] = dict(zip(sizes, t, strict=True))
    wire = {c.name: {p.bytes: p.time_us for p in c.costs} for c in result.candidates}
    nccl = {p.bytes: p.time_us for p in result.nccl} if result.nccl is not None else None
    runtime = ({cfg: dict(zip(sizes, runtime_times(result, model, c, cfg), strict=True))
                for cfg, c in lookup.items()} if nccl is not None else {})

    def runs(cfg: Config, size: int) -> bool:
        return xml is None or bool(runs_at(np.array([size]),
                                           lookup[cfg].schedule.collective.buffer_chunks,
                                           cfg.instances)[0])

    out = []
    for b in buckets:
        def key(cfg: Config, size: int = b.size) -> tuple:
            c = lookup[cfg]
            return (not runs(cfg, size), times[cfg][size], cfg.instances, wire[c.name][size],
                    c.report.steps, c.name)
        ranking = sorted(lookup, key=key)
        at = {cfg: times[cfg][b.size] if runs(cfg, b.size) else math.inf for cfg in ranking}
        out.append(BucketTuning(b, ranking, len(ranking), len(ranking), ranking[0], at))

    def as_run(cfg: Config, t: BucketTuning) -> float:
        size = t.bucket.size
        return runtime[cfg][size] if runs(cfg, size) else math.inf
    nccl_us = [nccl[b.size] for b in buckets] if nccl is not None else None
    return Ranked(with_nccl(out, nccl_us, as_run),
                  {**lookup, **({NCCL: None} if nccl is not None else {})}, nccl_us, as_run)


def range_options(xml: XmlOptions, lo: int, hi: int, instances: int | None = None,
                  proto: str | None = None) -> XmlOptions:
    """The file's byte range: inclusive ``hi`` (exec, rccl) or exclusive ``hi + 1`` (legacy,
    spec §2.1); 0 stays unbounded. ``instances``, ``proto``: the range's own form (default the
    solve's)."""
    top = hi + 1 if hi and xml.profile == "legacy" else hi
    return replace(xml, min_bytes=lo, max_bytes=top,
                   instances=xml.instances if instances is None else instances,
                   proto=xml.proto if proto is None else proto)


def ranged_xml(cache: XmlCache, candidate: Candidate, xml: XmlOptions, cfg: Config, lo: int,
               hi: int, ahead: CompileAhead | None = None) -> tuple[str, tuple[Any, ...]] | str:
    """The file for ``lo..hi``: the candidate's compile in ``cfg``'s form over the solve's whole
    byte range -- the very program the deciding model timed -- with only ``minBytes`` and
    ``maxBytes`` set to the range, verified (or why there is none). The compile itself is
    proven only where it is the file (the range is the compile's): else the range's text is the
    one written, and the one proven (:func:`~synth.select.program_scorer.full_range_text`).

    Why not compile anew for the range: the compiler's choices (its deadlock check, where each
    op goes) use the byte bounds, so a range's own compile can be another program, and it was:
    a ``rail_blocks`` x2 range file on dgx_h100 x 8 took 14,336 steps and 372.64 µs at 1 KB where
    the compile that won its range took 896 steps and 36.24 µs. A program compiled for every size
    up to ``xml.max_bytes`` runs at any size in a range inside it.

    ``ahead``: a worker that may have made the file already (:meth:`CompileAhead.plan_files`:
    the same calls, so the same text and proofs).

    The file's program, where it is the compile's with only the bounds changed (sharing its
    ranks, so holding it costs nothing), is held in ``cache`` under ``PARSED``: the veto and the
    report parse the file again, and past the bound on kept text (files of 60-120 MB at 512
    ranks) that was a parse anew -- 10 s of a 62 MB file on ``synth solve --topo dgx_h100
    --nodes 64 --coll allgather``."""
    full = replace(xml, proto=cfg.proto, instances=cfg.instances)
    ranged = range_options(full, lo, hi)
    same = (ranged.min_bytes, ranged.max_bytes) == (full.min_bytes, full.max_bytes)
    key = (candidate.name, ranged)
    if ahead is not None and ((candidate.name, full) not in cache if same else key not in cache):
        made = ahead.take_file(candidate.name, full, ranged.min_bytes, ranged.max_bytes)
        if made is not None:
            whole, part = made
            if isinstance(whole, tuple) and whole[1] is None:   # compiled, not proven
                cache.setdefault((candidate.name, full, UNPROVEN), whole[0])
            else:
                cache.setdefault((candidate.name, full), whole)
            if part is not None:
                cache.setdefault(key, part)
    if same:
        return compiled_xml(cache, candidate, full, ahead)
    if key not in cache:
        got = full_range_text(cache, candidate, full, ahead)
        if isinstance(got, str):
            return got
        try:
            with progress.phase(f"XML of {candidate.name} ({full.proto} x{full.instances}, "
                                f"{candidate.schedule.num_transfers:,} transfers) for "
                                f"{lo}..{hi or 'unbounded'} bytes: prove"):
                text, reports = program_for_sizes(got[1], candidate.schedule, full,
                                                  ranged.min_bytes, ranged.max_bytes,
                                                  candidate.name, got[0])
            cache[key] = (text, tuple(reports))
            kept = parse_program(text, f"{candidate.name}.xml", xml.profile)   # just proven: held
            if kept.gpus is got[1].gpus:
                cache[(*key, PARSED)] = kept
        except SynthError as exc:
            cache[key] = exc.message
    return cache[key]


def choose_ranges(result: SolveResult, xml: XmlOptions | None, model: Scorer = lockstep_scorer,
                  plan: Any = None, split: bool = False, veto: ProgramVeto | None = None
                  ) -> tuple[list[SizeRange], list[str]]:
    """The winner of every size range, each with its interpreter-verified XML (when ``xml``), or
    with ``plan`` (:class:`synth.outputs.mscclpp.PlanTarget`) its verified MSCCL++ plan.

    Selection is the catalog's (:func:`synth.select.choose`): adjacent buckets with one
    winner merge into one range, one file, and near ties (:data:`NEAR_TIE`) do not split ranges;
    a configuration (candidate, instances) whose file cannot be produced (a hard limit
    of the runtime, named with its excess by the compiler) is excluded with that reason and its
    buckets go to their next-best candidate. Returns the ranges and the notes on exclusions.

    Each range's file is compiled with that range's byte bounds; a model that already compiled
    the candidates (:class:`ProgramScorer`, its ``compiled`` cache) lends them, so a range whose
    options equal the ones it compiled with is not compiled again.

    ``split`` (``xml`` in-place only, :func:`splits_call_kinds`): each range also gets its
    out-of-place file (:func:`out_of_place_companion`).

    ``veto`` (XML only, where NCCL competes): the program model's veto
    (:mod:`synth.select.program_veto`). Every file the ranges would write is timed by the program
    model at the sizes of its range that ``model`` did not rank with it; a (configuration, size)
    not faster than NCCL there ranks after NCCL from then on and the ranges are chosen again
    (:func:`synth.select.nccl.choose_with_nccl`), until no file is slower than NCCL at a size it
    serves. An out-of-place file is held to the same rule.
    """
    notes: list[str] = []
    if xml is not None:
        why = xml_unsupported_reason(result.best.schedule, xml)
        if why:     # the collective has no MSCCL-IR form: the same for every candidate
            notes.append(f"no XML: {why}")
            xml = None
    ranked = rank_sizes(result, xml, model)
    made: XmlCache = getattr(model, "compiled", {})
    ahead = (_files_ahead(result, ranked.tunings, ranked.lookup, xml, model, made, split)
             if xml is not None and plan is None else None)
    if xml is None or plan is not None or ranked.nccl_us is None:
        veto = None     # no XML to time, or nothing to veto against
    try:
        return _choose_ranges(result, xml, model, plan, split, notes, ranked, made, ahead, veto)
    finally:
        if ahead is not None:
            ahead.close()


def _choose_ranges(result: SolveResult, xml: XmlOptions | None, model: Scorer, plan: Any,
                   split: bool, notes: list[str], ranked: Ranked, made: XmlCache,
                   ahead: CompileAhead | None, veto: ProgramVeto | None
                   ) -> tuple[list[SizeRange], list[str]]:
    tunings, lookup = ranked.tunings, ranked.lookup
    plans: dict[tuple[str, int, int, int], tuple[str, tuple[Any, ...]] | str] = {}

    def attempt(r: Range) -> str | None:
        if r.config == NCCL or (xml is None and plan is None):
            return None
        if plan is not None:
            key = (lookup[r.config].name, r.lo, r.hi, r.config.instances)
            if key not in plans:
                plans[key] = verified_plan(lookup[r.config].schedule, plan, r.lo, r.hi,
                                           r.config.instances)
            got = plans[key]
        else:
            got = ranged_xml(made, lookup[r.config], xml, r.config, r.lo, r.hi, ahead)
        return got if isinstance(got, str) else None

    if veto is not None:    # choose_ranges keeps one only with XML and NCCL competing
        assert ranked.nccl_us is not None and xml is not None
        vetted = choose_with_nccl(tunings, ranked.nccl_us, ranked.runtime_us, attempt,
                                  _files_timed(veto, model, tunings, ranked.nccl_us, lookup, made,
                                               xml, ahead), NEAR_TIE)
        choice = vetted.choice
        notes += _veto_notes(vetted, tunings, model, len(model_forms(model, xml)) > 1)
    else:
        choice = choose(tunings, attempt, NEAR_TIE)
    sizes = [p.bytes for p in result.best.costs]
    ranges = []
    for r in choice.ranges:
        inside = _inside(sizes, r)
        cand = lookup[r.config]
        if cand is None:    # left to NCCL: no file; its own time
            nccl = {p.bytes: p.time_us for p in result.nccl or ()}
            ranges.append(SizeRange(r.lo, r.hi, None, inside,
                                    model_us=tuple(nccl[s] for s in inside), decided_by="nccl"))
            continue
        got = (plans.get((cand.name, r.lo, r.hi, r.config.instances)) if plan is not None
               else ranged_xml(made, cand, xml, r.config, r.lo, r.hi)
               if xml is not None else None)
        text, reports = got if isinstance(got, tuple) else (None, ())
        at = dict(zip(sizes, config_times(model, cand, r.config), strict=True))
        by = getattr(model, "decided_by", None)
        ranges.append(SizeRange(r.lo, r.hi, cand, inside, text, reports,
                                tuple(at[s] for s in inside), instances=r.config.instances,
                                proto=r.config.proto,
                                decided_by=by(inside[-1]) if by is not None and inside else None))
    if split and xml is not None and plan is None:
        paired = []
        for r in ranges:
            r, why = out_of_place_companion(result, r, xml, made, model, ahead, veto)
            paired.append(r)
            if why:
                notes.append(f"out-of-place calls of {r.lo}..{r.hi or 'unbounded'} bytes are "
                             f"left to NCCL: {why}")
        ranges = paired
    several = len(model_forms(model, xml)) > 1
    notes += [f"{cfg.family}{f' {cfg.proto} x{cfg.instances}' if several else ''} passed over: "
              f"{why}" for cfg, why in choice.excluded.items()]
    left = [r for r in ranges if r.candidate is None]
    if left:
        spans = ", ".join(f"{r.lo}..{r.hi or 'unbounded'}" for r in left)
        notes.append(f"left to NCCL (no file; its model is faster there than every candidate as "
                     f"the runtime runs it): {spans} bytes")
    if xml is not None:
        # a runtime never selects a file where it does not run, so the deciding model may not
        # time it there (ProgramScorer: inf); the missed chance is judged by lock-step
        notes += _never_selected(result, tunings, choice, lookup, lockstep_scorer,
                                 "" if model is lockstep_scorer else " by the lock-step model")
    return ranges, notes


def _files_timed(veto: ProgramVeto, model: Scorer, tunings: Sequence[BucketTuning],
                 nccl_us: Sequence[float], lookup: dict[Config, Candidate | None],
                 made: XmlCache, xml: XmlOptions, ahead: CompileAhead | None
                 ) -> Callable[[Choice], Timed]:
    """The veto's timer for :func:`~synth.select.nccl.choose_with_nccl`: per bucket a chosen
    range's file serves, that file's program time, only where ``model`` did not rank with the
    program model (where it did, the ranking already holds the file's program time: a range's file
    is the compile the scorer timed with only its byte bounds changed, :func:`ranged_xml`)."""
    decided = getattr(model, "decided_by", None)

    def timed(choice: Choice) -> Timed:
        out = Timed()
        for r in choice.ranges:
            if r.config == NCCL:
                continue
            idx = [b for b in r.buckets
                   if decided is None or decided(tunings[b].bucket.size) != "program"]
            got = ranged_xml(made, lookup[r.config], xml, r.config, r.lo, r.hi, ahead) \
                if idx else None
            if not isinstance(got, tuple):
                continue    # every size ranked by the program model (its file was made)
            times, bounds = veto.times(got[0], r.config.proto,
                                       [tunings[b].bucket.size for b in idx],
                                       [nccl_us[b] for b in idx])
            out.update(zip(idx, times, strict=True))
            out.bounds.update(idx[i] for i in bounds)
        return out
    return timed


def _veto_notes(vetted: Vetted, tunings: Sequence[BucketTuning], model: Scorer, forms: bool
                ) -> list[str]:
    """One note per configuration the program model's veto moved off sizes it had won."""
    by: dict[Config, list[int]] = {}
    for v in vetted.vetoes:
        by.setdefault(v.config, []).append(tunings[v.bucket].bucket.size)
    ranker = "the lock-step model" if model is lockstep_scorer or getattr(
        model, "decided_by", None) is None else "the lock-step model (the program model's budget " \
        "ran out before these sizes)"
    return [f"{cfg.family}{f' {cfg.proto} x{cfg.instances}' if forms else ''}: its file is not "
            f"faster than NCCL under the program model at {len(at)} size(s) "
            f"({min(at)}..{max(at)} bytes) where {ranker} ranked it ahead; those sizes went to the "
            f"next configuration or to NCCL"
            for cfg, at in by.items()]


def splits_call_kinds(collective: Any, xml: XmlOptions | None) -> bool:
    """Whether a solve asking for one file for both kinds of call (``xml.inplace`` None) is
    served by one file per kind instead (:func:`out_of_place_companion`): where the runtime lets
    a file declare both kinds at all (not the legacy profile, not alltoall, spec §3.4)."""
    return (xml is not None and xml.inplace is None and xml.profile != "legacy"
            and collective.custom is None and collective.kind in ALIASED_KINDS
            and collective.kind != "alltoall")


def _inside(sizes: Sequence[int], r: Range) -> tuple[int, ...]:
    """The swept sizes that fall in range ``r`` (``hi`` 0: unbounded)."""
    return tuple(s for s in sizes if s >= r.lo and (not r.hi or s <= r.hi))


def _files_ahead(result: SolveResult, tunings: Sequence[BucketTuning],
                 lookup: dict[Config, Candidate | None], xml: XmlOptions, model: Scorer,
                 made: XmlCache, split: bool) -> CompileAhead | None:
    """A worker making the range files :func:`choose_ranges` will most likely ask for -- each
    range's in-place file and, with ``split``, its out-of-place one, both proven and timed at the
    range's sizes (an in-place file only where the scorer did not time its compile) -- while this
    process makes them from the first (:meth:`CompileAhead.plan_files`); None where that does not
    pay (:data:`MIN_FILE_TRANSFERS`).

    The ranges are :func:`choose`'s first pass with every file assumed to exist (what it returns
    unless a file cannot be made; a range it then changes is made inline). Measured on one group
    of ``synth solve --topo dgx1 --nodes 8 --concurrent stride:8 --coll allreduce``: the winners
    stage (7 ranges, 14 files) took 19 s of the solving process under py-spy before this, every
    proof and timing made there."""
    sizes = [p.bytes for p in result.best.costs]
    decided = getattr(model, "decided_by", None)
    jobs, companions = [], []
    for r in choose(tunings, lambda _r: None, NEAR_TIE).ranges:
        cand = lookup[r.config]
        if cand is None:
            continue
        inside = _inside(sizes, r)
        full = replace(xml, proto=r.config.proto, instances=r.config.instances)
        ranged = range_options(full, r.lo, r.hi)
        text = made.get((cand.name, full, COMPILED))
        # the sizes the program model decided have the scorer's times already (a range's file
        # is its compile with the bounds set, the same times: synth.timing.program_store)
        untimed = tuple(s for s in inside if decided is None or decided(s) != "program")
        jobs.append((cand.name, cand.schedule, full, text[0] if isinstance(text, tuple) else None,
                     ranged.min_bytes, ranged.max_bytes, untimed))
        if split and inside:
            out = range_options(replace(full, inplace=False), r.lo, r.hi)
            timed = decided is not None and all(decided(s) == "program" for s in inside)
            companions.append((cand.name, cand.schedule, replace(full, inplace=False), None,
                               out.min_bytes, out.max_bytes, inside if timed else ()))
    jobs += companions
    if not wanted(sum(job[1].num_transfers for job in jobs), MIN_FILE_TRANSFERS):
        return None
    ahead = CompileAhead(result.topology, getattr(model, "calibration", None), xml.profile)
    ahead.plan_files(jobs)
    ahead.pump()
    return ahead


def out_of_place_companion(result: SolveResult, r: SizeRange, xml: XmlOptions, cache: XmlCache,
                           model: Scorer, ahead: CompileAhead | None = None,
                           veto: ProgramVeto | None = None) -> tuple[SizeRange, str | None]:
    """``r`` (its file in-place only) with its out-of-place file, or without one and why.

    Why two files: a file declaring both kinds (``inplace="1" outofplace="1"``) must copy each
    rank's input into the output buffer, and in an in-place call that copy writes the very cells
    the sends read, so every send waits for it. On 8 x H100 allgather at 1 MB that copy cost the
    direct schedule (LL x4) 14.79 µs against 12.25 µs compiled in-place only -- which is what
    MSCCL's production file (``ag-1m``, ``outofplace="0"``) is. The runtime picks a file per call
    by its kind (spec §3.1), so the solve ranks and writes in-place programs and adds, per
    range, the winner compiled out-of-place (its copies placed where they overlap the first
    receive's wait, :func:`synth.emit.passes.lower`), verified and timed by the deciding model at
    every size of the range. It is written only where it is faster than NCCL at every one of
    them; elsewhere out-of-place calls of that range fall back to NCCL, and the note says so.
    Where the lock-step model ranked some of the range's sizes, ``veto`` (the program model's,
    :mod:`synth.select.program_veto`) times the file at every size of the range, and those are
    the times it is held to (and carries) instead of lock-step's.
    """
    cand = r.candidate
    if cand is None or r.text is None or not r.sizes:
        return r, None
    cfg = _config(cand, r.proto, r.instances)
    got = ranged_xml(cache, cand, replace(xml, inplace=False), cfg, r.lo, r.hi, ahead)
    if isinstance(got, str):
        return r, f"no out-of-place file: {got}"
    decided = getattr(model, "decided_by", None)
    program = decided is not None and all(decided(s) == "program" for s in r.sizes)
    if program:
        timing = program_model(result.topology, r.proto, getattr(model, "calibration", None))
        times = tuple(cached_times(got[0], result.topology, list(r.sizes), model=timing,
                                   profile=xml.profile))
    else:       # ranked by lock-step: one schedule, one wire time for both kinds
        times = r.model_us
    nccl = {p.bytes: p.time_us for p in result.nccl or ()}
    if not program and veto is not None:   # the program model's times (or bounds over NCCL's)
        times = tuple(veto.times(got[0], r.proto, r.sizes, [nccl[s] for s in r.sizes])[0])
    slow = [s for s, t in zip(r.sizes, times, strict=True) if s in nccl and not t < nccl[s]]
    if slow:
        return r, (f"its out-of-place file is not faster than NCCL at {len(slow)} size(s) "
                   f"({slow[0]}..{slow[-1]} bytes)")
    return replace(r, oop=CallKindFile(got[0], got[1], times)), None


def _never_selected(result: SolveResult, tunings: Sequence[BucketTuning], choice: Any,
                    lookup: dict[Config, Candidate | None], model: Scorer, by: str = ""
                    ) -> list[str]:
    """Notes on candidates faster than a bucket's winner whose file a runtime would not select
    there (``nchunksperloop`` does not divide the element count, spec §3.1)."""
    sizes = [p.bytes for p in result.best.costs]
    lookup = {cfg: c for cfg, c in lookup.items() if c is not None}   # not NCCL: no file
    times = {cfg: dict(zip(sizes, config_times(model, c, cfg), strict=True))
             for cfg, c in lookup.items()}
    winner = {b: r.config for r in choice.ranges for b in r.buckets}
    missed: dict[str, list[int]] = {}
    chunks = {c.name: c.schedule.collective.buffer_chunks for c in result.candidates}
    for t in tunings:
        size = t.bucket.size
        if winner[t.bucket.index] not in times:
            continue    # left to NCCL
        won = times[winner[t.bucket.index]][size]
        for cfg in t.ranking:
            if cfg not in lookup:
                continue
            c = lookup[cfg]
            if times[cfg][size] < won and not runs_at(
                    np.array([size]), c.schedule.collective.buffer_chunks, cfg.instances)[0] \
                    and size not in missed.get(c.name, ()):
                missed.setdefault(c.name, []).append(size)
    return [f"{name} would be faster{by} at {len(at)} size(s) ({at[0]}..{at[-1]} bytes) but its "
            f"nchunksperloop ({chunks[name]}) "
            f"does not divide their fp32 element counts, so no runtime selects it there (spec §3.1)"
            for name, at in missed.items()]


def verified_plan(schedule: Any, plan: Any, lo: int, hi: int, instances: int
                  ) -> tuple[str, tuple[Any, ...]] | str:
    """``schedule`` as a verified MSCCL++ plan for sizes ``lo..hi`` (``min/max_message_size``,
    both inclusive in the executor's ``checkMessageSize``), or why there is none."""
    try:
        text, report = emit_verified_plan(schedule, plan.topology, replace(
            plan.options, min_bytes=lo, max_bytes=hi, instances=instances))
    except SynthError as exc:
        return exc.message
    return text, (report,)
