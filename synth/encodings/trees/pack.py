"""Spanning-tree packing for the ``trees`` encoding (ForestColl's optimum, solved by column generation).

The problem: every *root* (a rank whose data must reach all others) splits its data over a set of
spanning out-trees of the **logical graph** — rank-to-rank edges, one per link and, for a switch,
one per pair of ranks on different ports (the switch "unwound", as ForestColl's edge splitting
does) — so that the data every resource carries per unit of time fits its bandwidth. A logical edge
loads the resources of :meth:`Topology.channel`: a link, or the sender's out-port and the
receiver's in-port of a switch, so a port shared by several ranks (a NIC) stays one budget.

Minimise T such that, for every resource e, ``sum over trees t of w_t · uses_t(e) <= cap_e · T``
and every root's tree weights sum to 1. T times the per-root data is the time of the collective;
ForestColl proves the optimum equals the allgather cut bound, and :func:`pack_trees` reports both.

Solved as a linear program over tree columns (Dantzig–Wolfe): the restricted LP gives resource
prices, and the pricing problem — the cheapest spanning arborescence of a root under those prices —
is Edmonds' algorithm (:func:`min_arborescence`, array-based, Chu–Liu contraction), so no tree is
ever enumerated blindly. With a rank group ``H`` (:mod:`.symmetry`) only one root per orbit is
priced and the capacity rows are per *resource orbit*: a representative's tree edge on a resource
of orbit O puts ``|H|/|O|`` units on every resource of O once replicated.

Three lexicographic LP stages share the columns — least T, then the least load ratio on the
resources the bottleneck leaves slack (balance), then the least busy time plus a small charge per
tree level (lean) — and, besides Edmonds, the pricing step offers shortest-path trees and
"relay-first" trees (the root hands the data to one neighbour, which fans it out) so that shallow
trees are available when they are as good. Optional restrictions (``shallow``) keep each root's
trees on near-shortest paths.

Large switches are unwound sparsely: all pairs up to :data:`FULL_SWITCH_PAIRS`, else the pairs of
ranks with the same local index in different nodes (the NIC rails), which keeps every cut the
bound uses and makes a 1024-rank fabric 130k edges instead of a million.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ... import progress
from ...errors import SynthError
from ...topology import Topology
from ..symmetry import RankGroup, ResourceMap

FULL_SWITCH_PAIRS = 8192
"""A switch with at most this many cross-port rank pairs is unwound into all of them."""


# ==================================================================================== logical graph
@dataclass
class LogicalGraph:
    """Rank-level edges with the resource orbits each one loads.

    ``src[i] -> dst[i]`` is a logical edge; with ``reverse`` it stands for the real transfer
    ``dst[i] -> src[i]`` (in-trees for reductions are out-trees of the reversed graph).
    ``load`` is the (edges x orbits) sparse matrix of chunks one use of the edge puts on every
    resource of each orbit.
    """

    n: int
    src: np.ndarray
    dst: np.ndarray
    alpha: np.ndarray
    load: sp.csr_array
    orbit_edges: list[list[int]]
    """orbit -> the edges that load it (for reports)."""
    resources: ResourceMap
    reverse: bool
    sparse_switches: tuple[str, ...] = ()

    @property
    def num_edges(self) -> int:
        return int(self.src.size)

    def cap(self) -> np.ndarray:
        """Per orbit: the bandwidth of one of its resources, GB/s."""
        rm = self.resources
        return np.array([rm.lanes[o] * 1000.0 / rm.beta[o] for o in range(rm.count)])

    def tau_per_mb(self) -> np.ndarray:
        """Per orbit: µs one chunk of 1 MB (10^6 B) occupies one resource of the orbit."""
        rm = self.resources
        return np.array([rm.beta[o] / rm.lanes[o] for o in range(rm.count)])


def _switch_pairs(topology: Topology, s: int, stripes: bool = False
                  ) -> tuple[list[tuple[int, int]], bool]:
    """Cross-port rank pairs of switch ``s``: all of them, or the rail-aligned ones when too many.

    ``stripes`` (rail-aligned case only) keeps, for the ranks of local index j, only the node
    offsets d with ``(d - 1) mod L == j`` plus the first offset of stripe j+1 (so the LP can still
    balance the NICs): every rank then talks to about ``nodes / L + 1`` remote peers instead of
    ``nodes - 1``, which is what a runtime with a per-channel threadblock limit (MSCCL: 32) can load.
    """
    sw = topology.switches[s]
    port_of: dict[int, int] = {}
    for p, port in enumerate(sw.ports):
        for r in port.ranks:
            port_of[r] = p
    members = sorted(port_of)
    total = len(members) * (len(members) - 1) - sum(len(p.ranks) * (len(p.ranks) - 1)
                                                    for p in sw.ports)
    if total <= FULL_SWITCH_PAIRS:
        return [(a, b) for a in members for b in members if a != b and port_of[a] != port_of[b]], False
    nodes = [tuple(m) for m in topology.nodes]
    if len(nodes) > 1 and len({len(m) for m in nodes}) == 1:
        node_of, local = topology.node_of, {}
        for members_of_node in nodes:
            for j, r in enumerate(members_of_node):
                local[r] = j
        by_local: dict[int, list[int]] = {}
        for r in members:
            by_local.setdefault(local[r], []).append(r)
        m, size = len(nodes), len(nodes[0])
        allowed: dict[int, set[int]] | None = None
        if stripes and m - 1 > size:  # more remote nodes than local ranks: worth striping
            allowed = {}
            for j in range(size):
                mine = {d for d in range(1, m) if (d - 1) % size == j}
                nxt = sorted(d for d in range(1, m) if (d - 1) % size == (j + 1) % size)
                allowed[j] = mine | set(nxt[:1])
        pairs = [(a, b) for j, group in by_local.items() for a in group for b in group
                 if node_of[a] != node_of[b] and port_of[a] != port_of[b]
                 and (allowed is None or (node_of[b] - node_of[a]) % m in allowed[j])]
        if pairs:
            return pairs, True
    # one flat switch too large to unwind: each rank reaches the ports at power-of-two offsets
    ports = [p for p in range(len(sw.ports)) if sw.ports[p].ranks]
    pos = {p: i for i, p in enumerate(ports)}
    out = set()
    for a in members:
        i = pos[port_of[a]]
        step = 1
        while step < len(ports):
            for q in (ports[(i + step) % len(ports)], ports[(i - step) % len(ports)]):
                rks = sw.ports[q].ranks
                b = rks[sw.ports[port_of[a]].ranks.index(a) % len(rks)]
                if port_of[b] != port_of[a]:
                    out.add((a, b))
            step *= 2
    return sorted(out), True


def logical_graph(topology: Topology, group: RankGroup, *, reverse: bool = False,
                  resources: ResourceMap | None = None, stripes: bool = False) -> LogicalGraph:
    """The sparse rank-level graph the packing prices (see the module docstring); ``stripes``
    limits each rank's fabric peers (see :func:`_switch_pairs`; the group must then not move ranks
    between local indices)."""
    n = topology.num_ranks
    pairs: set[tuple[int, int]] = {(lk.src, lk.dst) for lk in topology.links if lk.src != lk.dst}
    sparse = []
    for s in range(len(topology.switches)):
        found, is_sparse = _switch_pairs(topology, s, stripes)
        pairs.update(found)
        if is_sparse:
            sparse.append(topology.switches[s].name)
    rm = resources or ResourceMap(topology, group)
    src, dst, alpha, rows, cols, vals = [], [], [], [], [], []
    for a, b in sorted(pairs):
        ch = topology.channel(a, b)
        if ch is None:
            continue
        i = len(src)
        if reverse:
            src.append(b)
            dst.append(a)
        else:
            src.append(a)
            dst.append(b)
        alpha.append(ch.alpha_us)
        for res, beta, lanes in ch.resources:
            o = rm.add(res, beta, lanes)
            rows.append(i)
            cols.append(o)
            vals.append(rm.mult(o))
    m = len(src)
    load = sp.csr_array((np.asarray(vals, dtype=float), (np.asarray(rows), np.asarray(cols))),
                        shape=(m, rm.count))
    load.sum_duplicates()
    orbit_edges: list[list[int]] = [[] for _ in range(rm.count)]
    coo = load.tocoo()
    for i, o in zip(coo.row.tolist(), coo.col.tolist(), strict=True):
        orbit_edges[o].append(i)
    return LogicalGraph(n, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                        np.asarray(alpha, dtype=float), load, orbit_edges, rm, reverse,
                        tuple(sparse))


# ==================================================================================== Edmonds
def min_arborescence(n: int, src: np.ndarray, dst: np.ndarray, cost: np.ndarray, root: int
                     ) -> np.ndarray:
    """Edge indices of a minimum-cost spanning arborescence rooted at ``root`` (Chu–Liu/Edmonds).

    Array-based contraction: each round picks every vertex's cheapest incoming edge (ties by edge
    index, so the result is deterministic), contracts the cycles they form with reduced costs, and
    repeats; the expansion keeps, in every cycle, all cycle edges but the one entering the vertex
    where the outside edge arrives. Raises SynthError when some vertex is unreachable.
    """
    m = src.size
    eid = np.arange(m, dtype=np.int64)
    u, v, w = src.astype(np.int64), dst.astype(np.int64), cost.astype(float).copy()
    nv, r = n, root
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    # levels[l] = (comp: level-l vertex -> level-(l+1) vertex, in_cycle mask, best edge id per vertex)
    while True:
        keep = (u != v) & (v != r)
        eid, u, v, w = eid[keep], u[keep], v[keep], w[keep]
        order = np.lexsort((eid, w, v))
        vs = v[order]
        first = np.ones(vs.size, dtype=bool)
        first[1:] = vs[1:] != vs[:-1]
        best = order[first]
        best_edge = np.full(nv, -1, dtype=np.int64)
        best_edge[v[best]] = eid[best]
        pre = np.full(nv, -1, dtype=np.int64)
        pre[v[best]] = u[best]
        inw = np.zeros(nv)
        inw[v[best]] = w[best]
        lacking = [x for x in range(nv) if x != r and pre[x] < 0]
        if lacking:
            raise SynthError("the logical graph does not reach every rank from the root; the "
                             "topology is disconnected for this collective")
        # cycles of the functional graph x -> pre[x]
        state = np.zeros(nv, dtype=np.int8)  # 0 new, 1 on stack, 2 done
        comp = np.full(nv, -1, dtype=np.int64)
        in_cycle = np.zeros(nv, dtype=bool)
        ncomp = 0
        pre_l = pre.tolist()
        state_l = [0] * nv
        comp_l = [-1] * nv
        state_l[r] = 2
        for x0 in range(nv):
            if state_l[x0]:
                continue
            path = []
            x = x0
            while x >= 0 and state_l[x] == 0:
                state_l[x] = 1
                path.append(x)
                x = pre_l[x]
            if x >= 0 and state_l[x] == 1:  # found a new cycle through x
                y = x
                while True:
                    comp_l[y] = ncomp
                    in_cycle[y] = True
                    y = pre_l[y]
                    if y == x:
                        break
                ncomp += 1
            for y in path:
                state_l[y] = 2
        del state
        if ncomp == 0:
            levels.append((np.arange(nv), in_cycle, best_edge))
            break
        for x in range(nv):
            if comp_l[x] < 0:
                comp_l[x] = ncomp
                ncomp += 1
        comp = np.asarray(comp_l, dtype=np.int64)
        levels.append((comp, in_cycle, best_edge))
        w = w - inw[v]
        u, v = comp[u], comp[v]
        r = int(comp[r])
        nv = ncomp
    # level ids of every original vertex, per level
    ids = [np.arange(n, dtype=np.int64)]
    for comp, _, _ in levels[:-1]:
        ids.append(comp[ids[-1]])
    _, _, top_best = levels[-1]
    chosen = top_best  # per top-level vertex: original edge id (-1 for the root)
    for lvl in range(len(levels) - 2, -1, -1):
        comp, in_cycle, best_edge = levels[lvl]
        entering = chosen[comp]  # edge entering each vertex's super vertex
        lvl_dst = np.where(entering >= 0, ids[lvl][dst[np.maximum(entering, 0)]], -1)
        own = np.arange(comp.size)
        chosen = np.where(in_cycle & (lvl_dst != own), best_edge, entering)
    chosen = chosen[chosen >= 0]
    return np.sort(chosen)


# ==================================================================================== packing
@dataclass
class Tree:
    """One spanning out-tree of a representative root, as logical-edge indices in BFS order."""

    rep: int
    root: int
    edges: np.ndarray
    weight: float = 0.0


@dataclass
class Packing:
    """The LP optimum: trees per representative with weights summing to 1 per representative."""

    graph: LogicalGraph
    roots: tuple[int, ...]
    trees: list[Tree]
    T: float
    """Optimal time per unit of per-root data, in (GB / (GB/s)): seconds per GB."""
    iterations: int
    columns: int
    optimal: bool
    seconds: float
    notes: list[str] = field(default_factory=list)

    def time_us(self, per_root_bytes: float) -> float:
        return self.T * per_root_bytes / 1e3


def _bfs_order(n: int, src: np.ndarray, dst: np.ndarray, edges: np.ndarray, root: int) -> np.ndarray:
    children: dict[int, list[int]] = {}
    for e in edges.tolist():
        children.setdefault(int(src[e]), []).append(e)
    out, frontier = [], [root]
    while frontier:
        nxt = []
        for x in frontier:
            for e in sorted(children.get(x, ()), key=lambda e: int(dst[e])):
                out.append(e)
                nxt.append(int(dst[e]))
        frontier = nxt
    if len(out) != n - 1:
        raise AssertionError("an arborescence must span the ranks")
    return np.asarray(out, dtype=np.int64)


def _hops_from(n: int, src: np.ndarray, dst: np.ndarray, root: int) -> np.ndarray:
    g = sp.csr_array((np.ones(src.size), (src, dst)), shape=(n, n))
    from scipy.sparse.csgraph import shortest_path
    d = shortest_path(g, directed=True, unweighted=True, indices=root)
    return np.where(np.isfinite(d), d, n)


def pack_trees(graph: LogicalGraph, roots: tuple[int, ...], *, time_limit_s: float = 120.0,
               max_iterations: int = 400, target_T: float | None = None,
               refine: bool = True, balance: bool = True, shallow: float | None = None) -> Packing:
    """Column generation for the minimum-T tree packing of ``roots`` (one per group orbit).

    Three lexicographic stages share the columns (the pricing step adapts to each objective):

    1. ``T``: the least time per unit of data (the cut bound);
    2. ``balance``: at that T, the least load ratio on the resources the bottleneck leaves slack
       (e.g. spread a torus's relays over all its directions instead of one), which is the ratio
       the pipelined schedule's geometric ramp is limited by;
    3. ``lean``: at both, the least total busy time (no detours).

    ``target_T`` (the cut bound in the same units) ends stage 1 as soon as it is reached;
    ``refine`` False stops after stage 1, ``balance`` False skips stage 2. ``shallow`` (a slack,
    as a fraction of the median edge weight) restricts every root's trees to its near-shortest
    paths in the β metric (an edge is weighted by the µs/MB of its resources): an edge u->v is kept
    when ``dist(u) + w(u, v) <= dist(v) + slack``. Slack 0 is the shortest-path DAG; a slack below
    one slow hop forbids extra slow hops (a second NIC crossing) but allows cheap detours. Trees
    get shallower, at a T that may exceed the bound.
    """
    start = time.perf_counter()
    n, src, dst = graph.n, graph.src, graph.dst
    cap = graph.cap()
    load = graph.load
    hops = [_hops_from(n, src, dst, r) for r in roots]
    # tie-break towards shallow trees: a tiny cost growing with the sender's distance to the root
    tiny = [1e-7 * (h[src] + 1.0) for h in hops]
    if shallow is not None and shallow is not False:  # edges off near-shortest paths never enter
        pattern = load.copy()
        pattern.data = np.ones_like(pattern.data)
        wt = np.asarray(pattern @ graph.tau_per_mb()).ravel()
        slack = shallow * float(np.median(wt)) + 1e-9 * float(wt.max())
        from scipy.sparse.csgraph import dijkstra
        wg = sp.csr_array((wt, (src, dst)), shape=(n, n))
        for i, r in enumerate(roots):
            dist = dijkstra(wg, directed=True, indices=r)
            tiny[i] = np.where(dist[src] + wt <= dist[dst] + slack, tiny[i], np.inf)
    columns: list[tuple[int, np.ndarray, np.ndarray]] = []  # (rep index, edges, usage per orbit)
    depths: list[int] = []
    seen: set[tuple[int, bytes]] = set()

    def add_column(i: int, edges: np.ndarray) -> bool:
        key = (i, edges.tobytes())
        if key in seen:
            return False
        seen.add(key)
        usage = np.asarray(load[edges].sum(axis=0)).ravel()
        columns.append((i, edges, usage))
        depths.append(_depth(n, src, dst, edges, roots[i]))
        return True

    pair_index = sp.csr_array((np.arange(src.size) + 1.0, (src, dst)), shape=(n, n))
    out_nbrs: dict[int, list[int]] = {}
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        out_nbrs.setdefault(a, []).append(b)

    base = load @ (1.0 / cap)  # busy time of one use of each edge per unit of data
    for i, r in enumerate(roots):
        add_column(i, _arborescence(n, src, dst, base * (1 + tiny[i]), r))
    notes: list[str] = []
    iterations = 0
    optimal = False

    def generate(stage: _Stage) -> tuple[float, np.ndarray]:
        nonlocal iterations, optimal
        rounds = 0
        while True:
            iterations += 1
            rounds += 1
            value, sol, price, mu = _restricted_lp(columns, cap, len(roots), stage, depths)
            if stage.kind == "T" and target_T is not None and value <= target_T * (1 + 1e-9):
                optimal = True
                notes.append("reached the cut bound")
                return value, sol
            if stage.kind != "T" and rounds > SECONDARY_ROUNDS:
                notes.append(f"{stage.kind}: stopped after {SECONDARY_ROUNDS} LP rounds")
                return value, sol
            if iterations >= max_iterations or time.perf_counter() - start > time_limit_s:
                notes.append(f"stopped after {iterations} LP rounds "
                             f"({time.perf_counter() - start:.1f} s)")
                return value, sol
            cost = load @ price
            if stage.kind == "lean":
                cost = cost + base
            improved = False
            scale = max(float(cost.max(initial=0.0)), 1e-12)
            for i, r in enumerate(roots):
                cands = [_arborescence(n, src, dst, cost + scale * tiny[i], r)]
                allowed = np.isfinite(tiny[i])
                if stage.kind == "lean":  # shallow candidates: shortest paths with a per-hop toll
                    for toll in (0.25, 1.0, 4.0):
                        cands.append(_path_tree(n, src, dst, cost + toll * stage.depth_weight,
                                                allowed, pair_index, r))
                if n <= RELAY_FIRST_MAX_RANKS:  # relay-first: root -> a, then a's path tree
                    toll = stage.depth_weight or 0.05 * float(np.mean(cost)) + 1e-12
                    for a in _spread(out_nbrs[r], RELAY_FIRST_NEIGHBOURS):
                        tree = _relay_tree(n, src, dst, cost + toll, allowed, pair_index, r, a)
                        if tree is not None:
                            cands.append(tree)
                for edges in cands:
                    reduced = float(cost[edges].sum()) - float(mu[i])
                    if stage.kind == "lean":
                        reduced += stage.depth_weight * _depth(n, src, dst, edges, r)
                    if reduced < -1e-9 * max(1.0, abs(float(mu[i]))) and add_column(i, edges):
                        improved = True
            if not improved:
                if stage.kind == "T":
                    optimal = True
                    notes.append("no improving tree: LP optimum over the logical graph")
                return value, sol

    best_T, sol = generate(_Stage("T"))
    if refine and time.perf_counter() - start < time_limit_s:
        T_cap = best_T * (1 + 1e-7)
        ratio = _usage(columns, sol) / cap
        slack = ratio < best_T * (1 - 1e-6)
        if balance and slack.any():
            bal, sol = generate(_Stage("balance", T_cap, slack))
            notes.append(f"balance: slack resources at {bal / best_T:.3f} of the bottleneck's load")
            _, sol = generate(_Stage("lean", T_cap, slack, bal * (1 + 1e-7), best_T * DEPTH_WEIGHT))
        else:
            _, sol = generate(_Stage("lean", T_cap, depth_weight=best_T * DEPTH_WEIGHT))
        notes.append("lean: least busy time among those packings")
        best_T = float(np.max(_usage(columns, sol) / cap))
    trees = []
    for j, (i, edges, _) in enumerate(columns):
        w = float(sol[j])
        if w > 1e-9:
            trees.append(Tree(i, roots[i], _bfs_order(n, src, dst, edges, roots[i]), w))
    # renormalise per root (HiGHS tolerances)
    for i in range(len(roots)):
        total = sum(t.weight for t in trees if t.rep == i)
        for t in trees:
            if t.rep == i:
                t.weight /= total
    return Packing(graph, roots, trees, best_T, iterations, len(columns), optimal,
                   time.perf_counter() - start, notes)


DEPTH_WEIGHT = 0.02
"""In the lean stage each level of a tree costs this fraction of T: a pipelined schedule pays about
one step per level to fill and drain, so among optimal packings the shallower wins."""


def _depth(n: int, src: np.ndarray, dst: np.ndarray, edges: np.ndarray, root: int) -> int:
    parent = {int(dst[e]): int(src[e]) for e in edges.tolist()}
    depth = {root: 0}

    def d(v: int) -> int:
        chain = []
        while v not in depth:
            chain.append(v)
            v = parent[v]
        base = depth[v]
        for u in reversed(chain):
            base += 1
            depth[u] = base
        return depth[chain[0]] if chain else base

    return max((d(v) for v in parent), default=0)


def _edge_ids(pair_index: sp.csr_array, heads: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """Indices of the edges ``heads[k] -> tails[k]`` (``pair_index`` stores index + 1).

    An empty selection is answered directly: scipy returns a sparse array, not a dense one, for an
    empty fancy index (a 2-rank relay tree has no edge after its first hop).
    """
    if heads.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(pair_index[heads, tails]).ravel().astype(np.int64) - 1


def _path_tree(n: int, src: np.ndarray, dst: np.ndarray, cost: np.ndarray, allowed: np.ndarray,
               pair_index: sp.csr_array, root: int) -> np.ndarray:
    """Edges of a shortest-path tree from ``root`` under ``cost`` (over the ``allowed`` edges)."""
    from scipy.sparse.csgraph import dijkstra

    idx = np.flatnonzero(allowed)
    g = sp.csr_array((cost[idx], (src[idx], dst[idx])), shape=(n, n))
    dist, pred = dijkstra(g, directed=True, indices=root, return_predecessors=True)
    vs = np.flatnonzero(pred >= 0)
    if vs.size != n - 1 or not np.isfinite(dist).all():
        raise SynthError("the logical graph does not reach every rank from the root")
    edges = _edge_ids(pair_index, pred[vs], vs)
    return np.sort(edges)


SECONDARY_ROUNDS = 40
"""LP rounds allowed to the balance and lean stages (secondary objectives: a good answer suffices)."""

RELAY_FIRST_MAX_RANKS = 64
"""Relay-first candidate trees are priced up to this many ranks (one Dijkstra per neighbour)."""
RELAY_FIRST_NEIGHBOURS = 16


def _spread(items: list[int], k: int) -> list[int]:
    items = sorted(items)
    if len(items) <= k:
        return items
    return [items[(i * len(items)) // k] for i in range(k)]


def _relay_tree(n: int, src: np.ndarray, dst: np.ndarray, cost: np.ndarray, allowed: np.ndarray,
                pair_index: sp.csr_array, root: int, first: int) -> np.ndarray | None:
    """root -> ``first``, then a shortest-path tree from ``first`` to everyone else (a broadcast
    that hands the data to one relay before it fans out: shallow, and off the root's own links)."""
    from scipy.sparse.csgraph import dijkstra

    e0 = int(pair_index[root, first]) - 1
    if e0 < 0 or not allowed[e0]:
        return None
    idx = np.flatnonzero(allowed & (dst != root) & (dst != first))
    g = sp.csr_array((cost[idx], (src[idx], dst[idx])), shape=(n, n))
    _, pred = dijkstra(g, directed=True, indices=first, return_predecessors=True)
    vs = np.flatnonzero(pred >= 0)
    if vs.size != n - 2:
        return None
    edges = _edge_ids(pair_index, pred[vs], vs)
    return np.sort(np.append(edges, e0))


def _arborescence(n: int, src: np.ndarray, dst: np.ndarray, cost: np.ndarray, root: int) -> np.ndarray:
    """:func:`min_arborescence` over the edges of finite cost (indices into the full arrays)."""
    ok = np.isfinite(cost)
    if ok.all():
        return min_arborescence(n, src, dst, cost, root)
    idx = np.flatnonzero(ok)
    return np.sort(idx[min_arborescence(n, src[idx], dst[idx], cost[idx], root)])


@dataclass(frozen=True)
class _Stage:
    """One LP objective: ``T`` (min T), ``balance`` (min the slack resources' load ratio at a fixed
    T) or ``lean`` (min busy time at a fixed T and balance)."""

    kind: str
    T: float | None = None
    slack: np.ndarray | None = None
    ratio: float | None = None
    depth_weight: float = 0.0


def _usage(columns: list[tuple[int, np.ndarray, np.ndarray]], w: np.ndarray) -> np.ndarray:
    total = np.zeros(columns[0][2].size)
    for j, (_, _, usage) in enumerate(columns):
        if w[j] > 0:
            total += w[j] * usage
    return total


def _restricted_lp(columns: list[tuple[int, np.ndarray, np.ndarray]], cap: np.ndarray, n_roots: int,
                   stage: _Stage, depths: list[int]) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """The LP over the current columns: (objective, tree weights, orbit prices >= 0, root duals).

    Variables: the tree weights, then (stages T and balance) one extra variable, T or the balance
    ratio. Rows: ``usage <= cap * T`` for every orbit, and for the slack orbits ``usage <= cap *
    ratio``; each orbit's price is the sum of its rows' duals.
    """
    k_orb = cap.size
    c_n = len(columns)
    extra = stage.kind in ("T", "balance")
    nvar = c_n + (1 if extra else 0)
    usage_rows, usage_cols, usage_vals = [], [], []
    for j, (_, _, usage) in enumerate(columns):
        nz = np.flatnonzero(usage)
        usage_rows.extend(nz.tolist())
        usage_cols.extend([j] * nz.size)
        usage_vals.extend(usage[nz].tolist())
    rows, cols, vals = list(usage_rows), list(usage_cols), list(usage_vals)
    b_ub: list[float] = []
    row_orbit = list(range(k_orb))
    obj = np.zeros(nvar)
    if stage.kind == "T":
        rows.extend(range(k_orb))
        cols.extend([c_n] * k_orb)
        vals.extend((-cap).tolist())
        b_ub.extend([0.0] * k_orb)
        obj[c_n] = 1.0
    else:
        assert stage.T is not None
        b_ub.extend((cap * stage.T).tolist())
    if stage.slack is not None:
        idx = np.flatnonzero(stage.slack)
        remap = {int(o): k_orb + i for i, o in enumerate(idx)}
        for r, c, v in zip(usage_rows, usage_cols, usage_vals, strict=True):
            if r in remap:
                rows.append(remap[r])
                cols.append(c)
                vals.append(v)
        row_orbit.extend(int(o) for o in idx)
        if stage.kind == "balance":
            rows.extend(remap.values())
            cols.extend([c_n] * idx.size)
            vals.extend((-cap[idx]).tolist())
            b_ub.extend([0.0] * idx.size)
            obj[c_n] = 1.0
        else:
            assert stage.ratio is not None
            b_ub.extend((cap[idx] * stage.ratio).tolist())
    if stage.kind == "lean":
        for j, (_, _, usage) in enumerate(columns):
            obj[j] = float(np.sum(usage / cap)) + stage.depth_weight * depths[j]
    n_rows = len(b_ub)
    a_ub = sp.csr_array((vals, (rows, cols)), shape=(n_rows, nvar))
    eq_rows = [i for i, _, _ in columns]
    a_eq = sp.csr_array((np.ones(c_n), (eq_rows, np.arange(c_n))), shape=(n_roots, nvar))
    with progress.span("solve"):
        res = linprog(obj, A_ub=a_ub, b_ub=np.asarray(b_ub), A_eq=a_eq, b_eq=np.ones(n_roots),
                      bounds=(0, None), method="highs")
    if res.status != 0:
        raise SynthError(f"tree-packing LP failed ({stage.kind}): {res.message}")
    duals = np.maximum(-np.asarray(res.ineqlin.marginals), 0.0)
    price = np.zeros(k_orb)
    np.add.at(price, np.asarray(row_orbit, dtype=np.int64), duals)
    mu = np.asarray(res.eqlin.marginals)
    return float(res.fun), np.asarray(res.x[:c_n]), price, mu


def packing_time_per_unit(graph: LogicalGraph, trees: list[tuple[Tree, float]]) -> float:
    """max over orbits of load / capacity for trees with the given weights (per unit of data)."""
    usage = np.zeros(graph.cap().size)
    for tree, w in trees:
        usage += w * np.asarray(graph.load[tree.edges].sum(axis=0)).ravel()
    return float(np.max(usage / graph.cap()))
