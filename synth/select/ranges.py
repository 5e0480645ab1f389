"""From per-bucket rankings to size ranges: winners, near ties, merging, and the fallback past a
configuration whose file cannot be produced.

**Winners and merging.** A bucket's winner is the fastest configuration in its ranking that has
not been excluded (ties: Simple before LL before LL128, fewer instances, fewer chunks, the
earlier encoding in the registry); runs of adjacent buckets with the same winner form one range, one XML file.
With a near-tie ``tolerance`` (:func:`settle_near_ties`; ``synth solve`` uses 1%, the catalog 0),
a bucket may instead take a configuration within that fraction of its winner when doing so writes
fewer ranges: a file that is faster by less than the tolerance is not worth a range boundary.
:func:`choose` drives the fallback: a configuration whose file cannot be produced is excluded for
the collective, with the reason, and the buckets it won go to their next-best configuration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SynthError
from .buckets import Bucket

INSTANCES = (1, 2, 4, 8)
"""Instance counts tried (each instance is one more channel set; MAXCHANNELS is 32)."""

NEAR_TIE = 0.01
"""Near ties do not split ranges: a bucket takes an adjacent range's configuration when that is
within this fraction (1%) of its own winner's time and a range is saved
(:func:`settle_near_ties`). Why 1%: the models are not that precise (the program model is
validated to a few percent, results/reality_msccl.md), and every extra range is one more file to
compile, verify, ship and select."""


@dataclass(frozen=True, order=True)
class Config:
    family: str
    chunks: int
    proto: str
    instances: int

    def label(self) -> str:
        return f"{self.family} c{self.chunks} {self.proto} x{self.instances}"

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.family, "chunks": self.chunks, "proto": self.proto,
                "instances": self.instances}


@dataclass
class BucketTuning:
    """One bucket's tuning run and the ranking it produced."""

    bucket: Bucket
    ranking: list[Config]
    evaluations: int
    full_evaluations: int
    tuner_best: Config
    times: dict[Config, float] = field(default_factory=dict)
    """The ranked configurations' µs at the bucket's size (``inf`` where the runtime would not
    select the file), for :func:`settle_near_ties`; empty: no near-tie settling."""


@dataclass(frozen=True)
class Range:
    """A run of adjacent buckets with one winner: one XML file."""

    config: Config
    buckets: tuple[int, ...]
    lo: int
    hi: int


def merge(buckets: Sequence[Bucket], winners: Sequence[Config]) -> list[Range]:
    """Adjacent buckets with the same winner, merged."""
    out: list[Range] = []
    for b, w in zip(buckets, winners, strict=True):
        if out and out[-1].config == w:
            last = out[-1]
            out[-1] = Range(w, (*last.buckets, b.index), last.lo, b.hi)
        else:
            out.append(Range(w, (b.index,), b.lo, b.hi))
    return out


Attempt = Callable[[Range], str | None]
"""Try to produce a range's file: None on success, else why it cannot be produced."""


@dataclass
class Choice:
    ranges: list[Range]
    excluded: dict[Config, str] = field(default_factory=dict)


def settle_near_ties(tunings: Sequence[BucketTuning], winners: Sequence[Config],
                     excluded: Any = (), tolerance: float = 0.0) -> list[Config]:
    """The fewest ranges whose every bucket runs within ``tolerance`` of its winner.

    Why: two configurations 0.15% apart alternating over adjacent buckets (trn1_32 allgather under
    the program model: milp / trees_aligned / milp at the largest sizes) write a file each for no
    measurable gain; a model is not that precise anyway. So each bucket may take any configuration
    of its ranking that is not ``excluded``, runs there (finite time in ``BucketTuning.times``) and
    is at most ``(1 + tolerance)`` times its winner's time; among those assignments the one with the
    fewest ranges (runs of one configuration) is taken, then the smallest sum over buckets of time /
    winner's time, then the earliest in the rankings. It is exact (a dynamic programme over buckets)
    and deterministic. A bucket's winner is kept whenever no range is saved by giving it up (its
    ratio, 1, is the smallest), and with ``tolerance`` 0 or no times the winners are returned
    unchanged, so exact ties never move.
    """
    if tolerance <= 0 or not all(t.times for t in tunings):
        return list(winners)
    # per bucket: (config, time / winner's time), the winner first, then its ranking's order
    allowed: list[list[tuple[Config, float]]] = []
    for t, w in zip(tunings, winners, strict=True):
        tw = t.times.get(w, math.inf)
        ok = [(w, 1.0)]
        if 0 < tw < math.inf:
            ok += [(c, t.times[c] / tw) for c in t.ranking
                   if c != w and c not in excluded and math.isfinite(t.times.get(c, math.inf))
                   and t.times[c] <= (1 + tolerance) * tw]
        allowed.append(ok)
    # state per config ending the prefix: ((ranges, ratio sum, positions), path)
    prev: dict[Config, tuple[tuple[int, float, int], list[Config]]] = {}
    for ok in allowed:
        switch = min(prev.values(), key=lambda v: v[0]) if prev else ((0, 0.0, 0), [])
        cur: dict[Config, tuple[tuple[int, float, int], list[Config]]] = {}
        for pos, (cfg, ratio) in enumerate(ok):
            options = [((switch[0][0] + 1, switch[0][1], switch[0][2]), switch[1])]
            if cfg in prev:
                options.append(prev[cfg])
            (n, r, p), path = min(options, key=lambda v: v[0])
            cur[cfg] = ((n, r + ratio, p + pos), [*path, cfg])
        prev = cur
    return min(prev.values(), key=lambda v: v[0])[1]


def choose(tunings: Sequence[BucketTuning], attempt: Attempt, tolerance: float = 0.0) -> Choice:
    """Winners per bucket with the fallback of the module docstring; raises if a bucket runs dry.

    ``tolerance``: near ties do not split ranges (:func:`settle_near_ties`; 0 = exact winners, the
    catalog's choice: its buckets are tuned per protocol and instance count, and its report quotes
    each bucket's winner)."""
    excluded: dict[Config, str] = {}
    while True:
        winners = []
        for t in tunings:
            pick = next((c for c in t.ranking if c not in excluded), None)
            if pick is None:
                reasons = "; ".join(f"{c.label()}: {why}" for c, why in excluded.items())
                raise SynthError(f"no configuration can be emitted for sizes {t.bucket.lo}.."
                                 f"{t.bucket.hi} ({reasons or 'no candidate runs at that size'})")
            winners.append(pick)
        winners = settle_near_ties(tunings, winners, excluded, tolerance)
        ranges = merge([t.bucket for t in tunings], winners)
        failed = False
        for r in ranges:
            why = attempt(r)
            if why is not None:
                excluded[r.config] = why
                failed = True
        if not failed:
            return Choice(ranges, excluded)
