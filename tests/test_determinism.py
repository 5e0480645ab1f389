"""Same inputs, same answer, however loaded the machine: the solvers' limits are deterministic work
budgets (synth.encodings.work), and a wall-clock limit is only a safety net.

Each test solves with a budget small enough that it *binds* (the search is cut short), once on a
quiet machine and once while CPU-burning processes compete for every core; a wall-clock limit in
that role would stop the loaded run at another point.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from synth.encodings.milp.solvers import available_solvers, solve_milp
from synth.encodings.smt.problem import SAT, UNKNOWN, SmtProblem
from synth.encodings.work import WorkBudget
from synth.topology_io import load_topology
from tests.test_milp_solvers import knapsack

pytestmark = pytest.mark.filterwarnings("ignore:Constructing LpVariable:DeprecationWarning")


@pytest.fixture
def under_load() -> Iterator[Callable]:
    """``under_load(f)``: ``f()`` while busy-looping processes occupy every core."""
    procs: list[subprocess.Popen] = []

    def run(f: Callable):
        for _ in range(max(2, os.cpu_count() or 2)):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        try:
            return f()
        finally:
            for p in procs:
                p.kill()
                p.wait()
            procs.clear()

    yield run
    for p in procs:  # pragma: no cover - only if run() itself failed to clean up
        p.kill()


@pytest.mark.parametrize("solver", [s for s in ("highs", "cbc", "cpsat") if available_solvers()[s]])
def test_milp_work_limit_gives_the_same_incumbent_under_load(solver, under_load) -> None:
    def once():
        p = knapsack(200, 3, 8)
        r = solve_milp(p, solver, work=0.05, time_limit_s=120)
        return r.status, r.objective, r.stopped_by, [v.varValue for v in p.variables()]

    quiet = once()
    loaded = under_load(once)
    assert quiet[0] == "feasible" and quiet[2] == "work"  # the work limit, not the clock, stopped it
    assert loaded == quiet


def test_smt_work_budget_gives_the_same_verdicts_under_load(under_load) -> None:
    from synth.collectives import make_collective

    topo = load_topology("dgx1")

    def once():
        out = []
        for units in (0.01, 0.02, 0.03, 0.05):
            problem = SmtProblem(topo, make_collective("allgather", 8, 6))
            budget = WorkBudget(units)
            res = problem.solve(3, 7, 6, budget=budget)
            steps = None if res.schedule is None else res.schedule.to_json()
            out.append((res.status, res.how, budget.spent, steps, tuple(budget.safety_notes)))
        return out

    quiet = once()
    loaded = under_load(once)
    statuses = {s for s, *_ in quiet}
    assert UNKNOWN in statuses and SAT in statuses  # the budget decides, so it is tested
    assert loaded == quiet


def test_smt_and_milp_encodings_byte_identical_under_load(under_load) -> None:
    """End to end: the encodings' schedules (meta included) do not depend on the machine's load."""
    from synth.collectives import make_collective
    from synth.encodings import Options, run_encoding

    def once():
        out = []
        for enc, topo, kind in (("smt", "ring:6", "allreduce"), ("milp", "ring:6", "allgather")):
            t = load_topology(topo)
            notes: list[str] = []
            found = run_encoding(enc, t, make_collective(kind, t.num_ranks, 1),
                                 Options(time_limit_s=5.0, notes=notes))
            out.append(([found[name].to_json() for name in sorted(found)], notes))
        return out

    quiet = once()
    assert all(not notes for _, notes in quiet)
    assert under_load(once) == quiet


def test_a_pickled_budget_keeps_its_safety_net() -> None:
    """A budget sent to a worker process (pickled) keeps the seconds its safety net had left, and
    its notes and spending, not a reading of the sender's monotonic clock."""
    import pickle

    budget = WorkBudget(10.0)
    budget.charge(2.0)
    budget.note_safety_stop("milp scheduling (highs)")
    copy = pickle.loads(pickle.dumps(budget))
    assert copy.spent == 2.0 and copy.safety_notes == budget.safety_notes
    left, copied = budget.wall_left(), copy.wall_left()
    assert left is not None and copied is not None and abs(copied - left) < 1.0 and copied > 90
    unlimited = pickle.loads(pickle.dumps(WorkBudget(None)))
    assert unlimited.wall_left() is None and unlimited.left() is None


def test_safety_net_stop_is_noted() -> None:
    """When the wall clock, not the work budget, stops a solve, the budget says so."""
    budget = WorkBudget(1.0, safety_factor=0.0)  # floor only
    assert budget.wall_left() is not None and budget.left() == 1.0
    budget.note_safety_stop("milp routing (highs)")
    budget.note_safety_stop("milp routing (highs)")
    assert len(budget.safety_notes) == 1 and "not be" not in budget.safety_notes[0]
    assert "may differ from run to run" in budget.safety_notes[0]
    inner = budget.sub(0.25)
    inner.charge(0.25)
    assert inner.left() == 0.0 and budget.left() == pytest.approx(0.75)
    assert inner.safety_notes is budget.safety_notes


def test_wall_clock_stop_reaches_the_solve_notes() -> None:
    """z3 has no deterministic clock: a search its wall-clock limit stops is noted as such."""
    from synth.collectives import make_collective
    from synth.encodings import Options, run_encoding
    from synth.errors import SynthError

    topo = load_topology("dgx1")
    notes: list[str] = []
    options = Options(chunks=6, time_limit_s=0.001, notes=notes,
                      extra={"engine": "z3", "steps": 3, "rounds": 7})
    with pytest.raises(SynthError, match="time limit"):
        run_encoding("smt", topo, make_collective("allgather", 8, 6), options)
    assert notes and "wall-clock safety net" in notes[0] and "smt (z3)" in notes[0]
