"""What selection chooses among: every verified schedule an encoding produced, costed against the
bound at every swept size.

A :class:`Candidate` is one verified schedule with its lock-step cost profile; a
:class:`SolveResult` is all of them for one (topology, collective), with the bound and the notes on
what was passed over before verification. Both are plain data: :func:`synth.solve.solve` makes
them, :mod:`synth.select.ranking` ranks them per size and :mod:`synth.outputs` writes the winners.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bounds import Bound, lower_bound
from ..collectives import Collective
from ..errors import NotApplicable
from ..schedule import Schedule
from ..sizes import algbw_GBps
from ..timing.lockstep import schedule_times_us
from ..timing.nccl import NcclTimes
from ..topology import Topology
from ..verify import VerifyReport


@dataclass(frozen=True)
class CostPoint:
    """Predicted performance at one message size, and how close it is to the physical limit."""

    bytes: int
    time_us: float
    algbw_GBps: float
    bound_us: float
    pct_of_bound: float

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "time_us": round(self.time_us, 6),
                "algbw_GBps": round(self.algbw_GBps, 6), "bound_us": round(self.bound_us, 6),
                "pct_of_bound": round(self.pct_of_bound, 4)}


def cost_points(sizes: Sequence[int], times: Sequence[float], bound: Bound) -> list[CostPoint]:
    """Times at ``sizes`` as cost points: algorithm bandwidth and % of ``bound``."""
    bws = algbw_GBps(sizes, np.asarray(times, dtype=float))
    points = []
    for size, t, bw in zip(sizes, times, bws, strict=True):
        b = bound.time_us(size)
        points.append(CostPoint(int(size), float(t), float(bw), float(b),
                                100.0 * b / float(t) if t > 0 else 100.0))
    return points


def cost_profile(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                 bound: Bound | None = None) -> list[CostPoint]:
    """The schedule's lock-step time (:func:`synth.timing.lockstep.schedule_times_us`), algorithm
    bandwidth and % of the lower bound at every size."""
    bound = bound or lower_bound(topology, schedule.collective)
    return cost_points(sizes, schedule_times_us(schedule, topology, sizes), bound)


def nccl_points(topology: Topology, collective: Collective, sizes: Sequence[int], bound: Bound,
                calibration: Any = None) -> list[CostPoint] | None:
    """NCCL's own time at every size (:mod:`synth.timing.nccl`: its tuner's algorithm, protocol
    and channels, with its floors), or None where NCCL has no such collective or does not run."""
    if collective.custom is not None:
        return None
    try:
        times = NcclTimes(topology, calibration).times_us(collective.kind, sizes)
    except NotApplicable:
        return None
    return cost_points(sizes, times, bound)


@dataclass(frozen=True)
class Candidate:
    name: str
    schedule: Schedule
    report: VerifyReport
    costs: list[CostPoint]

    @property
    def score(self) -> float:
        """Geometric-mean fraction of the bound over the size sweep (1.0 = optimal everywhere)."""
        return math.exp(sum(math.log(max(p.pct_of_bound, 1e-9) / 100) for p in self.costs)
                        / len(self.costs))


@dataclass
class SolveResult:
    topology: Topology
    collective: Collective
    encoding: str
    best: Candidate
    candidates: list[Candidate]
    bound: Bound
    seconds: float
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Candidates passed over before verification (size guards), and why."""
    nccl: list[CostPoint] | None = None
    """NCCL itself at every size, the competitor in every selection (None where NCCL does not run
    or has no such collective): :func:`nccl_points`."""
    calibration: Any = None
    """The calibration the solve ran with (a path, a mapping or None), for the time models that
    read their own sections of it (:mod:`synth.timing`)."""
