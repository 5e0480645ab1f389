"""What every MILP backend shares: the model as arrays, a backend's raw answer, the common result,
and the base class a backend implements (one module per backend, :mod:`.solvers` the front).

A backend (:class:`Backend`) says whether it can run here (:meth:`Backend.is_installed`), solves a
:class:`Matrix` (the PuLP model copied into arrays) under a :class:`Request`, and translates its
solver's status codes with one table, ``STATUS_MAP``, into synth's statuses (:data:`STATUSES`) or
into one of two verdicts the front settles the same way for every backend: :data:`STOPPED` (a
limit stopped the search: ``feasible`` with an incumbent, ``no_solution`` without) and
:data:`EITHER` (infeasible or unbounded, not told apart: a HiGHS feasibility probe tells).

OR-Tools is imported here, before PuLP: ``import pulp`` tries ``import highspy``, whose
``libhighs.so.1`` would otherwise be loaded first and leave CP-SAT unloadable for the rest of the
process (see :mod:`.backend_highs`). Every module of the solver layer imports PuLP from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

# OR-Tools first, then PuLP: see the module docstring (libhighs.so.1 clash with highspy).
try:
    import ortools.sat.python.cp_model as cp_model

    CPSAT_IMPORT_ERROR = ""
except ImportError as exc:  # pragma: no cover - depends on what the process imported first
    cp_model = None  # type: ignore[assignment]
    CPSAT_IMPORT_ERROR = str(exc)

import numpy as np
import pulp
import scipy.sparse as sp

from ...errors import SynthError
from ...progress import SolverProgress, relative_gap
from ..work import units_for_nodes

__all__ = ["CPSAT_IMPORT_ERROR", "DEFAULT_MIP_GAP", "EITHER", "STATUSES", "STOPPED", "Backend",
           "Matrix", "MilpResult", "Outcome", "Request", "cp_model", "matrix", "model_size", "pulp",
           "relative_gap"]

STATUSES = ("optimal", "feasible", "infeasible", "no_solution", "unbounded")

STOPPED = "stopped"
"""A ``STATUS_MAP`` verdict: a limit stopped the search (``feasible`` if it has an incumbent)."""
EITHER = "infeasible_or_unbounded"
"""A ``STATUS_MAP`` verdict: infeasible or unbounded, the solver does not say which."""

DEFAULT_MIP_GAP = 1e-4
"""Relative gap at which every backend may call an incumbent optimal (HiGHS's and Gurobi's default)."""


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


def model_size(problem: pulp.LpProblem) -> tuple[int, int, int]:
    """``(variables, integer_variables, constraints)`` of a PuLP model (binaries count as integer)."""
    variables = problem.variables()
    return (len(variables), sum(1 for v in variables if v.cat == pulp.LpInteger),
            len(_constraints(problem)))


def _constraints(problem: pulp.LpProblem) -> list[pulp.LpConstraint]:
    """The constraints in insertion order (PuLP 3 deprecates the dict view that PuLP 2 has)."""
    cons = problem.constraints
    return list(cons()) if callable(cons) else list(cons.values())


# ============================================================================================ matrix
@dataclass
class Matrix:
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


def matrix(problem: pulp.LpProblem) -> Matrix:
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
    return Matrix(columns, lb, ub, cost, integer, np.array(row_lo, dtype=float),
                  np.array(row_hi, dtype=float), a, offset, problem.sense == pulp.LpMaximize)


# =========================================================================================== backend
@dataclass(frozen=True)
class Request:
    """How one solve is to run: limits, threads, modes, the start point and who listens."""

    time_limit_s: float | None
    threads: int
    gap: float
    """The relative gap at which the search may stop and call its incumbent optimal."""
    relax: bool = False
    """Drop integrality (the LP relaxation)."""
    feasibility: bool = False
    """The objective is dropped (the matrix's cost is zero): any feasible point will do."""
    node_limit: int | None = None
    work: float | None = None
    start_point: np.ndarray | None = None
    """A feasible point in column order to start from (HiGHS; the others ignore it)."""
    progress: SolverProgress | None = None


@dataclass
class Outcome:
    """A backend's raw answer, before the common post-processing."""

    status: str
    """One of :data:`STATUSES`, or :data:`EITHER` for the front to settle."""
    values: np.ndarray | None = None
    """Column values of the incumbent, in :class:`Matrix` column order (None: PuLP already set them)."""
    bound: float | None = None
    note: str = ""
    bound_missing: bool = False
    """The solver stopped at its gap tolerance without saying its bound (so it is not the objective)."""
    stopped_by: str = ""
    nodes: int | None = None


class Backend:
    """One solver behind :func:`.solvers.solve_milp` (cvxpy's solver interfaces are the model).

    A subclass names itself (``name``, and ``label`` for messages), says why it cannot run here
    (:meth:`unavailable_reason`), solves (:meth:`solve`) and translates its solver's statuses with
    ``STATUS_MAP`` (:meth:`status`). ``STOPPED_BY`` says which statuses mean the wall-clock limit
    (``wall``) or the deterministic one (``work``) stopped the search.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    STATUS_MAP: ClassVar[Mapping[Any, str]]
    """The solver's status -> one of :data:`STATUSES`, :data:`STOPPED` or :data:`EITHER`; a
    status missing from it is a failure (:class:`SynthError` naming it)."""
    STOPPED_BY: ClassVar[Mapping[Any, str]] = {}
    FAILED: ClassVar[str] = "{label} failed on this model (status {status})"
    """The message for a status ``STATUS_MAP`` does not know."""

    def unavailable_reason(self) -> str | None:
        """None when this backend can run in this process; else why not (for the error message)."""
        raise NotImplementedError

    def is_installed(self) -> bool:
        return self.unavailable_reason() is None

    def solve(self, problem: pulp.LpProblem, mat: Matrix, request: Request) -> Outcome:
        """Solve ``mat`` (``problem`` is the PuLP model it was copied from, for the backends
        that go through PuLP); the incumbent in the outcome or already in PuLP's variables."""
        raise NotImplementedError

    def status(self, code: Any, has_point: bool, shown: str | None = None) -> str:
        """synth's status for the solver's ``code``: :data:`STOPPED` becomes ``feasible`` or
        ``no_solution`` by ``has_point``; a code not in ``STATUS_MAP`` raises, naming it
        (``shown``: how the solver spells it, when ``code`` is not that)."""
        verdict = self.STATUS_MAP.get(code)
        if verdict is None:
            raise SynthError(self.FAILED.format(label=self.label, status=shown or code))
        if verdict == STOPPED:
            return "feasible" if has_point else "no_solution"
        return verdict
