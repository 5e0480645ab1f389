"""The MILP solver layer's front: one PuLP model, four open or optional solvers, one result.

The MILP encoding (:mod:`synth.encodings.milp.encoding`, TACCL-style) builds its models with PuLP
and hands them to :func:`solve_milp`, which runs the backend the user named and returns a
:class:`MilpResult` with the incumbent, the proven bound and the relative gap — the same fields for
every backend — and leaves the incumbent in every PuLP variable's ``varValue``. Each backend is a
module of its own with a ``STATUS_MAP`` from its solver's statuses to synth's (shared code in
:mod:`.backend`), registered in :data:`BACKENDS`:

* ``highs`` (default): HiGHS through SciPy's bindings (:mod:`.backend_highs`), live incumbents;
* ``cbc``: the CBC binary bundled with PuLP (:mod:`.backend_cbc`);
* ``cpsat``: OR-Tools CP-SAT on an integer model of the MILP (:mod:`.backend_cpsat`);
* ``gurobi``: optional, when gurobipy imports and a license works (:mod:`.backend_gurobi`).

This module (or :mod:`.backend`) must be imported before PuLP or highspy, or CP-SAT cannot load
(:mod:`.backend_highs` says why); :func:`available_solvers` then says so.

Determinism (same model, same answer) matters more than speed here: every backend runs in a
reproducible mode (its module says how). A wall-clock time limit that stops a search would be the
one source of run-to-run variation left (where it stops depends on the machine's speed), so
callers bound the work deterministically — ``work`` (:mod:`synth.encodings.work`: a node limit for
HiGHS, CBC and Gurobi, CP-SAT's deterministic time) or ``node_limit`` — and keep ``time_limit_s``
only as a safety net; :attr:`MilpResult.stopped_by` says which limit stopped a search.

``optimal`` means proven within ``mip_gap`` (default :data:`DEFAULT_MIP_GAP`, the HiGHS/Gurobi
default, set on every backend so the word means the same everywhere); the reported ``gap`` is the
measured one (``|objective - bound| / max(|objective|, 1e-9)``), 0.0 when the bound meets the
incumbent.

Progress: every solve reports its stage, live incumbent and bound, and result to a
:class:`synth.progress.SolverProgress` — the caller's, or by default one on the current progress
reporter (:func:`synth.progress.solver_progress`), so the display follows ``SYNTH_PROGRESS`` and
nothing need be passed in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from ...errors import SynthError, unknown_name
from ...progress import SolverProgress, solver_progress
from ..work import nodes_for, root_work
from .backend import (
    DEFAULT_MIP_GAP,
    EITHER,
    STATUSES,
    Backend,
    Matrix,
    MilpResult,
    Outcome,
    Request,
    matrix,
    model_size,
    pulp,
    relative_gap,
)
from .backend_cbc import CbcBackend
from .backend_cpsat import CpsatBackend
from .backend_gurobi import GurobiBackend
from .backend_highs import HighsBackend, unbounded_or_infeasible

__all__ = ["BACKENDS", "DEFAULT_MIP_GAP", "SOLVERS", "STATUSES", "MilpResult", "available_solvers",
           "diagnose_infeasible", "model_size", "pulp", "relative_gap", "solve_milp"]

BACKENDS: dict[str, Backend] = {b.name: b for b in (HighsBackend(), CbcBackend(), CpsatBackend(),
                                                    GurobiBackend())}
"""The backends by name, in the order they are offered."""

SOLVERS = tuple(BACKENDS)
"""Backend names, in the order they are offered."""

_INT_TOL = 1e-6
"""Integer variables within this of an integer are reported as that integer."""


def available_solvers() -> dict[str, bool]:
    """Which backends work in this process: ``{name: usable}`` in :data:`SOLVERS` order."""
    return {name: backend.is_installed() for name, backend in BACKENDS.items()}


def solve_milp(problem: pulp.LpProblem, solver: str = "highs", *, time_limit_s: float | None = None,
               threads: int = 2, mip_gap: float | None = None, stage: str = "",
               progress: SolverProgress | None = None, warm_start: bool = False,
               node_limit: int | None = None, work: float | None = None,
               max_root_work: float | None = None) -> MilpResult:
    """Solve a PuLP model with the named backend; the incumbent is left in every ``var.varValue``.

    ``time_limit_s`` is wall-clock; when it stops the search the result is ``feasible`` (with the
    bound and gap) or ``no_solution``, with ``stopped_by == "wall"``: keep it a safety net and
    bound the work with ``work`` or ``node_limit``. ``mip_gap`` is the relative gap at which the
    search may stop and call the incumbent optimal (default :data:`DEFAULT_MIP_GAP`). ``threads``
    is the solver's thread budget; every backend is run in a reproducible mode (see the module docstring).
    ``stage`` names the solve in the progress display and in :meth:`MilpResult.summary`;
    ``progress`` observes it (default: the current progress reporter's, :mod:`synth.progress`).

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
    if solver not in BACKENDS:
        raise unknown_name("MILP solver", solver, SOLVERS)
    reason = BACKENDS[solver].unavailable_reason()
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
           mip_gap: float | None, stage: str, progress: SolverProgress | None, relax: bool = False,
           feasibility: bool = False, warm_start: bool = False,
           node_limit: int | None = None, work: float | None = None,
           max_root_work: float | None = None) -> MilpResult:
    """:func:`solve_milp` plus two modes for :func:`diagnose_infeasible`: ``relax`` drops
    integrality (LP relaxation), ``feasibility`` drops the objective (any feasible point will do;
    CBC keeps it, see :class:`.backend_cbc.CbcBackend`)."""
    _check_args(solver, time_limit_s, threads, mip_gap)
    progress = progress if progress is not None else solver_progress()
    mat = matrix(problem)
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
    try:
        if max_root_work is not None and solver != "cpsat" and root_work(mat.a.nnz) > max_root_work:
            out = Outcome("no_solution", stopped_by="work", nodes=0,
                          note=f"not started: {mat.a.nnz:,} nonzeros, whose root alone may take "
                               f"about {root_work(mat.a.nnz):.0f} work units, over the "
                               f"{max_root_work:.0f} allowed (raise --time-limit)")
        elif mat.num_cols == 0 or mat.num_rows == 0:
            out = _solve_box(mat)  # CBC cannot read a model without rows; nobody needs a solver
        else:
            start_point = None
            if warm_start and all(v.varValue is not None for v in mat.columns):
                start_point = np.array([float(v.varValue) for v in mat.columns])
            request = Request(time_limit_s, threads, DEFAULT_MIP_GAP if mip_gap is None else mip_gap,
                              relax, feasibility, node_limit, work, start_point, progress)
            out = BACKENDS[solver].solve(problem, mat, request)
            if out.status == EITHER:
                out.status = unbounded_or_infeasible(mat)
    except BaseException:
        if progress is not None:
            progress.abort()
        raise
    seconds = time.perf_counter() - start
    result = _finish(problem, mat, solver, out, seconds, nint, stage, feasibility)
    if progress is not None:
        progress.end(result)
    return result


