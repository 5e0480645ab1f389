"""NCCL as a candidate: what NCCL itself runs at each size competes in every selection, and the
sizes where it is fastest are left to it.

A synthesizer is worth using only where its files beat what users already have. So NCCL's own
choice at each size (:mod:`synth.timing.nccl`: its tuner's algorithm, protocol and channels, with
its floors; validated in results/reality.md) is a candidate that writes no file: where it is
faster than every synthesized configuration *as the runtime runs it* (:func:`runtime_times`), the
size goes to NCCL, no XML covers it and ``MSCCL_CONFIG`` has no entry for it. Both sides are
compared with their runtime floors: a configuration's program-model time where the program model
decides, else the protocol model's (the lock-step steps plus the protocol's launch, per-step
synchronisation and channel caps), never the bare wire time.

The rule is written once, in :func:`with_nccl`: ``synth solve`` (:func:`synth.select.ranking.
rank_sizes`) and ``synth catalog`` (:mod:`synth.catalog`) both pass their rankings through it
before :func:`synth.select.ranges.choose` merges them into ranges.

**The program model's veto** (:func:`choose_with_nccl`). ``synth solve`` ranks with the program
model where it decides, so its runtime times already are the program model's there; at the sizes it
ranks with lock-step (the program model's budget ran out, or ``--winners-by lockstep``) its files
are vetoed the same way (:mod:`synth.select.program_veto`). A catalog ranks
hundreds of configurations per bucket with the protocol model and writes only the winners, so the
program model can time only the files it writes: each written file is timed at its buckets, and a
(configuration, bucket) whose program time is not below NCCL's is vetoed there -- it ranks after
NCCL at that bucket, the bucket goes to its next configuration or to NCCL, and the ranges are
chosen again until no written file is slower than NCCL at a bucket it serves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import NotApplicable
from ..timing.nccl import NcclTimes
from ..timing.protocol import ProtocolTimes, Run
from .candidates import Candidate, SolveResult
from .ranges import Attempt, BucketTuning, Choice, Config, choose

NCCL = Config("nccl", 0, "nccl", 0)
"""The configuration that writes no file: its sizes are left to NCCL."""


def nccl_choices(topology: Any, kind: str, sizes: Sequence[int], calibration: Any = None
                 ) -> list[Any] | None:
    """What NCCL runs at each size and its time (:class:`synth.timing.nccl.Choice`), with the
    calibration's ``nccl_model`` section; None where NCCL does not run (no NVIDIA GPU) or has no
    such collective: then NCCL does not compete."""
    try:
        return NcclTimes(topology, calibration).choices(kind, sizes)
    except NotApplicable:
        return None


def with_nccl(tunings: Sequence[BucketTuning], nccl_us: Sequence[float] | None,
              runtime_us: Callable[[Config, BucketTuning], float]) -> list[BucketTuning]:
    """Every bucket's ranking with NCCL competing: the one place the rule is written.

    ``nccl_us``: NCCL's time at each bucket's size (None: NCCL does not run there, the tunings
    are returned unchanged); ``runtime_us(cfg, tuning)``: the configuration at that bucket as the
    runtime runs it (``inf`` where the runtime would not select its file). A configuration not
    faster than NCCL there ranks after :data:`NCCL`, and since NCCL always succeeds (it writes no
    file) those never serve the bucket: no size is served slower than NCCL. NCCL takes no part in
    near-tie settling (:func:`synth.select.ranges.settle_near_ties`): a bucket NCCL wins keeps it
    (its only timed option), a bucket it does not win times only the configurations faster than
    NCCL, so it cannot settle on a slower one. Tunings that carry no times (the catalog's: no
    settling) carry none after.
    """
    if nccl_us is None:
        return list(tunings)
    out = []
    for t, nccl in zip(tunings, nccl_us, strict=True):
        faster = [cfg for cfg in t.ranking if cfg != NCCL and runtime_us(cfg, t) < nccl]
        times = ({cfg: t.times[cfg] for cfg in faster} or {NCCL: nccl}) if t.times else {}
        out.append(replace(t, ranking=[*faster, NCCL], times=times))
    return out


@dataclass(frozen=True)
class Veto:
    """A configuration the program model ruled out at one bucket: its written file's program
    time there (``program_us``) is not below NCCL's (``nccl_us``). ``bound``: ``program_us`` is
    the program model's lower bound (:func:`synth.timing.program_bound.time_lower_bound`), already
    not below NCCL's, so the file was not simulated there: its time is at least that."""

    config: Config
    bucket: int
    program_us: float
    nccl_us: float
    bound: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "bucket": self.bucket,
                "program_us": round(self.program_us, 6) if math.isfinite(self.program_us)
                else None, "nccl_us": round(self.nccl_us, 6), "lower_bound": self.bound}


