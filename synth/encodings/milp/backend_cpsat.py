"""The ``cpsat`` backend: OR-Tools CP-SAT on a model built here with integer coefficients.

OR-Tools' own MIP import (``model_builder`` with solver ``"sat"``, or ``pywraplp`` "SAT") was
tested and is *not* used: on a 6-job scheduling model with continuous start times it returned
"OPTIMAL" 10.543 where the true optimum (HiGHS, CBC, SCIP agree) is 8.234. Here continuous
variables live on an explicit decimal grid ``x = step · X`` (the coarsest power of ten that
represents the model's decimal data exactly, at most 10^-6), every row is scaled by a power of ten
to integers, and the objective likewise; the solution is mapped back and the objective recomputed
on the original PuLP model. With continuous variables the answer is that of the grid model (noted
in :attr:`.backend.MilpResult.note`); for decimal data with unit coefficients on the continuous
variables — the makespan/start-time rows of TACCL models — the grid loses nothing.

With several workers CP-SAT runs them interleaved (``interleave_search``, batches of one task),
its reproducible mode. Its deterministic work limit is CP-SAT's deterministic time (``work``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ...errors import SynthError
from ..work import cpsat_work_used
from .backend import CPSAT_IMPORT_ERROR, STOPPED, Backend, Matrix, Outcome, Request, cp_model, pulp

MAX_GRID_DECIMALS = 6
"""Continuous variables on a grid no finer than 10^-6 (finer data is rounded, and noted)."""

MAX_ROW_DECIMALS = 9
"""A row (or the objective) is scaled by at most 10^9 to make its coefficients integers."""

CPSAT_CAP = 2**40
"""Grid units allowed to a variable the model leaves unbounded (CP-SAT needs finite domains)."""


class CpsatBackend(Backend):
    name = "cpsat"
    label = "CP-SAT"
    # CpSolverStatus names -> synth's (MODEL_INVALID is refused with CP-SAT's reason)
    STATUS_MAP: ClassVar[Mapping[str, str]] = {
        "OPTIMAL": "optimal",
        "FEASIBLE": STOPPED,
        "UNKNOWN": STOPPED,
        "INFEASIBLE": "infeasible",
    }

    def unavailable_reason(self) -> str | None:
        if cp_model is None:
            return ("OR-Tools could not load in this process (" + CPSAT_IMPORT_ERROR.split(":")[0]
                    + "); highspy's libhighs.so.1 was probably loaded first — import "
                    "synth.encodings.milp.solvers before pulp or highspy")
        return None

    def solve(self, problem: pulp.LpProblem, mat: Matrix, request: Request) -> Outcome:
        assert cp_model is not None
        grid = _grid_model(mat)
        if isinstance(grid, Outcome):
            return grid
        time_limit_s, work, progress = request.time_limit_s, request.work, request.progress
        solver = cp_model.CpSolver()
        params = solver.parameters
        params.num_workers = request.threads
        if request.threads > 1:
            # CP-SAT's reproducible way to run several workers. Batches of one task: on the test
            # models the default batch size was 20-60x slower than batches of one, which were
            # faster than a single worker and as fast as the non-reproducible parallel search.
            params.interleave_search = True
            params.interleave_batch_size = 1
        params.random_seed = 1
        params.relative_gap_limit = request.gap
        if time_limit_s is not None:
            params.max_time_in_seconds = float(time_limit_s)
        if work is not None:
            params.max_deterministic_time = float(work)
        callback: Any = None
        if progress is not None and grid.has_objective:
            to_original = grid.to_original

            class _Report(cp_model.CpSolverSolutionCallback):
                def on_solution_callback(self) -> None:
                    progress.update(incumbent=to_original(self.objective_value),
                                    bound=to_original(self.best_objective_bound))

            callback = _Report()
            solver.best_bound_callback = lambda b: progress.update(bound=to_original(b))
        code = solver.solve(grid.model, callback)
        if code == cp_model.MODEL_INVALID:
            raise SynthError(f"CP-SAT rejected the model: {grid.model.validate() or 'invalid'}")
        stopped = self.STATUS_MAP.get(solver.status_name(code)) == STOPPED
        if stopped and time_limit_s is None and work is None:
            # No limit, yet CP-SAT stopped short of a proof: that was Ctrl-C, which CP-SAT catches
            # itself (it stops the search gracefully); pass it on as the other backends do. With
            # a limit, an early stop is CP-SAT's own (e.g. its presolve gives up), reported as is.
            raise KeyboardInterrupt
        note = "; ".join(grid.notes)
        stopped_by = ""
        if stopped:
            used = cpsat_work_used(solver)
            stopped_by = "work" if work is not None and used >= 0.99 * work else "wall"
        status = self.status(solver.status_name(code), code == cp_model.FEASIBLE)
        if status not in ("optimal", "feasible"):
            return Outcome(status, note=note, stopped_by=stopped_by)
        units = np.array([solver.value(x) for x in grid.xs], dtype=float)
        at_cap = grid.capped & ((units <= -grid.cap) | (units >= grid.cap))
        if at_cap.any():
            name = mat.columns[int(np.flatnonzero(at_cap)[0])].name
            return Outcome("unbounded", None, None,
                           f"variable {name} ran to CP-SAT's artificial bound; the model is "
                           "unbounded or needs explicit bounds")
        bound = grid.to_original(solver.best_objective_bound if grid.has_objective else 0)
        return Outcome(status, units * grid.step, bound, note, stopped_by=stopped_by)


@dataclass
class _GridModel:
    """The CP-SAT model of a :class:`Matrix`: integer variables in grid units, integer rows."""

    model: Any
    xs: list[Any]
    step: np.ndarray
    """Grid step per column (1 for integer columns)."""
    cap: np.ndarray
    """The artificial bound, in grid units, of each column."""
    capped: np.ndarray
    """Columns the model leaves unbounded on a side (the cap stands in for it)."""
    has_objective: bool
    objective_scale: int
    offset: float
    notes: list[str]

    def to_original(self, value: float) -> float:
        """An objective value of the integer model in the PuLP model's units."""
        return value / self.objective_scale + self.offset


