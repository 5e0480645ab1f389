"""Solver backends for the MILP encoding: one PuLP model, four open or optional solvers.

The MILP encoding (:mod:`synth.encodings.milp.encoding`, TACCL-style) builds its models with PuLP and hands
them to :func:`solve_milp`, which runs the solver the user named and returns a :class:`MilpResult`
with the incumbent, the proven bound and the relative gap — the same fields for every backend — and
leaves the incumbent in every PuLP variable's ``varValue``. How each backend gets there:

* ``highs`` (default) — HiGHS through the copy of highspy's ``_core`` bindings that SciPy ships
  (``scipy.optimize._highspy._core``, HiGHS 1.12, statically linked). The PuLP model is copied
  column-wise into a ``HighsLp`` in one call (PuLP's own ``HiGHS`` wrapper adds rows one Python
  call at a time, drops the objective constant and reports time-limit stops as "optimal"). Bound
  and gap come from ``getInfo()`` (``mip_dual_bound``); live incumbents and bounds from HiGHS's MIP
  callbacks, which also make Ctrl-C stop the search promptly.

  Why not the ``highspy`` wheel itself: highspy and OR-Tools each ship a *different* HiGHS build
  under the same soname ``libhighs.so.1``. Whichever is loaded first wins, and the other then fails
  to import (undefined symbols) — so loading highspy would break CP-SAT (here and in the SMT
  engine) for the rest of the process. ``import pulp`` itself tries ``import highspy``; this module
  therefore loads OR-Tools *before* PuLP, which makes that attempt fail harmlessly. Code that
  imports PuLP or highspy before this module loses CP-SAT; :func:`available_solvers` then says so.
  The ``highspy`` wheel is used only when SciPy lacks the bundled bindings (SciPy < 1.15).

* ``cbc`` — the CBC binary bundled with PuLP (``COIN_CMD`` on that path, which is what the
  deprecated ``PULP_CBC_CMD`` does, without its warning). Bound and gap are parsed from CBC's
  closing report (``Lower bound:`` / ``Upper bound:``), which CBC prints when it stops short of
  proving optimality; a proven optimum has bound = objective. No live incumbent (CBC runs as a
  subprocess and writes its log buffered).

* ``cpsat`` — OR-Tools CP-SAT on a model built here with integer coefficients. OR-Tools' own MIP
  import (``model_builder`` with solver ``"sat"``, or ``pywraplp`` "SAT") was tested and is *not*
  used: on a 6-job scheduling model with continuous start times it returned "OPTIMAL" 10.543
  where the true optimum (HiGHS, CBC, SCIP agree) is 8.234. Here continuous variables live on an
  explicit decimal grid ``x = step · X`` (the coarsest power of ten that represents the model's
  decimal data exactly, at most 10^-6), every row is scaled by a power of ten to integers, and the
  objective likewise; the solution is mapped back and the objective recomputed on the original
  PuLP model. With continuous variables the answer is that of the grid model (noted in
  :attr:`MilpResult.note`); for decimal data with unit coefficients on the continuous variables —
  the makespan/start-time rows of TACCL models — the grid loses nothing.

* ``gurobi`` — optional, through ``pulp.GUROBI`` when gurobipy imports and a license works.

Determinism (same model, same answer) matters more than speed here. HiGHS's MIP search is
deterministic and independent of its thread count (measured: identical node and simplex iteration
counts with 1, 2 and 4 threads; more threads were only slower). CBC's parallel mode is not
repeatable, so ``threads > 1`` is passed as CBC's deterministic parallel mode (``100 + n``).
CP-SAT with several workers runs them interleaved (``interleave_search``, batches of one task),
its reproducible mode.
Gurobi is deterministic by default. A wall-clock time limit that stops a search would be the one
source of run-to-run variation left (where it stops depends on the machine's speed), so callers
bound the work deterministically — ``work`` (:mod:`synth.encodings.work`: a node limit for HiGHS,
CBC and Gurobi, CP-SAT's deterministic time) or ``node_limit`` — and keep ``time_limit_s`` only as
a safety net; :attr:`MilpResult.stopped_by` says which limit stopped a search.

``optimal`` means proven within ``mip_gap`` (default :data:`DEFAULT_MIP_GAP`, the HiGHS/Gurobi
default, set on every backend so the word means the same everywhere); the reported ``gap`` is the
measured one (``|objective - bound| / max(|objective|, 1e-9)``), 0.0 when the bound meets the
incumbent.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# OR-Tools first, then PuLP: see the module docstring (libhighs.so.1 clash with highspy).
try:
    import ortools.sat.python.cp_model as cp_model

    _CPSAT_IMPORT_ERROR = ""
except ImportError as exc:  # pragma: no cover - depends on what the process imported first
    cp_model = None  # type: ignore[assignment]
    _CPSAT_IMPORT_ERROR = str(exc)

import numpy as np
import pulp
import scipy.sparse as sp
from rich.console import Console
from rich.errors import LiveError
from rich.markup import escape
from rich.progress import Progress as RichProgress
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from ...errors import SynthError, unknown_name
from ..work import cpsat_work_used, nodes_for, root_work, units_for_nodes

SOLVERS = ("highs", "cbc", "cpsat", "gurobi")
"""Backend names, in the order they are offered."""

STATUSES = ("optimal", "feasible", "infeasible", "no_solution", "unbounded")

DEFAULT_MIP_GAP = 1e-4
"""Relative gap at which every backend may call an incumbent optimal (HiGHS's and Gurobi's default)."""

MAX_GRID_DECIMALS = 6
"""CP-SAT: continuous variables on a grid no finer than 10^-6 (finer data is rounded, and noted)."""

MAX_ROW_DECIMALS = 9
"""CP-SAT: a row (or the objective) is scaled by at most 10^9 to make its coefficients integers."""

_CPSAT_CAP = 2**40
"""CP-SAT: grid units allowed to a variable the model leaves unbounded (CP-SAT needs finite domains)."""

_INT_TOL = 1e-6
"""Integer variables within this of an integer are reported as that integer."""


# ============================================================================================ result
@dataclass
class MilpResult:
    """What one solve proved and found; the incumbent itself is in the PuLP variables."""

    solver: str
    status: str
    """``optimal`` | ``feasible`` (limit hit, incumbent found) | ``infeasible`` | ``no_solution``
    (limit hit before any incumbent) | ``unbounded``."""
    objective: float | None
    """The incumbent's objective, evaluated on the PuLP model (constant included)."""
    best_bound: float | None
    """The best proven bound on the optimum (lower when minimising), None when the solver has none."""
    gap: float | None
    """``|objective - best_bound| / max(|objective|, 1e-9)``; 0.0 when the bound meets the incumbent."""
    seconds: float
    variables: int
    integer_variables: int
    constraints: int
    stage: str = ""
    note: str = ""
    """Anything the numbers alone do not say (CP-SAT's grid, a CBC bound not reported, ...)."""
    stopped_by: str = ""
    """What stopped a search short of its proof: ``work`` (the deterministic limit: reproducible),
    ``wall`` (the wall-clock limit: the answer may differ run to run), ``""`` (nothing did)."""
    nodes: int | None = None
    """Branch-and-bound nodes explored (HiGHS), None when the backend does not say."""
    nonzeros: int = 0
    """Constraint-matrix entries: what a node's work grows with (:func:`..work.node_weight`)."""

    @property
    def work_used(self) -> float | None:
        """The deterministic work units the nodes explored stand for (None: the backend did not say)."""
        return None if self.nodes is None else units_for_nodes(self.nodes, self.nonzeros)

    @property
    def has_solution(self) -> bool:
        """True when the PuLP variables hold an incumbent (``optimal`` or ``feasible``)."""
        return self.status in ("optimal", "feasible")

    def summary(self) -> str:
        """One line for notes and the CLI, e.g. ``highs: optimal, objective 8.234, gap 0.00% ...``."""
        head = f"{self.stage} ({self.solver})" if self.stage else self.solver
        parts = [self.status]
        if self.objective is not None:
            parts.append(f"objective {_num(self.objective)}")
        if self.best_bound is not None:
            parts.append(f"bound {_num(self.best_bound)}")
        if self.gap is not None:
            parts.append(f"gap {100 * self.gap:.2f}%")
        if self.stopped_by:
            parts.append("stopped by the " + ("wall-clock limit" if self.stopped_by == "wall"
                                               else "work limit"))
        parts.append(f"{self.seconds:.2f} s")
        parts.append(f"{self.variables} vars ({self.integer_variables} integer), "
                     f"{self.constraints} constraints")
        line = f"{head}: " + ", ".join(parts)
        return f"{line}; {self.note}" if self.note else line