class Timed(dict[int, float]):
    """Program times per bucket index, and ``bounds``: the buckets whose value is only the
    program model's lower bound (enough to veto there, :class:`Veto`), not a simulated time."""

    def __init__(self, *args: Any, bounds: set[int] | None = None) -> None:
        super().__init__(*args)
        self.bounds: set[int] = set(bounds or ())


@dataclass
class Vetted:
    """:func:`choose_with_nccl`'s answer: the ranges, the final files' program times per bucket
    (bucket index -> µs; only buckets a file serves and the timer timed), the vetoes in the order
    they were found, and how many times the ranges were chosen."""

    choice: Choice
    program_us: dict[int, float]
    vetoes: list[Veto]
    rounds: int


def choose_with_nccl(tunings: Sequence[BucketTuning], nccl_us: Sequence[float] | None,
                     model_us: Callable[[Config, BucketTuning], float], attempt: Attempt,
                     program_us: Callable[[Choice], Mapping[int, float]] | None = None,
                     tolerance: float = 0.0) -> Vetted:
    """:func:`~synth.select.ranges.choose` with NCCL competing (:func:`with_nccl`) and the program
    model's veto (module docstring).

    ``model_us(cfg, tuning)``: the configuration's time at the bucket as ranked (the protocol
    model with the runtime's floors); ``program_us(choice)``: the program time, per bucket index,
    of the file ``attempt`` produced for the range serving that bucket (bucket indices missing:
    not timed, no veto; a :class:`Timed` may give, where that already vetoes, the program model's
    lower bound instead of the time). A (configuration, bucket) whose program time is not below NCCL's there
    competes with that time from then on, so it ranks after NCCL at that bucket only; the
    ranking itself stays the protocol model's. Each round vetoes at least one new pair (a vetoed
    pair cannot serve its bucket again), so it ends; it is deterministic when ``attempt`` and
    ``program_us`` are. Where NCCL does not run (``nccl_us`` None) nothing is vetoed and the
    files are timed once, for the report.
    """
    timed: dict[tuple[Config, int], float] = {}
    vetoes: list[Veto] = []
    at = {t.bucket.index: i for i, t in enumerate(tunings)}
    rounds = 0
    while True:
        rounds += 1
        competing = with_nccl(tunings, nccl_us, lambda cfg, t: timed.get(
            (cfg, t.bucket.index), model_us(cfg, t)))
        choice = choose(competing, attempt, tolerance)
        got = program_us(choice) if program_us is not None else {}
        bounds = getattr(got, "bounds", set())
        times = dict(got)
        if nccl_us is None:
            return Vetted(choice, times, vetoes, rounds)
        fresh = [Veto(r.config, b, times[b], nccl_us[at[b]], b in bounds) for r in choice.ranges
                 if r.config != NCCL for b in r.buckets
                 if b in times and not times[b] < nccl_us[at[b]]]
        assert all(b not in bounds for r in choice.ranges for b in r.buckets
                   if b in times and times[b] < nccl_us[at[b]]), "a bound below NCCL is no time"
        if not fresh:
            return Vetted(choice, times, vetoes, rounds)
        for v in fresh:
            assert (v.config, v.bucket) not in timed, "a vetoed configuration served its bucket"
            timed[(v.config, v.bucket)] = v.program_us
        vetoes += fresh