def _decimals(values: np.ndarray, limit: int) -> int | None:
    """The fewest decimals ``k <= limit`` with every value a multiple of 10^-k; None if more needed."""
    vals = values[np.isfinite(values)]
    if vals.size == 0:
        return 0
    for k in range(limit + 1):
        scaled = vals * 10.0**k
        tol = np.minimum(1e-9 * np.maximum(1.0, np.abs(scaled)), 1e-4)
        if np.all(np.abs(scaled - np.round(scaled)) <= tol):
            return k
    return None


def _grid_decimals(mat: Matrix) -> tuple[int, bool]:
    """Decimals of the grid for continuous variables, and whether it represents the data exactly.

    The grid must hold the continuous variables' bounds, and in every row that has a continuous
    variable, that row's other coefficients, its bounds and its continuous coefficients: then
    difference rows such as ``start_j >= start_i + duration * x`` have their solutions on it.
    """
    cont = ~mat.integer
    if not cont.any():
        return 0, True
    pieces = [mat.lb[cont], mat.ub[cont]]
    csr = mat.a
    rows_with_cont = np.unique(csr.tocsc()[:, np.flatnonzero(cont)].nonzero()[0])
    if rows_with_cont.size:
        sub = csr[rows_with_cont]
        pieces += [sub.data, mat.row_lo[rows_with_cont], mat.row_hi[rows_with_cont]]
    k = _decimals(np.concatenate(pieces), MAX_GRID_DECIMALS)
    return (MAX_GRID_DECIMALS, False) if k is None else (k, True)


def _int_scale(coefs: np.ndarray) -> tuple[int, float]:
    """The power of ten (at most 10^MAX_ROW_DECIMALS) that makes ``coefs`` integers, and the
    largest relative rounding error left (0.0 when exact)."""
    k = _decimals(coefs, MAX_ROW_DECIMALS)
    exact = k is not None
    k = MAX_ROW_DECIMALS if k is None else k
    scaled = coefs * 10.0**k
    if exact or scaled.size == 0:
        return 10**k, 0.0
    err = np.abs(scaled - np.round(scaled)) / np.maximum(np.abs(scaled), 1e-300)
    return 10**k, float(err.max())


