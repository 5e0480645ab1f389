"""Calibrate link classes from nccl-tests logs (``all_gather_perf``, ``all_reduce_perf``, ...).

Users of NCCL clusters already have nccl-tests output; this turns it into per-link-class α/β (and
the per-call latency floor) that ``solve``, ``pareto`` and ``catalog`` then use instead of datasheet
figures (:mod:`synth.calibration`).

**Input.** nccl-tests logs, read by :mod:`.nccl_tests`.

**Model (stated, and the one the fit is judged against).** A run of collective K on the topology
(with the log's node count) is predicted as

    time(size) = launch + Σ_steps max over the step's resources r of (α_c(r) + load_r · chunk · β_c(r))

i.e. synth's α-β step cost (:func:`synth.timing.lockstep.schedule_times_us`) of the algorithm NCCL runs: the
**ring** (:mod:`synth.encodings.baseline.algorithms`) for allgather and reducescatter, ring allreduce
(= reducescatter then allgather, 2(n-1) steps), and **direct** point-to-point for alltoall. NCCL runs
several rings side by side on a multi-node machine, rail-aligned so that each ring crosses nodes
through its own NIC: with ``rings`` rings (default: NICs per node) the inter-node resources carry
1/rings of a ring step's data, while intra-node resources (a GPU's NVSwitch port) carry every ring's.
``launch`` is the per-call floor (kernel launch and protocol set-up) on top of the per-step α; it is
separable from α only when the log has collectives with different step counts over the same class
(e.g. allgather and allreduce), otherwise it is 0 and α absorbs it (noted). A class is fitted only
where it is the bottleneck somewhere in the log (the intra-node class in single-node runs, the NIC
class in multi-node ones); others keep the topology's figures, marked ``default``.

**Fit.** Robust non-linear least squares (``scipy.optimize.least_squares``, soft-L1 loss) on the log
of the times — relative error, so 8 B and 8 GB rows count alike, and multiplicative noise is
unbiased — with the exact Jacobian of the step model (piecewise linear in α/β: each step's
bottleneck class). Parameters the log cannot separate are fixed and said so. The report gives the
median and max relative error per run and each parameter's standard error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..calibrated import apply_calibration
from ..calibration import Calibration, ClassParams, class_figures
from ..collectives import make_collective
from ..encodings.baseline.algorithms import baseline
from ..errors import SynthError
from ..schedule import Schedule
from ..timing.lockstep import StepModel, schedule_times_us, step_model
from ..topology import Topology
from .nccl_tests import BUS_FACTOR, PROGRAMS, Run, read_nccl_log

ALGORITHM = {"allgather": "ring", "reducescatter": "ring", "allreduce": "ring", "alltoall": "direct"}
"""NCCL's algorithm per collective, as a synth baseline."""
RING = ("allgather", "reducescatter", "allreduce")
F_SCALE = 0.05
"""Soft-L1 scale in log-time units: residuals under ~5% count quadratically, larger ones linearly."""


# ========================================================================================= model
def nics_per_node(topology: Topology) -> int:
    """Distinct NICs on the first node: NCCL's rail-aligned rings, one per NIC."""
    if not topology.nodes:
        return max(1, len(topology.nics))
    first = set(topology.nodes[0])
    return max(1, sum(1 for n in topology.nics if set(n.ranks) <= first))


def nccl_schedule(topology: Topology, collective: str) -> Schedule:
    """NCCL's algorithm for ``collective`` on ``topology`` as a synth baseline schedule."""
    coll = make_collective(collective, topology.num_ranks, 1, None, False)
    return baseline(topology, coll, ALGORITHM[collective])


# =========================================================================================== fit
@dataclass
class _Series:
    run: Run
    topology: Topology
    model: StepModel
    sizes: np.ndarray
    times: np.ndarray
    rings: int


