"""OR-Tools CP-SAT engine for the SCCL model of :mod:`synth.encodings.smt.model` (the fast one).

One CP-SAT model is built per (steps, chunks) family and reused for every round budget R: the total
rounds variable's domain is narrowed before each solve, and the last solution is passed as a hint,
so a walk over R is incremental. With ``deterministic`` the search runs with the parameters that
make CP-SAT reproducible (interleaved workers, a fixed seed, a deterministic-time limit), so the
same inputs give the same schedule; the wall-clock limit is only a safety net
(:mod:`synth.encodings.work`).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ..work import cpsat_work_used
from .model import Cap, Imp, Lin, Model

SAT, UNSAT, UNKNOWN = "sat", "unsat", "unknown"


class CpSatEngine:
    name = "cpsat"

    def __init__(self, model: Model, max_rounds: int, *, workers: int = 2) -> None:
        self.model = model
        self.workers = workers
        m = cp_model.CpModel()
        S = model.steps
        self.x = [m.new_bool_var("") for _ in range(model.nbool)]
        self.rounds = [m.new_int_var(1, max(1, max_rounds - S + 1), f"r{s}") for s in range(S)]
        self.total = m.new_int_var(S, max(S, max_rounds), "R")
        m.add(sum(self.rounds) == self.total)
        x = self.x
        for c in model.constraints:
            if isinstance(c, Imp):
                m.add_implication(x[c.a], x[c.b])
            elif isinstance(c, Cap):
                m.add(sum(x[v] for v in c.vars) <= c.cap * self.rounds[c.step])
            else:
                assert isinstance(c, Lin)
                if not c.terms:
                    if not c.empty_holds():
                        m.add_bool_or([])  # infeasible
                    continue
                if all(a == 1 for a, _ in c.terms) and c.lo == 1 and c.hi == 1:
                    m.add_exactly_one([x[v] for _, v in c.terms])
                    continue
                if all(a == 1 for a, _ in c.terms) and c.lo is None and c.hi == 1:
                    m.add_at_most_one([x[v] for _, v in c.terms])
                    continue
                expr = sum(a * x[v] for a, v in c.terms)
                lo = c.lo if c.lo is not None else -cp_model.INT_MAX
                hi = c.hi if c.hi is not None else cp_model.INT_MAX
                m.add_linear_constraint(expr, lo, hi)
        self.cp = m
        self.last: list[int] | None = None

    def solve(self, total_rounds: int, work: float | None, *, wall_s: float | None = None,
              deterministic: bool = False) -> tuple[str, tuple[list[int], set[int]] | None,
                                                    float, bool]:
        """Decide ``sum rounds <= total_rounds``; SAT gives (rounds per step, true variables).

        ``work`` is CP-SAT's deterministic-time budget (the same effort on any machine);
        ``wall_s`` the wall-clock safety net. ``deterministic`` interleaves the workers
        (reproducible). Returns (status, solution, deterministic time used, whether the safety
        net rather than the budget stopped an undecided search).
        """
        dom = self.total.proto.domain
        dom[0] = self.model.steps
        dom[1] = total_rounds
        m = self.cp
        m.clear_hints()
        if self.last is not None:
            for v, val in zip(self.x, self.last, strict=True):
                m.add_hint(v, val)
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.num_workers = self.workers
        p.random_seed = 1
        if deterministic and self.workers > 1:
            p.interleave_search = True
        if work is not None:
            p.max_deterministic_time = max(0.01, work)
        if wall_s is not None:
            p.max_time_in_seconds = max(0.01, wall_s)
        status = solver.solve(m)
        used = cpsat_work_used(solver)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            values = [int(solver.boolean_value(v)) for v in self.x]
            self.last = values
            rounds = [int(solver.value(r)) for r in self.rounds]
            return SAT, (rounds, {i for i, val in enumerate(values) if val}), used, False
        if status == cp_model.INFEASIBLE:
            return UNSAT, None, used, False
        by_wall = wall_s is not None and (work is None or used < 0.99 * max(0.01, work))
        return UNKNOWN, None, used, by_wall
