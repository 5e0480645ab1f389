"""From packed trees to a synchronous, pipelined step schedule (planned per representative root).

Each root's data is cut into ``k`` equal pieces; a piece follows one tree (trees get pieces in
proportion to their LP weights, largest remainder). A *task* is one piece crossing one tree edge; it
is ready once the piece has reached the edge's sender. Steps are synchronous (:mod:`synth.timing.lockstep`):
a step costs the maximum over resources of α + load · chunk · β / lanes, so the schedule's time is
the sum over steps. A list scheduler fills step s with ready tasks, highest subtree first, while the
busiest resource stays within a time budget ``B_s``.

Budgets decrease geometrically (floored at one task): a big first step puts most of the data on the
bottleneck at once, and every later step carries a fraction ρ of the previous one, so the relays
that a step triggers fit under the next step's bottleneck work and the last step — the only one
whose work is not overlapped — is tiny. Fewer, larger steps pay α fewer times; a steady pipeline
(``S`` equal budgets) suits deep trees (rings, tori). Three families are tried — geometric
``B_s = B_0 · ρ^s``; adaptive ``B_s = f · (work left) · (1 - ρ)``, which sends the rest in one step
once that falls below a few α; uniform ``W / S`` — and the cheapest plan at the target message
size is refined by coordinate descent on single step budgets (the first 4 and last 12 steps).

All counting is per resource orbit (:mod:`.symmetry`), for the representative roots only: a
representative task on orbit O costs ``mult_O · τ_O`` on every resource of O once replicated, so
the planned cost is the exact cost of the replicated schedule.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from .pack import LogicalGraph, Tree


@dataclass
class TaskSet:
    """Tasks of the representative roots' pieces.

    ``parent[t]`` is the task that brings the piece to the sender of t (-1 at the root);
    ``children`` its inverse; ``height[t]`` the hops left below t's receiver, plus one.
    """

    rep: np.ndarray
    piece: np.ndarray
    edge: np.ndarray
    parent: np.ndarray
    height: np.ndarray
    children: list[list[int]]
    roots: list[int]
    """Tasks that leave a root (ready at the start)."""

    @property
    def size(self) -> int:
        return int(self.edge.size)


def assign_pieces(trees: list[Tree], reps: int, k: int) -> list[list[Tree]]:
    """Per representative: the tree each of its ``k`` pieces follows, in an interleaved order."""
    out: list[list[Tree]] = []
    for i in range(reps):
        mine = [t for t in trees if t.rep == i]
        weights = np.array([t.weight for t in mine])
        weights = weights / weights.sum()
        raw = weights * k
        counts = np.floor(raw).astype(int)
        short = k - int(counts.sum())
        order = np.lexsort((np.arange(len(mine)), -(raw - counts)))
        counts[order[:short]] += 1
        seq: list[Tree] = []
        given = np.zeros(len(mine))
        for p in range(k):
            want = counts * (p + 1) / k - given
            j = int(np.argmax(np.where(given < counts, want, -np.inf)))
            given[j] += 1
            seq.append(mine[j])
        out.append(seq)
    return out


def build_tasks(graph: LogicalGraph, pieces: list[list[Tree]]) -> TaskSet:
    src, dst = graph.src, graph.dst
    rep_l, piece_l, edge_l, parent_l, height_l = [], [], [], [], []
    roots: list[int] = []
    tree_cache: dict[int, tuple[list[int], list[int], list[int]]] = {}
    for i, seq in enumerate(pieces):
        for p, tree in enumerate(seq):
            key = id(tree)
            if key not in tree_cache:
                edges = tree.edges.tolist()
                pos_of_dst = {int(dst[e]): j for j, e in enumerate(edges)}
                par = [pos_of_dst.get(int(src[e]), -1) for e in edges]
                hgt = [1] * len(edges)
                for j in range(len(edges) - 1, -1, -1):
                    if par[j] >= 0:
                        hgt[par[j]] = max(hgt[par[j]], hgt[j] + 1)
                tree_cache[key] = (edges, par, hgt)
            edges, par, hgt = tree_cache[key]
            base = len(edge_l)
            rep_l.extend([i] * len(edges))
            piece_l.extend([p] * len(edges))
            edge_l.extend(edges)
            parent_l.extend([base + q if q >= 0 else -1 for q in par])
            height_l.extend(hgt)
            roots.extend(base + j for j, q in enumerate(par) if q < 0)
    children: list[list[int]] = [[] for _ in edge_l]
    for t, q in enumerate(parent_l):
        if q >= 0:
            children[q].append(t)
    return TaskSet(np.asarray(rep_l), np.asarray(piece_l), np.asarray(edge_l),
                   np.asarray(parent_l), np.asarray(height_l), children, roots)


@dataclass
class Plan:
    """A step assignment of the tasks and its cost at the target size."""

    steps: list[list[int]]
    cost_us: float
    bandwidth_us: float
    label: str
    budgets: list[float]
    """The busiest orbit's time in each step (the budget that reproduces the plan)."""