def _finish(problem: pulp.LpProblem, mat: Matrix, solver: str, out: Outcome, seconds: float,
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


def _solve_box(mat: Matrix) -> Outcome:
    """A model without variables or without constraints: each variable on its own in its bounds."""
    if np.any((mat.row_lo > 1e-9) | (mat.row_hi < -1e-9)):  # rows without terms are constants
        return Outcome("infeasible")
    lo = np.where(mat.integer, np.ceil(mat.lb - 1e-9), mat.lb)
    hi = np.where(mat.integer, np.floor(mat.ub + 1e-9), mat.ub)
    if np.any(lo > hi):
        return Outcome("infeasible")
    cost = -mat.cost if mat.maximize else mat.cost
    values = np.clip(np.zeros(mat.num_cols), lo, hi)
    values = np.where(cost > 0, lo, np.where(cost < 0, hi, values))
    if not np.all(np.isfinite(values)):
        return Outcome("unbounded")
    return Outcome("optimal", values)


# ====================================================================================== diagnosis
def diagnose_infeasible(build: Callable[[frozenset[str]], pulp.LpProblem], groups: Sequence[str],
                        solver: str = "highs", *, time_limit_s: float | None = 30.0,
                        progress: SolverProgress | None = None, work: float | None = None) -> list[str]:
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
