"""Public NCCL measurements, and fitting :class:`~synth.calibration.NcclCalibration` to them.

A measurement file is an nccl-tests log (``*.log``, read by :mod:`synth.calibrate.nccl_tests`) or a
published table (``*.csv`` with ``collective,bytes,nccl_us`` columns). Either starts with a line

    # synth: topology=dgx_h100 nodes=1 nccl=2.18.3 [algo=NVLSTree] [gpu=H200] [status=...]

saying which synth topology models the machine, on how many nodes, which NCCL version ran and
whether the user forced ``NCCL_ALGO``, and ``status=reported-below-expectation`` where the
reporter says the machine underperformed; the lines after it cite the source (URL, hardware). The
validation suite (``benchmarks/reality.py``, ``tests/test_nccl_model.py``) reads every file of
``tests/data/nccl-tests/``.

The fit: ``t = launch + latency_scale · lat + bytes / (bandwidth_scale · busBw)`` of the
configuration NCCL's own (uncalibrated) tuner picks, least squares on log time (relative error, so
8 B and 16 GB rows count alike) with ``scipy.optimize.least_squares``. Parameters a data set cannot
separate stay at NCCL's values: the bandwidth scale needs a point where the bandwidth term is at
least a tenth of the time, the latency scale one where the latency term is, and the launch floor
is fitted only together with the latency scale when both regimes are present.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..calibration import NcclCalibration
from ..errors import SynthError
from ..files import read_input
from ..timing.nccl import NcclMachine, choose, machine_of

SCALE_LIMIT = 4.0
"""The latency and bandwidth scales are fitted within [1/4, 4] of NCCL's figures."""
_HEADER_RE = re.compile(r"^#\s*synth:\s*(.*)$")


@dataclass(frozen=True)
class Measurement:
    """One collective measured on one machine: sizes and times (µs), and where they come from."""

    name: str
    path: str
    collective: str
    topology: str
    nodes: int
    nccl: str
    algos: tuple[str, ...]
    status: str
    """``measured`` or what the file's header says of the run (``reported-below-expectation``:
    the reporter says the machine underperformed; kept as measured, reported apart)."""
    sizes: np.ndarray
    times_us: np.ndarray
    source: str

    @property
    def label(self) -> str:
        return f"{self.name}:{self.collective}"


def _header(text: str, where: str) -> tuple[dict[str, str], str]:
    fields: dict[str, str] | None = None
    source: list[str] = []
    for line in text.splitlines():
        m = _HEADER_RE.match(line)
        if m:
            fields = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
        elif line.startswith("# source:"):
            source.append(line.removeprefix("# source:").strip())
        elif source and line.startswith("#   ") and len(source) == 1:
            source.append(line.strip("# ").strip())
    if fields is None or "topology" not in fields:
        raise SynthError(f"{where}: no '# synth: topology=NAME nodes=N nccl=VERSION' line; a "
                         "measurement file must say which machine it was measured on")
    return fields, " ".join(source)