class Scheduler:
    """List scheduling of a task set under per-step budgets (see the module docstring)."""

    def __init__(self, graph: LogicalGraph, tasks: TaskSet, chunk_mb: float):
        self.graph, self.tasks = graph, tasks
        tau = graph.tau_per_mb() * chunk_mb
        load = graph.load.tocsr()
        self.edge_res: dict[int, tuple[tuple[int, float], ...]] = {}
        for e in np.unique(tasks.edge).tolist():
            lo, hi = load.indptr[e], load.indptr[e + 1]
            self.edge_res[e] = tuple((int(o), float(m) * float(tau[o]))
                                     for o, m in zip(load.indices[lo:hi], load.data[lo:hi], strict=True))
        self.alpha = graph.alpha
        self.n_orbits = tau.size
        # total busy time per orbit (the bandwidth term no schedule of these tasks can beat)
        total = np.zeros(self.n_orbits)
        for e, cnt in zip(*np.unique(tasks.edge, return_counts=True), strict=True):
            for o, a in self.edge_res[int(e)]:
                total[o] += a * cnt
        self.total = total
        self.work = float(total.max()) if total.size else 0.0
        self.floor = max((a for res in self.edge_res.values() for _, a in res), default=0.0)
        t = tasks
        self.key = np.lexsort((np.arange(t.size), t.piece, -t.height))
        self.rank = np.empty(t.size, dtype=np.int64)
        self.rank[self.key] = np.arange(t.size)

    def run(self, budgets, label: str, max_steps: int = 100000) -> Plan:
        """Greedy list scheduling under ``budgets(step, work left on the busiest orbit)``.

        Ready tasks wait in one queue per logical edge (tasks of an edge load the same resources);
        a step pops tasks in global priority order and drops an edge's whole queue for the step as
        soon as its head does not fit, so a step costs O(placed + edges) heap operations.
        """
        t = self.tasks
        rank = self.rank.tolist()
        edge = t.edge.tolist()
        children = t.children
        edge_res = self.edge_res
        alpha = self.alpha.tolist()
        queues: dict[int, list[tuple[int, int]]] = {}
        for x in t.roots:
            queues.setdefault(edge[x], []).append((rank[x], x))
        for q in queues.values():
            heapq.heapify(q)
        steps: list[list[int]] = []
        real: list[float] = []
        cost = 0.0
        bw = 0.0
        remaining = t.size
        left = self.total.copy()
        s = 0
        while remaining:
            if s >= max_steps:
                raise AssertionError("list scheduling does not terminate")
            budget = max(budgets(s, float(left.max())), self.floor) * (1 + 1e-9)
            used: dict[int, float] = {}
            amax: dict[int, float] = {}
            placed: list[int] = []
            heads = [(q[0][0], e) for e, q in queues.items() if q]
            heapq.heapify(heads)
            while heads:
                _, e = heapq.heappop(heads)
                res = edge_res[e]
                if not all(used.get(o, 0.0) + a <= budget for o, a in res):
                    continue
                q = queues[e]
                _, x = heapq.heappop(q)
                a_e = alpha[e]
                for o, a in res:
                    used[o] = used.get(o, 0.0) + a
                    if a_e > amax.get(o, -1.0):
                        amax[o] = a_e
                placed.append(x)
                if q:
                    heapq.heappush(heads, (q[0][0], e))
            if not placed:  # cannot happen with budget >= floor; keep the invariant explicit
                raise AssertionError("a step with a budget above every task placed nothing")
            step_t = max(amax[o] + u for o, u in used.items())
            for o, u in used.items():
                left[o] -= u
            cost += step_t
            peak = max(used.values())
            bw += peak
            real.append(peak)
            steps.append(placed)
            remaining -= len(placed)
            for x in placed:
                for c in children[x]:
                    heapq.heappush(queues.setdefault(edge[c], []), (rank[c], c))
            s += 1
        return Plan(steps, cost, bw, label, real)

    def best(self, refine_rounds: int = 2, grid: str = "full") -> Plan:
        """The cheapest plan over the budget grid (``coarse``: a quarter of it), then refined."""
        w = self.work
        floor = self.floor
        amax = float(self.alpha.max()) if self.alpha.size else 0.0
        coarse = grid == "coarse"
        rhos = (0.45, 0.62, 0.78, 0.92) if coarse else (0.3, 0.45, 0.55, 0.62, 0.7, 0.78, 0.85, 0.92)
        fs = (1.0,) if coarse else (0.85, 1.0, 1.2)
        stops = (1.0, 2.0) if coarse else (1.0, 2.0, 4.0)
        plans = []
        for rho in rhos:
            for f in fs:
                b0 = f * w * (1 - rho)
                plans.append(self.run(lambda s, left, b0=b0, rho=rho: b0 * rho ** s,
                                      f"geometric rho={rho} B0={f:g}W(1-rho)"))
                for stop in stops:
                    def budget(s: int, left: float, rho: float = rho, f: float = f,
                               stop: float = stop) -> float:
                        b = f * left * (1 - rho)
                        return left if b < max(floor * 1.5, stop * amax) else b
                    plans.append(self.run(budget, f"adaptive rho={rho} f={f:g} stop={stop:g}a"))
        for steps in ((1, 4, 16) if coarse else (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)):
            b = w / steps
            plans.append(self.run(lambda s, left, b=b: b, f"uniform W/{steps}"))
        best = min(plans, key=lambda p: (p.cost_us, len(p.steps)))
        return self.refine(best, rounds=refine_rounds) if refine_rounds else best

    def refine(self, plan: Plan, rounds: int = 2) -> Plan:
        """Coordinate descent on the per-step budgets of ``plan`` (scaled one at a time)."""
        best = plan
        for _ in range(rounds):
            improved = False
            count = len(best.steps)
            # the ramps matter, the steady middle rarely does: the first 4 and last 12 steps
            indices = sorted(set(range(min(4, count))) | set(range(max(0, count - 12), count)))
            for s in indices:
                for factor in (0.75, 0.9, 1.1, 1.3):
                    budgets = list(best.budgets)
                    if s >= len(budgets):
                        break
                    budgets[s] *= factor
                    trial = self.run(_explicit(budgets), best.label.split(" +")[0] + " +refined")
                    if trial.cost_us < best.cost_us * (1 - 1e-12):
                        best, improved = trial, True
            if not improved:
                break
        return best


def _explicit(budgets: list[float]):
    def f(s: int, left: float) -> float:
        return budgets[s] if s < len(budgets) else left
    return f