def _grid_model(mat: Matrix) -> _GridModel | Outcome:
    """Build the integer model (an ``infeasible`` outcome when the grid leaves a domain empty)."""
    assert cp_model is not None
    k_grid, grid_exact = _grid_decimals(mat)
    step = np.where(mat.integer, 1.0, 10.0**-k_grid)
    notes = []
    if (~mat.integer).any():
        notes.append(f"continuous variables on a grid of {10.0**-k_grid:g}"
                     + ("" if grid_exact else " (rounds some of the model's data)"))
    a = mat.a.tocsr()
    a_grid = sp.csr_matrix(a @ sp.diags(step))  # coefficients per grid unit
    # domains in grid units; unbounded sides get a finite cap CP-SAT can add up without overflow
    row_len = np.maximum(np.diff(a_grid.indptr), 1)
    cap = np.full(mat.num_cols, float(CPSAT_CAP))
    row_scales: list[int] = []
    max_err = 0.0
    for r in range(mat.num_rows):
        lo, hi = a_grid.indptr[r], a_grid.indptr[r + 1]
        scale, err = _int_scale(a_grid.data[lo:hi])
        row_scales.append(scale)
        max_err = max(max_err, err)
        if hi > lo:
            big = np.abs(a_grid.data[lo:hi]) * scale * row_len[r]
            cap[a_grid.indices[lo:hi]] = np.minimum(cap[a_grid.indices[lo:hi]],
                                                    np.floor(2.0**61 / np.maximum(big, 1.0)))
    with np.errstate(invalid="ignore"):
        lb_units = np.where(np.isfinite(mat.lb), np.ceil(mat.lb / step - 1e-9), -cap)
        ub_units = np.where(np.isfinite(mat.ub), np.floor(mat.ub / step + 1e-9), cap)
    capped = (~np.isfinite(mat.lb)) | (~np.isfinite(mat.ub))
    if np.any(lb_units > ub_units):
        return Outcome("infeasible", note="; ".join(notes))
    model = cp_model.CpModel()
    xs = [model.new_int_var(int(lo_), int(hi_), f"x{j}")
          for j, (lo_, hi_) in enumerate(zip(lb_units.tolist(), ub_units.tolist(), strict=True))]
    for r in range(mat.num_rows):
        lo, hi = a_grid.indptr[r], a_grid.indptr[r + 1]
        scale = row_scales[r]
        coefs = np.round(a_grid.data[lo:hi] * scale).astype(np.int64).tolist()
        idx = a_grid.indices[lo:hi].tolist()
        rlo = mat.row_lo[r] * scale
        rhi = mat.row_hi[r] * scale
        lo_i = math.ceil(rlo - 1e-6) if math.isfinite(rlo) else cp_model.INT_MIN
        hi_i = math.floor(rhi + 1e-6) if math.isfinite(rhi) else cp_model.INT_MAX
        terms = [(c, i) for c, i in zip(coefs, idx, strict=True) if c != 0]
        if not terms:
            if not lo_i <= 0 <= hi_i:
                model.add_bool_or([])  # a false constant row
            continue
        model.add_linear_constraint(sum(c * xs[i] for c, i in terms), lo_i, hi_i)
    if max_err > 0:
        notes.append(f"row coefficients rounded (relative error up to {max_err:.1e})")
    obj_grid = mat.cost * step
    obj_scale, obj_err = _int_scale(obj_grid[obj_grid != 0])
    if obj_err > 0:
        notes.append(f"objective rounded (relative error up to {obj_err:.1e})")
    obj_int = np.round(obj_grid * obj_scale).astype(np.int64)
    expr = sum(int(c) * xs[j] for j, c in enumerate(obj_int.tolist()) if c)
    if any(obj_int):
        if mat.maximize:
            model.maximize(expr)
        else:
            model.minimize(expr)
    problem_text = model.validate()
    if problem_text:
        raise SynthError(f"CP-SAT cannot take this model ({problem_text}); give its variables "
                         "finite bounds or use --solver highs")
    return _GridModel(model, xs, step, cap, capped, bool(any(obj_int)), obj_scale, mat.offset,
                      notes)
