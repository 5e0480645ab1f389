"""The MILP solver layer: every backend on the same small models, limits, diagnosis, errors."""

from __future__ import annotations

import io
import math
import random
import subprocess
import sys

import pytest
from rich.console import Console

# isort: off
# milp_solvers loads OR-Tools before PuLP: PuLP's import of highspy would otherwise load a second
# libhighs.so.1 and leave CP-SAT unloadable (see the module docstring).
from synth.encodings.milp.solvers import (
    SOLVERS,
    MilpResult,
    available_solvers,
    diagnose_infeasible,
    model_size,
    relative_gap,
    solve_milp,
)
import pulp
# isort: on

from synth.errors import INPUT_ERROR, SynthError
from synth.progress import SolverProgress as Progress

AVAILABLE = [s for s, ok in available_solvers().items() if ok]

# PuLP 3 deprecates LpVariable(...) in favour of prob.add_variable, which PuLP 2 lacks
pytestmark = pytest.mark.filterwarnings("ignore:Constructing LpVariable:DeprecationWarning")


# ========================================================================================== models
def facility_location() -> pulp.LpProblem:
    """Capacitated facility location: open facilities (binary) and serve customers (integer)."""
    rng = random.Random(7)
    fac, cus = 5, 12
    open_cost = [rng.randint(30, 60) for _ in range(fac)]
    cap = [rng.randint(15, 30) for _ in range(fac)]
    demand = [rng.randint(2, 8) for _ in range(cus)]
    ship = [[rng.randint(1, 9) for _ in range(cus)] for _ in range(fac)]
    p = pulp.LpProblem("facility", pulp.LpMinimize)
    y = [pulp.LpVariable(f"open{f}", cat=pulp.LpBinary) for f in range(fac)]
    x = [[pulp.LpVariable(f"serve{f}_{c:02d}", 0, demand[c], cat=pulp.LpInteger) for c in range(cus)]
         for f in range(fac)]
    p += pulp.lpSum(open_cost[f] * y[f] for f in range(fac)) + pulp.lpSum(
        ship[f][c] * x[f][c] for f in range(fac) for c in range(cus))
    for c in range(cus):
        p += pulp.lpSum(x[f][c] for f in range(fac)) == demand[c], f"demand{c}"
    for f in range(fac):
        p += pulp.lpSum(x[f][c] for c in range(cus)) <= cap[f] * y[f], f"cap{f}"
    return p


def knapsack(n: int = 60, seed: int = 1, dims: int = 5, *, skip: int = 0) -> pulp.LpProblem:
    """A multi-dimensional 0/1 knapsack (maximise): easy at n=60, not instant at n=200."""
    rng = random.Random(seed)
    for _ in range(skip):
        rng.randint(10, 60)
    value = [rng.randint(10, 60) for _ in range(n)]
    p = pulp.LpProblem("knapsack", pulp.LpMaximize)
    x = [pulp.LpVariable(f"x{i:03d}", cat=pulp.LpBinary) for i in range(n)]
    p += pulp.lpSum(value[i] * x[i] for i in range(n))
    for k in range(dims):
        w = [rng.randint(5, 80) for _ in range(n)]
        p += pulp.lpSum(w[i] * x[i] for i in range(n)) <= sum(w) // 3, f"cap{k}"
    return p


DURATIONS = [0.7, 1.37, 2.113, 0.55, 1.9, 0.31]
RELEASE = [0.0, 0.2, 0.45, 1.1, 0.0, 2.05]


def scheduling() -> pulp.LpProblem:
    """One machine, continuous start times and makespan, binary order variables (big-M): the shape
    of a TACCL stage-3 model. Optimum: makespan 6.943 (no idle time), objective 11.234."""
    n = len(DURATIONS)
    big_m = sum(DURATIONS) + max(RELEASE)
    p = pulp.LpProblem("scheduling", pulp.LpMinimize)
    s = [pulp.LpVariable(f"start{i}", lowBound=RELEASE[i]) for i in range(n)]
    makespan = pulp.LpVariable("makespan", lowBound=0)
    for i in range(n):
        for j in range(i + 1, n):
            before = pulp.LpVariable(f"before{i}_{j}", cat=pulp.LpBinary)
            p += s[i] + DURATIONS[i] <= s[j] + big_m * (1 - before), f"ij{i}_{j}"
            p += s[j] + DURATIONS[j] <= s[i] + big_m * before, f"ji{i}_{j}"
        p += makespan >= s[i] + DURATIONS[i], f"end{i}"
    p += makespan + 0.1 * pulp.lpSum(s) + 3  # the constant must survive every backend
    return p