def runtime_times(result: SolveResult, scorer: Any, candidate: Candidate, cfg: Config
                  ) -> list[float]:
    """``candidate`` compiled as ``cfg`` at every swept size, as the runtime runs it: the
    scorer's time where the program model decided that size, else the protocol model's."""
    sizes = [p.bytes for p in result.best.costs]
    decided_by = getattr(scorer, "decided_by", None)
    at = getattr(scorer, "at", None)
    timed = list(at(candidate, cfg.instances, cfg.proto)) if at is not None else None
    proto: list[float] | None = None
    out = []
    for i, size in enumerate(sizes):
        if timed is not None and decided_by is not None and decided_by(size) == "program":
            out.append(timed[i])
            continue
        if proto is None:
            proto = ProtocolTimes(result.topology, result.calibration).times_us(
                Run(candidate.schedule, cfg.proto, max(1, cfg.instances)), sizes)
        out.append(proto[i])
    return out


@dataclass(frozen=True)
class NcclComparison:
    """What serves one size against NCCL, both with their runtime floors.

    ``runtime_us``: the file serving the size as the MSCCL runtime runs it, ``runtime_proto``
    naming the model (``program``: the written XML under the timed program model; a protocol
    name: the protocol model of that file's protocol and instances), or NCCL's own time where
    NCCL serves the size (``served_by`` ``nccl``, no file). ``speedup`` = nccl_us / runtime_us.
    """

    bytes: int
    nccl_algo: str
    nccl_proto: str
    nccl_channels: int
    nccl_us: float
    runtime_us: float
    runtime_proto: str
    served_by: str = "synth"

    @property
    def speedup(self) -> float:
        return self.nccl_us / self.runtime_us if self.runtime_us > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "nccl": {"algo": self.nccl_algo, "proto": self.nccl_proto,
                                              "channels": self.nccl_channels,
                                              "time_us": round(self.nccl_us, 6)},
                "runtime_us": round(self.runtime_us, 6), "runtime_proto": self.runtime_proto,
                "speedup_vs_nccl": round(self.speedup, 6), "served_by": self.served_by}


def compare_with_nccl(result: SolveResult, ranges: Sequence[Any], sizes: Sequence[int],
                      proto: str = "Simple", instances: int = 1, nccl_calibration: Any = None,
                      program_us: Sequence[float] | None = None) -> list[NcclComparison] | None:
    """Per size, what serves it against NCCL; None where NCCL has no such collective or does not
    run (no NVIDIA GPU). ``ranges``: the size ranges written (:class:`~synth.select.ranking.
    SizeRange`; empty: ``result.best`` serves every size with ``proto`` and ``instances``);
    ``program_us``: the written XML's time per size under the program model, used where finite."""
    coll = result.collective
    if coll.custom is not None:
        return None
    nccl = nccl_choices(result.topology, coll.kind, sizes, nccl_calibration)
    if nccl is None:
        return None
    model = ProtocolTimes(result.topology, result.calibration)
    serving = {s: r for r in ranges for s in r.sizes}
    cache: dict[tuple[str, str, int], dict[int, float]] = {}
    out = []
    for i, c in enumerate(nccl):
        r = serving.get(c.bytes)
        if r is not None and r.candidate is None:
            out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                      c.time_us, "NCCL", "nccl"))
            continue
        if program_us is not None and math.isfinite(program_us[i]):
            out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                      float(program_us[i]), "program"))
            continue
        cand, inst, form = ((r.candidate, r.instances, r.proto if r.text is not None else proto)
                            if r is not None else (result.best, instances, proto))
        key = (cand.name, form, inst)
        if key not in cache:
            cache[key] = dict(zip(sizes, model.times_us(Run(cand.schedule, form, inst), sizes),
                                  strict=True))
        out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                  cache[key][c.bytes], form))
    return out
