"""The ``flow`` encoding: time-expanded multi-commodity flow for point-to-point collectives.

Alltoall, scatter, gather and custom collectives whose chunks each go from one rank to one rank need
no copies, so the schedule is a multi-commodity flow: a commodity per (source, destination) pair,
carried over paths of the topology, hop by hop in synchronous steps. This encoding

1. plans one representative source per orbit of a rank group (:mod:`..symmetry`) — 511 commodities
   instead of 261,632 on 512 ranks — counting load per resource orbit;
2. offers every commodity a few candidate paths: the direct channel when one exists (a switch),
   and shortest paths of the sparse logical graph (:mod:`..trees.pack`), by hops and by β;
3. solves the **time-expanded LP** (HiGHS via scipy): a variable per (commodity, path, start
   step) — the fraction of the commodity's data that leaves at that step and advances one hop per
   step — with ``z_t >= τ_O · load(O, t)`` for every resource orbit O and step t, minimising
   ``sum_t z_t`` (the bandwidth part of the step costs); the number of steps S is searched from
   the longest shortest path upwards;
4. rounds the fractions to ``k`` integral chunks per pair (stratified rounding with a per-commodity
   offset, so rounding errors spread over the resources instead of piling up), replicates by the
   group, and sets rounds with :func:`synth.steps.step_from_arrays`.

``meta`` reports the LP optimum (``sum z_t`` plus each step's α) and the rounded schedule's gap to
it. Options (:class:`..options.FlowOptions`): ``size`` (bytes the plan is tuned for, default 1 GiB),
``symmetry``, ``rail_stripes`` (paths only over the striped fabric of :mod:`..trees.pack`: each rank
talks to about nodes/8 fabric peers, which MSCCL's threadblock limits can load), ``max_paths``
(default 4), ``extra_steps`` (how far S is searched past its
minimum, default 8; the search stops after two steps without gain), ``max_transfers``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog
from scipy.sparse.csgraph import dijkstra, shortest_path

from ... import progress
from ...collectives import Collective, make_collective, max_chunks_per_rank
from ...errors import NotApplicable, SynthError
from ...schedule import Schedule, Step
from ...steps import step_from_arrays
from ...topology import MB, Topology
from ..options import DEFAULT_SIZE, FlowOptions, Options
from ..symmetry import RankGroup, ResourceMap, rank_group, trivial_group
from ..trees.pack import LogicalGraph, logical_graph

DEFAULT_MAX_PATHS = FlowOptions.max_paths
DEFAULT_MAX_TRANSFERS = FlowOptions.max_transfers


@dataclass
class Commodity:
    """Data from ``src`` to ``dst``: ``chunks`` chunk ids (global, for the representative)."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    paths: list[tuple[int, ...]]
    """Candidate paths as rank sequences (src ... dst)."""


@dataclass
class FlowPlan:
    steps: int
    lp_bandwidth_us: float
    lp_us: float
    choice: dict[int, list[tuple[int, int, int]]]
    """commodity index -> [(chunk position, path index, start step)]."""
    cost_us: float


def _applicable(collective: Collective) -> None:
    if collective.combining:
        raise NotApplicable(f"flow moves data without combining; {collective.name} reduces "
                            "(use --encoding trees)")
    for c, (pre, post) in enumerate(zip(collective.pre, collective.post, strict=True)):
        targets = [r for r in post if r not in pre]
        if targets and len(pre) != 1:
            raise NotApplicable(f"flow needs one holder per chunk; chunk {c} starts on ranks "
                                f"{list(pre)[:4]}")
        if len(targets) > 1:
            raise NotApplicable(f"{collective.name} copies chunk {c} to {len(targets)} ranks; a "
                                "flow without copies cannot express it (use --encoding trees)")