def check_incumbent(problem: pulp.LpProblem, tol: float = 1e-6) -> None:
    """The values in the PuLP variables satisfy every bound, integrality and constraint."""
    for v in problem.variables():
        assert v.varValue is not None, v.name
        if v.lowBound is not None:
            assert v.varValue >= v.lowBound - tol, v.name
        if v.upBound is not None:
            assert v.varValue <= v.upBound + tol, v.name
        if v.cat == pulp.LpInteger:
            assert v.varValue == round(v.varValue), v.name
    cons = problem.constraints
    for con in (cons() if callable(cons) else cons.values()):
        assert con.valid(tol), con.name


def check_consistent(r: MilpResult) -> None:
    assert r.status in ("optimal", "feasible", "infeasible", "no_solution", "unbounded")
    if r.has_solution:
        assert r.objective is not None and math.isfinite(r.objective)
        if r.best_bound is not None:
            assert r.gap == relative_gap(r.objective, r.best_bound)
        else:
            assert r.gap is None
    else:
        assert r.objective is None and r.gap is None
    assert r.seconds >= 0
    assert r.solver in r.summary() and r.status in r.summary()


# =========================================================================================== tests
@pytest.mark.parametrize("solver", AVAILABLE)
def test_every_backend_finds_the_same_optimum(solver: str) -> None:
    for build, optimum in ((facility_location, None), (knapsack, 1113.0)):
        reference = solve_milp(build(), "highs").objective if optimum is None else optimum
        p = build()
        r = solve_milp(p, solver, stage="test")
        check_consistent(r)
        assert r.status == "optimal"
        assert r.objective == pytest.approx(reference, abs=1e-6)
        assert r.gap is not None and r.gap <= 1e-4
        assert pulp.value(p.objective) == pytest.approx(r.objective)
        assert (r.variables, r.integer_variables, r.constraints) == model_size(p)
        check_incumbent(p)
        assert p.status == pulp.LpStatusOptimal


def test_facility_location_optimum_is_the_same_everywhere() -> None:
    values = {s: solve_milp(facility_location(), s).objective for s in AVAILABLE}
    assert len(set(values.values())) == 1, values


@pytest.mark.parametrize("solver", AVAILABLE)
def test_mixed_continuous_and_integer(solver: str) -> None:
    p = scheduling()
    r = solve_milp(p, solver)
    check_consistent(r)
    assert r.status == "optimal"
    assert r.objective == pytest.approx(11.234, abs=1e-6)
    assert p.variablesDict()["makespan"].varValue == pytest.approx(6.943, abs=1e-6)
    check_incumbent(p)
    if solver == "cpsat":
        assert "grid of 0.001" in r.note  # the data has three decimals: the grid is exact


@pytest.mark.parametrize("solver", AVAILABLE)
def test_infeasible(solver: str) -> None:
    # LP relaxation infeasible
    p = pulp.LpProblem("lp_infeasible", pulp.LpMinimize)
    x = [pulp.LpVariable(f"x{i}", cat=pulp.LpBinary) for i in range(3)]
    p += pulp.lpSum(x)
    p += pulp.lpSum(x) >= 2, "many"
    p += pulp.lpSum(x) <= 1, "few"
    r = solve_milp(p, solver)
    check_consistent(r)
    assert r.status == "infeasible"
    assert p.status == pulp.LpStatusInfeasible
    # LP relaxation feasible, no integer point (2a = 3)
    q = pulp.LpProblem("int_infeasible", pulp.LpMinimize)
    a = pulp.LpVariable("a", 0, 10, cat=pulp.LpInteger)
    b = pulp.LpVariable("b", 0, 10)
    q += a + b
    q += 2 * a - b == 3, "odd"
    q += b <= 0.5, "small"
    assert solve_milp(q, solver).status == "infeasible"


@pytest.mark.parametrize("solver", AVAILABLE)
def test_unbounded(solver: str) -> None:
    p = pulp.LpProblem("unbounded", pulp.LpMinimize)
    x = pulp.LpVariable("x", upBound=5, cat=pulp.LpInteger)
    y = pulp.LpVariable("y", 0, 1, cat=pulp.LpBinary)
    p += x + y
    p += x + y <= 5, "c"
    r = solve_milp(p, solver)
    check_consistent(r)
    assert r.status == "unbounded"


@pytest.mark.parametrize("solver", AVAILABLE)
def test_time_limit_gives_incumbent_or_nothing(solver: str) -> None:
    p = knapsack(200, 3)
    r = solve_milp(p, solver, time_limit_s=0.05)
    check_consistent(r)
    assert r.status in ("feasible", "no_solution", "optimal")
    if r.has_solution:
        check_incumbent(p)
        assert pulp.value(p.objective) == pytest.approx(r.objective)
        if r.best_bound is not None:
            assert r.best_bound >= r.objective - 1e-6  # maximising: the bound is above
    assert r.seconds < 5


