"""Stages 2 and 3 of the MILP encoding: order the routed transfers, then batch them into steps.

A *task* is one hop of one representative chunk. Because the schedule is replicated by the rank
group, a task placed in step s puts ``mult`` chunks on every resource of each orbit it loads, so a
step's time is ``max_O (α_O + S · Σ_tasks τ_O · mult)`` for a chunk of S MB — the α-β cost of
:mod:`synth.timing.lockstep` on the replicated step.

* **Stage 2, ordering** (TACCL's greedy): list scheduling, most-remaining-hops first, each step
  filled while no resource orbit exceeds a per-step budget; the budget is searched over multiples
  of the largest task and the cheapest plan at the target size wins.
* **Stage 3, scheduling** (TACCL's contiguity MILP, on the drain): the tasks of stage 2's last
  ``window + 1`` steps may take any of those steps or ``window`` new ones; binaries ``y[t, s]`` and
  per-step times ``D_s >= α_O u[s, O] + S · load(s, O)``, with ``u[s, O]`` paid once per orbit and
  step (the batch's α), minimising ``Σ D_s`` subject to every hop leaving after the hop that brought
  its chunk. Earlier tasks stay put: measured on trn1_32 and dgx_a100 x 4 allgather, what the
  whole-plan MILP (each task within ``window`` steps of its stage-2 step) won over stage 2 was won
  at the drain, where the last chunks' final hops trail the busiest links (2782.8 -> 2772.5 µs and
  4215.6 -> 4117.5 µs at 1 GiB), and the drain model finds it (2772.7, 4123.0) in 2 % of the
  whole model's time (1.7 s against 109 s on trn1_32). A ``window`` over :data:`FIRST_WINDOW` runs
  as a second, wider pass from the first pass's plan (:func:`schedule_tasks`). The MILP keeps the
  stage-2 plan if it cannot beat it in its budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..work import WorkBudget
from .problem import Edge, MilpProblem
from .solvers import pulp  # OR-Tools must load before PuLP: see milp.solvers

STAGE3_NODES = 2000
"""Branch-and-bound nodes the scheduling MILP may explore (HiGHS, CBC, Gurobi): a deterministic
budget, so the plan it returns does not depend on the machine's speed; the wall-clock limit is only
a safety net (:mod:`synth.encodings.work`). CP-SAT gets the stage's work budget instead. 2,000 is
the default stage budget's worth (10 units, :data:`synth.encodings.work.NODES_PER_UNIT`): the drain
model has at most ``2 window + 1`` binaries per task of the last ``window + 1`` steps, so its nodes
are cheap (trn1_32 allgather, 16 chunks: 230 binaries, proven optimal within 1,000 nodes in 1.7 s,
2772.7 µs at 1 GiB, where 300 nodes stopped at 2776.0). The whole-plan model this replaced needed
0.36 s a node there, which is why it had 300."""


@dataclass
class Tasks:
    chunk: list[int]
    edge: list[Edge]
    parent: list[int]
    """index of the task that brings the chunk to the sender; -1 at the origin"""
    height: list[int]
    """hops below this task in its chunk's tree (priority)"""
    loads: list[tuple[tuple[int, float], ...]]
    """per task: (orbit, µs per MB it adds to every resource of the orbit)"""
    alpha: list[float]

    def __len__(self) -> int:
        return len(self.chunk)


def outcome(result) -> str:
    """A solver result without its timing: status, objective, gap."""
    gap = "n/a" if result.gap is None else f"{100 * result.gap:.2f}%"
    obj = "n/a" if result.objective is None else f"{result.objective:.6g}"
    return f"{result.solver}: {result.status}, objective {obj}, gap {gap}"


def make_tasks(problem: MilpProblem, routes: dict[int, list[Edge]]) -> Tasks:
    t = Tasks([], [], [], [], [], [])
    for c in sorted(routes):
        at: dict[int, int] = {}
        first = len(t.chunk)
        for u, v in routes[c]:
            t.chunk.append(c)
            t.edge.append((u, v))
            t.parent.append(at.get(u, -1))
            at[v] = len(t.chunk) - 1
            t.loads.append(tuple((o, problem.tau(o) * m) for o, m in problem.orbits_of((u, v))))
            t.alpha.append(problem.alpha((u, v)))
            t.height.append(0)
        for i in range(len(t.chunk) - 1, first - 1, -1):  # children come after parents
            p = t.parent[i]
            if p >= 0:
                t.height[p] = max(t.height[p], t.height[i] + 1)
    return t