def _by_size(sizes: Sequence[float], times: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """One time per size: the median of the rows (out-of-place and in-place) at that size."""
    groups: dict[int, list[float]] = {}
    for s, t in zip(sizes, times, strict=True):
        groups.setdefault(int(s), []).append(float(t))
    keys = sorted(groups)
    return np.array(keys, dtype=float), np.array([float(np.median(groups[k])) for k in keys])


def read_measurements(path: str | Path) -> list[Measurement]:
    """The measurements of one file (one per collective it holds)."""
    p = Path(path)
    text = read_input(p, "measurement file")
    fields, source = _header(text, str(p))
    try:
        nodes = int(fields.get("nodes", "1"))
    except ValueError as exc:
        raise SynthError(f"{p}: nodes must be an integer, got '{fields.get('nodes')}'") from exc
    algos = tuple(a for a in fields.get("algo", "").split(",") if a)
    common = dict(path=str(p), topology=fields["topology"], nodes=nodes,
                  nccl=fields.get("nccl", "unknown"), algos=algos,
                  status=fields.get("status", "measured"), source=source)
    per: dict[str, tuple[list[float], list[float]]] = {}
    if p.suffix == ".csv":
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        for i, row in enumerate(csv.DictReader(io.StringIO(body))):
            try:
                coll, size, t = row["collective"], float(row["bytes"]), float(row["nccl_us"])
            except (KeyError, TypeError, ValueError) as exc:
                raise SynthError(f"{p}: row {i + 1} needs collective, bytes, nccl_us") from exc
            per.setdefault(coll, ([], []))
            per[coll][0].append(size)
            per[coll][1].append(t)
    else:
        from .nccl_tests import parse_nccl_tests

        for run in parse_nccl_tests(text, str(p)):
            assert run.collective is not None
            per.setdefault(run.collective, ([], []))
            per[run.collective][0].extend(r.size for r in run.rows)
            per[run.collective][1].extend(r.time_us for r in run.rows)
    out = []
    for coll in sorted(per):
        sizes, times = _by_size(*per[coll])
        out.append(Measurement(name=p.stem, collective=coll, sizes=sizes, times_us=times,
                               **common))  # type: ignore[arg-type]
    if not out:
        raise SynthError(f"{p}: no measured rows")
    return out


def load_suite(folder: str | Path) -> list[Measurement]:
    """Every measurement under ``folder`` (``*.log`` and ``*.csv``), in file-name order."""
    d = Path(folder)
    files = sorted([*d.glob("*.log"), *d.glob("*.csv")])
    if not files:
        raise SynthError(f"no measurement files (*.log, *.csv) in '{d}'")
    return [m for f in files for m in read_measurements(f)]


def machine_for(meas: Measurement, cache: dict[tuple[str, int], NcclMachine] | None = None
                ) -> NcclMachine:
    from ..topology_io import load_topology

    key = (meas.topology, meas.nodes)
    if cache is not None and key in cache:
        return cache[key]
    m = machine_of(load_topology(meas.topology, meas.nodes))
    if cache is not None:
        cache[key] = m
    return m


def predict_measurement(meas: Measurement, cal: NcclCalibration | None = None,
                        machine: NcclMachine | None = None) -> np.ndarray:
    """Predicted NCCL time (µs) at every measured size."""
    m = machine or machine_for(meas)
    return np.array([choose(m, meas.collective, int(s), cal, meas.algos or None).time_us
                     for s in meas.sizes])


def _terms(meas: Measurement, m: NcclMachine) -> tuple[np.ndarray, np.ndarray]:
    """(latency term, bandwidth term) of NCCL's choice at every size, uncalibrated."""
    chosen = [choose(m, meas.collective, int(s), None, meas.algos or None) for s in meas.sizes]
    return (np.array([c.latency_term_us for c in chosen]),
            np.array([c.bandwidth_term_us for c in chosen]))


@dataclass(frozen=True)
class FitResult:
    calibration: NcclCalibration
    fitted: tuple[str, ...]
    points: int
    median_ratio: float
    """Median of max(pred/meas, meas/pred) over the points fitted."""


def fit(measurements: Sequence[Measurement], *, exclude: tuple[str, int] | None = None,
        source: str = "fit", machines: dict[tuple[str, int], NcclMachine] | None = None
        ) -> FitResult:
    """Fit launch / latency scale / bandwidth scale to the points (``exclude``: (label, size) left out)."""
    from scipy.optimize import least_squares

    lat_all, bw_all, y_all = [], [], []
    for meas in measurements:
        m = machine_for(meas, machines)
        lat, bw = _terms(meas, m)
        keep = np.ones(len(meas.sizes), dtype=bool)
        if exclude is not None and exclude[0] == meas.label:
            keep &= meas.sizes != exclude[1]
        lat_all.append(lat[keep])
        bw_all.append(bw[keep])
        y_all.append(meas.times_us[keep])
    lat_v, bw_v, y = (np.concatenate(a) for a in (lat_all, bw_all, y_all))
    if len(y) == 0:
        raise SynthError("nothing to fit: no measured points")
    total = lat_v + bw_v
    has_bw = bool(np.any(bw_v >= 0.1 * total))
    has_lat = bool(np.any(lat_v >= 0.5 * total))
    free = [name for name, ok in (("latency_scale", has_lat), ("bandwidth_scale", has_bw),
                                  ("launch_us", has_lat and has_bw and len(y) >= 6)) if ok]
    if not free:
        cal = NcclCalibration(source=f"{source} (nothing separable)")
        return FitResult(cal, (), len(y), _median_ratio(lat_v + bw_v, y))

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        vals = dict(zip(free, x, strict=True))
        return (float(vals.get("launch_us", 0.0)), math.exp(vals.get("latency_scale", 0.0)),
                math.exp(vals.get("bandwidth_scale", 0.0)))

    def residuals(x: np.ndarray) -> np.ndarray:
        launch, ls, bs = unpack(x)
        pred = launch + ls * lat_v + bw_v / bs
        return np.log(np.maximum(pred, 1e-9) / y)

    # scales stay within 4x of NCCL's own figures, the launch floor within 0..100 µs: beyond
    # that the fit is explaining a broken machine, not correcting NCCL's table
    lo = [(0.0 if k == "launch_us" else -math.log(SCALE_LIMIT)) for k in free]
    hi = [(100.0 if k == "launch_us" else math.log(SCALE_LIMIT)) for k in free]
    x0 = np.array([1.0 if k == "launch_us" else 0.0 for k in free])  # inside the bounds
    res = least_squares(residuals, x0, bounds=(lo, hi), method="trf", x_scale="jac",
                        xtol=1e-12, ftol=1e-12, gtol=1e-12)
    launch, ls, bs = unpack(res.x)
    cal = NcclCalibration(launch, ls, bs, source)
    pred = launch + ls * lat_v + bw_v / bs
    return FitResult(cal, tuple(free), len(y), _median_ratio(pred, y))


def _median_ratio(pred: np.ndarray, meas: np.ndarray) -> float:
    r = np.maximum(pred / meas, meas / pred)
    return float(np.median(r)) if len(r) else math.nan


def error_ratio(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Symmetric error factor per point: max(pred/meas, meas/pred) (1.0 = exact)."""
    return np.maximum(pred / meas, meas / pred)
