"""Rankings by a knob search: the catalog's configurations tuned per bucket under the protocol model.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import SynthError, unknown_name
from ..timing.protocol import PROTOCOLS, ProtocolModel
from ..tuning import TUNERS, Knob, Space, tune
from .buckets import Bucket, runs_at
from .ranges import INSTANCES, BucketTuning, Config


class Candidate(Protocol):
    """What a tuned table needs of a candidate (:class:`synth.catalog.candidates.Candidate`)."""

    family: str
    chunks: int
    schedule: Any
    profile: Any

    @property
    def is_baseline(self) -> bool: ...

INFEASIBLE_US = 1e18
"""What a tuner sees for a configuration that cannot run at that size (finite, for optuna)."""


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


def tune_buckets(table: Table, method: str, seed: int = 0,
                 progress: Callable[[Bucket], None] | None = None) -> list[BucketTuning]:
    """Run the tuner once per bucket (module docstring); returns each bucket's ranking."""
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