def _num(x: float) -> str:
    return f"{x:.6g}"


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """``|objective - bound| / max(|objective|, 1e-9)``, 0.0 within rounding, None if either is missing."""
    if objective is None or bound is None or not math.isfinite(objective) or not math.isfinite(bound):
        return None
    diff = abs(objective - bound)
    if diff <= 1e-9 * max(1.0, abs(objective)):
        return 0.0
    return diff / max(abs(objective), 1e-9)


def model_size(problem: pulp.LpProblem) -> tuple[int, int, int]:
    """``(variables, integer_variables, constraints)`` of a PuLP model (binaries count as integer)."""
    variables = problem.variables()
    return (len(variables), sum(1 for v in variables if v.cat == pulp.LpInteger),
            len(_constraints(problem)))


def _constraints(problem: pulp.LpProblem) -> list[pulp.LpConstraint]:
    """The constraints in insertion order (PuLP 3 deprecates the dict view that PuLP 2 has)."""
    cons = problem.constraints
    return list(cons()) if callable(cons) else list(cons.values())


# ========================================================================================= progress
class Progress:
    """Live solver status on stderr — stage, elapsed time, incumbent, bound, gap — for many stages.

    The caller makes one and passes it to every :func:`solve_milp` of a run; a running stage has a
    live row (spinner, stage and solver, elapsed, incumbent/bound/gap where the backend reports
    them: HiGHS and CP-SAT), and a finished one becomes a permanent line with its
    :meth:`MilpResult.summary`. Use it as a context manager (``with Progress() as p:``) so the
    display closes; used without one, each stage opens and closes it. It nests under a caller's
    ``console.status`` (rich >= 14; older rich refuses a second live display, and then only the
    final lines are printed). When stderr is not a terminal (tests, pipes, CI) it is silent.

    A subclass may override :meth:`begin`, :meth:`update` and :meth:`end` to observe solves
    (they are the whole interface :func:`solve_milp` uses). :meth:`update` may be called from a
    solver's threads.
    """

    def __init__(self, console: Console | None = None, *, enabled: bool | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self._live: RichProgress | None = None
        self._lines_only = False
        self._auto = False
        self._task: Any = None
        self._desc = ""
        self._lock = threading.Lock()
        self._last_update = 0.0
        self._incumbent: float | None = None
        self._bound: float | None = None

    def __enter__(self) -> Progress:
        self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        if not self.enabled or self._live is not None or self._lines_only:
            return
        live = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                            TextColumn("{task.fields[info]}"), console=self.console,
                            redirect_stdout=False, redirect_stderr=False, refresh_per_second=4)
        try:
            live.start()
        except LiveError:
            self._lines_only = True
            return
        self._live = live

    def close(self) -> None:
        """Stop the live display (rows already printed stay on screen)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def begin(self, stage: str, solver: str) -> None:
        """A solve starts."""
        self._incumbent = self._bound = None
        self._last_update = 0.0
        if not self.enabled:  # plain progress (CI, logs): the stage shows in the heartbeat
            from ... import progress

            progress.detail(f"milp {stage or 'solve'} ({solver})")
            return
        if self._live is None and not self._lines_only:
            self._open()
            self._auto = self._live is not None
        if self._live is not None:
            self._desc = f"{stage or 'solve'} ({solver})"
            self._task = self._live.add_task(self._desc, total=1, info="")

    def update(self, *, incumbent: float | None = None, bound: float | None = None) -> None:
        """A solver reported a new incumbent and/or bound (redrawn a few times a second at most)."""
        if incumbent is not None:
            self._incumbent = incumbent
        if bound is not None:
            self._bound = bound
        if not self.enabled:
            from ... import progress

            info = _progress_info(self._incumbent, self._bound)
            if info:
                progress.detail(info)
            return
        if self._live is None or self._task is None:
            return
        now = time.perf_counter()
        with self._lock:
            if now - self._last_update < 0.2:
                return
            self._last_update = now
        self._live.update(self._task, info=_progress_info(self._incumbent, self._bound))

    def end(self, result: MilpResult) -> None:
        """The solve finished: its live row becomes a permanent line with the final result."""
        if not self.enabled:
            from ... import progress

            progress.note(result.summary())
            return
        mark = {"optimal": "[green]✓[/]", "feasible": "[yellow]~[/]"}.get(result.status, "[red]✗[/]")
        if self._live is not None and self._task is not None:
            self._live.remove_task(self._task)
            self._task = None
        # printed above any live display (ours or a caller's), so it stays when they close
        self.console.print(f"{mark} {escape(result.summary())}", highlight=False)
        if self._auto:
            self.close()
            self._auto = False


def _progress_info(incumbent: float | None, bound: float | None) -> str:
    parts = []
    if incumbent is not None and math.isfinite(incumbent):
        parts.append(f"incumbent {_num(incumbent)}")
    if bound is not None and math.isfinite(bound):
        parts.append(f"bound {_num(bound)}")
    gap = relative_gap(incumbent, bound)
    if gap is not None:
        parts.append(f"gap {100 * gap:.2f}%")
    return "  ".join(parts)


# ========================================================================================== matrix
@dataclass
class _Matrix:
    """A PuLP model as arrays: ``row_lo <= A x <= row_hi``, ``lb <= x <= ub``, min/max ``cost·x``."""

    columns: list[pulp.LpVariable]
    lb: np.ndarray
    ub: np.ndarray
    cost: np.ndarray
    integer: np.ndarray
    """Boolean mask of integer (and binary) columns."""
    row_lo: np.ndarray
    row_hi: np.ndarray
    a: sp.csr_matrix
    offset: float
    maximize: bool

    @property
    def num_cols(self) -> int:
        return len(self.columns)

    @property
    def num_rows(self) -> int:
        return len(self.row_lo)


def _matrix(problem: pulp.LpProblem) -> _Matrix:
    """Copy a PuLP model into arrays; columns in PuLP's (name-sorted) variable order."""
    problem.checkDuplicateVars()
    columns = list(problem.variables())
    index = {id(v): k for k, v in enumerate(columns)}
    n = len(columns)
    lb = np.array([-np.inf if v.lowBound is None else float(v.lowBound) for v in columns], dtype=float)
    ub = np.array([np.inf if v.upBound is None else float(v.upBound) for v in columns], dtype=float)
    integer = np.array([v.cat == pulp.LpInteger for v in columns], dtype=bool)
    cost = np.zeros(n)
    offset = 0.0
    if problem.objective is not None:
        for v, c in problem.objective.items():
            cost[index[id(v)]] += c
        offset = float(problem.objective.constant)
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    row_lo = []
    row_hi = []
    for con in _constraints(problem):
        for v, c in con.items():
            if c != 0:
                indices.append(index[id(v)])
                data.append(float(c))
        indptr.append(len(indices))
        lo, hi = con.getLb(), con.getUb()
        row_lo.append(-np.inf if lo is None else float(lo))
        row_hi.append(np.inf if hi is None else float(hi))
    a = sp.csr_matrix((np.array(data, dtype=float), np.array(indices, dtype=np.int64),
                       np.array(indptr, dtype=np.int64)), shape=(len(row_lo), n))
    a.sum_duplicates()
    return _Matrix(columns, lb, ub, cost, integer, np.array(row_lo, dtype=float),
                   np.array(row_hi, dtype=float), a, offset, problem.sense == pulp.LpMaximize)


