"""The ``gurobi`` backend (optional): ``pulp.GUROBI`` when gurobipy imports and a license works.

Gurobi is deterministic by default; ``Seed=0`` keeps it so, and its node limit is the deterministic
work limit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import ClassVar

from .backend import EITHER, STOPPED, Backend, Matrix, Outcome, Request, pulp


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


class GurobiBackend(Backend):
    name = "gurobi"
    label = "Gurobi"
    # names of gurobipy.GRB's status codes -> synth's
    STATUS_MAP: ClassVar[Mapping[str, str]] = {
        "OPTIMAL": "optimal",
        "INFEASIBLE": "infeasible",
        "UNBOUNDED": "unbounded",
        "INF_OR_UNBD": EITHER,
        "TIME_LIMIT": STOPPED,
        "INTERRUPTED": STOPPED,
        "NODE_LIMIT": STOPPED,
        "SOLUTION_LIMIT": STOPPED,
        "ITERATION_LIMIT": STOPPED,
        "SUBOPTIMAL": STOPPED,
    }
    STOPPED_BY: ClassVar[Mapping[str, str]] = {"TIME_LIMIT": "wall", "NODE_LIMIT": "work"}

    def unavailable_reason(self) -> str | None:
        return _gurobi_problem()

    def solve(self, problem: pulp.LpProblem, mat: Matrix,
              request: Request) -> Outcome:  # pragma: no cover - needs a Gurobi license
        import gurobipy

        names = {getattr(gurobipy.GRB, n): n for n in self.STATUS_MAP}
        saved_objective = problem.objective
        if request.feasibility:
            problem.objective = pulp.LpAffineExpression()
        limits = {"NodeLimit": float(request.node_limit)} if request.node_limit else {}
        solver = pulp.GUROBI(mip=not request.relax, msg=False, timeLimit=request.time_limit_s,
                             gapRel=request.gap, Threads=request.threads, Seed=0, **limits)
        try:
            problem.solve(solver)
            model = problem.solverModel
            code = model.Status
            has_point = model.SolCount >= 1
            bound = None
            if has_point:
                bound = float(model.ObjBound) if model.IsMIP else float(model.ObjVal)
            name = self.status(names.get(code, code), has_point)
        finally:
            problem.objective = saved_objective
            solver.close()
        return Outcome(name, None, bound, stopped_by=self.STOPPED_BY.get(names.get(code), ""))
