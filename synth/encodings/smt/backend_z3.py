"""z3 engine for the SCCL model of :mod:`synth.encodings.smt.model` (SMT fidelity).

The model's constraints become z3 clauses and pseudo-Boolean constraints (``PbEq``/``PbLe``, as in
SCCL), the round count of each step a one-hot choice with ``rounds == i -> load <= cap * i``. One
solver is kept per (steps, chunks) family; each round budget R is a fresh Boolean literal that
implies ``sum rounds <= R`` and is passed as an *assumption* to ``check``, so learnt clauses carry
over from one R to the next (incremental solving).

z3 has no deterministic clock this project maps to CP-SAT's, so its limit is wall-clock: a search
it stops is reported as stopped by the safety net (not reproducible); the auto path uses CP-SAT.
"""

from __future__ import annotations

import time

import z3

from .model import Cap, Imp, Lin, Model

SAT, UNSAT, UNKNOWN = "sat", "unsat", "unknown"


def _pb(terms, lo, hi, x):
    """z3 constraints for lo <= sum(a * x_v) <= hi, with positive weights only."""
    lits: list[tuple] = []
    shift = 0
    for a, v in terms:
        if a > 0:
            lits.append((x[v], a))
        elif a < 0:
            lits.append((z3.Not(x[v]), -a))
            shift += -a  # a*x = -a*(1-x) - (-a)
    out = []
    unit = all(w == 1 for _, w in lits)
    if lo is not None and hi is not None and lo == hi:
        target = lo + shift
        if unit and target == 1:
            out.append(z3.PbEq(lits, 1))
        else:
            out.append(z3.PbEq(lits, target))
        return out
    if hi is not None:
        bound = hi + shift
        if unit and bound == 0:
            out.extend(z3.Not(lit) for lit, _ in lits)
        elif unit and bound == 1:
            out.append(z3.AtMost(*[lit for lit, _ in lits], 1))
        else:
            out.append(z3.PbLe(lits, bound))
    if lo is not None:
        bound = lo + shift
        if unit and bound == 1:
            out.append(z3.Or([lit for lit, _ in lits]))
        else:
            out.append(z3.PbGe(lits, bound))
    return out


class Z3Engine:
    name = "z3"

    def __init__(self, model: Model, max_rounds: int, *, workers: int = 1) -> None:
        self.model = model
        S = model.steps
        self.ctx = z3.Context()
        ctx = self.ctx
        solver = z3.SolverFor("QF_FD", ctx=ctx)
        # native cardinality/PB reasoning in z3's SAT core: an order of magnitude faster here
        solver.set("sat.cardinality.solver", True)
        x = [z3.Bool(f"x{i}", ctx) for i in range(model.nbool)]
        self.x = x
        top = max(1, max_rounds - S + 1)
        # one-hot round choice per step: rsel[s][i] <=> rounds_s == i+1
        self.top = top
        self.rsel = [[z3.Bool(f"r{s}_{i + 1}", ctx) for i in range(top)] for s in range(S)]
        for sel in self.rsel:
            solver.add(z3.PbEq([(b, 1) for b in sel], 1))
        for c in model.constraints:
            if isinstance(c, Imp):
                solver.add(z3.Or(z3.Not(x[c.a]), x[c.b]))
            elif isinstance(c, Cap):
                lits = [(x[v], 1) for v in c.vars]
                if len(lits) <= c.cap:
                    continue
                for i in range(top):
                    if len(lits) > c.cap * (i + 1):
                        solver.add(z3.Implies(self.rsel[c.step][i], z3.PbLe(lits, c.cap * (i + 1))))
            else:
                assert isinstance(c, Lin)
                if not c.terms:
                    if not c.empty_holds():
                        solver.add(z3.BoolVal(False, ctx))
                    continue
                for item in _pb(c.terms, c.lo, c.hi, x):
                    solver.add(item)
        self.solver = solver
        self.budget: dict[int, z3.BoolRef] = {}

    def _budget_literal(self, total: int) -> z3.BoolRef:
        lit = self.budget.get(total)
        if lit is None:
            lit = z3.Bool(f"budget{total}", self.ctx)
            weights = [(b, i + 1) for sel in self.rsel for i, b in enumerate(sel)]
            self.solver.add(z3.Implies(lit, z3.PbLe(weights, total)))
            self.budget[total] = lit
        return lit

    def solve(self, total_rounds: int, work: float | None, *, wall_s: float | None = None,
              deterministic: bool = False) -> tuple[str, tuple[list[int], set[int]] | None,
                                                    float, bool]:
        """As :meth:`CpSatEngine.solve`; z3's limit is wall-clock (``work`` seconds, at most
        ``wall_s``), so an undecided stop always counts as the safety net's."""
        lit = self._budget_literal(total_rounds)
        limits = [x for x in (work, wall_s) if x is not None]
        if limits:
            self.solver.set("timeout", max(1, int(min(limits) * 1000)))
        start = time.perf_counter()
        result = self.solver.check(lit)
        used = time.perf_counter() - start
        if result == z3.sat:
            m = self.solver.model()
            true = {i for i, v in enumerate(self.x) if z3.is_true(m.eval(v, model_completion=True))}
            rounds = []
            for sel in self.rsel:
                chosen = [i + 1 for i, b in enumerate(sel) if z3.is_true(m.eval(b, model_completion=True))]
                rounds.append(chosen[0])
            return SAT, (rounds, true), used, False
        if result == z3.unsat:
            return UNSAT, None, used, False
        return UNKNOWN, None, used, bool(limits)