@dataclass
class _Outcome:
    """A backend's raw answer, before the common post-processing."""

    status: str
    values: np.ndarray | None = None
    """Column values of the incumbent, in :class:`_Matrix` column order (None: PuLP already set them)."""
    bound: float | None = None
    note: str = ""
    bound_missing: bool = False
    """The solver stopped at its gap tolerance without saying its bound (so it is not the objective)."""
    stopped_by: str = ""
    nodes: int | None = None


# ======================================================================================= the front
def available_solvers() -> dict[str, bool]:
    """Which backends work in this process: ``{name: usable}`` in :data:`SOLVERS` order."""
    return {name: _unavailable_reason(name) is None for name in SOLVERS}


def _unavailable_reason(name: str) -> str | None:
    if name == "highs":
        return None if _highs_core() is not None else "HiGHS bindings not found (scipy>=1.15 or highspy)"
    if name == "cbc":
        return None if _cbc_path() is not None else "PuLP's bundled CBC binary does not run here"
    if name == "cpsat":
        if cp_model is None:
            return ("OR-Tools could not load in this process (" + _CPSAT_IMPORT_ERROR.split(":")[0]
                    + "); highspy's libhighs.so.1 was probably loaded first — import "
                    "synth.encodings.milp.solvers before pulp or highspy")
        return None
    if name == "gurobi":
        return _gurobi_problem()
    raise AssertionError(name)


