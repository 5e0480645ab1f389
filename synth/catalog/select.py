"""Per size bucket, the best configuration by the cost model; adjacent buckets with one winner merged.

**Buckets.** The requested sizes ``s_0 < s_1 < ... < s_m`` (powers of two for ``1KB:4GB``) are the
buckets' representatives; the boundary between ``s_i`` and ``s_{i+1}`` is just above their
geometric mean, so bucket ``i`` covers ``[e_{i-1}, e_i - 1]`` with ``e_i = isqrt(s_i·s_{i+1}) + 1``,
``e_{-1} = s_0`` and the last bucket ending at ``s_m``. The buckets tile ``[s_0, s_m]`` with no gap
and no overlap, inclusive at both ends (the ``minBytes``/``maxBytes`` semantics of the executor
runtimes, spec §2.1), and every byte count is decided by the representative nearest to it on a
log scale.

**Configurations.** A configuration is (family, chunks per rank, protocol, instances): the
family's schedule with that chunking, run with that protocol over that many channel sets. Its
predicted time at every representative comes from :mod:`synth.timing.protocol` (computed once per
candidate, protocol and instance count, so a tuner's evaluation is a table lookup). It competes at
a size only where the runtime would select its file: the runtimes skip a file unless the call's
element count is a multiple of ``nchunksperloop`` (spec §3.1), so a configuration whose
``nchunksperloop`` does not divide the representative's fp32 element count (:data:`ELEMENT_BYTES`)
is infeasible there (a tree packing cut into 182 pieces per rank never runs a power-of-two call).

**Tuning.** Each bucket is one tuning problem for :func:`synth.tuning.tune` (AutoCCL's split):
``algorithm`` and ``proto`` are implementation knobs, ``chunks`` (an index into the family's chunk
counts, clamped to its last) and ``instances`` are resource knobs. The model is exact and costs a
lookup at every budget, so the budget is ignored and every evaluated configuration is ranked. The
baselines' configurations are always ranked too, all of them: they are what every result is
compared to, so that comparison is exact whatever the tuner explored, and the winner can never be
worse than the best baseline (it is chosen among a set that contains them).

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

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SynthError, unknown_name
from ..timing.protocol import PROTOCOLS, ProtocolModel
from .candidates import Candidate

INSTANCES = (1, 2, 4, 8)
"""Instance counts tried (each instance is one more channel set; MAXCHANNELS is 32)."""
INFEASIBLE_US = 1e18
"""What a tuner sees for a configuration that cannot run at that size (finite, for optuna)."""
ELEMENT_BYTES = 4
"""The element size eligibility is judged for (fp32, nccl-tests' default): a file runs a call only
when its element count divides into ``nchunksperloop`` chunks (spec §3.1). A file eligible for
4-byte elements at a byte count is eligible for 2- and 1-byte ones too."""


@dataclass(frozen=True)
class Bucket:
    index: int
    size: int
    """The representative: the size the bucket's choice is made at."""
    lo: int
    hi: int


def runs_at(sizes: np.ndarray, buffer_chunks: int, instances: int) -> np.ndarray:
    """Where the runtime would select a file of ``buffer_chunks * instances`` chunks per loop: its
    ``nchunksperloop`` must divide the call's element count (spec §3.1, :data:`ELEMENT_BYTES`)."""
    return np.asarray(sizes, dtype=np.int64) % (ELEMENT_BYTES * buffer_chunks * instances) == 0


def make_buckets(sizes: Sequence[int]) -> list[Bucket]:
    """Buckets tiling ``[min(sizes), max(sizes)]`` exactly (module docstring)."""
    s = sorted(set(int(x) for x in sizes))
    if not s:
        raise SynthError("the size range is empty")
    if s[0] < 1:
        raise SynthError(f"message sizes must be at least 1 byte, got {s[0]}")
    edges = [s[0]] + [math.isqrt(a * b) + 1 for a, b in itertools.pairwise(s)] + [s[-1] + 1]
    return [Bucket(i, size, edges[i], edges[i + 1] - 1) for i, size in enumerate(s)]


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


class Table:
    """Predicted µs of every (candidate, protocol, instances) at every bucket representative."""

    def __init__(self, candidates: Sequence[Candidate], buckets: Sequence[Bucket],
                 model: ProtocolModel) -> None:
        self.candidates = list(candidates)
        self.buckets = list(buckets)
        self.sizes = np.array([b.size for b in buckets], dtype=float)
        self.by_family: dict[str, list[Candidate]] = {}
        for c in self.candidates:
            self.by_family.setdefault(c.family, []).append(c)
        for fam in self.by_family.values():
            fam.sort(key=lambda c: c.chunks)
        self._index = {(c.family, c.chunks): c for c in self.candidates}
        self.times: dict[tuple[str, int, str, int], np.ndarray] = {}
        sizes = np.array([b.size for b in buckets], dtype=np.int64)
        for c in self.candidates:
            for inst in INSTANCES:
                runs = runs_at(sizes, c.schedule.collective.buffer_chunks, inst)
                for proto in PROTOCOLS:
                    t = c.profile.times_us(self.sizes, model.get(proto), inst,
                                           model.instance_overhead_us)
                    self.times[(c.family, c.chunks, proto, inst)] = np.where(runs, t, np.inf)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(self.by_family)

    def candidate(self, cfg: Config) -> Candidate:
        return self._index[(cfg.family, cfg.chunks)]

    def chunk_levels(self) -> int:
        return max(len(v) for v in self.by_family.values())

    def config(self, family: str, level: int, proto: str, instances: int) -> Config:
        fam = self.by_family[family]
        return Config(family, fam[min(level, len(fam) - 1)].chunks, proto, instances)

    def time(self, cfg: Config, bucket: int) -> float:
        return float(self.times[(cfg.family, cfg.chunks, cfg.proto, cfg.instances)][bucket])

    def profile(self, cfg: Config) -> np.ndarray:
        return self.times[(cfg.family, cfg.chunks, cfg.proto, cfg.instances)]

    def all_configs(self, baseline_only: bool = False) -> list[Config]:
        return [Config(c.family, c.chunks, p, i) for c in self.candidates
                if c.is_baseline or not baseline_only for p in PROTOCOLS for i in INSTANCES]


def rank_key(table: Table, bucket: int) -> Callable[[Config], tuple]:
    """Fastest first; ties go to the simpler file: Simple, fewer instances, fewer chunks, then the
    earlier encoding in the registry (baselines first) and the family name."""
    order = {c.family: i for i, c in enumerate(table.candidates)}

    def key(cfg: Config) -> tuple:
        return (table.time(cfg, bucket), PROTOCOLS.index(cfg.proto), cfg.instances, cfg.chunks,
                order[cfg.family], cfg.family)
    return key


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


def tune_buckets(table: Table, method: str, seed: int = 0,
                 progress: Callable[[Bucket], None] | None = None) -> list[BucketTuning]:
    """Run the tuner once per bucket (module docstring); returns each bucket's ranking."""
    from ..tuning import TUNERS, Knob, Space, tune

    if method not in TUNERS:
        raise unknown_name("tuner", method, TUNERS)
    if not table.candidates:
        raise SynthError("no candidate schedule to tune")
    space = Space((Knob("algorithm", table.families, "implementation"),
                   Knob("proto", PROTOCOLS, "implementation"),
                   Knob("chunks", tuple(range(table.chunk_levels())), "resource"),
                   Knob("instances", INSTANCES, "resource")))
    baselines = table.all_configs(baseline_only=True)
    out = []
    for b in table.buckets:
        def evaluate(cfg: dict[str, Any], budget: float, b: Bucket = b) -> float:
            t = table.time(table.config(cfg["algorithm"], cfg["chunks"], cfg["proto"],
                                        cfg["instances"]), b.index)
            return t if math.isfinite(t) else INFEASIBLE_US

        res = tune(space, evaluate, method, seed=seed)
        seen = {table.config(c["algorithm"], c["chunks"], c["proto"], c["instances"])
                for c, _, _ in res.history}
        best = res.best
        ranked = sorted(seen | set(baselines), key=rank_key(table, b.index))
        ranked = [c for c in ranked if math.isfinite(table.time(c, b.index))]
        out.append(BucketTuning(b, ranked, res.evaluations, res.full_evaluations,
                                table.config(best["algorithm"], best["chunks"], best["proto"],
                                             best["instances"])))
        if progress is not None:
            progress(b)
    return out


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