def step_orbit_loads(tasks: Tasks, steps: list[int]
                     ) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """(step, orbit) -> µs/MB of load, and -> the largest α of the hops loading it."""
    load: dict[tuple[int, int], float] = {}
    alpha: dict[tuple[int, int], float] = {}
    for i, s in enumerate(steps):
        for o, w in tasks.loads[i]:
            load[(s, o)] = load.get((s, o), 0.0) + w
            alpha[(s, o)] = max(alpha.get((s, o), 0.0), tasks.alpha[i])
    return load, alpha


def plan_cost(tasks: Tasks, steps: list[int], chunk_mb: float) -> float:
    """Σ over steps of max over orbits of (α + S · load), the replicated schedule's α-β time."""
    if not steps:
        return 0.0
    load, alpha = step_orbit_loads(tasks, steps)
    per_step: dict[int, float] = {}
    for key, w in load.items():
        per_step[key[0]] = max(per_step.get(key[0], 0.0), alpha[key] + chunk_mb * w)
    return sum(per_step.values())


def orbit_totals(tasks: Tasks) -> dict[int, float]:
    """µs/MB of all the representative tasks on each resource orbit (the routing's loads)."""
    total: dict[int, float] = {}
    for ls in tasks.loads:
        for o, w in ls:
            total[o] = total.get(o, 0.0) + w
    return total


def list_schedule(tasks: Tasks, rate: float, by_subtree: bool = False) -> list[int]:
    """Greedy steps: ready tasks by priority, each orbit fed at ``rate`` x its total load per step.

    Every orbit earns ``rate * total_O`` of credit per step (a token bucket, so a task heavier than
    one step's share waits for enough credit): each step then carries the same mix of work as the
    whole schedule, so the per-step maximum over orbits adds up to the routing's busiest orbit
    instead of to the sum of alternating bottlenecks. Ties go to the task with the most hops left.
    """
    n = len(tasks)
    step = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    ready: list[int] = []
    for i in range(n):
        if tasks.parent[i] < 0:
            ready.append(i)
        else:
            children[tasks.parent[i]].append(i)
    total = orbit_totals(tasks)
    widest: dict[int, float] = {}
    for ls in tasks.loads:
        for o, w in ls:
            widest[o] = max(widest.get(o, 0.0), w)
    share = {o: rate * t for o, t in total.items()}
    credit = dict.fromkeys(total, 0.0)
    below = [1] * n  # tasks in each task's subtree (itself included)
    for i in range(n - 1, -1, -1):
        if tasks.parent[i] >= 0:
            below[tasks.parent[i]] += below[i]
    key = [(-tasks.height[i], -below[i], tasks.chunk[i], tasks.edge[i]) for i in range(n)]
    if by_subtree:
        key = [(-below[i], -tasks.height[i], tasks.chunk[i], tasks.edge[i]) for i in range(n)]
    s = 0
    left = n
    while left:
        for o in credit:
            credit[o] = min(credit[o] + share[o], max(share[o], widest[o]) * 2)
        ready.sort(key=key.__getitem__)
        placed: list[int] = []
        waiting: list[int] = []
        for i in ready:
            fits = all(credit[o] >= w * (1 - 1e-9) for o, w in tasks.loads[i])
            if fits or not placed:
                placed.append(i)
                for o, w in tasks.loads[i]:
                    credit[o] -= w
            else:
                waiting.append(i)
        for i in placed:
            step[i] = s
        left -= len(placed)
        ready = waiting + [c for i in placed for c in children[i]]
        s += 1
    return step