@dataclass
class CalibrationFit:
    """The fitted calibration plus everything the report shows."""

    topology: str
    source: str
    classes: dict[str, ClassParams]
    launch_us: float
    launch_source: str
    """``fit``, or ``fixed`` (0: not separable from α with this log)."""
    launch_stderr_pct: float | None
    model: dict[str, Any]
    runs: list[dict[str, Any]]
    notes: list[str]
    points: int
    median_rel_error: float
    max_rel_error: float
    default_median_rel_error: float
    nccl_model: dict[str, Any] | None = None
    """The fit of NCCL's own tuning model to the same log (:mod:`synth.calibrate.nccl_fit`): its launch
    floor, latency and bandwidth scales, read by :mod:`synth.timing.nccl`."""

    def calibration(self) -> Calibration:
        """The fit as a :class:`synth.calibration.Calibration` (what ``solve``/``catalog`` read).

        The per-call floor goes to ``launch`` and, because it is the small-message regime's where
        NCCL runs LL, also to ``protocols.LL.launch_us`` (the topology's α is read as LL's per-hop
        latency, as :mod:`synth.timing.protocol` does). A floor that was not separable is written as
        ``fixed`` and not passed to the protocols.
        """
        launch = {"launch_us": _r(self.launch_us), "source": self.launch_source,
                  "stderr_pct": _r(self.launch_stderr_pct)}
        protocols = ({"LL": {"launch_us": _r(self.launch_us), "source": "fit"}}
                     if self.launch_source == "fit" else None)
        fit = {"log": self.source, "points": self.points,
               "median_rel_error": _r(self.median_rel_error), "max_rel_error": _r(self.max_rel_error),
               "default_median_rel_error": _r(self.default_median_rel_error),
               "runs": self.runs, "notes": self.notes}
        return Calibration(dict(self.classes), launch, self.topology, "nccl-tests", self.model, fit,
                           self.source, protocols, nccl_model=self.nccl_model)

    def to_json(self) -> dict[str, Any]:
        return self.calibration().to_json()

    def dumps(self) -> str:
        """Canonical text of :meth:`to_json`: the same fit gives the same bytes."""
        import json
        return json.dumps(self.to_json(), indent=2) + "\n"


def _topology_for(base_spec: str, nodes: int, cache: dict[int, Topology]) -> Topology:
    from ..topology_io import load_topology
    if nodes not in cache:
        cache[nodes] = load_topology(base_spec, nodes)
    return cache[nodes]


def calibrate_nccl(runs: Sequence[Run], topo_spec: str, *, nodes: int | None = None,
                   rings: int | None = None, source: str = "log") -> CalibrationFit:
    """Fit per-class α/β and the launch floor to ``runs`` measured on ``topo_spec`` (one node).

    ``nodes`` is the node count for runs whose log does not list hosts; ``rings`` overrides the
    number of parallel rings on multi-node runs (default: NICs per node).
    """
    from ..topology_io import load_topology

    base = load_topology(topo_spec, 1)
    if base.num_nodes > 1:
        raise SynthError(f"--topo '{topo_spec}' already spans {base.num_nodes} nodes; give the "
                         "single-node topology (the log's hosts give the node count)")
    per_node = base.num_ranks
    cache: dict[int, Topology] = {1: base}
    placed: list[tuple[Run, Topology, int]] = []
    notes: list[str] = []
    schedules: dict[tuple[int, str], Schedule] = {}
    skipped: dict[str, tuple[int, int]] = {}
    for run in runs:
        assert run.collective is not None
        where = f"{source}:{run.start_line}"
        if run.hosts:
            n_nodes = run.nodes
        elif run.ranks and run.ranks % per_node == 0:
            n_nodes = run.ranks // per_node
        else:
            n_nodes = nodes or 1
        if not run.ranks:
            run.ranks = n_nodes * per_node
            notes.append(f"{where}: {run.program} lists no ranks; assumed {run.ranks} "
                         f"({n_nodes} x {base.name})")
        run.nodes = n_nodes
        if run.ranks != n_nodes * per_node:
            raise SynthError(f"{where}: {run.program} ran on {run.ranks} ranks over {n_nodes} node(s), "
                             f"but {base.name} has {per_node} ranks per node; calibrate with the "
                             "topology the log was measured on (runs must use every rank of each node)")
        topo = _topology_for(topo_spec, n_nodes, cache)
        if (n_nodes, run.collective) not in schedules:
            schedules[(n_nodes, run.collective)] = nccl_schedule(topo, run.collective)
        k = (rings or nics_per_node(topo)) if (n_nodes > 1 and run.collective in RING) else 1
        placed.append((run, topo, k))
        for why, count in run.skipped.items():
            runs_count, values = skipped.get(why, (0, 0))
            skipped[why] = (runs_count + 1, values + count)
    for why, (runs_count, values) in sorted(skipped.items()):
        notes.append(f"skipped {values} value(s) in {runs_count} run(s): {why}")
    figures: dict[str, tuple[float, float]] = {}
    for topo in cache.values():
        for kind, fig in class_figures(topo).items():
            figures.setdefault(kind, fig)
    classes = tuple(sorted(figures))
    models: dict[tuple[int, str, int], StepModel] = {}
    series = []
    for run, topo, k in placed:
        key = (run.nodes, run.collective or "", k)
        if key not in models:
            models[key] = step_model(schedules[key[:2]], topo, classes, k)
        series.append(_Series(run, topo, models[key], np.array([r.size for r in run.rows], float),
                              np.array([r.time_us for r in run.rows]), k))
    result = _fit(series, classes, figures, base, notes, source, rings)
    result.nccl_model = _fit_nccl_model(placed, topo_spec, source)
    return result


