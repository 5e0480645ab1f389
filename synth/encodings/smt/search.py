"""Searches over SCCL instances: least steps, and the latency/bandwidth Pareto frontier.

``pareto`` is SCCL's walk (msccl-tools ``solve pareto-optimal`` without its unproven monotonicity
assumption): for C = 1, 2, ... chunks, R from the rounds bound ``ceil(rpc_lb * C)`` upward (skipping
R/C fractions a smaller C already covered), S from the steps bound upward; the first SAT (S, R) for
a C is that C's algorithm; the walk stops when R / C reaches ``rpc_lb`` (bandwidth optimal). The
frontier is the set of those algorithms that no other beats in both steps and rounds per chunk.

Two exact shortcuts make it cheaper without changing the frontier:

* an (S, R, C) whose algorithm would be dominated by one already found is not solved: only
  S below the best step count among found points with R'/C' <= R/C can join the frontier;
* satisfiability is monotone in S at fixed R (a step of several rounds splits into two steps: the
  loads of a link split freely, those of switch ports form a bipartite multigraph that splits
  evenly), so whether SCCL would have found *some* (dominated) algorithm at this R — which ends the
  C — is decided by the single instance S = R.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from ..work import WorkBudget
from .problem import (
    SAT,
    UNKNOWN,
    UNSAT,
    InstanceResult,
    SmtProblem,
    rounds_lower_bound,
    sorted_frontier,
)


@dataclass
class SearchReport:
    """What a search proved and found."""

    kind: str
    """``pareto`` or ``least_steps``."""
    steps_lb: int
    rpc_lb: Fraction
    points: list[InstanceResult] = field(default_factory=list)
    """The answer: the frontier (pareto), or the one least-steps algorithm."""
    found: list[InstanceResult] = field(default_factory=list)
    """Every SAT instance the walk stopped at, dominated ones included (SCCL's list)."""
    tried: list[InstanceResult] = field(default_factory=list)
    complete: bool = False
    stop: str = ""
    seconds: float = 0.0
    safety_notes: list[str] = field(default_factory=list)
    """Solves a wall-clock safety net stopped (:mod:`synth.encodings.work`): not reproducible."""

    def proven_lines(self) -> list[str]:
        """One line per decided instance, for reports and limit messages."""
        out = []
        for r in self.tried:
            tag = {SAT: "SAT", UNSAT: "UNSAT", UNKNOWN: "undecided"}[r.status]
            out.append(f"{r.describe()}: {tag} ({r.how}, {r.seconds:.2f} s)")
        return out


Callback = Callable[[InstanceResult], None]
PROBE_MAX_CHUNKS = 12
PROBE_SECONDS = 5.0


def least_steps(problem: SmtProblem, *, chunks: int = 1, rounds: int | None = None,
                time_limit_s: float | None = None, max_steps: int | None = None,
                on_instance: Callback | None = None, budget: WorkBudget | None = None
                ) -> SearchReport:
    """The fewest steps S with an algorithm of R = S rounds (or the given R) and C chunks.

    ``time_limit_s`` is a deterministic work budget (:mod:`synth.encodings.work`) shared by the
    instances; pass ``budget`` instead to read its safety notes afterwards."""
    start = time.perf_counter()
    budget = budget or WorkBudget(time_limit_s)
    lb = max(1, problem.steps_lower_bound())
    rpc = problem.rpc_lower_bound()
    report = SearchReport("least_steps", lb, rpc)
    first = lb
    if rounds is None:
        first = max(lb, problem.rounds_lower_bound(chunks))
    for steps in itertools.count(first):
        if max_steps is not None and steps > max_steps:
            report.stop = f"no algorithm with at most {max_steps} steps (--max-steps)"
            report.complete = True
            break
        r = steps if rounds is None else rounds
        if rounds is not None and steps > rounds:
            report.stop = (f"no algorithm with {rounds} rounds and {chunks} chunks at any step count "
                           f"(S = {rounds} is UNSAT, and fewer steps cannot do better)")
            report.complete = True
            break
        if budget.exhausted():
            report.stop = "time limit"
            break
        res = _decide(problem, report, (steps, r, chunks), budget, on_instance)
        if res.status == SAT:
            report.found = [res]
            report.complete = True
            report.stop = "least steps found"
            break
        if res.status == UNKNOWN:
            report.stop = "time limit"
            break
    return _finish(report, start, budget)


def pareto(problem: SmtProblem, *, max_steps: int | None = None, min_chunks: int = 1,
           max_chunks: int | None = None, time_limit_s: float | None = None,
           on_instance: Callback | None = None, budget: WorkBudget | None = None) -> SearchReport:
    """SCCL's Pareto walk (see the module docstring); stops at the bandwidth bound or the limit
    (a deterministic work budget, as in :func:`least_steps`)."""
    start = time.perf_counter()
    budget = budget or WorkBudget(time_limit_s)
    lb_s = max(1, problem.steps_lower_bound())
    sccl_lb = problem.sccl_rpc_lower_bound()
    rpc_lb = problem.rpc_lower_bound(strong=True)
    report = SearchReport("pareto", lb_s, rpc_lb)
    if max_steps is not None and max_steps < lb_s:
        report.stop = f"--max-steps {max_steps} is below the steps lower bound {lb_s}"
        report.complete = True
        report.seconds = time.perf_counter() - start
        return report

    def decide(S: int, R: int, C: int) -> InstanceResult | None:
        res = _decide(problem, report, (S, R, C), budget, on_instance)
        return None if res.status == UNKNOWN else res

    # probe the best point the bounds allow: (S_lb, rpc_lb * C*, C*) for the smallest C* making the
    # rounds whole; if it exists it dominates everything else and the walk only confirms it
    star = rpc_lb.denominator
    if rpc_lb > 0 and star <= PROBE_MAX_CHUNKS and (max_chunks is None or star <= max_chunks) \
            and star >= min_chunks:
        r_star = int(rpc_lb * star)
        for S in range(lb_s, min(lb_s, r_star, max_steps or r_star) + 1):
            left = budget.left()
            probe = budget.sub(PROBE_SECONDS if left is None else min(PROBE_SECONDS, 0.1 * left))
            res = problem.solve(S, r_star, star, budget=probe) if left != 0 else None
            if res is None:
                break
            if res.status != UNKNOWN:
                _record(report, res, on_instance)
            if res.status == SAT:
                report.found.append(res)
                break

    stopped = False
    chunks_iter = itertools.count(min_chunks) if max_chunks is None else \
        range(min_chunks, max_chunks + 1)
    for C in chunks_iter:
        if any(p.rpc <= rpc_lb and p.chunks < C for p in report.found):
            report.complete = True
            report.stop = "bandwidth optimal"
            break
        R = rounds_lower_bound(sccl_lb, C) - 1  # SCCL's start; the stronger bound answers at once
        got: InstanceResult | None = None
        while not stopped:
            R += 1
            if math.gcd(C, R) != 1:
                continue
            rpc = Fraction(R, C)
            top = R if max_steps is None else min(R, max_steps)
            if top < lb_s:
                continue
            cap = min((p.steps for p in report.found if p.rpc <= rpc), default=math.inf)
            hi = int(min(top, cap - 1))
            if hi < lb_s and rpc > rpc_lb:
                break  # everything this C can still give is dominated
            for S in range(lb_s, hi + 1):
                if problem.known(S, R, C) == UNSAT:
                    continue
                res = decide(S, R, C)
                if res is None:
                    stopped = True
                    break
                if res.status == SAT:
                    got = res
                    break
            if stopped or got is not None:
                break
            if hi < top:
                # SCCL would stop this C at any SAT S in (hi, top]; monotone in S: ask hi+1, then top
                verdict = None
                for S in dict.fromkeys((max(hi + 1, lb_s), top)):
                    verdict = problem.known(S, R, C)
                    if verdict is None:
                        res = decide(S, R, C)
                        if res is None:
                            stopped = True
                            break
                        verdict = res.status
                    if verdict == SAT:
                        break
                if stopped or verdict == SAT:
                    break
        problem.release(C)
        if stopped:
            report.stop = "time limit"
            break
        if got is not None:
            report.found.append(got)
            if got.rpc <= rpc_lb:
                report.complete = True
                report.stop = "bandwidth optimal"
                break
        if budget.exhausted():
            report.stop = "time limit"
            break
    else:
        report.stop = f"chunk limit ({max_chunks})"
    return _finish(report, start, budget)


def pareto_sccl(problem: SmtProblem, *, max_steps: int | None = None, min_chunks: int = 1,
                max_chunks: int | None = None, time_limit_s: float | None = None,
                on_instance: Callback | None = None) -> SearchReport:
    """msccl-tools' ``pareto-optimal`` walk literally, *including* its default (unproven)
    monotonic-feasibility assumption: an S-step instance is skipped when one of S steps with a
    larger rounds-per-chunk was UNSAT. Kept to reproduce SCCL's published output; the assumption
    can hide frontier points (DGX-1 gather: (S2, R7, C6) exists although (S2, R6, C5) does not)."""
    start = time.perf_counter()
    budget = WorkBudget(time_limit_s)
    lb_s = max(1, problem.steps_lower_bound())
    sccl_lb = problem.sccl_rpc_lower_bound()
    rpc_lb = problem.rpc_lower_bound(strong=True)
    report = SearchReport("pareto", lb_s, rpc_lb)
    step_rpc_lb: dict[int, Fraction] = {}
    chunks_iter = itertools.count(min_chunks) if max_chunks is None else \
        range(min_chunks, max_chunks + 1)
    stopped = False
    for C in chunks_iter:
        R = rounds_lower_bound(sccl_lb, C) - 1
        got = None
        while got is None and not stopped:
            R += 1
            if math.gcd(C, R) != 1:
                continue
            rpc = Fraction(R, C)
            top = R if max_steps is None else min(R, max_steps)
            for S in range(lb_s, top + 1):
                if rpc < step_rpc_lb.get(S, Fraction(0)):
                    continue
                res = _decide(problem, report, (S, R, C), budget, on_instance)
                if res.status == UNKNOWN:
                    stopped = True
                    break
                if res.status == SAT:
                    got = res
                    break
                step_rpc_lb[S] = max(step_rpc_lb.get(S, Fraction(0)), rpc)
        problem.release(C)
        if stopped:
            report.stop = "time limit"
            break
        assert got is not None
        report.found.append(got)
        if got.rpc <= rpc_lb:
            report.complete = True
            report.stop = "bandwidth optimal"
            break
    else:
        report.stop = f"chunk limit ({max_chunks})"
    return _finish(report, start, budget)


def _record(report: SearchReport, res: InstanceResult, on_instance: Callback | None) -> None:
    """A decided instance: into the report's list, and to the caller's callback."""
    report.tried.append(res)
    if on_instance:
        on_instance(res)


def _decide(problem: SmtProblem, report: SearchReport, instance: tuple[int, int, int],
            budget: WorkBudget, on_instance: Callback | None) -> InstanceResult:
    """Solve one (steps, rounds, chunks) instance and record it."""
    res = problem.solve(*instance, budget=budget)
    _record(report, res, on_instance)
    return res


def _finish(report: SearchReport, start: float, budget: WorkBudget) -> SearchReport:
    """Close a search: its frontier, wall time and any wall-clock safety notes."""
    report.points = sorted_frontier(report.found)
    report.seconds = time.perf_counter() - start
    report.safety_notes = budget.safety_notes
    return report
