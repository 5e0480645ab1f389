"""Fit the timed program model's floors to measured MSCCL times of known XML files.

Input: measured per-call times (nccl-tests convention, in µs) of MSCCL runs at given sizes, and the
algorithm files the runtime had loaded. For every measured size the file the executor would have
selected is found as the runtime selects it (same collective, in place, ``minBytes <= size <=
maxBytes``, element count divisible by ``nchunksperloop``; spec §3.1; EXEC takes the first match in
sorted path order); sizes no file covers ran NCCL's own kernels and are left out.

Fitted: the launch per protocol (``launch_us``; protocols with fewer than
:data:`MIN_POINTS_PER_PROTOCOL` points keep NCCL's ``baseLat``) and one executor step cost
(``step_us``, per message, on a 0.05 µs grid), minimising the squared log error of
:func:`synth.timing.program.program_time`. The launch is additive, so each ``step_us`` on the grid
needs one simulation per point and the launches are then 1-D minimisations. The result is a
calibration ``program`` section (:func:`synth.timing.program.program_model` reads it) with in-sample
and leave-one-file-out errors, the latter refitting without each file's points and predicting them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from ..emit.program import Program
from ..emit.runtimes import normalize_coll
from ..errors import SynthError
from ..timing.program import program_model, program_time
from ..topology import Topology

STEP_GRID = tuple(round(0.05 * i, 2) for i in range(21))
"""Executor step costs tried (µs per message)."""
MIN_POINTS_PER_PROTOCOL = 3
ELEMENT_BYTES = 2
"""fp16, as the published MSCCL runs (``-d half``); only used for the divisibility test."""


@dataclass(frozen=True)
class Measurement:
    collective: str
    bytes: int
    time_us: float


@dataclass
class FloorFit:
    """Fitted floors and how well they predict the measurements."""

    launch_us: dict[str, float]
    step_us: float
    points: list[dict[str, Any]]
    in_sample: dict[str, float]
    leave_one_file_out: dict[str, float]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def program_section(self) -> dict[str, Any]:
        return {"launch_us": {k: round(v, 4) for k, v in sorted(self.launch_us.items())},
                "step_us": self.step_us,
                "fit": {"in_sample": self.in_sample, "leave_one_file_out": self.leave_one_file_out,
                        "points": len(self.points)}}


def select_program(programs: Mapping[str, Program], coll: str, nbytes: int,
                   element_bytes: int = ELEMENT_BYTES) -> str | None:
    """Name of the file the executor would run for an in-place call (None: NCCL's own kernels)."""
    want = normalize_coll(coll)
    for name in sorted(programs):
        p = programs[name]
        if normalize_coll(p.coll) != want or not p.inplace:
            continue
        if nbytes < p.min_bytes or (p.max_bytes and nbytes > p.max_bytes):
            continue
        if (nbytes // element_bytes) % p.nchunksperloop:
            continue
        return name
    return None


def errors(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    err = np.exp(np.abs(np.log(pred / meas)))
    return {"median_error": round(float(np.median(err)), 4), "worst_error": round(float(err.max()), 4),
            "median_ratio": round(float(np.median(pred / meas)), 4)}


def _best_launch(rest: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    def loss(x: float) -> float:
        return float(np.sum(np.log((x + rest) / meas) ** 2))
    r = minimize_scalar(loss, bounds=(0.0, 40.0), method="bounded")
    return float(r.x), float(r.fun)


def _fit(rest: np.ndarray, meas: np.ndarray, protos: list[str], cited: dict[str, float],
         mask: np.ndarray) -> tuple[dict[str, float], int]:
    """Per-protocol launches and the step index minimising the log loss over ``mask``."""
    best: tuple[float, dict[str, float], int] = (math.inf, {}, 0)
    names = sorted(set(protos))
    parr = np.array(protos)
    for j in range(rest.shape[1]):
        total, launches = 0.0, {}
        for name in names:
            sel = mask & (parr == name)
            if sel.sum() >= MIN_POINTS_PER_PROTOCOL:
                launches[name], loss = _best_launch(rest[sel, j], meas[sel])
            else:
                launches[name] = cited[name]
                loss = float(np.sum(np.log((cited[name] + rest[sel, j]) / meas[sel]) ** 2))
            total += loss
        if total < best[0]:
            best = (total, launches, j)
    return best[1], best[2]


def fit_floors(programs: Mapping[str, Program], measurements: Sequence[Measurement],
               topology: Topology, profile: str = "exec") -> FloorFit:
    """Fit launch per protocol and the executor step cost (module docstring)."""
    points, skipped = [], []
    for m in measurements:
        name = select_program(programs, m.collective, m.bytes)
        if name is None:
            skipped.append({"collective": m.collective, "bytes": m.bytes})
        else:
            points.append({"collective": m.collective, "bytes": m.bytes, "file": name,
                           "proto": programs[name].proto, "measured_us": m.time_us})
    if len(points) < 2:
        raise SynthError(f"only {len(points)} measured size(s) match a loaded XML file: need at "
                         "least 2 to fit the program model's floors")
    meas = np.array([p["measured_us"] for p in points], dtype=float)
    if not np.all(meas > 0):
        raise SynthError("measured times must be positive")
    rest = np.zeros((len(points), len(STEP_GRID)))
    cited: dict[str, float] = {}
    for i, pt in enumerate(points):
        prog = programs[pt["file"]]
        base = program_model(topology, prog.proto)
        cited[prog.proto] = base.launch_us
        base = replace(base, launch_us=0.0)
        for j, step in enumerate(STEP_GRID):
            rest[i, j] = program_time(prog, topology, pt["bytes"], model=replace(base, step_us=step),
                                      profile=profile).time_us
    protos = [p["proto"] for p in points]
    every = np.ones(len(points), dtype=bool)
    launches, j = _fit(rest, meas, protos, cited, every)
    pred = np.array([launches[p] for p in protos]) + rest[:, j]
    loo = np.zeros(len(points))
    for f in sorted({p["file"] for p in points}):
        out = np.array([p["file"] == f for p in points])
        la, jj = _fit(rest, meas, protos, cited, ~out)
        loo[out] = np.array([la.get(protos[i], cited[protos[i]]) for i in np.flatnonzero(out)]) \
            + rest[out, jj]
    for i, pt in enumerate(points):
        pt["fitted_us"] = round(float(pred[i]), 4)
        pt["leave_one_file_out_us"] = round(float(loo[i]), 4)
    return FloorFit(launches, float(STEP_GRID[j]), points, errors(pred, meas), errors(loo, meas),
                    skipped)


def read_measurements(data: Any, source: str) -> list[Measurement]:
    """Measured MSCCL times from a JSON object ``{collective: [{bytes, msccl_us | time_us}]}``."""
    if not isinstance(data, Mapping):
        raise SynthError(f"{source}: expected a JSON object mapping a collective to its rows")
    rows = []
    for coll, items in data.items():
        if not isinstance(items, list):
            continue            # metadata such as "source" or "hardware"
        for k, row in enumerate(items):
            if not isinstance(row, Mapping) or "bytes" not in row:
                raise SynthError(f"{source}: {coll}[{k}] needs 'bytes' and 'msccl_us' (or 'time_us')")
            t = row.get("msccl_us", row.get("time_us"))
            try:
                nbytes, t = int(row["bytes"]), float(t)
            except (TypeError, ValueError):
                raise SynthError(f"{source}: {coll}[{k}]: bytes and time must be numbers") from None
            if nbytes < 1 or not t > 0:
                raise SynthError(f"{source}: {coll}[{k}]: bytes and time must be positive")
            rows.append(Measurement(str(coll), nbytes, t))
    if not rows:
        raise SynthError(f"{source}: no measurement rows (collective -> list of {{bytes, msccl_us}})")
    return rows