class _Paths:
    """Candidate paths over the logical graph (plus direct channels)."""

    def __init__(self, topology: Topology, graph: LogicalGraph, max_paths: int, direct: bool = True):
        self.topology = topology
        self.direct = direct
        self.graph = graph
        self.max_paths = max_paths
        n = graph.n
        self.adj = sp.csr_array((np.ones(graph.num_edges), (graph.src, graph.dst)), shape=(n, n))
        tau = graph.tau_per_mb()
        w = np.asarray(graph.load @ tau).ravel() + 1e-9
        self.wadj = sp.csr_array((w, (graph.src, graph.dst)), shape=(n, n))
        self.preds: dict[int, tuple[np.ndarray, list[list[int]], np.ndarray]] = {}
        self.out_nbrs: list[list[int]] = [[] for _ in range(n)]
        for a, b in zip(graph.src.tolist(), graph.dst.tolist(), strict=True):
            self.out_nbrs[a].append(b)
        for lst in self.out_nbrs:
            lst.sort()

    def _dag(self, s: int) -> tuple[np.ndarray, list[list[int]], np.ndarray]:
        if s not in self.preds:
            d = shortest_path(self.adj, directed=True, unweighted=True, indices=s)
            _, pw = dijkstra(self.wadj, directed=True, indices=s, return_predecessors=True)
            n = self.graph.n
            pred: list[list[int]] = [[] for _ in range(n)]
            g = self.graph
            ok = np.isfinite(d[g.src]) & (d[g.dst] == d[g.src] + 1)
            for a, b in zip(g.src[ok].tolist(), g.dst[ok].tolist(), strict=True):
                pred[b].append(a)
            for lst in pred:
                lst.sort()
            self.preds[s] = (d, pred, pw)
        return self.preds[s]

    def paths(self, s: int, t: int) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        if self.direct and self.topology.has_channel(s, t):
            out.append((s, t))
        d, pred, pw = self._dag(s)
        if not np.isfinite(d[t]):
            if out:
                return out
            raise SynthError(f"no path from rank {s} to rank {t} in '{self.topology.name}'")
        # up to max_paths shortest-hop paths, spread by rotating the predecessor choice
        for i in range(self.max_paths):
            path = [t]
            v = t
            depth = 0
            while v != s:
                options = pred[v]
                v = options[(i + depth * 7 + t) % len(options)] if i else options[0]
                path.append(v)
                depth += 1
            cand = tuple(reversed(path))
            if cand not in out:
                out.append(cand)
            if len(out) >= self.max_paths:
                break
        # relays: one intermediate rank, when the direct channel exists (a switch's congested
        # port can be bypassed through a neighbour, e.g. a gather's remote ranks via the root's node)
        if out and len(out[0]) == 2:
            outs = self.out_nbrs[s]
            mids = [w for w in outs if w != t and self.topology.has_channel(w, t)]
            if mids:
                take = min(self.max_paths, len(mids))
                stride = len(mids) / take
                for i in range(take):
                    w = mids[int((i * stride + (s + t) % max(1, int(stride))) % len(mids))]
                    cand = (s, w, t)
                    if cand not in out:
                        out.append(cand)
        # and the β-weighted shortest path
        if len(out) < self.max_paths + 1 and pw[t] >= 0:
            path, v = [t], t
            while v != s and v >= 0:
                v = int(pw[v])
                path.append(v)
            cand = tuple(reversed(path))
            if v == s and cand not in out:
                out.append(cand)
        return out


def _edge_orbits(topology: Topology, rm: ResourceMap, a: int, b: int,
                 cache: dict[tuple[int, int], tuple[tuple[int, float], ...]]
                 ) -> tuple[tuple[int, float], ...]:
    key = (a, b)
    if key not in cache:
        ch = topology.channel(a, b)
        if ch is None:
            raise AssertionError(f"path uses a missing channel {a}->{b}")
        cache[key] = tuple((rm.add(res, beta, lanes), rm.mult(rm.add(res, beta, lanes)))
                           for res, beta, lanes in ch.resources)
    return cache[key]


