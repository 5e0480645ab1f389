"""Fitting the Trainium model's physical terms (:mod:`synth.closed.neuron`) to measured calls.

The unknowns are the model's own figures, not one α/β per measured key: the core-to-core
bandwidth inside a chip, the efficiencies of mesh and ring/RDH traffic on NeuronLink and of EFA,
and per runtime profile the launch, the per-rank floor and the three hop latencies. A measurement
informs every key that shares those figures, so a calibration of one group predicts the others.

Objective (``scipy.optimize.least_squares``), over observations *i* of sources *s* with ``n_s``
points each:

    Σ_i (e_i / √n_s)² + κ² Σ_i (e_i² / √n_s)² + λ² Σ_θ (log θ − log θ_prior)²,   e_i = log(pred_i / meas_i)

* errors are ratios (log), so a 6 µs and a 40 ms point count alike; each source weighs √n_s, so a
  28-row sweep does not drown a one-row page;
* the κ term leans the fit toward the worst point (the goal is a worst-case factor as well as a
  median; :data:`MINIMAX_WEIGHT`);
* the λ term holds each figure near its documented prior (:data:`PRIOR_WEIGHT`): a figure no
  observation informs stays at the documentation's value instead of wandering, and one that is
  informed moves freely (λ is small). ``per_rank_us`` may be 0 and is fitted in µs around 0.

A figure's *source* is ``fit`` when the observations carry more information on it than its prior
(diagonal of JᵀJ), else ``prior``; its standard error comes from the same Jacobian.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..closed.neuron import Bandwidths, Family, Floor, Group, NeuronModel

SHARED_TERMS = ("core_GBps", "mesh_efficiency", "ring_efficiency", "efa_efficiency")
FLOOR_TERMS = ("launch_us", "per_rank_us", "chip_hop_us", "link_hop_us", "efa_hop_us")
LINEAR_TERMS = {"per_rank_us"}
"""Terms fitted in their own unit (they may be 0); the rest are fitted as logarithms."""
PRIOR_WEIGHT = 0.05
MINIMAX_WEIGHT = 4.0
LINEAR_PRIOR_SCALE_US = 1.0
EFFICIENCIES = {"mesh_efficiency", "ring_efficiency", "efa_efficiency", "amortization"}
"""Fractions of a documented figure: bounded by 1 (a call cannot beat the hardware's line rate)."""


@dataclass(frozen=True)
class Observation:
    """One measured time: ``calls`` back-to-back calls (``kind`` call) or a bare launch."""

    profile: str
    primitive: str
    group: Group
    nbytes: float
    time_us: float
    calls: int = 1
    source: str = ""
    kind: str = "call"


@dataclass
class FittedTerm:
    name: str
    value: float
    stderr_pct: float | None
    source: str  # fit | prior


@dataclass
class PhysicsFit:
    """The fitted figures: shared throughputs, floors per profile, and how well they fit."""

    bandwidths: Bandwidths
    floors: dict[str, Floor]
    terms: dict[str, FittedTerm]
    log_errors: list[float]
    amortization: float | None = None
    notes: list[str] = field(default_factory=list)

    def model(self, family: Family, profile: str) -> NeuronModel:
        return NeuronModel(family, self.bandwidths, self.floors[profile], profile)


def fit_physics(observations: Sequence[Observation], family: Family, bandwidth_prior: Bandwidths,
                floor_priors: Mapping[str, Floor], inherit: Mapping[str, tuple[str, Sequence[str]]]
                | None = None, amortization_prior: float | None = None,
                fixed: Sequence[str] = ()) -> PhysicsFit:
    """Fit ``family``'s figures to ``observations``.

    ``floor_priors``: one :class:`Floor` per profile the observations use (its values are the
    priors; its ``inter_node_rdh`` flag is kept). ``inherit``: ``{profile: (parent, own_terms)}``
    makes a profile share every floor term of ``parent`` but ``own_terms`` (a release range with
    too few figures of its own). ``amortization_prior``: fit the back-to-back amortization too
    (needed when some observation has ``calls`` > 1). ``fixed``: names held at their priors.
    """
    inherit = dict(inherit or {})
    alias: dict[str, str] = {}
    prior: dict[str, float] = {}
    for name in SHARED_TERMS:
        prior[name] = float(getattr(bandwidth_prior, name))
    for profile, floor in floor_priors.items():
        parent, own = inherit.get(profile, (None, FLOOR_TERMS))
        for term in FLOOR_TERMS:
            name = f"{profile}.{term}"
            if parent is not None and term not in own:
                alias[name] = f"{parent}.{term}"
            else:
                prior[name] = float(getattr(floor, term))
    for name in list(alias):  # resolve chains (2.17 -> 2.10 -> 2.21)
        target = alias[name]
        while target in alias:
            target = alias[target]
        alias[name] = target
    if amortization_prior is not None:
        prior["amortization"] = amortization_prior
    free = [n for n in prior if n not in fixed]
    x0 = np.array([_to_x(n, prior[n]) for n in free])
    counts = Counter(o.source for o in observations)
    floors_rdh = {p: f.inter_node_rdh for p, f in floor_priors.items()}
    profiles = sorted({o.profile for o in observations})
    unknown = [p for p in profiles if p not in floor_priors]
    if unknown:
        raise ValueError(f"observations use profiles without priors: {unknown}")

    def values(x: np.ndarray) -> dict[str, float]:
        v = dict(prior)
        v.update({n: _from_x(n, xi) for n, xi in zip(free, x, strict=True)})
        for a, target in alias.items():
            v[a] = v[target]
        return v

    def models(v: dict[str, float]) -> dict[str, NeuronModel]:
        bw = Bandwidths(*(v[n] for n in SHARED_TERMS))
        return {p: NeuronModel(family, bw, Floor(*(v[f"{p}.{t}"] for t in FLOOR_TERMS),
                                                 inter_node_rdh=floors_rdh[p]), p)
                for p in profiles}

    def predictions(v: dict[str, float]) -> np.ndarray:
        ms = models(v)
        out = np.empty(len(observations))
        for i, o in enumerate(observations):
            m = ms[o.profile]
            if o.kind == "launch":
                out[i] = m.floor.launch_us
                continue
            one = m.time_us(o.primitive, o.group, o.nbytes)
            if o.calls > 1:
                rho = v.get("amortization", 1.0)
                out[i] = o.calls * one - (o.calls - 1) * (1.0 - rho) * m.floor.launch_us
            else:
                out[i] = one
        return out

    weights = np.array([1.0 / math.sqrt(counts[o.source]) for o in observations])
    measured = np.array([o.time_us for o in observations])

    def residuals(x: np.ndarray) -> np.ndarray:
        v = values(x)
        pred = np.maximum(predictions(v), 1e-9)
        e = np.log(pred / measured)
        prior_res = [PRIOR_WEIGHT * (xi - _to_x(n, prior[n])) / _prior_scale(n)
                     for n, xi in zip(free, x, strict=True)]
        return np.concatenate([e * weights, MINIMAX_WEIGHT * e * e * weights, prior_res])

    from scipy.optimize import least_squares

    lower = np.array([0.0 if _linear(n) else -np.inf for n in free])
    upper = np.array([0.0 if n in EFFICIENCIES else np.inf for n in free])
    x0 = np.minimum(x0, upper)
    sol = least_squares(residuals, x0, bounds=(lower, upper), x_scale="jac")
    v = values(sol.x)
    pred = predictions(v)
    log_errors = [float(e) for e in np.log(pred / measured)]
    terms = _uncertainties(sol, free, v, len(observations))
    for a, target in alias.items():
        t = terms[target]
        terms[a] = FittedTerm(a, t.value, t.stderr_pct, f"{t.source} (as {target})")
    ms = models(v)
    floors = {p: ms[p].floor for p in profiles}
    for p, f in floor_priors.items():
        floors.setdefault(p, f)
    return PhysicsFit(Bandwidths(*(v[n] for n in SHARED_TERMS)), floors, terms, log_errors,
                      v.get("amortization"))


def _linear(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in LINEAR_TERMS


def _to_x(name: str, value: float) -> float:
    return value if _linear(name) else math.log(max(value, 1e-12))


def _from_x(name: str, x: float) -> float:
    return float(x) if _linear(name) else math.exp(x)


def _prior_scale(name: str) -> float:
    return LINEAR_PRIOR_SCALE_US if _linear(name) else 1.0


def _stderr_pct(name: str, sd: float | None, value: float) -> float | None:
    """A standard error in percent of the value (a log parameter's error is already relative)."""
    if sd is None:
        return None
    if _linear(name):
        return 100 * sd / abs(value) if abs(value) > 1e-6 else None
    return 100 * sd


def _uncertainties(sol, free: Sequence[str], v: Mapping[str, float], n_obs: int) -> dict[str, FittedTerm]:
    """Standard errors from the Jacobian; ``fit`` where the data outweigh the prior."""
    jac = np.asarray(sol.jac)
    data_rows = jac[: 2 * n_obs]
    res = np.asarray(sol.fun)[:n_obs]
    dof = max(n_obs - len(free), 1)
    s2 = float(res @ res) / dof if n_obs > len(free) else float("nan")
    try:
        cov = np.linalg.pinv(jac.T @ jac) * s2
    except np.linalg.LinAlgError:
        cov = np.full((len(free), len(free)), np.nan)
    out = {}
    for i, name in enumerate(free):
        info_data = float(data_rows[:, i] @ data_rows[:, i])
        info_prior = (PRIOR_WEIGHT / _prior_scale(name)) ** 2
        sd = math.sqrt(cov[i, i]) if np.isfinite(cov[i, i]) and cov[i, i] >= 0 else None
        pct = _stderr_pct(name, sd, v[name])
        out[name] = FittedTerm(name, v[name], pct, "fit" if info_data > info_prior else "prior")
    return out


# ------------------------------------------------------------------------------------------ suites
SCORED_BYTES = (1 << 10, 1 << 30)
"""The size range the suite fits and scores (1 KiB .. 1 GiB): the goal's range. Rows below 1 KiB
are kept in the files as published but left out (they sit on the floor and several are erratic,
e.g. 63 µs at 8 B next to 312 µs at 16 B in the 2024 sample)."""
SUITE_INHERIT: dict[str, tuple[str, tuple[str, ...]]] = {
    "2.10": ("2.21", ("launch_us", "per_rank_us", "efa_hop_us")),
    "2.17": ("2.10", ("efa_hop_us",)),
}
"""How the older profiles share figures. The on-chip and NeuronLink hops are the hardware's and are
taken from the current releases' figures; what the older releases add is software: their launch,
per-rank floor and EFA hop are their own (fitted from the 2.10 page's three runs). The 2.17-2.20
profile has one published run (2 instances): it gets its own EFA hop and shares 2.10's launch and
per-rank floor."""


def suite_priors(family: Family) -> tuple[Bandwidths, dict[str, Floor]]:
    """The documented priors of a suite fit: hardware figures at full efficiency, documented hops,
    a 2 µs launch (ASSUMED) and no per-rank floor."""
    from ..closed.neuron import DOCUMENTED_HOPS, FLOORS

    bw = Bandwidths(family.core_GBps, 1.0, 1.0, 1.0)
    floors = {p: Floor(2.0, 0.0, DOCUMENTED_HOPS["chip_hop_us"], DOCUMENTED_HOPS["link_hop_us"],
                       DOCUMENTED_HOPS["efa_hop_us"], f.inter_node_rdh) for p, f in FLOORS.items()}
    return bw, floors


def suite_observations(logs: Sequence, family: Family) -> list[Observation]:
    """Observations of a suite's logs (:func:`synth.calibrate.closed_logs.read_suite`) in range."""
    from ..closed.neuron import consecutive_group, runtime_profile

    out = []
    lo, hi = SCORED_BYTES
    for log in logs:
        profile = runtime_profile(log.runtime)
        for r in log.records:
            if r.kind != "call" or not lo <= r.nbytes <= hi:
                continue
            out.append(Observation(profile, r.primitive,
                                   consecutive_group(family, r.ranks, r.group[0]),
                                   r.nbytes, r.time_us, r.calls, log.name))
    return out


def fit_suite(logs: Sequence, family: Family) -> PhysicsFit:
    """Fit ``family``'s figures to every log of a suite (the shipped figures are this fit)."""
    obs = suite_observations(logs, family)
    if not obs:
        raise ValueError("no observation in range")
    bw, floors = suite_priors(family)
    used = {o.profile for o in obs}
    while True:
        more = {SUITE_INHERIT[p][0] for p in used if p in SUITE_INHERIT} - used
        if not more:
            break
        used |= more
    out = fit_physics(obs, family, bw, {p: f for p, f in floors.items() if p in used},
                      {p: v for p, v in SUITE_INHERIT.items() if p in used})
    # a profile no observation informs takes its parent's floors (the nearest release measured)
    for p in floors:
        q = p
        while q not in out.floors and q in SUITE_INHERIT:
            q = SUITE_INHERIT[q][0]
        if p not in out.floors and q in out.floors:
            out.floors[p] = replace(out.floors[q], inter_node_rdh=floors[p].inter_node_rdh)
            out.notes.append(f"profile {p}: no observation; floors of {q}")
    return out