def _fit_nccl_model(placed: Sequence[tuple[Run, Topology, int]], topo_spec: str, source: str
                    ) -> dict[str, Any] | None:
    """NCCL's tuning model fitted to the same runs (launch floor, latency and bandwidth scales)."""
    from ..errors import NotApplicable
    from .nccl_fit import Measurement, _by_size, error_ratio, fit, predict_measurement

    meas = []
    for run, _, _ in placed:
        if not run.rows:
            continue
        sizes, times = _by_size([r.size for r in run.rows], [r.time_us for r in run.rows])
        meas.append(Measurement(f"{source}:{run.start_line}", source, run.collective or "",
                                topo_spec, run.nodes, "log", (), "measured", sizes, times, source))
    if not meas:
        return None
    try:
        result = fit(meas, source=f"synth calibrate {source}")
        before = np.concatenate([error_ratio(predict_measurement(m), m.times_us) for m in meas])
        after = np.concatenate([error_ratio(predict_measurement(m, result.calibration), m.times_us)
                                for m in meas])
    except NotApplicable:
        return None
    return {**result.calibration.to_dict(), "fitted": list(result.fitted), "points": result.points,
            "median_error_factor": _r(float(np.median(after))),
            "max_error_factor": _r(float(np.max(after))),
            "uncalibrated_median_error_factor": _r(float(np.median(before)))}


def _predict(series: Sequence[_Series], theta: np.ndarray, n_cls: int) -> tuple[np.ndarray, np.ndarray]:
    """Predicted times of every point and their Jacobian wrt θ = [launch, α..., β...]."""
    launch, alpha, beta = theta[0], theta[1:1 + n_cls], theta[1 + n_cls:]
    preds, jacs = [], []
    for s in series:
        t, da, db = s.model.times(alpha, beta, s.sizes)
        preds.append(launch + t)
        jacs.append(np.hstack([np.ones((len(t), 1)), da, db]))
    return np.concatenate(preds), np.vstack(jacs)


def _independent(jac: np.ndarray, order: Sequence[int]) -> list[int]:
    """Columns of ``jac`` kept, in preference ``order``, while each adds rank (relative scale)."""
    norms = np.linalg.norm(jac, axis=0)
    kept: list[int] = []
    for j in order:
        if norms[j] == 0:
            continue
        trial = [*kept, j]
        m = jac[:, trial] / norms[trial]
        sv = np.linalg.svd(m, compute_uv=False)
        if sv[-1] > 1e-6 * sv[0]:
            kept = trial
    return sorted(kept)


