"""The lock-step α-β model: a schedule's steps run one after another, each as slow as its busiest
resource.

A transfer of S bytes over a resource costs α + S·β. Transfers that share a resource (a link, or a
switch port on the send or receive side) in one step share its bandwidth: a resource carrying L
chunks of S bytes with ``lanes`` parallel lanes takes α + L·S·β / lanes. Steps are synchronous, so a
step costs the maximum over its resources and a schedule the sum over its steps. Rounds are the
verifier's budget, not a cost: the cost is computed from the actual load (:mod:`synth.steps`).

This is the wire alone, with no runtime floors: the model the lower bounds (:mod:`synth.bounds`)
are comparable with, and the one every encoding optimises.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..calibration import class_figures, class_of_port
from ..schedule import Schedule
from ..steps import step_loads
from ..topology import MB, Topology


def schedule_times_us(schedule: Schedule, topology: Topology, sizes: Sequence[int]) -> np.ndarray:
    """Predicted time (µs) of ``schedule`` for each message size in ``sizes``."""
    chunk_mb = np.asarray(sizes, dtype=float) / schedule.collective.buffer_chunks / MB
    total = np.zeros_like(chunk_mb)
    for step in schedule.steps:
        if not step.transfers:
            continue
        loads = step_loads(step.transfers, topology)
        alpha = np.array([a for _, a, _, _ in loads.values()])
        coef = np.array([n * b / lanes for n, _, b, lanes in loads.values()])
        # max over resources of alpha + coef * chunk; group identical alphas for speed
        by_alpha: dict[float, float] = defaultdict(float)
        for a, c in zip(alpha, coef, strict=True):
            by_alpha[a] = max(by_alpha[a], c)
        step_time = np.max([a + c * chunk_mb for a, c in by_alpha.items()], axis=0)
        total += step_time
    return total


# ------------------------------------------------------------------ in terms of link-class figures
@dataclass
class StepModel:
    """:func:`schedule_times_us` as a function of per-link-class α and β, with its derivatives:
    what a fit of class figures to measured times (:mod:`synth.calibrate.link_fit`) needs. At the
    topology's own figures it gives :func:`schedule_times_us`'s times (tests/test_calibrate_nccl.py).

    ``coef[u, c]``: the largest load·β-multiplier of class c in step pattern u (NaN when the step
    uses no resource of class c); ``count[u]``: how many steps have that pattern. For a chunk of x MB
    a step costs max_c (α_c + coef[u, c]·x·β_c).
    """

    classes: tuple[str, ...]
    coef: np.ndarray
    count: np.ndarray
    buffer_chunks: int

    def times(self, alpha: np.ndarray, beta: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                         np.ndarray]:
        """(time µs per size without launch, d time/d α [P, C], d time/d β [P, C])."""
        x = np.asarray(sizes, float) / self.buffer_chunks / MB
        with np.errstate(invalid="ignore"):
            term = alpha[None, :, None] + self.coef[:, :, None] * x[None, None, :] * beta[None, :, None]
        term = np.where(np.isnan(term), -np.inf, term)  # [U, C, P]
        arg = np.argmax(term, axis=1)  # [U, P]
        step = np.take_along_axis(term, arg[:, None, :], axis=1)[:, 0, :]
        total = (self.count[:, None] * step).sum(axis=0)
        n_cls = len(self.classes)
        onehot = (arg[:, None, :] == np.arange(n_cls)[None, :, None])  # [U, C, P]
        d_alpha = (self.count[:, None, None] * onehot).sum(axis=0).T
        c = np.nan_to_num(self.coef)
        d_beta = (self.count[:, None, None] * onehot * c[:, :, None] * x[None, None, :]).sum(axis=0).T
        return total, d_alpha, d_beta


def step_model(schedule: Schedule, topology: Topology, classes: Sequence[str], rings: int = 1) -> StepModel:
    """The :class:`StepModel` of ``schedule`` on ``topology``; inter-node loads divided by ``rings``."""
    from ..steps import step_loads

    index = {c: i for i, c in enumerate(classes)}
    link_class = {(str(lk.src), str(lk.dst)): lk.kind for lk in topology.links}
    # ports with a domain are the inter-node fabric's NICs (synth.builders.multinode)
    port_class = {(sw.name, p.name): (class_of_port(topology, sw, p), p.domain >= 0)
                  for sw in topology.switches for p in sw.ports}
    patterns: dict[tuple, int] = {}
    for st in schedule.steps:
        if not st.transfers:
            continue
        row = [math.nan] * len(classes)
        for res, (n, _alpha, beta, lanes) in step_loads(st.transfers, topology).items():
            if res[0] == "link":
                kind, inter = link_class[(res[1], res[2])], False
            else:
                kind, inter = port_class[(res[1], res[2])]
            ref = _class_beta(topology, kind)
            c = n * (beta / ref) / lanes / (rings if inter else 1)
            i = index[kind]
            row[i] = c if math.isnan(row[i]) else max(row[i], c)
        key = tuple(row)
        patterns[key] = patterns.get(key, 0) + 1
    keys = list(patterns)
    coef = np.array(keys, float).reshape(len(keys), len(classes))
    return StepModel(tuple(classes), coef, np.array([patterns[k] for k in keys], float),
                     schedule.collective.buffer_chunks)


def _class_beta(topology: Topology, kind: str) -> float:
    """The class's β as the topology file states it (per link / per port lane)."""
    cache = topology.__dict__.setdefault("_class_beta_cache", {})
    if kind not in cache:
        cache[kind] = class_figures(topology)[kind][1]
    return cache[kind]


class LockstepModel:
    """The lock-step model as a :class:`synth.timing.TimeModel`: prices a schedule."""

    name = "lockstep"

    def __init__(self, topology: Topology, calibration: object = None) -> None:
        self.topology = topology
        self.source = "α-β steps over the topology's link figures (synth.timing.lockstep)"

    def times_us(self, subject: Schedule, sizes: Sequence[int]) -> list[float]:
        return [float(t) for t in schedule_times_us(subject, self.topology, sizes)]
