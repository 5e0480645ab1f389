"""Calibration: fit the closed-stack cost model's terms from measurements.

Inputs are read by :mod:`.closed_logs` (nccom-test output, timing JSON).

**Trainium** (the model has Neuron physics, :mod:`synth.closed.neuron`): the log's calls fit the
model's own figures (core-to-core, NeuronLink mesh and ring efficiencies, EFA efficiency, launch,
per-rank floor, hop latencies) by :func:`synth.calibrate.neuron_fit.fit_physics`, starting from and
held near the shipped figures; the calibration file carries them in ``parameters`` and
:func:`synth.closed.cost.load_model` reads them back. Per measured key it also reports the fitted
model's α/β line and errors (``terms``, marked ``"source": "neuron-model"``) for the catalog's
link-class scaling (:mod:`synth.calibrated`); they are derived, not applied again.

**Other stacks** (TPU/JAX), model fitted per key (weighted least squares, weights 1/time so every
size counts by relative error):

    time(M calls) = M·A_k − (M−1)·D + M·wire_bytes·β_k        A_k = launch + α_k,  D = (1−ρ)·launch
    time(transform) = transform_us + bytes / memcopy
    time(launch) = launch

``α_k = A_k − launch`` (launch fitted from launch records, else the default), ``ρ = 1 − D/launch``
(fitted when some record has M > 1, else the default). A key measured at one size only keeps its
default α and gets β alone. Every term is reported with its standard error and every key with the
relative residuals of its points: the "fit error per term".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..calibration import FORMAT
from ..closed.cost import CostModel, default_model, wire_factor
from ..closed.mesh import mesh_for_topology
from ..errors import SynthError
from ..topology import MB, Topology
from .closed_logs import OPS, TIMINGS_FORMAT, Record, read_log


# ------------------------------------------------------------------------------------ fitting
@dataclass
class Term:
    name: str
    value: float
    stderr: float | None
    source: str  # fit | default | derived

    def to_dict(self) -> dict[str, Any]:
        rel = (100.0 * self.stderr / abs(self.value)) if self.stderr is not None and self.value \
            and math.isfinite(self.stderr) else None
        return {"value": _r(self.value), "stderr": _r(self.stderr), "stderr_pct": _r(rel),
                "source": self.source}


def _r(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")


@dataclass
class Fit:
    platform: str
    topology: str
    source: str
    params: dict[str, Term]
    terms: list[dict[str, Any]]
    records: int
    rms_rel_error: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "platform": self.platform,
            "topology": self.topology,
            "source": self.source,
            "parameters": {k: _r(v.value) for k, v in self.params.items()},
            "terms": self.terms,
            "fit": {"parameters": {k: v.to_dict() for k, v in self.params.items()},
                    "records": self.records, "rms_rel_error": _r(self.rms_rel_error),
                    "notes": self.notes},
        }


def fit(records: Sequence[Record], model: CostModel, platform: str, topology: str,
        source: str) -> Fit:
    if model.physics is not None:
        return fit_trainium(records, model, platform, topology, source)
    calls = [r for r in records if r.kind == "call"]
    transforms = [r for r in records if r.kind == "transform"]
    launches = [r for r in records if r.kind == "launch"]
    notes: list[str] = []
    params: dict[str, Term] = {}

    # launch tax
    if launches:
        vals = np.array([r.time_us for r in launches])
        se = float(vals.std(ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else None
        params["launch_us"] = Term("launch_us", float(vals.mean()), se, "fit")
    else:
        params["launch_us"] = Term("launch_us", model.launch_us, None, "default")
        notes.append("no launch-only records: launch tax kept at its default; α is the per-call "
                     "fixed cost minus that default")
    tau = params["launch_us"].value

    # memcopy
    if transforms:
        x = np.array([[1.0, r.nbytes / MB] for r in transforms])
        y = np.array([r.time_us for r in transforms])
        coef, se, _ = _wls(x, y, weights=1.0 / y)
        if len({r.nbytes for r in transforms}) < 2:
            raise SynthError("transform records need at least two sizes to separate the fixed cost "
                             "from the bandwidth")
        bw = 1000.0 / coef[1]
        params["memcopy_GBps"] = Term("memcopy_GBps", bw, se[1] * bw / coef[1], "fit")
        params["transform_us"] = Term("transform_us", max(coef[0], 0.0), se[0], "fit")
    else:
        params["memcopy_GBps"] = Term("memcopy_GBps", model.memcopy_GBps, None, "default")
        params["transform_us"] = Term("transform_us", model.transform_us, None, "default")

    # calls: unknowns [A_k, beta_k per key] + D
    keys = sorted({r.key for r in calls})
    multi = any(r.calls > 1 for r in calls)
    sizes_by_key = {k: {r.nbytes for r in calls if r.key == k} for k in keys}
    col: dict[tuple, int] = {}
    fixed_a: dict[tuple, float] = {}
    for k in keys:
        if len(sizes_by_key[k]) >= 2 or any(r.calls > 1 for r in calls if r.key == k):
            col[("A", k)] = len(col)
        else:
            fixed_a[k] = tau + model.key_default_terms(k)[0]
            notes.append(f"{_key_text(k)}: measured at one size only, so α keeps its default "
                         f"({fixed_a[k] - tau:.3g} µs) and β alone is fitted")
        col[("B", k)] = len(col)
    if multi:
        col[("D",)] = len(col)
    terms_out: list[dict[str, Any]] = []
    if calls:
        x = np.zeros((len(calls), len(col)))
        y = np.zeros(len(calls))
        for i, r in enumerate(calls):
            m = r.calls
            w = wire_factor(r.primitive, r.ranks) * r.nbytes / MB
            y[i] = r.time_us
            if ("A", r.key) in col:
                x[i, col[("A", r.key)]] = m
            else:
                y[i] -= m * fixed_a[r.key]
            x[i, col[("B", r.key)]] = m * w
            if multi:
                x[i, col[("D",)]] = -(m - 1)
        coef, se, _ = _wls(x, y, weights=1.0 / np.array([r.time_us for r in calls]))
        if multi:
            d = coef[col[("D",)]]
            rho = 1.0 - d / tau if tau > 0 else model.amortization
            rho_se = se[col[("D",)]] / tau if tau > 0 else None
            params["amortization"] = Term("amortization", min(max(rho, 0.0), 1.0), rho_se, "fit")
        else:
            params["amortization"] = Term("amortization", model.amortization, None, "default")
            notes.append("no back-to-back records (calls > 1): amortization kept at its default")
        pred = x @ coef
        resid_rel = (y - pred) / np.array([r.time_us for r in calls])
        for k in keys:
            idx = [i for i, r in enumerate(calls) if r.key == k]
            if ("A", k) in col:
                a_total = coef[col[("A", k)]]
                a_se = se[col[("A", k)]]
            else:
                a_total, a_se = fixed_a[k], None
            alpha = a_total - tau
            if alpha < 0:
                notes.append(f"{_key_text(k)}: per-call fixed cost {a_total:.3g} µs is below the launch "
                             f"tax {tau:.3g} µs; α clamped to 0")
                alpha = 0.0
            beta = coef[col[("B", k)]]
            b_se = se[col[("B", k)]]
            logged = [calls[i].logged_busbw for i in idx if calls[i].logged_busbw]
            d_alpha, d_beta = model.key_default_terms(k)
            default_err = max(abs(model.launch_us * (1 + (calls[i].calls - 1) * model.amortization)
                                  + calls[i].calls * (d_alpha + wire_factor(k[0], calls[i].ranks)
                                                      * calls[i].nbytes / MB * d_beta)
                                  - calls[i].time_us) / calls[i].time_us for i in idx)
            big = max(idx, key=lambda i: calls[i].nbytes)
            busbw_pred = (wire_factor(k[0], k[1][0] * k[1][1]) * calls[big].nbytes
                          / (calls[big].time_us * 1e-6) / 1e9)
            terms_out.append({
                "primitive": k[0], "group": list(k[1]), "link_class": k[2],
                "alpha_us": _r(alpha), "beta_us_per_mb": _r(beta),
                "busbw_GBps": _r(1000.0 / beta) if beta > 0 else None,
                "alpha_stderr_pct": _r(100 * a_se / alpha) if a_se is not None and alpha > 0 else None,
                "beta_stderr_pct": _r(100 * b_se / beta) if beta > 0 else None,
                "points": len(idx),
                "rms_rel_error": _r(float(np.sqrt(np.mean(resid_rel[idx] ** 2)))),
                "max_rel_error": _r(float(np.max(np.abs(resid_rel[idx])))),
                "busbw_measured_GBps": _r(busbw_pred),
                "busbw_logged_GBps": _r(logged[-1]) if logged else None,
                "default_max_rel_error": _r(default_err),
            })
        rms = float(np.sqrt(np.mean(resid_rel ** 2)))
    else:
        params["amortization"] = Term("amortization", model.amortization, None, "default")
        rms = 0.0
    return Fit(platform, topology, source, params, terms_out, len(records), rms, notes)


def fit_trainium(records: Sequence[Record], model: CostModel, platform: str, topology: str,
                 source: str) -> Fit:
    """Fit the Trainium model's figures (see the module doc) to a log's records."""
    from ..closed.cost import DERIVED_TERMS, NEURON_PARAMETERS
    from ..closed.neuron import Group, consecutive_group
    from .neuron_fit import Observation, fit_physics

    physics = model.physics
    assert physics is not None
    calls = [r for r in records if r.kind == "call"]
    launches = [r for r in records if r.kind == "launch"]
    transforms = [r for r in records if r.kind == "transform"]
    notes: list[str] = []
    if not calls and not launches:
        raise SynthError(f"{source}: no collective calls to fit")
    groups: dict[tuple, Group] = {}
    obs = []
    for r in calls:
        try:
            g = model.group(r.axes) if r.axes else consecutive_group(physics.family, r.ranks, r.group[0])
        except SynthError as exc:
            raise SynthError(f"{r.line}: {exc.message}") from None
        groups[r.key] = g
        obs.append(Observation("calibrated", r.primitive, g, r.nbytes, r.time_us, r.calls,
                               r.run or r.line))
    obs += [Observation("calibrated", "", Group(1, (), 1), 0, r.time_us, 1, "launch", "launch")
            for r in launches]
    multi = any(r.calls > 1 for r in calls)
    prior_floor = replace(physics.floor, launch_us=model.launch_us)
    pf = fit_physics(obs, physics.family, physics.bandwidths, {"calibrated": prior_floor},
                     amortization_prior=model.amortization if multi else None)
    params: dict[str, Term] = {}
    labels = {"fit": "fit", "prior": "shipped"}
    for name in ("launch_us", *NEURON_PARAMETERS):
        key = name if name in ("core_GBps", "mesh_efficiency", "ring_efficiency", "efa_efficiency") \
            else f"calibrated.{name}"
        t = pf.terms[key]
        se = t.stderr_pct / 100 * abs(t.value) if t.stderr_pct is not None else None
        params[name] = Term(name, t.value, se, labels.get(t.source, t.source))
    if multi:
        t = pf.terms["amortization"]
        params["amortization"] = Term("amortization", t.value,
                                      t.stderr_pct / 100 * t.value if t.stderr_pct is not None else None,
                                      labels.get(t.source, t.source))
    else:
        params["amortization"] = Term("amortization", model.amortization, None, "default")
        notes.append("no back-to-back records (calls > 1): amortization kept at its default")
    params.update(_memcopy_terms(transforms, model))
    shipped = [n for n, t in params.items() if t.source == "shipped"]
    if shipped:
        notes.append("not informed by this log, kept at the shipped figures: " + ", ".join(shipped))
    fitted = replace(physics, bandwidths=pf.bandwidths, floor=pf.floors["calibrated"])
    rel = [math.expm1(e) for e in pf.log_errors[: len(calls)]]
    terms_out: list[dict[str, Any]] = []
    for k in sorted({r.key for r in calls}):
        idx = [i for i, r in enumerate(calls) if r.key == k]
        g = groups[k]
        alpha, beta = fitted.large_message_terms(k[0], g)
        logged = [calls[i].logged_busbw for i in idx if calls[i].logged_busbw]
        big = max(idx, key=lambda i: calls[i].nbytes)
        shipped_err = max(abs(physics.time_us(k[0], g, calls[i].nbytes) - calls[i].time_us)
                          / calls[i].time_us for i in idx if calls[i].calls == 1) if any(
            calls[i].calls == 1 for i in idx) else None
        terms_out.append({
            "primitive": k[0], "group": list(k[1]), "link_class": k[2], "source": DERIVED_TERMS,
            "alpha_us": _r(alpha), "beta_us_per_mb": _r(beta),
            "busbw_GBps": _r(1000.0 / beta) if beta > 0 else None,
            "alpha_stderr_pct": None, "beta_stderr_pct": None,
            "points": len(idx),
            "rms_rel_error": _r(float(np.sqrt(np.mean(np.square([rel[i] for i in idx]))))),
            "max_rel_error": _r(float(np.max(np.abs([rel[i] for i in idx])))),
            "busbw_measured_GBps": _r(wire_factor(k[0], k[1][0] * k[1][1]) * calls[big].nbytes
                                      / (calls[big].time_us * 1e-6) / 1e9),
            "busbw_logged_GBps": _r(logged[-1]) if logged else None,
            "default_max_rel_error": _r(shipped_err),
        })
    rms = float(np.sqrt(np.mean(np.square(rel)))) if rel else 0.0
    return Fit(platform, topology, source, params, terms_out, len(records), rms, notes + pf.notes)


def _memcopy_terms(transforms: Sequence[Record], model: CostModel) -> dict[str, Term]:
    if not transforms:
        return {"memcopy_GBps": Term("memcopy_GBps", model.memcopy_GBps, None, "default"),
                "transform_us": Term("transform_us", model.transform_us, None, "default")}
    if len({r.nbytes for r in transforms}) < 2:
        raise SynthError("transform records need at least two sizes to separate the fixed cost "
                         "from the bandwidth")
    x = np.array([[1.0, r.nbytes / MB] for r in transforms])
    y = np.array([r.time_us for r in transforms])
    coef, se, _ = _wls(x, y, weights=1.0 / y)
    bw = 1000.0 / coef[1]
    return {"memcopy_GBps": Term("memcopy_GBps", bw, se[1] * bw / coef[1], "fit"),
            "transform_us": Term("transform_us", max(coef[0], 0.0), se[0], "fit")}


def _key_text(k) -> str:
    return f"{k[0]} on {k[1][0]}x{k[1][1]} ranks over {k[2]}"


def _wls(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None):
    w = np.ones(len(y)) if weights is None else weights
    xw = x * w[:, None]
    yw = y * w
    coef, *_ = np.linalg.lstsq(xw, yw, rcond=None)
    resid = yw - xw @ coef
    dof = max(len(y) - x.shape[1], 1)
    if len(y) <= x.shape[1]:
        return coef, np.full(x.shape[1], np.nan), resid  # exact fit: no error estimate
    sigma2 = float(resid @ resid) / dof
    try:
        cov = sigma2 * np.linalg.pinv(xw.T @ xw)
        se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    except np.linalg.LinAlgError:
        se = np.full(x.shape[1], np.nan)
    return coef, se, resid


def calibrate(log: str | Path, topology: Topology, platform: str) -> Fit:
    """Read a log (nccom-test text or timing JSON) and fit the model for ``topology``."""
    if platform not in ("neuron", "jax"):
        from ..errors import unknown_name
        raise unknown_name("platform", platform, ("neuron", "jax"))
    mesh = mesh_for_topology(topology)
    model = default_model(topology, mesh)
    records = read_log(log, mesh, model)
    return fit(records, model, platform, topology.name, str(log))


# ------------------------------------------------------------------------------------ synthetic
def synthetic_nccom(truth, runs: Sequence[tuple[str, int, int]], sizes: Sequence[int],
                    noise: float = 0.02, seed: int = 0) -> str:
    """nccom-test output of a known Trainium model, with multiplicative Gaussian noise.

    ``truth``: a :class:`synth.closed.neuron.NeuronModel` (its figures are what a calibration
    should recover); ``runs``: (op name, ranks, nodes) per run, ranks 0 .. R/N - 1 of each node.
    """
    from ..closed.neuron import consecutive_group

    rng = np.random.default_rng(seed)
    lines = []
    for op, ranks, nodes in runs:
        prim = OPS[op]
        group = consecutive_group(truth.family, ranks, nodes)
        lines.append(f"$ nccom-test -r {ranks} -N {nodes} {op} -b {sizes[0]} -e {sizes[-1]} -f 2")
        lines.append("     size(B)    count(elems)     type    time:avg(us)    algbw(GB/s)    busbw(GB/s)")
        for s in sizes:
            t = truth.time_us(prim, group, s) * (1 + noise * rng.standard_normal())
            algbw = s / (t * 1e-6) / 1e9
            lines.append(f"{s:>12d}{s // 4:>16d}     fp32{t:>16.2f}{algbw:>15.2f}"
                         f"{algbw * wire_factor(prim, ranks):>15.2f}")
        lines.append("")
    return "\n".join(lines) + "\n"


def synthetic_timings(truth: dict, keys: Sequence[tuple[str, tuple[int, int], str]],
                      sizes: Sequence[int], calls: Sequence[int] = (1, 4, 16),
                      noise: float = 0.02, seed: int = 0) -> dict:
    """A timing JSON generated from known terms (launch, amortization, memcopy, per-key α/β)."""
    rng = np.random.default_rng(seed)
    tau, rho = truth["launch_us"], truth["amortization"]
    recs: list[dict[str, Any]] = []

    def noisy(t: float) -> float:
        return float(t * (1 + noise * rng.standard_normal()))

    for _ in range(8):
        recs.append({"launch": True, "time_us": noisy(tau)})
    for s in sizes:
        t = truth["transform_us"] + s / MB * 1000.0 / truth["memcopy_GBps"]
        recs.append({"transform": "transpose", "bytes": s, "time_us": noisy(t)})
    for key in keys:
        prim, group, cls = key
        alpha, beta = truth[key]
        g = group[0] * group[1]
        for s in sizes:
            for m in calls:
                t = tau * (1 + (m - 1) * rho) + m * (alpha + wire_factor(prim, g) * s / MB * beta)
                recs.append({"primitive": prim, "group": list(group), "link_class": cls,
                             "bytes": s, "calls": m, "time_us": noisy(t)})
    return {"format": TIMINGS_FORMAT, "records": recs}


PUBLISHED_NCCOM = """\
# Published nccom-test figures (docs/reference/hardware.md, from the AWS Neuron docs):
# 32-rank all-gather on trn1.32xlarge: 1 KiB in 6.2 us, 512 KiB in 23 us.
$ nccom-test -r 32 allg -b 1024 -e 524288
     size(B)    count(elems)     type    time(us)    algbw(GB/s)    busbw(GB/s)
        1024             256     fp32        6.20           0.17           0.16
      524288          131072     fp32       23.00          22.80          22.09
# 2 x trn1.32xlarge, 64-rank all-reduce: 1 GiB in 41.8 ms, bus bandwidth 47.1 GB/s.
$ nccom-test -r 64 -N 2 allr -b 1073741824 -e 1073741824
     size(B)    count(elems)     type    time(us)    algbw(GB/s)    busbw(GB/s)
  1073741824       268435456     fp32    41800.00          25.69          47.10
"""
"""The published figures as an nccom-test log (calibrate it against trn1_32 with --nodes 2)."""