def solve_milp(problem: pulp.LpProblem, solver: str = "highs", *, time_limit_s: float | None = None,
               threads: int = 2, mip_gap: float | None = None, stage: str = "",
               progress: Progress | None = None, warm_start: bool = False,
               node_limit: int | None = None, work: float | None = None,
               max_root_work: float | None = None) -> MilpResult:
    """Solve a PuLP model with the named backend; the incumbent is left in every ``var.varValue``.

    ``time_limit_s`` is wall-clock; when it stops the search the result is ``feasible`` (with the
    bound and gap) or ``no_solution``, with ``stopped_by == "wall"``: keep it a safety net and
    bound the work with ``work`` or ``node_limit``. ``mip_gap`` is the relative gap at which the
    search may stop and call the incumbent optimal (default :data:`DEFAULT_MIP_GAP`). ``threads``
    is the solver's thread budget; every backend is run in a reproducible mode (see the module docstring).
    ``stage`` names the solve in the progress display and in :meth:`MilpResult.summary`.

    ``node_limit``: a deterministic work limit (branch-and-bound nodes: HiGHS, CBC, Gurobi;
    CP-SAT ignores it): unlike a wall-clock limit it stops at the same incumbent on every machine,
    so a schedule built from a stopped search is still byte-identical run to run. ``work``: a
    deterministic budget in work units (:mod:`synth.encodings.work`): CP-SAT's deterministic
    seconds, ``nodes_for(work, nonzeros)`` nodes for the others (the smaller of it and ``node_limit``).

    ``warm_start``: the variables' initial values (``var.setInitialValue``) are a feasible
    point; HiGHS starts from it as its first incumbent (other backends ignore it), so a time limit
    can never return worse than the caller's heuristic.

    ``max_root_work``: a model whose root alone may cost more work units than this
    (:func:`synth.encodings.work.root_work` of its nonzeros; no node limit stops a root) is not
    solved: the result is ``no_solution`` with ``stopped_by == "work"`` and a note saying why.

    Unknown or unavailable solvers and bad limits raise :class:`SynthError` (exit code 2).
    """
    if work is not None and not (work > 0 and math.isfinite(work)):
        raise SynthError(f"work budget must be positive, got {work}")
    return _solve(problem, solver, time_limit_s=time_limit_s, threads=threads, mip_gap=mip_gap,
                  stage=stage, progress=progress, warm_start=warm_start, node_limit=node_limit,
                  work=work, max_root_work=max_root_work)