def _solve_lp(comms: list[Commodity], hop_res: list[list[list[tuple[int, float]]]], tau_mb: np.ndarray,
              data_mb: list[float], S: int
              ) -> tuple[float, np.ndarray, list[tuple[int, int, int]], np.ndarray]:
    """LP over (commodity, path, start): x = fraction of the commodity's ``data_mb`` leaving on that
    path at that step; returns (sum of z_t, x, variable index, z)."""
    var: list[tuple[int, int, int]] = []
    rows: dict[tuple[int, int], int] = {}
    a_r, a_c, a_v = [], [], []
    for ci, cm in enumerate(comms):
        for pi, path in enumerate(cm.paths):
            h = len(path) - 1
            for t0 in range(S - h + 1):
                j = len(var)
                var.append((ci, pi, t0))
                for hop, res in enumerate(hop_res[ci][pi]):
                    t = t0 + hop
                    for o, mult in res:
                        r = rows.setdefault((o, t), len(rows))
                        a_r.append(r)
                        a_c.append(j)
                        a_v.append(mult * data_mb[ci] * tau_mb[o])
    nv = len(var)
    if not nv:
        raise NotApplicable(f"no path fits in {S} steps")
    # z_t columns after the x columns
    for (_, t), r in rows.items():
        a_r.append(r)
        a_c.append(nv + t)
        a_v.append(-1.0)
    a_ub = sp.csr_array((a_v, (a_r, a_c)), shape=(len(rows), nv + S))
    eq_r = [ci for ci, _, _ in var]
    a_eq = sp.csr_array((np.ones(nv), (eq_r, np.arange(nv))), shape=(len(comms), nv + S))
    obj = np.concatenate([np.zeros(nv), np.ones(S)])
    with progress.span("solve"):
        res = linprog(obj, A_ub=a_ub, b_ub=np.zeros(len(rows)), A_eq=a_eq,
                      b_eq=np.ones(len(comms)), bounds=(0, None), method="highs")
    if res.status != 0:
        raise SynthError(f"flow LP failed: {res.message}")
    return float(res.fun), np.asarray(res.x[:nv]), var, np.asarray(res.x[nv:])


def _round(comms: list[Commodity], x: np.ndarray, var: list[tuple[int, int, int]]
           ) -> dict[int, list[tuple[int, int, int]]]:
    """Stratified rounding: commodity i's chunks take the options at the points (j + u_i) / k of
    its cumulative distribution, u_i a low-discrepancy offset (golden ratio)."""
    by_comm: dict[int, list[tuple[float, int, int]]] = {}
    for j, (ci, pi, t0) in enumerate(var):
        if x[j] > 1e-12:
            by_comm.setdefault(ci, []).append((float(x[j]), pi, t0))
    phi = (math.sqrt(5) - 1) / 2
    out: dict[int, list[tuple[int, int, int]]] = {}
    for ci, cm in enumerate(comms):
        opts = sorted(by_comm.get(ci, []), key=lambda o: (o[2], o[1]))
        total = sum(o[0] for o in opts)
        k = len(cm.chunks)
        u = (ci * phi) % 1.0
        picks = []
        acc, oi = 0.0, 0
        for j in range(k):
            point = (j + u) / k * total
            while oi < len(opts) - 1 and acc + opts[oi][0] <= point:
                acc += opts[oi][0]
                oi += 1
            picks.append((j, opts[oi][1], opts[oi][2]))
        out[ci] = picks
    return out


def _cost(comms: list[Commodity], hop_res: list[list[list[tuple[int, float]]]],
          hop_alpha: list[list[list[float]]],
          choice: dict[int, list[tuple[int, int, int]]], tau_mb: np.ndarray, chunk_mb: float, S: int
          ) -> tuple[float, float]:
    used = [Counter() for _ in range(S)]
    amax = [dict() for _ in range(S)]
    for ci, picks in choice.items():
        for _, pi, t0 in picks:
            for hop, res in enumerate(hop_res[ci][pi]):
                a = hop_alpha[ci][pi][hop]
                for o, mult in res:
                    used[t0 + hop][o] += mult
                    if a > amax[t0 + hop].get(o, -1.0):
                        amax[t0 + hop][o] = a
    total, bw = 0.0, 0.0
    for t in range(S):
        if not used[t]:
            continue
        total += max(amax[t][o] + cnt * chunk_mb * tau_mb[o] for o, cnt in used[t].items())
        bw += max(cnt * chunk_mb * tau_mb[o] for o, cnt in used[t].items())
    return total, bw