def compact(tasks: Tasks, steps: list[int], chunk_mb: float, passes: int = 4) -> list[int]:
    """Backfill: move each task to the earliest step where it costs nothing, then drop empty steps.

    A task may move to any step after the hop that brings its chunk and before the hops that
    forward it, if every orbit it loads stays within that step's current time (its busiest orbit
    and α): the step does not get longer, and the step it leaves can only get shorter. This fills
    the slack that integral chunks leave in every step (e.g. a link whose chunks do not divide
    the step's duration) with work that would otherwise trail at the end.
    """
    n = len(tasks)
    steps = list(steps)
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if tasks.parent[i] >= 0:
            children[tasks.parent[i]].append(i)
    horizon = max(steps) + 1
    load = [dict[int, float]() for _ in range(horizon)]
    alpha = [0.0] * horizon
    for i, st in enumerate(steps):
        alpha[st] = max(alpha[st], tasks.alpha[i])
        for o, w in tasks.loads[i]:
            load[st][o] = load[st].get(o, 0.0) + w

    def duration(st: int) -> float:
        return alpha[st] + chunk_mb * max(load[st].values(), default=0.0)

    for _ in range(passes):
        moved = False
        for i in sorted(range(n), key=lambda j: (steps[j], j)):
            here = steps[i]
            lo = steps[tasks.parent[i]] + 1 if tasks.parent[i] >= 0 else 0
            for st in range(lo, here):
                if tasks.alpha[i] > alpha[st] or not load[st]:
                    continue
                limit = duration(st)
                if all(alpha[st] + chunk_mb * (load[st].get(o, 0.0) + w) <= limit * (1 + 1e-12)
                       for o, w in tasks.loads[i]):
                    for o, w in tasks.loads[i]:
                        load[here][o] -= w
                        if load[here][o] <= 1e-12:
                            del load[here][o]
                        load[st][o] = load[st].get(o, 0.0) + w
                    steps[i] = st
                    moved = True
                    break
        if not moved:
            break
    used = sorted(set(steps))
    renumber = {st: k for k, st in enumerate(used)}
    return [renumber[st] for st in steps]


def order(tasks: Tasks, chunk_mb: float, refine: int = 4) -> tuple[list[int], float, float]:
    """Stage 2: (steps, cost µs, rate) of the best list schedule over a range of step counts.

    Every rate's list schedule is costed; the ``refine`` cheapest are then compacted
    (:func:`compact`) and the cheapest result wins.
    """
    if not len(tasks):
        return [], 0.0, 0.0
    most = max(sum(1 for ls in tasks.loads for o2, _ in ls if o2 == o) for o in orbit_totals(tasks))
    counts = sorted({max(1, round(c)) for c in np.geomspace(1, max(2, most), 32)})
    tried: list[tuple[float, float, list[int]]] = []
    for c in counts:
        rate = 1.0 / c
        for by_subtree in (False, True):
            steps = list_schedule(tasks, rate, by_subtree)
            tried.append((plan_cost(tasks, steps, chunk_mb), rate, steps))
    tried.sort(key=lambda x: (x[0], x[1]))
    best: tuple[float, float, list[int]] | None = None
    for _, rate, steps in tried[:refine]:
        steps = compact(tasks, steps, chunk_mb)
        cost = plan_cost(tasks, steps, chunk_mb)
        if best is None or cost < best[0] - 1e-9:
            best = (cost, rate, steps)
    assert best is not None
    return best[2], best[0], best[1]


def build_scheduling_model(tasks: Tasks, initial: list[int], chunk_mb: float, window: int
                           ) -> tuple[pulp.LpProblem, dict[tuple[int, int], pulp.LpVariable]]:
    """Stage 3's MILP over the stage-2 plan's drain (see the module docstring).

    The tasks of the last ``window + 1`` steps are free to take any of those steps or ``window``
    steps more; every earlier task stays where stage 2 put it, so the model is small."""
    model = pulp.LpProblem("synth_milp_scheduling", pulp.LpMinimize)
    last = max(initial)
    first = max(0, last - window)
    horizon = last + 1 + window
    free = [i for i, s0 in enumerate(initial) if s0 >= first]
    lo: dict[int, int] = {}
    for i in free:  # parents come before children in task order
        p = tasks.parent[i]
        lo[i] = first if p < 0 else lo[p] + 1 if p in lo else max(first, initial[p] + 1)
    y: dict[tuple[int, int], pulp.LpVariable] = {}
    span: dict[int, list[int]] = {}
    for i in free:
        span[i] = list(range(lo[i], horizon))
        for s in span[i]:
            y[(i, s)] = model.add_variable(f"y_{i}_{s}", cat="Binary")
        model += pulp.lpSum(y[(i, s)] for s in span[i]) == 1, f"once_{i}"
    # precedence, time-indexed (the strong form): a hop is done by step s only if the hop that
    # brings its chunk was done by step s - 1
    for i in free:
        p = tasks.parent[i]
        if p not in span:
            continue
        for s in span[i]:
            mine = [y[(i, t)] for t in span[i] if t <= s]
            before = [y[(p, t)] for t in span[p] if t <= s - 1]
            model += pulp.lpSum(mine) <= pulp.lpSum(before), f"after_{i}_{s}"
    on: dict[tuple[int, int], list[tuple[int, float]]] = {}
    alpha: dict[int, float] = {}
    for i in free:
        for o, w in tasks.loads[i]:
            alpha[o] = max(alpha.get(o, 0.0), tasks.alpha[i])
            for s in span[i]:
                on.setdefault((s, o), []).append((i, w))
    ceiling = max(tasks.alpha) + chunk_mb * sum(w for i in free for _, w in tasks.loads[i])
    D = {s: model.add_variable(f"D_{s}", lowBound=0, upBound=ceiling) for s in range(first, horizon)}
    for (s, o), members in sorted(on.items()):
        u = model.add_variable(f"u_{s}_{o}", cat="Binary")
        for i, _ in members:
            model += u >= y[(i, s)], f"use_{s}_{o}_{i}"
        model += D[s] >= alpha[o] * u + chunk_mb * pulp.lpSum(w * y[(i, s)] for i, w in members), \
            f"time_{s}_{o}"
    model += pulp.lpSum(D.values())
    return model, y