def _fit(series: list[_Series], classes: tuple[str, ...], figures: dict[str, tuple[float, float]],
         base: Topology, notes: list[str], source: str, rings: int | None) -> CalibrationFit:
    from scipy.optimize import least_squares

    n_cls = len(classes)
    y = np.concatenate([s.times for s in series])
    default = np.array([0.0] + [figures[c][0] for c in classes] + [figures[c][1] for c in classes])
    # identifiability, judged at the topology's figures: which classes bottleneck some step, and
    # which columns (in relative-error units) are independent, preferring β, then α, then launch
    theta0 = default.copy()
    pred0, jac0 = _predict(series, theta0, n_cls)
    rel0 = jac0 / pred0[:, None]
    betas = list(range(1 + n_cls, 1 + 2 * n_cls))
    alphas = list(range(1, 1 + n_cls))
    free = _independent(rel0, betas + alphas + [0])
    if 0 not in free:
        notes.append("launch floor not separable from α (the log has one step count per link "
                     "class; add all_reduce_perf next to all_gather_perf to separate them): launch = 0, "
                     "so α includes its share of the per-call floor")
    for j in alphas + betas:
        if j in free:
            continue
        c = classes[(j - 1) % n_cls]
        what = "α" if j in alphas else "β"
        used = np.linalg.norm(jac0[:, j]) > 0
        notes.append(f"{c}: {what} kept at the topology's figure ("
                     + ("not separable from the other terms with these sizes)" if used else
                        "no run in the log is bottlenecked by this class)"))
    if not free:
        raise SynthError(f"{source}: nothing to fit (no run exercises a link class of {base.name})")

    def unpack(x: np.ndarray) -> np.ndarray:
        theta = default.copy()
        theta[0] = 0.0
        theta[free] = x
        return theta

    def residuals(x: np.ndarray) -> np.ndarray:
        pred, _ = _predict(series, unpack(x), n_cls)
        return np.log(np.maximum(pred, 1e-12)) - np.log(y)

    def jacobian(x: np.ndarray) -> np.ndarray:
        pred, jac = _predict(series, unpack(x), n_cls)
        return jac[:, free] / np.maximum(pred, 1e-12)[:, None]

    x0 = np.array([max(theta0[j], 1e-3) if j else 1.0 for j in free])
    lower = np.array([0.0 if j == 0 or j in alphas else 1e-9 for j in free])
    # a least-squares start, then the robust fit from there (soft-L1 needs a sensible scale)
    start = least_squares(residuals, x0, jac=jacobian, bounds=(lower, np.inf), method="trf",
                          x_scale="jac")
    sol = least_squares(residuals, start.x, jac=jacobian, bounds=(lower, np.inf), method="trf",
                        loss="soft_l1", f_scale=F_SCALE, x_scale="jac")
    theta = unpack(sol.x)
    pred, jac = _predict(series, theta, n_cls)
    rel = np.abs(pred - y) / y
    # standard errors from the Jacobian of the log residuals at the solution
    jr = jac[:, free] / pred[:, None]
    r = np.log(pred) - np.log(y)
    dof = max(len(y) - len(free), 1)
    stderr = np.full(len(theta), np.nan)
    try:
        cov = np.linalg.inv(jr.T @ jr) * float(r @ r) / dof
        stderr[free] = np.sqrt(np.maximum(np.diag(cov), 0.0))
    except np.linalg.LinAlgError:
        pass

    def pct(j: int) -> float | None:
        ok = j in free and theta[j] > 0 and math.isfinite(stderr[j])
        return float(100 * stderr[j] / theta[j]) if ok else None

    params = {}
    for i, c in enumerate(classes):
        ja, jb = 1 + i, 1 + n_cls + i
        fitted = ja in free or jb in free
        params[c] = ClassParams(float(theta[ja]), float(theta[jb]), "fit" if fitted else "default",
                                pct(ja), pct(jb))
    pred_default, _ = _predict(series, default, n_cls)
    rel_default = np.abs(pred_default - y) / y
    run_rows = []
    offset = 0
    for s in series:
        sl = slice(offset, offset + len(s.times))
        offset += len(s.times)
        run_rows.append({
            "collective": s.run.collective, "program": s.run.program, "line": s.run.start_line,
            "ranks": s.run.ranks, "nodes": s.run.nodes, "algorithm": ALGORITHM[s.run.collective or ""],
            "rings": s.rings, "points": len(s.times),
            "sizes": [int(s.sizes.min()), int(s.sizes.max())],
            "median_rel_error": _r(float(np.median(rel[sl]))),
            "max_rel_error": _r(float(np.max(rel[sl]))),
            "default_median_rel_error": _r(float(np.median(rel_default[sl]))),
        })
    launch_src = "fit" if 0 in free else "fixed"
    model = {
        "time": "launch + sum over steps of max over resources (alpha_class + load * chunk * beta_class)",
        "algorithms": {k: ALGORITHM[k] for k in sorted({s.run.collective or "" for s in series})},
        "rings": "NICs per node" if rings is None else rings,
        "inter_node_load": "divided by rings (rail-aligned rings, one NIC each)",
        "loss": f"soft_l1 on log(time), f_scale {F_SCALE}",
        "launch": "protocols.LL.launch_us: the small-message floor (NCCL runs LL there)",
    }
    return CalibrationFit(base.name, source, params, float(theta[0]), launch_src, pct(0), model,
                          run_rows, notes, len(y), float(np.median(rel)), float(np.max(rel)),
                          float(np.median(rel_default)))