@pytest.mark.parametrize("solver", AVAILABLE)
def test_same_model_same_answer(solver: str) -> None:
    answers = []
    for _ in range(2):
        p = facility_location()
        solve_milp(p, solver, threads=2)
        answers.append([v.varValue for v in p.variables()])
    assert answers[0] == answers[1]


def test_lp_bound_is_the_objective() -> None:
    p = pulp.LpProblem("lp", pulp.LpMaximize)
    x = pulp.LpVariable("x", 0)
    y = pulp.LpVariable("y", 0)
    p += 3 * x + 2 * y
    p += x + y <= 4, "a"
    p += x + 3 * y <= 6, "b"
    p += x <= 3, "c"
    for solver in AVAILABLE:
        r = solve_milp(p, solver)
        assert r.status == "optimal" and r.objective == pytest.approx(11.0)
        assert r.best_bound == pytest.approx(11.0) and r.gap == 0.0


def test_highs_thread_counts_can_change_between_solves() -> None:
    # HiGHS keeps one thread pool per process and refuses a solve asking for another size
    for threads in (2, 1, 3):
        assert solve_milp(knapsack(), "highs", threads=threads).objective == 1113.0


def test_highs_keeps_stdout_clean(capfd: pytest.CaptureFixture[str]) -> None:
    # HiGHS 1.12 printf's "HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();"
    # on some models even with output off (this one: twice); stdout may carry --json output
    assert solve_milp(knapsack(skip=60), "highs").objective == 1159
    assert capfd.readouterr().out == ""


class Recorder(Progress):
    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.events: list[tuple] = []

    def begin(self, stage: str, solver: str) -> None:
        self.events.append(("begin", stage, solver))

    def update(self, *, incumbent: float | None = None, bound: float | None = None) -> None:
        self.events.append(("update", incumbent, bound))

    def end(self, result: MilpResult) -> None:
        self.events.append(("end", result.status))


@pytest.mark.parametrize("solver", [s for s in ("highs", "cpsat") if s in AVAILABLE])
def test_progress_hears_incumbents(solver: str) -> None:
    rec = Recorder()
    solve_milp(scheduling(), solver, stage="stage 3", progress=rec)
    assert rec.events[0] == ("begin", "stage 3", solver)
    assert rec.events[-1] == ("end", "optimal")
    incumbents = [e[1] for e in rec.events if e[0] == "update" and e[1] is not None]
    assert incumbents and min(incumbents) == pytest.approx(11.234, abs=1e-6)


def test_progress_is_quiet_off_a_terminal_and_shows_stages_on_one() -> None:
    quiet = io.StringIO()
    with Progress(Console(file=quiet)) as prog:  # a StringIO console is not a terminal
        solve_milp(knapsack(), "highs", stage="route", progress=prog)
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    with Progress(Console(file=shown, force_terminal=True, width=120)) as prog:
        solve_milp(knapsack(), "highs", stage="route", progress=prog)
        solve_milp(scheduling(), "highs", stage="schedule", progress=prog)
    out = shown.getvalue()
    assert "route (highs): optimal, objective 1113" in out
    assert "schedule (highs): optimal, objective 11.234" in out


def test_progress_under_a_callers_status_display() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=200)
    with console.status("outer"):
        solve_milp(knapsack(), "highs", stage="inner", progress=Progress(console))
    assert "inner (highs): optimal, objective 1113" in buf.getvalue()


# ======================================================================================== diagnose
def grouped_model(dropped: frozenset[str]) -> pulp.LpProblem:
    """Six binaries; 'demand' and 'capacity' conflict, 'exact' and 'parity' conflict only in
    integers (LP-feasible), 'pairs' and 'relay' are harmless."""
    p = pulp.LpProblem("grouped", pulp.LpMinimize)
    x = [pulp.LpVariable(f"x{i}", cat=pulp.LpBinary) for i in range(6)]
    z = pulp.LpVariable("z", 0, 10, cat=pulp.LpInteger)
    p += pulp.lpSum(x) + z
    groups = {
        "demand": [pulp.lpSum(x) >= 4],
        "capacity": [pulp.lpSum(x) <= 2],
        "pairs": [x[0] + x[1] <= 1, x[2] + x[3] <= 1],
        "relay": [x[5] >= x[4]],
        "exact": [pulp.lpSum(x[:5]) == 3],
        "parity": [2 * z == pulp.lpSum(x[:5])],
    }
    for name, cons in groups.items():
        if name not in dropped:
            for k, c in enumerate(cons):
                p += c, f"{name}_{k}"
    return p