def _pairs(collective: Collective) -> dict[tuple[int, int], list[int]]:
    """(source, destination) -> the chunks that must move from one to the other."""
    pairs: dict[tuple[int, int], list[int]] = {}
    for c, (pre, post) in enumerate(zip(collective.pre, collective.post, strict=True)):
        for r in post:
            if r not in pre:
                pairs.setdefault((pre[0], r), []).append(c)
    return pairs


def flow_encoding(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """``--encoding flow``: see the module docstring."""
    _applicable(collective)
    opts = FlowOptions.parse(options.extra)
    size = opts.size
    n = topology.num_ranks
    max_paths = opts.max_paths
    extra_steps = opts.extra_steps
    max_transfers = opts.max_transfers
    standard = collective.custom is None
    symmetric = standard and collective.kind == "alltoall"
    stripes = opts.rail_stripes
    group = (rank_group(topology, enabled=opts.symmetry, nodes_only=stripes)
             if symmetric else trivial_group(n))
    rm = ResourceMap(topology, group)
    graph = logical_graph(topology, group, resources=rm, stripes=stripes)
    finder = _Paths(topology, graph, max_paths, direct=not stripes)
    # commodities: the representatives' (source, destination) pairs; chunks are set per k below
    if symmetric:
        keys = [(rho, d) for rho in group.reps for d in range(n) if d != rho]
        base_pairs = {key: [0] for key in keys}
    else:
        base_pairs = _pairs(collective)
        keys = sorted(base_pairs)
    if not keys:
        return {"flow": Schedule(collective, topology.name, topology.content_hash, (), "flow", "flow",
                                 {"why": "flow: nothing to move"})}
    comms = [Commodity(s, d, tuple(base_pairs[(s, d)]), finder.paths(s, d)) for s, d in keys]
    ecache: dict[tuple[int, int], tuple[tuple[int, float], ...]] = {}
    hop_res = [[[_edge_orbits(topology, rm, p[i], p[i + 1], ecache) for i in range(len(p) - 1)]
                for p in cm.paths] for cm in comms]
    hop_alpha = [[[topology.channel(p[i], p[i + 1]).alpha_us for i in range(len(p) - 1)]  # type: ignore[union-attr]
                  for p in cm.paths] for cm in comms]
    tau_mb = np.array([rm.beta[o] / rm.lanes[o] for o in range(rm.count)])
    s_min = max(min(len(p) - 1 for p in cm.paths) for cm in comms)
    # data of each commodity in MB at the target size (independent of the chunking)
    chunk1_mb = size / collective.buffer_chunks / MB
    data_mb = [chunk1_mb * len(cm.chunks) for cm in comms]
    # chunkings to try: k chunks per rank for standard collectives (k x the input's chunks)
    moved = sum(len(cm.chunks) for cm in comms) * (group.order if symmetric else 1)
    if options.chunks or not standard:
        ks = [int(options.chunks or collective.chunks_per_rank)]
    else:
        cap = max_chunks_per_rank(collective.kind, n)     # dgx_h100 x 64 alltoall: 4, not 8
        ks = [k for k in (1, 2, 4, 8, 16, 32, 64)
              if moved * k * s_min <= max_transfers and k <= cap] or [1]
    sized_by_k: dict[int, tuple[Collective, list[Commodity]]] = {}
    for k in ks:
        coll_k = (make_collective(collective.kind, n, k, collective.root, collective.inplace)
                  if standard else collective)
        if symmetric:
            sized = [Commodity(cm.src, cm.dst, tuple(range(k)), cm.paths) for cm in comms]
        else:
            pk = _pairs(coll_k)
            sized = [Commodity(cm.src, cm.dst, tuple(pk[(cm.src, cm.dst)]), cm.paths) for cm in comms]
        sized_by_k[k] = (coll_k, sized)
    best: tuple[float, int, FlowPlan] | None = None
    stale, lp_best = 0, math.inf
    for S in range(s_min, s_min + extra_steps + 1):
        if stale >= 2:  # two more steps did not help: the α term now outweighs pipelining
            break
        value, x, var, _ = _solve_lp(comms, hop_res, tau_mb, data_mb, S)
        # α of the LP's busy steps (the smallest α among the orbits it loads in each step)
        lp_alpha = _lp_alpha(comms, hop_res, hop_alpha, x, var, S)
        for k in ks:
            coll_k, sized = sized_by_k[k]
            chunk_mb = size / coll_k.buffer_chunks / MB
            choice = _round(sized, x, var)
            cost, _ = _cost(sized, hop_res, hop_alpha, choice, tau_mb, chunk_mb, S)
            plan = FlowPlan(S, value, value + lp_alpha, choice, cost)
            if best is None or cost < best[0] * (1 - 1e-12):
                best = (cost, k, plan)
        stale = 0 if value + lp_alpha < lp_best * (1 - 1e-6) else stale + 1
        lp_best = min(lp_best, value + lp_alpha)
    assert best is not None
    cost, k, plan = best
    coll, sized = sized_by_k[k]
    steps = _build_steps(topology, group, coll, sized, plan, k if symmetric else 0)
    gap = cost / plan.lp_us - 1 if plan.lp_us > 0 else 0.0
    why = (f"flow: {collective.name} moves every chunk from one rank to one rank, so a "
           f"multi-commodity flow (no copies) is exact; time-expanded LP over {len(comms)} "
           f"{'representative ' if symmetric else ''}commodities, {plan.steps} steps, symmetry "
           f"{group.describe()}; rounded to {k} chunk(s) per rank, {100 * gap:.2f}% above the LP "
           f"optimum at {size} bytes")
    meta = {
        "why": why,
        "size_bytes": size,
        "steps": plan.steps,
        "chunks_per_rank": coll.chunks_per_rank,
        "lp_bandwidth_us": round(plan.lp_bandwidth_us, 6),
        "lp_optimum_us": round(plan.lp_us, 6),
        "predicted_us": round(cost, 6),
        "lp_gap": round(gap, 9),
        "commodities": len(comms),
        "symmetry": group.describe(),
    }
    return {"flow": Schedule(coll, topology.name, topology.content_hash, tuple(steps), "flow",
                             "flow", meta)}


def _lp_alpha(comms, hop_res, hop_alpha, x, var, S) -> float:
    lo = [math.inf] * S
    for j, (ci, pi, t0) in enumerate(var):
        if x[j] <= 1e-9:
            continue
        for hop in range(len(hop_res[ci][pi])):
            lo[t0 + hop] = min(lo[t0 + hop], hop_alpha[ci][pi][hop])
    return sum(a for a in lo if math.isfinite(a))


def _build_steps(topology: Topology, group: RankGroup, coll: Collective, comms: list[Commodity],
                 plan: FlowPlan, k: int) -> list[Step]:
    n = topology.num_ranks
    perms = group.perms
    per_step: list[list[tuple[int, int, int, int]]] = [[] for _ in range(plan.steps)]
    # (src rank, dst rank, path position a, b) per representative chunk
    for ci, picks in plan.choice.items():
        cm = comms[ci]
        for j, pi, t0 in picks:
            path = cm.paths[pi]
            for hop in range(len(path) - 1):
                per_step[t0 + hop].append((ci, j, path[hop], path[hop + 1]))
    steps: list[Step] = []
    for items in per_step:
        if not items:
            continue
        arr = np.asarray(items, dtype=np.int64)
        ci, j, a, b = arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
        src_of = np.asarray([comms[i].src for i in range(len(comms))], dtype=np.int64)
        dst_of = np.asarray([comms[i].dst for i in range(len(comms))], dtype=np.int64)
        if k:  # symmetric alltoall: chunk (s, d, i) -> (s*n + d)*k + i
            u = perms[:, a].ravel()
            v = perms[:, b].ravel()
            s_r = perms[:, src_of[ci]].ravel()
            d_r = perms[:, dst_of[ci]].ravel()
            jj = np.broadcast_to(j, (perms.shape[0], j.size)).ravel()
            chunk = (s_r * n + d_r) * k + jj
        else:
            u, v = a, b
            chunk = np.asarray([comms[i].chunks[x] for i, x in zip(ci.tolist(), j.tolist(), strict=True)],
                               dtype=np.int64)
        steps.append(step_from_arrays(u, v, chunk, topology))
    return steps


__all__ = ["DEFAULT_SIZE", "flow_encoding"]