FIRST_WINDOW = 2
"""Stage 3's first pass frees the last ``FIRST_WINDOW + 1`` steps; a wider ``window`` then runs as a
second pass from its plan (:func:`schedule_tasks`)."""
WIDE_PASS_MIN_WORK = 10.0
"""The wider pass runs only with at least this stage-3 work budget (the default's; ``--time-limit``
of 40 or more). Its nodes cost several times a routing node of the same size (trn1_32, 32 chunks:
237 nodes of an 11,034-nonzero model in 18 s, against 377 nodes of the 1,106-nonzero narrow model
in 1.7 s), so a small budget's node limit would not keep it short."""


def schedule_tasks(tasks: Tasks, initial: list[int], chunk_mb: float, *, window: int, solver: str,
                   time_limit_s: float | None, progress=None, work: float | None = None,
                   safety: WorkBudget | None = None) -> tuple[list[int], dict]:
    """Stage 3: the MILP's steps when they beat stage 2, else stage 2's; and a report.

    A ``window`` wider than :data:`FIRST_WINDOW` runs as two passes: the narrow drain model first
    (small, usually proven optimal), then the wide one warm-started from its plan, so the wide
    pass, stopped by its node budget, can only improve on the narrow one. The wide pass needs
    :data:`WIDE_PASS_MIN_WORK` and a root that fits ``work`` (:func:`..work.root_work`). Measured on trn1_32
    allgather at 1 GiB (32 chunks per rank, each half of a 16-chunk route): window 2 gives
    2762.8 µs (94.88 % of bound), window 4 alone 2749.0 (95.36 %, stopped at its node budget);
    on dgx_a100 x 4 the wide model alone stopped above the narrow one's optimum (4127 > 4123 µs).

    Each pass is bounded by :data:`STAGE3_NODES` and ``work`` (deterministic); ``time_limit_s``
    is the wall-clock safety net, and ``safety`` records when it is what stopped the solve."""
    report = stage2_report(tasks, initial, chunk_mb, window)
    base = plan_cost(tasks, initial, chunk_mb)
    if not len(tasks) or window <= 0:
        report["stage3"] = "skipped"
        return initial, report
    steps, cost = initial, base
    passes = []
    windows = sorted({min(window, FIRST_WINDOW), window})
    if not wide_pass_runs(window, work):
        windows = windows[:1]
    for w in windows:
        found, outcome_line, size = _schedule_pass(tasks, steps, chunk_mb, w, solver, time_limit_s,
                                                   progress, work, safety,
                                                   max_root_work=work if w > FIRST_WINDOW else None)
        passes.append({"window": w, "outcome": outcome_line, "size": size})
        if found is not None:
            found_cost = plan_cost(tasks, found, chunk_mb)
            passes[-1]["us"] = round(found_cost, 6)
            if found_cost < cost - 1e-9:
                steps, cost = found, found_cost
    report["stage3"] = passes[-1]["outcome"]
    report["stage3_size"] = passes[-1]["size"]
    report["stage3_passes"] = passes
    if steps is not initial:
        report["stage3_us"] = round(cost, 6)
    return steps, report