@pytest.mark.parametrize("solver", AVAILABLE)
def test_diagnose_finds_the_conflicting_groups(solver: str) -> None:
    everything = ["pairs", "demand", "relay", "capacity", "exact", "parity"]

    def only(*conflict: str):
        others = {"demand", "capacity", "exact", "parity"} - set(conflict)
        return lambda dropped: grouped_model(dropped | others)

    assert diagnose_infeasible(only("demand", "capacity"), everything, solver) == ["demand", "capacity"]
    # LP-feasible, integer-infeasible: found by the MIP feasibility solve, not the relaxation
    assert diagnose_infeasible(only("exact", "parity"), everything, solver) == ["exact", "parity"]
    # both conflicts at once: a minimal answer is one of them, and dropping it is not enough alone
    both = diagnose_infeasible(grouped_model, everything, solver)
    assert both in (["demand", "capacity"], ["exact", "parity"])


def test_diagnose_when_the_fixed_part_conflicts() -> None:
    def build(dropped: frozenset[str]) -> pulp.LpProblem:
        p = pulp.LpProblem("fixed", pulp.LpMinimize)
        x = pulp.LpVariable("x", 0, 1)
        p += x
        p += x >= 2, "always"
        if "extra" not in dropped:
            p += x <= 5, "extra"
        return p

    assert diagnose_infeasible(build, ["extra"]) == []


# ========================================================================================== errors
def test_unknown_solver_is_a_user_error() -> None:
    with pytest.raises(SynthError, match=r"unknown MILP solver 'higs'; did you mean highs") as exc:
        solve_milp(knapsack(), "higs")
    assert exc.value.exit_code == INPUT_ERROR


@pytest.mark.skipif(available_solvers()["gurobi"], reason="Gurobi is installed and licensed here")
def test_gurobi_missing_is_a_user_error_naming_the_alternatives() -> None:
    with pytest.raises(SynthError) as exc:
        solve_milp(knapsack(), "gurobi")
    assert exc.value.exit_code == INPUT_ERROR
    assert "gurobi" in exc.value.message and "available: " + ", ".join(AVAILABLE) in exc.value.message


@pytest.mark.parametrize("kwargs", [{"time_limit_s": 0}, {"time_limit_s": -1.0}, {"threads": 0},
                                    {"mip_gap": -0.1}])
def test_bad_limits_are_user_errors(kwargs: dict) -> None:
    with pytest.raises(SynthError):
        solve_milp(knapsack(), "highs", **kwargs)


def test_names_and_sizes() -> None:
    assert SOLVERS == ("highs", "cbc", "cpsat", "gurobi")
    assert set(available_solvers()) == set(SOLVERS)
    assert {"highs", "cbc", "cpsat"} <= set(AVAILABLE)  # the open solvers ship with the project
    assert model_size(facility_location()) == (65, 65, 17)
    assert model_size(scheduling()) == (22, 15, 36)


_SOLVE_ALL = (
    "from synth.errors import SynthError\n"
    "p = pulp.LpProblem('p', pulp.LpMinimize)\n"
    "x = pulp.LpVariable('x', 0, 3, cat=pulp.LpInteger)\n"
    "p += x\n"
    "p += x >= 1.5, 'c'\n"
    "ok = m.available_solvers()\n"
    "assert ok['highs'] and ok['cbc'], ok\n"
    "for name in ('highs', 'cbc', 'cpsat'):\n"
    "    try:\n"
    "        print(name, m.solve_milp(p, name).objective)\n"
    "    except SynthError as e:\n"
    "        print(name, 'error', e)\n"
)


def _run(code: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())


def test_import_order_keeps_cp_sat_usable() -> None:
    """Loading synth's solver layer first keeps every open backend usable next to PuLP, whichever
    HiGHS builds PuLP, highspy and OR-Tools ship (the libhighs.so.1 clash of older releases)."""
    got = _run("import synth.encodings.milp.solvers as m, pulp\n" + _SOLVE_ALL)
    assert got == {"highs": "2.0", "cbc": "2.0", "cpsat": "2.0"}


def test_pulp_imported_first_keeps_highs_and_cbc() -> None:
    """The other order: PuLP (and with it, on some releases, highspy) first. HiGHS and CBC always
    work; CP-SAT either works or, where the installed releases clash, refuses with the fix named."""
    got = _run("import pulp\nimport synth.encodings.milp.solvers as m\n" + _SOLVE_ALL)
    assert got["highs"] == "2.0" and got["cbc"] == "2.0"
    if got["cpsat"] != "2.0":
        assert "import synth.encodings.milp.solvers before pulp" in got["cpsat"], got
        assert "available: highs, cbc" in got["cpsat"], got