def _r(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")


def calibrate_file(log: str | Path, topo_spec: str, *, nodes: int | None = None,
                   rings: int | None = None) -> CalibrationFit:
    """Read an nccl-tests log and fit it (the library side of ``synth calibrate --format nccl-tests``)."""
    if rings is not None and rings < 1:
        raise SynthError(f"--rings must be at least 1, got {rings}")
    runs = read_nccl_log(log)
    return calibrate_nccl(runs, topo_spec, nodes=nodes, rings=rings, source=str(log))


# ===================================================================================== synthetic
def _float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: the most decimals (2, 1, 0) that fit the width, else exponent."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        s = fmt.format(value)
        if len(s) <= width:
            return s
    return (f"{{:{width}.1e}}" if width >= 7 else f"{{:{width}.0e}}").format(value)


def _printed_size(collective: str, requested: int, n: int, word: int = 4) -> int:
    """The size nccl-tests prints for a requested size (per-rank counts aligned down to 16 B)."""
    count = requested // word
    if collective == "allreduce":
        return count * word
    base = (count // n) & ~(16 // word - 1)
    return base * n * word


def synthetic_nccl_log(topology: Topology, params: dict[str, Any],
                       collectives: Sequence[str] = ("allgather", "reducescatter", "allreduce"),
                       sizes: Sequence[int] = tuple(2**e for e in range(3, 31)),
                       noise: float = 0.03, seed: int = 0, *, rings: int | None = None,
                       host_prefix: str = "node") -> str:
    """An nccl-tests log, as version 2.13 prints it, of runs with known α/β and lognormal noise.

    ``topology`` is the machine the runs use (``load_topology('dgx_a100', 2)`` for two nodes);
    ``params`` maps link classes to ``(alpha_us, beta_us_per_mb)`` plus an optional ``launch_us``.
    Times are computed by :func:`synth.timing.lockstep.schedule_times_us` on the calibrated topology (with
    inter-node port β divided by ``rings`` for ring collectives on several nodes) — a separate code
    path from the fit's step model, so recovering the parameters also checks that model.
    """

    rng = np.random.default_rng(seed)
    launch = float(params.get("launch_us", 0.0))
    classes = {k: v for k, v in params.items() if k != "launch_us"}
    truth = apply_calibration(topology, {"link_classes": {
        k: {"alpha_us": float(a), "beta_us_per_mb": float(b)} for k, (a, b) in classes.items()}})
    n = topology.num_ranks
    nodes = topology.nodes or (tuple(range(n)),)
    host_of = {r: f"{host_prefix}-{i}" for i, members in enumerate(nodes) for r in members}
    local = {r: members.index(r) for members in nodes for r in members}
    k = rings or nics_per_node(topology)
    out: list[str] = []
    for coll in collectives:
        if coll not in ALGORITHM:
            raise SynthError(f"synthetic logs cover {', '.join(ALGORITHM)}, not '{coll}'")
        prog = next(p for p, c in PROGRAMS.items() if c == coll) + "_perf"
        topo = truth
        if len(nodes) > 1 and coll in RING and k > 1:
            topo = _scale_inter_node(truth, 1 / k)
        sched = nccl_schedule(topo, coll)
        printed = [_printed_size(coll, s, n) for s in sizes]
        nonzero = [p for p in printed if p > 0]
        model = dict(zip(nonzero, schedule_times_us(sched, topo, nonzero) + launch, strict=True))
        redop = "sum" if coll in ("allreduce", "reducescatter") else "none"
        out += ["# nccl-tests version 2.13.11 nccl-headers=22304 nccl-library=22304",
                f"# Collective test starting: {prog}",
                f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) "
                "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
                "#", "# Using devices"]
        for r in range(n):
            out.append(f"#  Rank {r:2d} Group  0 Pid {40000 + r:6d} on {host_of[r]:>10s} device "
                       f"{local[r]:2d} [0000:{0x07 + 16 * local[r]:02x}:00] NVIDIA A100-SXM4-80GB")
        out += ["#",
                "#                                                              out-of-place"
                "                       in-place          ",
                "#       size         count      type   redop    root     time   algbw   busbw #wrong"
                "     time   algbw   busbw #wrong ",
                "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
                "     (us)  (GB/s)  (GB/s)        "]
        busbws = []
        for req, size in zip(sizes, printed, strict=True):
            line = f"{size:12d}  {req // 4:12d}  {'float':>8s}  {redop:>6s}  {-1:6d}"
            for _ in ("out", "in"):
                base_t = model[size] if size else max(launch, 1.0)
                t = float(base_t * math.exp(noise * rng.standard_normal()))
                alg = size / 1e3 / t
                bus = alg * BUS_FACTOR[coll](n)
                busbws.append(bus)
                line += f"  {_float_str(t, 7)}  {_float_str(alg, 6)}  {_float_str(bus, 6)}  {0:6g}"
            out.append(line)
        out += ["# Out of bounds values : 0 OK",
                f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):g} ", "#",
                f"# Collective test concluded: {prog}", ""]
    return "\n".join(out) + "\n"


def _scale_inter_node(topology: Topology, factor: float) -> Topology:
    """``topology`` with the β of inter-node (fabric, NIC) switch ports multiplied by ``factor``."""
    import dataclasses
    switches = tuple(dataclasses.replace(sw, ports=tuple(
        dataclasses.replace(p, beta_us_per_mb=p.beta_us_per_mb * (factor if p.domain >= 0 else 1.0))
        for p in sw.ports)) for sw in topology.switches)
    return dataclasses.replace(topology, switches=switches)