def stage2_report(tasks: Tasks, initial: list[int], chunk_mb: float, window: int,
                  why_not: str | None = None) -> dict:
    """The report of a plan's stage 3 before it runs; ``why_not``: it will not run (the caller
    keeps the stage-2 plan ``initial``), and why."""
    report: dict = {"stage2_us": round(plan_cost(tasks, initial, chunk_mb), 6), "window": window}
    if why_not is not None:
        report["stage3"] = f"not run: {why_not}"
    return report


def stage3_keeps(initial: list[int], window: int, work: float | None) -> int:
    """How many leading steps of the stage-2 plan ``initial`` stage 3 (:func:`schedule_tasks`)
    leaves as they are, whatever it finds: its narrow pass frees only the tasks of the last
    ``FIRST_WINDOW + 1`` steps and puts none before them (:func:`build_scheduling_model`), so its
    plan's last step is at least the number of steps it kept; the wide pass then frees the last
    ``window + 1`` steps of that plan. The schedule replicated from the plan (one forward phase)
    begins with these steps, in this order."""
    if not initial:
        return 0
    first = max(initial) - min(window, FIRST_WINDOW)
    kept = len({s for s in initial if s < first})  # non-empty steps: the plans drop empty ones
    return max(0, kept - window) if wide_pass_runs(window, work) else kept


def wide_pass_runs(window: int, work: float | None) -> bool:
    """Does stage 3 run a second, wide pass (:func:`schedule_tasks`)?"""
    return window > FIRST_WINDOW and (work is None or work >= WIDE_PASS_MIN_WORK)


def _schedule_pass(tasks: Tasks, initial: list[int], chunk_mb: float, window: int, solver: str,
                   time_limit_s: float | None, progress, work: float | None,
                   safety: WorkBudget | None, max_root_work: float | None = None
                   ) -> tuple[list[int] | None, str, dict]:
    """One scheduling MILP over ``initial``'s drain: (its plan, renumbered; None when it has no
    complete plan, or was not started: ``max_root_work``), its outcome line, its model size."""
    from .solvers import solve_milp

    model, y = build_scheduling_model(tasks, initial, chunk_mb, window)
    _start_from(model, y, tasks, initial, chunk_mb)
    result = solve_milp(model, solver, time_limit_s=time_limit_s, stage="scheduling",
                        progress=progress, warm_start=True, node_limit=STAGE3_NODES, work=work,
                        max_root_work=max_root_work)
    if result.stopped_by == "wall" and safety is not None:
        safety.note_safety_stop(f"milp scheduling ({solver})")
    size = {"variables": result.variables, "constraints": result.constraints}
    if result.status not in ("optimal", "feasible"):
        return None, outcome(result), size
    placed = {i for (i, s), var in y.items() if (var.varValue or 0) > 0.5}
    if placed != {i for i, _ in y}:
        return None, outcome(result), size
    steps = list(initial)
    for (i, s), var in y.items():
        if (var.varValue or 0) > 0.5:
            steps[i] = s
    # drop empty steps (the MILP may leave gaps)
    used = sorted(set(steps))
    renumber = {s: k for k, s in enumerate(used)}
    return [renumber[s] for s in steps], outcome(result), size


def _start_from(model: pulp.LpProblem, y: dict[tuple[int, int], pulp.LpVariable], tasks: Tasks,
                initial: list[int], chunk_mb: float) -> None:
    """Set every variable to the stage-2 plan, so the MILP starts from it (a feasible point)."""
    for (i, s), var in y.items():
        var.setInitialValue(1 if initial[i] == s else 0)
    load, _ = step_orbit_loads(tasks, initial)
    orbit_alpha: dict[int, float] = {}
    for i in sorted({i for i, _ in y}):
        for o, _ in tasks.loads[i]:
            orbit_alpha[o] = max(orbit_alpha.get(o, 0.0), tasks.alpha[i])
    for var in model.variables():
        name = var.name
        if name.startswith("u_"):
            _, s, o = name.split("_")
            var.setInitialValue(1 if (int(s), int(o)) in load else 0)
        elif name.startswith("D_"):
            s = int(name.split("_")[1])
            var.setInitialValue(max((orbit_alpha[o] + chunk_mb * w for (t, o), w in load.items()
                                     if t == s), default=0.0))


def step_arrays(tasks: Tasks, steps: list[int]) -> list[np.ndarray]:
    """Task indices per step, in step order."""
    by: dict[int, list[int]] = {}
    for i, s in enumerate(steps):
        by.setdefault(s, []).append(i)
    return [np.asarray(by[s], dtype=np.int64) for s in sorted(by)]