def _check_args(solver: str, time_limit_s: float | None, threads: int, mip_gap: float | None) -> None:
    if solver not in SOLVERS:
        raise unknown_name("MILP solver", solver, SOLVERS)
    reason = _unavailable_reason(solver)
    if reason is not None:
        usable = [s for s, ok in available_solvers().items() if ok]
        raise SynthError(f"MILP solver '{solver}' is not installed or cannot run here: {reason}; "
                         f"available: {', '.join(usable) or 'none'}")
    if time_limit_s is not None and not (time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise SynthError(f"time limit must be a positive number of seconds, got {time_limit_s}")
    if threads < 1:
        raise SynthError(f"threads must be at least 1, got {threads}")
    if mip_gap is not None and not (mip_gap >= 0 and math.isfinite(mip_gap)):
        raise SynthError(f"mip gap must be a non-negative fraction, got {mip_gap}")


def _solve(problem: pulp.LpProblem, solver: str, *, time_limit_s: float | None, threads: int,
           mip_gap: float | None, stage: str, progress: Progress | None, relax: bool = False,
           feasibility: bool = False, warm_start: bool = False,
           node_limit: int | None = None, work: float | None = None,
           max_root_work: float | None = None) -> MilpResult:
    """:func:`solve_milp` plus two modes for :func:`diagnose_infeasible`: ``relax`` drops
    integrality (LP relaxation), ``feasibility`` drops the objective (any feasible point will do;
    CBC keeps it, see :func:`_solve_cbc`)."""
    _check_args(solver, time_limit_s, threads, mip_gap)
    gap = DEFAULT_MIP_GAP if mip_gap is None else mip_gap
    mat = _matrix(problem)
    if feasibility:
        mat.cost = np.zeros(mat.num_cols)
        mat.offset = 0.0
    if relax:
        mat.integer = np.zeros(mat.num_cols, dtype=bool)
    nint = int(mat.integer.sum())
    if progress is not None:
        progress.begin(stage, solver)
    if work is not None:
        node_limit = min(nodes_for(work, mat.a.nnz), node_limit or nodes_for(work, mat.a.nnz))
    start = time.perf_counter()
    if max_root_work is not None and solver != "cpsat" and root_work(mat.a.nnz) > max_root_work:
        out = _Outcome("no_solution", stopped_by="work", nodes=0,
                       note=f"not started: {mat.a.nnz:,} nonzeros, whose root alone may take about "
                            f"{root_work(mat.a.nnz):.0f} work units, over the {max_root_work:.0f} "
                            "allowed (raise --time-limit)")
    elif mat.num_cols == 0 or mat.num_rows == 0:
        out = _solve_box(mat)  # CBC cannot read a model without rows; nobody needs a solver here
    elif solver == "highs":
        start_point = None
        if warm_start and all(v.varValue is not None for v in mat.columns):
            start_point = np.array([float(v.varValue) for v in mat.columns])
        out = _solve_highs(mat, time_limit_s, threads, gap, progress, start_point, node_limit)
    elif solver == "cbc":
        out = _solve_cbc(problem, mat, time_limit_s, threads, gap, relax, feasibility, node_limit)
    elif solver == "cpsat":
        out = _solve_cpsat(mat, time_limit_s, threads, gap, progress, work)
    else:
        out = _solve_gurobi(problem, mat, time_limit_s, threads, gap, relax, feasibility,
                            node_limit)
    seconds = time.perf_counter() - start
    result = _finish(problem, mat, solver, out, seconds, nint, stage, feasibility)
    if progress is not None:
        progress.end(result)
    return result


def _finish(problem: pulp.LpProblem, mat: _Matrix, solver: str, out: _Outcome, seconds: float,
            nint: int, stage: str, feasibility: bool) -> MilpResult:
    """Common post-processing: values into PuLP, objective recomputed, gap measured, status set."""
    objective: float | None = None
    bound = out.bound
    if out.status in ("optimal", "feasible"):
        if out.values is not None:
            values = np.asarray(out.values, dtype=float).copy()
            ints = mat.integer & (np.abs(values - np.round(values)) <= _INT_TOL)
            values[ints] = np.round(values[ints])
            values[values == 0] = 0.0  # no "-0.0"
            for v, x in zip(mat.columns, values.tolist(), strict=True):
                v.varValue = x
        objective = 0.0 if feasibility else float(
            mat.offset + sum(c * v.varValue for c, v in zip(mat.cost, mat.columns, strict=True)
                             if c))
        if out.status == "optimal" and (nint == 0 or (bound is None and not out.bound_missing)):
            bound = objective  # an LP optimum, or a MIP proven optimal outright
    if bound is not None and not math.isfinite(bound):
        bound = None
    pulp_status = {"optimal": (pulp.LpStatusOptimal, pulp.LpSolutionOptimal),
                   "feasible": (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible),
                   "infeasible": (pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible),
                   "unbounded": (pulp.LpStatusUnbounded, pulp.LpSolutionUnbounded),
                   "no_solution": (pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)}
    problem.assignStatus(*pulp_status[out.status])
    return MilpResult(solver=solver, status=out.status, objective=objective, best_bound=bound,
                      gap=relative_gap(objective, bound), seconds=seconds,
                      variables=mat.num_cols, integer_variables=nint, constraints=mat.num_rows,
                      stage=stage, note=out.note,
                      stopped_by=out.stopped_by if out.status not in ("optimal", "infeasible",
                                                                      "unbounded") else "",
                      nodes=out.nodes, nonzeros=int(mat.a.nnz))


def _solve_box(mat: _Matrix) -> _Outcome:
    """A model without variables or without constraints: each variable on its own in its bounds."""
    if np.any((mat.row_lo > 1e-9) | (mat.row_hi < -1e-9)):  # rows without terms are constants
        return _Outcome("infeasible")
    lo = np.where(mat.integer, np.ceil(mat.lb - 1e-9), mat.lb)
    hi = np.where(mat.integer, np.floor(mat.ub + 1e-9), mat.ub)
    if np.any(lo > hi):
        return _Outcome("infeasible")
    cost = -mat.cost if mat.maximize else mat.cost
    values = np.clip(np.zeros(mat.num_cols), lo, hi)
    values = np.where(cost > 0, lo, np.where(cost < 0, hi, values))
    if not np.all(np.isfinite(values)):
        return _Outcome("unbounded")
    return _Outcome("optimal", values)


# ============================================================================================ HiGHS
@functools.cache
def _highs_core() -> ModuleType | None:
    """SciPy's statically linked copy of highspy's ``_core`` (no soname clash), else highspy's."""
    try:
        import scipy.optimize._highspy._core as core

        return core
    except ImportError:  # pragma: no cover - SciPy < 1.15
        pass
    try:  # pragma: no cover
        import highspy._core as core

        return core
    except ImportError:  # pragma: no cover
        return None


@contextlib.contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null while native code runs.

    HiGHS 1.12 (the copy in SciPy and OR-Tools) prints a stray debug line
    (``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``) with printf
    even with output off; it would corrupt ``synth ... --json`` on stdout.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no usable fd 1
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _solve_highs(mat: _Matrix, time_limit_s: float | None, threads: int, gap: float,
                 progress: Progress | None, start_point: np.ndarray | None = None,
                 node_limit: int | None = None) -> _Outcome:
    core = _highs_core()
    assert core is not None
    h = _highs_model(core, mat)
    if start_point is not None:
        solution = core.HighsSolution()
        solution.col_value = start_point.tolist()
        solution.value_valid = True
        h.setSolution(solution)
    h.setOptionValue("threads", threads)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", gap)
    if node_limit is not None:
        h.setOptionValue("mip_max_nodes", int(node_limit))
    if time_limit_s is not None:
        h.setOptionValue("time_limit", float(time_limit_s))
    interrupted: list[BaseException] = []
    cbt = core.cb.HighsCallbackType

    def callback(kind: Any, _message: str, out: Any, data_in: Any, _user: Any) -> None:
        # Runs on the solver's thread with the GIL; a KeyboardInterrupt raised here would unwind
        # through C++, so it is recorded, the search told to stop, and re-raised after run().
        try:
            if progress is not None:
                if int(kind) == int(cbt.kCallbackMipImprovingSolution):
                    progress.update(incumbent=out.objective_function_value, bound=out.mip_dual_bound)
                else:
                    progress.update(incumbent=out.mip_primal_bound, bound=out.mip_dual_bound)
        except BaseException as exc:
            interrupted.append(exc)
        if interrupted and data_in is not None:
            data_in.user_interrupt = True

    h.setCallback(callback, None)
    h.startCallback(cbt.kCallbackMipInterrupt)
    if progress is not None:
        h.startCallback(cbt.kCallbackMipImprovingSolution)
    with _c_stdout_silenced():
        status = h.run()
        if status == core.HighsStatus.kError and h.getModelStatus() == core.HighsModelStatus.kNotset:
            # HiGHS keeps one global thread pool; a solve asking for another size is refused
            # until the pool is rebuilt (our solves are sequential, so this is safe).
            core._Highs.resetGlobalScheduler(True)
            status = h.run()
    if interrupted:
        raise interrupted[0]
    ms = core.HighsModelStatus
    model_status = h.getModelStatus()
    info = h.getInfo()
    mip = bool(mat.integer.any())
    has_point = info.primal_solution_status == 2  # kSolutionStatusFeasible
    bound = float(info.mip_dual_bound) if mip else None
    if model_status == ms.kOptimal:
        status_name = "optimal"
    elif model_status == ms.kInfeasible:
        status_name = "infeasible"
    elif model_status == ms.kUnbounded:
        status_name = "unbounded"
    elif model_status == ms.kUnboundedOrInfeasible:
        status_name = _unbounded_or_infeasible(mat)
    elif model_status in (ms.kTimeLimit, ms.kIterationLimit, ms.kSolutionLimit, ms.kInterrupt,
                          getattr(ms, "kHighsInterrupt", ms.kInterrupt), ms.kObjectiveBound,
                          ms.kObjectiveTarget, ms.kUnknown):
        status_name = "feasible" if has_point else "no_solution"
    else:
        raise SynthError(f"HiGHS failed on this model: {h.modelStatusToString(model_status)}")
    stopped_by = ("wall" if model_status == ms.kTimeLimit
                  else "work" if model_status in (ms.kIterationLimit, ms.kSolutionLimit) else "")
    values = None
    if status_name in ("optimal", "feasible"):
        values = np.array(h.getSolution().col_value, dtype=float)
    nodes = int(info.mip_node_count) if mip else None
    return _Outcome(status_name, values, bound, stopped_by=stopped_by, nodes=nodes)


def _highs_model(core: ModuleType, mat: _Matrix) -> Any:
    """A HiGHS instance holding ``mat`` (one ``passModel`` call, column-wise)."""
    csc = mat.a.tocsc()
    lp = core.HighsLp()
    lp.num_col_ = mat.num_cols
    lp.num_row_ = mat.num_rows
    lp.col_cost_ = mat.cost
    lp.col_lower_ = mat.lb
    lp.col_upper_ = mat.ub
    lp.row_lower_ = mat.row_lo
    lp.row_upper_ = mat.row_hi
    lp.offset_ = mat.offset
    lp.sense_ = core.ObjSense.kMaximize if mat.maximize else core.ObjSense.kMinimize
    lp.a_matrix_.format_ = core.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = mat.num_cols
    lp.a_matrix_.num_row_ = mat.num_rows
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data
    if mat.integer.any():
        lp.integrality_ = [core.HighsVarType.kInteger if i else core.HighsVarType.kContinuous
                           for i in mat.integer.tolist()]
    h = core._Highs()
    h.setOptionValue("output_flag", False)
    if h.passModel(lp) == core.HighsStatus.kError:
        raise SynthError("HiGHS rejected the model (inconsistent bounds or NaN coefficients?)")
    return h


def _unbounded_or_infeasible(mat: _Matrix) -> str:
    """Tell the two apart (HiGHS's presolve may not): is there any feasible point at all?"""
    core = _highs_core()
    assert core is not None
    probe = _Matrix(mat.columns, mat.lb, mat.ub, np.zeros(mat.num_cols), mat.integer, mat.row_lo,
                    mat.row_hi, mat.a, 0.0, False)
    h = _highs_model(core, probe)
    h.setOptionValue("presolve", "off")
    with _c_stdout_silenced():
        h.run()
    return "unbounded" if h.getModelStatus() == core.HighsModelStatus.kOptimal else "infeasible"


# ============================================================================================== CBC
@functools.cache
def _cbc_path() -> str | None:
    """PuLP's bundled CBC binary, if it runs here (checked once with a one-variable model)."""
    from pulp.apis import coin_api

    for path in (coin_api.pulp_cbc_path, "cbc"):
        solver = pulp.COIN_CMD(path=path, msg=False)
        if not solver.available():
            continue
        with warnings.catch_warnings():  # PuLP 3 deprecates building variables this way
            warnings.simplefilter("ignore", DeprecationWarning)
            probe = pulp.LpProblem("probe", pulp.LpMinimize)
            x = pulp.LpVariable("x", 0, 3, cat=pulp.LpInteger)
            probe += x
            probe += x >= 1, "c"
            try:
                probe.solve(solver)
            except pulp.PulpSolverError:
                continue
        if probe.status == pulp.LpStatusOptimal and x.varValue == 1:
            return str(path)
    return None


_CBC_BOUND = re.compile(r"^(?:Lower|Upper) bound:\s*(\S+)", re.MULTILINE)


def _solve_cbc(problem: pulp.LpProblem, mat: _Matrix, time_limit_s: float | None, threads: int,
               gap: float, relax: bool, feasibility: bool,
               node_limit: int | None = None) -> _Outcome:
    path = _cbc_path()
    assert path is not None
    with tempfile.TemporaryDirectory(prefix="synth-cbc-") as tmp:
        log = Path(tmp) / "cbc.log"
        # threads > 1: CBC's "100 + n" mode, its deterministic (repeatable) parallel search
        solver = pulp.COIN_CMD(path=path, mip=not relax, msg=False, timeLimit=time_limit_s,
                               gapRel=gap, threads=100 + threads if threads > 1 else None,
                               logPath=str(log), options=["randomSeed 1", "randomCbcSeed 1"]
                               + ([f"maxNodes {int(node_limit)}"] if node_limit else []))
        solver.tmpDir = tmp
        # ``feasibility`` keeps the objective: without one, PuLP's MPS file omits the columns of
        # variables that appear in no constraint yet still bounds them, which CBC rejects
        failed: pulp.PulpSolverError | None = None
        try:
            problem.solve(solver)
        except pulp.PulpSolverError as exc:
            failed = exc
        text = log.read_text(errors="replace") if log.exists() else ""
    if failed is not None:
        # CBC's presolve can stop at "Problem is infeasible" without writing a solution file,
        # which PuLP reports as a failure to run.
        if re.search(r"^Problem is infeasible", text, re.MULTILINE):
            return _Outcome("infeasible")
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise SynthError(f"CBC failed on this model: {failed} ({tail})") from failed
    status, sol_status = problem.status, problem.sol_status
    bound_match = _CBC_BOUND.search(text)
    bound = float(bound_match.group(1)) if bound_match else None
    note = ""
    missing = False
    if status == pulp.LpStatusOptimal and sol_status == pulp.LpSolutionOptimal:
        name = "optimal"
        missing = bound is None and "within gap tolerance" in text
    elif status == pulp.LpStatusOptimal and sol_status == pulp.LpSolutionIntegerFeasible:
        name = "feasible"
        missing = bound is None
    elif status == pulp.LpStatusInfeasible:
        name = "infeasible"
        if "infeasible or unbounded" in text:
            name = _unbounded_or_infeasible(mat) if _highs_core() is not None else name
    elif status == pulp.LpStatusUnbounded:
        name = "unbounded"
    elif status == pulp.LpStatusNotSolved:
        name = "no_solution"
    else:
        raise SynthError(f"CBC failed on this model (status {pulp.LpStatus.get(status, status)})")
    if missing:
        note = "CBC did not report its bound"
    if feasibility or relax:
        bound = None
    # CBC's closing line names what stopped it ("Exiting on maximum time/nodes")
    stopped_by = ("wall" if re.search(r"on maximum time", text)
                  else "work" if re.search(r"on maximum nodes", text) else "")
    return _Outcome(name, None, bound, note, bound_missing=missing, stopped_by=stopped_by)


# =========================================================================================== CP-SAT
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


def _grid_decimals(mat: _Matrix) -> tuple[int, bool]:
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


def _solve_cpsat(mat: _Matrix, time_limit_s: float | None, threads: int, gap: float,
                 progress: Progress | None, work: float | None = None) -> _Outcome:
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
    cap = np.full(mat.num_cols, float(_CPSAT_CAP))
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
        return _Outcome("infeasible", note="; ".join(notes))
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

    def to_original(v: float) -> float:
        return v / obj_scale + mat.offset

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = threads
    if threads > 1:
        # CP-SAT's reproducible way to run several workers. Batches of one task: on the test
        # models the default batch size was 20-60x slower than batches of one, which were faster
        # than a single worker and as fast as the non-reproducible parallel search.
        params.interleave_search = True
        params.interleave_batch_size = 1
    params.random_seed = 1
    params.relative_gap_limit = gap
    if time_limit_s is not None:
        params.max_time_in_seconds = float(time_limit_s)
    if work is not None:
        params.max_deterministic_time = float(work)
    callback: Any = None
    if progress is not None and any(obj_int):

        class _Report(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self) -> None:
                progress.update(incumbent=to_original(self.objective_value),
                                bound=to_original(self.best_objective_bound))

        callback = _Report()
        solver.best_bound_callback = lambda b: progress.update(bound=to_original(b))
    code = solver.solve(model, callback)
    if code in (cp_model.FEASIBLE, cp_model.UNKNOWN) and time_limit_s is None and work is None:
        # No limit, yet CP-SAT stopped short of a proof: that was Ctrl-C, which CP-SAT catches
        # itself (it stops the search gracefully); pass it on as the other backends do. With a
        # limit, an early stop is CP-SAT's own (e.g. its presolve gives up) and is reported as is.
        raise KeyboardInterrupt
    note = "; ".join(notes)
    stopped_by = ""
    if code in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        used = cpsat_work_used(solver)
        stopped_by = "work" if work is not None and used >= 0.99 * work else "wall"
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        units = np.array([solver.value(x) for x in xs], dtype=float)
        values = units * step
        at_cap = capped & ((units <= -cap) | (units >= cap))
        if at_cap.any():
            name = mat.columns[int(np.flatnonzero(at_cap)[0])].name
            return _Outcome("unbounded", None, None,
                            f"variable {name} ran to CP-SAT's artificial bound; the model is unbounded"
                            " or needs explicit bounds")
        bound = to_original(solver.best_objective_bound) if any(obj_int) else to_original(0)
        status = "optimal" if code == cp_model.OPTIMAL else "feasible"
        return _Outcome(status, values, bound, note, stopped_by=stopped_by)
    if code == cp_model.INFEASIBLE:
        return _Outcome("infeasible", note=note)
    if code == cp_model.MODEL_INVALID:
        raise SynthError(f"CP-SAT rejected the model: {model.validate() or 'invalid'}")
    return _Outcome("no_solution", note=note, stopped_by=stopped_by)


# =========================================================================================== Gurobi
@functools.cache
def _gurobi_problem() -> str | None:
    """None when gurobipy imports and a license lets it open an environment; else the reason."""
    try:
        import gurobipy
    except ImportError:
        return "gurobipy is not installed"
    try:
        with gurobipy.Env(params={"OutputFlag": 0}):
            pass
    except gurobipy.GurobiError as exc:
        return f"no usable Gurobi license ({exc})"
    return None


def _solve_gurobi(problem: pulp.LpProblem, mat: _Matrix, time_limit_s: float | None, threads: int,
                  gap: float, relax: bool, feasibility: bool,
                  node_limit: int | None = None) -> _Outcome:  # pragma: no cover
    import gurobipy

    grb = gurobipy.GRB
    saved_objective = problem.objective
    if feasibility:
        problem.objective = pulp.LpAffineExpression()
    limits = {"NodeLimit": float(node_limit)} if node_limit else {}
    solver = pulp.GUROBI(mip=not relax, msg=False, timeLimit=time_limit_s, gapRel=gap,
                         Threads=threads, Seed=0, **limits)
    try:
        problem.solve(solver)
        model = problem.solverModel
        code = model.Status
        has_point = model.SolCount >= 1
        bound = None
        if has_point:
            bound = float(model.ObjBound) if model.IsMIP else float(model.ObjVal)
        if code == grb.OPTIMAL:
            name = "optimal"
        elif code == grb.INFEASIBLE:
            name = "infeasible"
        elif code == grb.UNBOUNDED:
            name = "unbounded"
        elif code == grb.INF_OR_UNBD:
            name = _unbounded_or_infeasible(mat)
        elif code in (grb.TIME_LIMIT, grb.INTERRUPTED, grb.NODE_LIMIT, grb.SOLUTION_LIMIT,
                      grb.ITERATION_LIMIT, grb.SUBOPTIMAL):
            name = "feasible" if has_point else "no_solution"
        else:
            raise SynthError(f"Gurobi failed on this model (status {code})")
        stopped_by = ("wall" if code == grb.TIME_LIMIT
                      else "work" if code == grb.NODE_LIMIT else "")
    finally:
        problem.objective = saved_objective
        solver.close()
    return _Outcome(name, None, bound, stopped_by=stopped_by)


# ====================================================================================== diagnosis
def diagnose_infeasible(build: Callable[[frozenset[str]], pulp.LpProblem], groups: Sequence[str],
                        solver: str = "highs", *, time_limit_s: float | None = 30.0,
                        progress: Progress | None = None, work: float | None = None) -> list[str]:
    """The constraint groups that together make a model infeasible: a minimal such set.

    ``build(dropped)`` must return a fresh model without the constraints of the ``dropped`` groups
    (constraints in no group are always kept). Each test first solves the LP relaxation — an
    infeasible relaxation settles it at LP speed — and only otherwise the model itself with its
    objective dropped (any feasible point will do), each under ``time_limit_s`` (wall clock) and
    ``work`` (a deterministic budget, see :func:`solve_milp`: with it the answer is reproducible).

    1. Dropping one group at a time finds the groups in *every* conflict: when dropping ``g`` alone
       restores feasibility, no infeasible subset avoids ``g``.
    2. Deletion filtering over the other groups (in the order given) then removes every group
       whose constraints are not needed for the infeasibility; what remains is irreducible: drop
       any one of the returned groups and the model becomes feasible.

    Returns the groups in the order given. ``[]`` means the always-kept constraints conflict on
    their own (or the full model turned out feasible — the caller should have solved it first). A
    test that hits the time limit counts as feasible, which keeps the group: the answer may then
    be larger than minimal, but dropping all of it still restores feasibility. At most
    ``2·len(groups) + 1`` such tests are run, all with one thread (reproducible).
    """
    order = list(dict.fromkeys(groups))
    all_groups = frozenset(order)

    def infeasible(kept: frozenset[str], label: str) -> bool:
        dropped = all_groups - kept
        if solver != "cpsat":  # CP-SAT has no LP relaxation to ask
            relaxed = _solve(build(dropped), solver, time_limit_s=time_limit_s, threads=1,
                             mip_gap=None, stage=f"diagnose: {label} (LP)", progress=progress,
                             relax=True, feasibility=True, work=work)
            if relaxed.status == "infeasible":
                return True
            if relaxed.status == "no_solution":  # undecided within the limit: keep the group
                return False
            model = build(dropped)
            if not any(v.cat == pulp.LpInteger for v in model.variables()):
                return False
        else:
            model = build(dropped)
        full = _solve(model, solver, time_limit_s=time_limit_s, threads=1, mip_gap=None,
                      stage=f"diagnose: {label}", progress=progress, feasibility=True, work=work)
        return full.status == "infeasible"

    if not infeasible(all_groups, "all groups"):
        return []
    necessary = [g for g in order if not infeasible(all_groups - {g}, f"without {g}")]
    kept = set(order)
    for g in order:
        if g in necessary:
            continue
        trial = frozenset(kept - {g})
        if infeasible(trial, f"without {g} and the groups already cleared"):
            kept.discard(g)
    return [g for g in order if g in kept]
