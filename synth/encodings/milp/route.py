"""Stage 1 of the MILP encoding (TACCL's routing): which links carry each representative chunk.

Variables ``x[q, e]`` (binary) exist only for the candidate links of :mod:`.problem`: the
sketch's links on (near-)shortest paths of the chunk. A multi-destination chunk picks one parent per
destination over a DAG (so the choice is a tree); a single-destination chunk picks a path (flow
conservation). The objective is TACCL's makespan proxy at large sizes: the busiest resource,
``T >= τ_O · load_O`` for every resource orbit ``O`` of links and switch ports, where the load is
counted per orbit for the whole symmetric schedule. A tiny second term prefers fewer hops.

Switch sharing policies of the sketch (at most / at least k peers per rank through a switch) add a
binary ``y`` per canonical (representative rank, peer) pair: the representative's peers stand for
every rank's, because the schedule is replicated by the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import SynthError
from ..work import WorkBudget
from .problem import Edge, MilpProblem
from .solvers import pulp  # OR-Tools must load before PuLP: see milp.solvers

ROUTING_GROUPS = ("delivery", "forwarding", "switch_max_peers", "switch_min_peers")
"""Constraint groups, named so an infeasible sketch can be explained (see :func:`diagnose`)."""


class InfeasibleSketch(SynthError):
    """The routing model has no solution under the sketch; the message names the groups."""


class NoRouting(SynthError):
    """The routing solve stopped (or was not started) without a routing; ``result`` says what it
    spent, so the caller charges its budget with that and not with the whole share."""

    def __init__(self, message: str, result) -> None:
        super().__init__(message, exit_code=3)
        self.result = result


@dataclass(frozen=True)
class PeerPolicy:
    """A sketch switch policy resolved to a topology switch name ("*" = every intra-node switch)."""

    switch: str
    max_peers: int | None
    min_peers: int | None


@dataclass
class Routes:
    """The chosen links per representative chunk (tree or path edges, parent before child)."""

    edges: dict[int, list[Edge]]
    """chunk id -> its edges in BFS order from the origin"""
    objective_us_per_mb: float
    """The busiest resource's load, µs per MB of chunk (the routing model's optimum or incumbent)."""
    result: object
    """The :class:`~synth.encodings.milp.solvers.MilpResult` of the routing model."""


def _switch_matches(problem: MilpProblem, edge: Edge, name: str) -> bool:
    ch = problem.channel(edge)
    if ch is None or ch.via == "link":
        return False
    if name != "*":
        return ch.via == name or ch.via.split("@", 1)[0] == name  # per-node copies: nvswitch@k
    return problem.topology.node_of[edge[0]] == problem.topology.node_of[edge[1]]


def _canonical(problem: MilpProblem, edge: Edge, inverse: np.ndarray) -> Edge:
    g = problem.group
    u, v = edge
    h = int(g.element[u])
    rep = int(g.reps[int(g.rep_index[u])])
    return rep, int(inverse[h][v])


def build_routing_model(problem: MilpProblem, policies: Sequence[PeerPolicy] = (),
                        drop: frozenset[str] = frozenset()) -> tuple[pulp.LpProblem, dict]:
    """The routing MILP; ``drop`` leaves out constraint groups (for infeasibility diagnosis)."""
    model = pulp.LpProblem("synth_milp_routing", pulp.LpMinimize)
    x: dict[tuple[int, Edge], pulp.LpVariable] = {}
    for i, ch in enumerate(problem.chunks):
        for e in ch.edges:
            x[(i, e)] = model.add_variable(f"x_{i}_{e[0]}_{e[1]}", cat="Binary")
    # a finite upper bound (every candidate link used at once) keeps CP-SAT's integer scaling sane
    ceiling = sum(max(problem.tau(o) * m for o, m in problem.orbits_of(e))
                  for ch in problem.chunks for e in ch.edges)
    T = model.add_variable("T", lowBound=0, upBound=max(ceiling, 1.0))
    # delivery and forwarding, per chunk
    for i, ch in enumerate(problem.chunks):
        into: dict[int, list[pulp.LpVariable]] = {}
        out: dict[int, list[pulp.LpVariable]] = {}
        for e in ch.edges:
            into.setdefault(e[1], []).append(x[(i, e)])
            out.setdefault(e[0], []).append(x[(i, e)])
        dests = set(ch.dests)
        if "delivery" not in drop:
            for d in ch.dests:
                model += pulp.lpSum(into.get(d, [])) == 1, f"deliver_{i}_{d}"
        if "forwarding" in drop:
            continue
        if len(ch.dests) == 1:
            model += pulp.lpSum(out.get(ch.origin, [])) == 1, f"leave_{i}"
            for v in sorted(set(into) | set(out)):
                if v in dests or v == ch.origin:
                    continue
                model += pulp.lpSum(into.get(v, [])) == pulp.lpSum(out.get(v, [])), f"conserve_{i}_{v}"
                model += pulp.lpSum(into.get(v, [])) <= 1, f"once_{i}_{v}"
        elif not ch.layered:
            for v in sorted(out):
                if v == ch.origin:
                    continue
                have = pulp.lpSum(into.get(v, []))
                for var in out[v]:
                    model += var <= have, f"fwd_{var.name}"
        else:
            # extra hops: each use of a link is indexed by its hop, so a rank forwards at hop h only
            # what it received at hop h - 1; levels strictly increase, so no cycles (and no big-M)
            at: dict[tuple[int, int], list[pulp.LpVariable]] = {}
            hop_vars: dict[tuple[Edge, int], pulp.LpVariable] = {}
            for e in ch.edges:
                for h in ch.levels[e]:
                    var = model.add_variable(f"xh_{i}_{e[0]}_{e[1]}_{h}", cat="Binary")
                    hop_vars[(e, h)] = var
                    at.setdefault((e[1], h), []).append(var)
                model += (x[(i, e)] == pulp.lpSum(hop_vars[(e, h)] for h in ch.levels[e]),
                          f"hops_{i}_{e[0]}_{e[1]}")
            for (e, h), var in hop_vars.items():
                if e[0] != ch.origin:
                    model += var <= pulp.lpSum(at.get((e[0], h - 1), [])), f"fwd_{var.name}"
    # load per resource orbit
    load: dict[int, list[tuple[float, pulp.LpVariable]]] = {}
    hops = []
    for (_, e), var in x.items():
        worst = 0.0
        for orbit, mult in problem.orbits_of(e):
            load.setdefault(orbit, []).append((mult, var))
            worst = max(worst, problem.tau(orbit))
        hops.append((worst, var))
    for orbit in sorted(load):
        model += (problem.tau(orbit) * pulp.lpSum(m * v for m, v in load[orbit]) <= T,
                  f"load_{orbit}")
    # switch sharing policies
    if policies:
        inverse = np.argsort(problem.group.perms, axis=1)
        for p_index, policy in enumerate(policies):
            y: dict[Edge, pulp.LpVariable] = {}
            users: dict[Edge, list[pulp.LpVariable]] = {}
            for (_, e), var in x.items():
                if not _switch_matches(problem, e, policy.switch):
                    continue
                key = _canonical(problem, e, inverse)
                if key not in y:
                    y[key] = model.add_variable(f"y{p_index}_{key[0]}_{key[1]}", cat="Binary")
                users.setdefault(key, []).append(var)
            for key, vars_ in users.items():
                for var in vars_:
                    model += var <= y[key], f"peer{p_index}_{var.name}"
                model += y[key] <= pulp.lpSum(vars_), f"peeruse{p_index}_{key[0]}_{key[1]}"
            for rep in problem.group.reps:
                mine = [var for (r, _), var in sorted(y.items()) if r == rep]
                if policy.max_peers is not None and "switch_max_peers" not in drop:
                    model += pulp.lpSum(mine) <= policy.max_peers, f"maxpeers{p_index}_{rep}"
                if policy.min_peers is not None and "switch_min_peers" not in drop:
                    model += pulp.lpSum(mine) >= policy.min_peers, f"minpeers{p_index}_{rep}"
    scale = min((w for w, _ in hops if w > 0), default=1.0)
    eps = 1e-4 * scale / max(1, len(hops))
    model += T + eps * pulp.lpSum(w * v for w, v in hops)
    return model, {"x": x, "T": T}


def route(problem: MilpProblem, policies: Sequence[PeerPolicy], *, solver: str,
          time_limit_s: float | None, mip_gap: float | None, progress=None,
          diagnose: bool = True, work: float | None = None,
          safety: WorkBudget | None = None, max_root_work: float | None = None) -> Routes:
    """Solve stage 1 and read each chunk's tree/path back (BFS from its origin).

    ``work`` bounds the solve deterministically (:mod:`synth.encodings.work`); ``time_limit_s``
    is the wall-clock safety net, and ``safety`` records when it is what stopped the solve.
    ``max_root_work``: a model too big for it is not solved (:func:`.solvers.solve_milp`)."""
    from .solvers import diagnose_infeasible, solve_milp

    model, var = build_routing_model(problem, policies)
    result = solve_milp(model, solver, time_limit_s=time_limit_s, mip_gap=mip_gap,
                        stage="routing", progress=progress, work=work,
                        max_root_work=max_root_work)
    if result.stopped_by == "wall" and safety is not None:
        safety.note_safety_stop(f"milp routing ({solver})")
    if result.status == "infeasible" and not diagnose:
        raise InfeasibleSketch("the sketch is infeasible: the routing model has no solution")
    if result.status == "infeasible":
        def rebuild(drop: frozenset[str]) -> pulp.LpProblem:
            return build_routing_model(problem, policies, drop)[0]

        # each test gets this solve's work budget (default 60 units), the safety net as its clock
        groups = diagnose_infeasible(rebuild, ROUTING_GROUPS, solver=solver,
                                     time_limit_s=time_limit_s or 600.0, work=work or 60.0)
        raise InfeasibleSketch("the sketch is infeasible: the routing model has no solution; constraint "
                         f"group(s) responsible: {', '.join(groups) or 'undetermined'} "
                         "(relax the sketch's switch policies or allow more links)")
    if result.status not in ("optimal", "feasible"):
        raise NoRouting(f"the routing model found no solution within the time limit "
                        f"({result.summary()}); raise --time-limit", result)
    chosen: dict[int, list[Edge]] = {}
    for i, ch in enumerate(problem.chunks):
        used = [e for e in ch.edges if (var["x"][(i, e)].varValue or 0) > 0.5]
        children: dict[int, list[int]] = {}
        for u, v in used:
            children.setdefault(u, []).append(v)
        order: list[Edge] = []
        frontier = [ch.origin]
        reached = {ch.origin}
        while frontier:
            nxt = []
            for u in frontier:
                for v in sorted(children.get(u, [])):
                    if v not in reached:
                        reached.add(v)
                        order.append((u, v))
                        nxt.append(v)
            frontier = nxt
        missing = [d for d in ch.dests if d not in reached]
        if missing:
            raise SynthError(f"routing returned no route for chunk {ch.chunk} to rank {missing[0]} "
                             f"({result.summary()})")
        if len(ch.dests) == 1:  # keep only the path to the destination
            parent = {v: u for u, v in order}
            path: list[Edge] = []
            v = ch.dests[0]
            while v != ch.origin:
                path.append((parent[v], v))
                v = parent[v]
            order = path[::-1]
        chosen[ch.chunk] = order
    T = float(var["T"].varValue or 0.0)
    return Routes(chosen, T, result)
