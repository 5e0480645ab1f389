"""Graph machinery for the baseline algorithms: adjacency, BFS trees, shortest paths, Hamiltonian
cycles (for rings) and the step plan that becomes a list of :class:`~synth.schedule.Step`.

Adjacency is the topology's own: ``b`` is adjacent to ``a`` when a transfer ``a -> b`` has a channel
(a direct link or a switch between two ports). Everything here is deterministic: neighbours are
visited in rank order and ties are broken by rank.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence

import networkx as nx

from ...collectives import Collective
from ...errors import NotApplicable
from ...schedule import Step, Transfer
from ...steps import make_step
from ...topology import Topology

SEARCH_BUDGET = 400_000
"""Work (candidate vertices examined) a Hamiltonian-cycle search may spend before giving up."""


class Tree:
    """A BFS tree (or forest, for several roots): ``parent`` points toward the roots.

    For an out-tree the edge is ``parent[v] -> v``; for an in-tree (BFS over in-edges) it is
    ``v -> parent[v]``. ``order`` lists the vertices in BFS order, roots first.
    """

    __slots__ = ("_children", "_height", "depth", "order", "parent", "roots")

    def __init__(self, roots: tuple[int, ...], parent: dict[int, int], depth: dict[int, int],
                 order: list[int]) -> None:
        self.roots = roots
        self.parent = parent
        self.depth = depth
        self.order = order
        self._height: dict[int, int] | None = None
        self._children: dict[int, list[int]] | None = None

    def spans(self, verts: Iterable[int]) -> bool:
        return all(v in self.depth for v in verts)

    @property
    def height(self) -> dict[int, int]:
        """Longest distance from each vertex down to a leaf of its subtree."""
        if self._height is None:
            h = dict.fromkeys(self.order, 0)
            for v in reversed(self.order):
                p = self.parent.get(v)
                if p is not None and h[v] + 1 > h[p]:
                    h[p] = h[v] + 1
            self._height = h
        return self._height

    @property
    def children(self) -> dict[int, list[int]]:
        if self._children is None:
            kids: dict[int, list[int]] = defaultdict(list)
            for v in self.order:
                p = self.parent.get(v)
                if p is not None:
                    kids[p].append(v)
            self._children = kids
        return self._children

    def path_up(self, v: int) -> list[int]:
        """``v``, its parent, ... up to a root."""
        path = [v]
        while path[-1] in self.parent:
            path.append(self.parent[path[-1]])
        return path


def tree_from_parent(root: int, parent: dict[int, int]) -> Tree:
    """A :class:`Tree` from a parent map (every non-root vertex -> its parent)."""
    kids: dict[int, list[int]] = defaultdict(list)
    for v, p in parent.items():
        kids[p].append(v)
    order, depth = [root], {root: 0}
    for v in order:
        for c in sorted(kids.get(v, ())):
            depth[c] = depth[v] + 1
            order.append(c)
    if len(order) != len(parent) + 1:
        raise AssertionError(f"parent map {parent} is not a tree rooted at {root}")
    return Tree((root,), dict(parent), depth, order)


class RankGraph:
    """The rank-level adjacency of a topology, with cached BFS trees and ring orders."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.n = topology.num_ranks
        self._out_sets: dict[int, frozenset[int]] = {}
        self._in: list[tuple[int, ...]] | None = None
        self._sym: dict[int, tuple[int, ...]] = {}
        self._trees: dict[tuple, Tree] = {}
        self._cycles: dict[tuple, tuple[list[int] | None, str]] = {}
        self._ring: tuple[list[int] | None, str] | None = None

    @property
    def name(self) -> str:
        return self.topology.name

    # ------------------------------------------------------------------ adjacency
    def out(self, r: int) -> tuple[int, ...]:
        return self.topology.neighbors(r)

    def out_set(self, r: int) -> frozenset[int]:
        s = self._out_sets.get(r)
        if s is None:
            s = self._out_sets[r] = frozenset(self.topology.neighbors(r))
        return s

    def adjacent(self, a: int, b: int) -> bool:
        return b in self.out_set(a)

    def inn(self, r: int) -> tuple[int, ...]:
        if self._in is None:
            ins: list[list[int]] = [[] for _ in range(self.n)]
            for a in range(self.n):
                for b in self.out(a):
                    ins[b].append(a)
            self._in = [tuple(x) for x in ins]
        return self._in[r]

    def sym(self, r: int) -> tuple[int, ...]:
        """Neighbours reachable in both directions."""
        s = self._sym.get(r)
        if s is None:
            s = self._sym[r] = tuple(b for b in self.out(r) if self.adjacent(b, r))
        return s

    # ------------------------------------------------------------------ trees and paths
    def bfs(self, roots: tuple[int, ...], *, reverse: bool = False, sym: bool = False,
            allowed: frozenset[int] | None = None) -> Tree:
        """BFS over out-edges (an out-tree), in-edges (``reverse``: an in-tree) or two-way edges."""
        key = (roots, reverse, sym, allowed)
        tree = self._trees.get(key)
        if tree is not None:
            return tree
        nbr = self.inn if reverse else (self.sym if sym else self.out)
        if len(roots) == 1 and allowed is None and len(nbr(roots[0])) == self.n - 1:
            root = roots[0]  # a star: no search (keeps complete 512-rank fabrics linear)
            others = [v for v in range(self.n) if v != root]
            tree = Tree(roots, dict.fromkeys(others, root), {root: 0, **dict.fromkeys(others, 1)},
                        [root, *others])
        else:
            parent: dict[int, int] = {}
            depth = dict.fromkeys(roots, 0)
            order = list(roots)
            queue = deque(roots)
            while queue:
                v = queue.popleft()
                for u in nbr(v):
                    if u not in depth and (allowed is None or u in allowed):
                        depth[u] = depth[v] + 1
                        parent[u] = v
                        order.append(u)
                        queue.append(u)
            tree = Tree(roots, parent, depth, order)
        self._trees[key] = tree
        return tree

    def path(self, a: int, b: int, allowed: frozenset[int] | None = None) -> list[int]:
        """A shortest path ``a -> ... -> b`` (within ``allowed`` when given)."""
        if a == b:
            return [a]
        if self.adjacent(a, b):
            return [a, b]
        tree = self.bfs((a,), allowed=allowed)
        if b not in tree.depth:
            where = "" if allowed is None else " inside its node"
            raise NotApplicable(f"rank {b} cannot be reached from rank {a}{where} in '{self.name}'")
        return tree.path_up(b)[::-1]

    # ------------------------------------------------------------------ rings
    def ring(self) -> tuple[list[int] | None, str]:
        """A Hamiltonian cycle of the whole topology, or None and why.

        On a multi-node topology it walks one Hamiltonian path inside each node (the same local
        order everywhere) and hops to the next node through the fabric, so it crosses nodes only
        as often as there are nodes; failing that, a search that prefers staying inside a node.
        """
        if self._ring is not None:
            return self._ring
        topo = self.topology
        dims = dict(topo.meta).get("torus")
        nodes = [list(nd) for nd in topo.nodes]
        result: tuple[list[int] | None, str] | None = None
        if len(nodes) > 1 and len({len(nd) for nd in nodes}) == 1:
            m = len(nodes[0])
            local_dims = dims if dims and _prod(dims) == m else None
            local_orders = [list(range(m))]
            if local_dims:
                comb = torus_cycle(tuple(local_dims))
                if comb is not None:
                    local_orders.append(comb)
            found, _ = self.cycle(nodes[0], dims=local_dims)
            if found is not None:
                local_orders.append([nodes[0].index(r) for r in found])
            for local in local_orders:
                for rot in range(m):
                    lo = local[rot:] + local[:rot]
                    order = [nd[i] for nd in nodes for i in lo]
                    if self.valid_cycle(order):
                        result = (order, "")
                        break
                if result:
                    break
        if result is None:
            node_of = topo.node_of

            def prefer(v: int, u: int) -> int:
                return 0 if node_of[v] == node_of[u] else 1

            result = self.cycle(list(range(self.n)), dims=dims if len(nodes) <= 1 else None,
                                prefer=prefer)
        self._ring = result
        return result

    def valid_cycle(self, order: Sequence[int]) -> bool:
        m = len(order)
        if m <= 1:
            return True
        return all(self.adjacent(order[i], order[(i + 1) % m]) for i in range(m))

    def cycle(self, verts: Sequence[int], *, dims: Sequence[int] | None = None,
              prefer: Callable[[int, int], int] | None = None) -> tuple[list[int] | None, str]:
        """A directed Hamiltonian cycle through ``verts`` (starting at ``verts[0]``), or None and why.

        Tries the given order, then a torus comb when ``dims`` (row-major over ``verts``) is known,
        then a budgeted backtracking search (Warnsdorff ordering on sparse graphs, ``prefer``
        first). The reason is "" on success, else "none exists" or "none found within the search
        budget".
        """
        key = (tuple(verts), tuple(dims or ()))
        if key in self._cycles:
            return self._cycles[key]
        found = self._find_cycle(list(verts), dims, prefer)
        self._cycles[key] = found
        return found

    def _find_cycle(self, verts: list[int], dims: Sequence[int] | None,
                    prefer: Callable[[int, int], int] | None) -> tuple[list[int] | None, str]:
        m = len(verts)
        if m <= 1 or self.valid_cycle(verts):
            return verts, ""
        structured = []
        if dims and _prod(dims) == m:
            structured.append(torus_cycle(tuple(dims)))
        if not m & (m - 1):
            structured.append([i ^ (i >> 1) for i in range(m)])  # Gray code: hypercubes
        for idx in structured:
            if idx is not None:
                order = [verts[i] for i in idx]
                if self.valid_cycle(order):
                    return order, ""
        vset = set(verts)
        succ = {v: [u for u in self.out(v) if u in vset] for v in verts}
        pred: dict[int, list[int]] = {v: [] for v in verts}
        for v in verts:
            for u in succ[v]:
                pred[u].append(v)
        if any(not succ[v] or not pred[v] for v in verts):
            return None, "none exists"
        if m == 2:
            return None, "none exists"
        symmetric = all(v in self.out_set(u) for v in verts for u in succ[v])
        if symmetric and not _may_have_cycle(verts, succ):
            return None, "none exists"
        start = verts[0]
        sparse = max(len(s) for s in succ.values()) <= 16
        visited = {start}

        def key(v: int, u: int) -> tuple[int, int, int]:
            p = prefer(v, u) if prefer else 0
            w = sum(1 for x in succ[u] if x not in visited) if sparse else 0
            return (p, w, u)

        path = [start]
        open_preds = len(pred[start])  # predecessors of start still unvisited: the way home
        stack = [iter(sorted((u for u in succ[start]), key=lambda u: key(start, u)))]
        work = 0
        while stack:
            if len(path) == m:
                if self.adjacent(path[-1], start):
                    return path, ""
                last = path.pop()
                visited.discard(last)
                open_preds += start in self.out_set(last)
                stack.pop()
                continue
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                last = path.pop()
                visited.discard(last)
                if path:
                    open_preds += start in self.out_set(last)
                continue
            work += len(succ[nxt])
            if work > SEARCH_BUDGET:
                return None, "none found within the search budget"
            closes = start in self.out_set(nxt)
            if closes and open_preds == 1 and len(path) + 1 < m:
                continue  # nxt is the last way back to start; it must come last
            path.append(nxt)
            visited.add(nxt)
            open_preds -= closes
            cand = [u for u in succ[nxt] if u not in visited]
            cand.sort(key=lambda u, v=nxt: key(v, u))
            stack.append(iter(cand))
        return None, "none exists"


def _prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _may_have_cycle(verts: list[int], succ: dict[int, list[int]]) -> bool:
    """Cheap necessary conditions for an undirected Hamiltonian cycle (n >= 3)."""
    if any(len(succ[v]) < 2 for v in verts):
        return False
    edges = sum(len(s) for s in succ.values()) // 2
    if edges > 50_000:
        return True
    g = nx.Graph()
    g.add_nodes_from(verts)
    g.add_edges_from((v, u) for v in verts for u in succ[v] if v < u)
    if not nx.is_connected(g) or any(True for _ in nx.articulation_points(g)):
        return False
    if nx.is_bipartite(g):
        side, _ = nx.bipartite.sets(g)
        if 2 * len(side) != len(verts):
            return False
    return True


def _comb(rows: int, cols: int) -> list[tuple[int, int]] | None:
    """A Hamiltonian cycle of the rows x cols grid (no wraparound) as (row, col), or None."""
    if rows % 2 == 1:
        if cols % 2 == 1:
            return None
        return [(r, c) for c, r in _comb(cols, rows) or ()]
    if cols == 1:
        return [(0, 0), (1, 0)] if rows == 2 else None
    seq = [(0, c) for c in range(cols)]
    for r in range(1, rows):
        span = range(cols - 1, 0, -1) if r % 2 == 1 else range(1, cols)
        seq += [(r, c) for c in span]
    seq += [(r, 0) for r in range(rows - 1, 0, -1)]
    return seq


def torus_cycle(dims: tuple[int, ...]) -> list[int] | None:
    """A Hamiltonian cycle of a row-major torus (the comb of its first axis against a cycle of the
    rest), as flat indices, or None when every axis is odd (then the search takes over)."""
    if len(dims) == 1:
        return list(range(dims[0]))
    rest = torus_cycle(dims[1:])
    if rest is None:
        return None
    comb = _comb(dims[0], len(rest))
    if comb is None:
        return None
    stride = len(rest)
    return [r * stride + rest[c] for r, c in comb]


class Plan:
    """Transfers keyed by step; :meth:`steps` turns them into Steps with the minimal rounds.

    For a non-combining collective a copy to a rank that already holds the chunk (or receives it
    from another transfer in the same step) is dropped: relays and overlapping trees can produce
    such duplicates, and two copies into one slot in one step would be a write conflict.
    Empty steps are dropped.
    """

    def __init__(self) -> None:
        self.by_step: dict[int, list[Transfer]] = defaultdict(list)

    def add(self, step: int, src: int, dst: int, chunk: int, op: str = "copy") -> None:
        self.by_step[step].append(Transfer(src, dst, chunk, op))  # type: ignore[arg-type]

    def send(self, step: int, src: int, dst: int, chunks: Iterable[int], op: str = "copy") -> None:
        bucket = self.by_step[step]
        for c in chunks:
            bucket.append(Transfer(src, dst, c, op))  # type: ignore[arg-type]

    def route(self, path: Sequence[int], chunks: Sequence[int], start: int) -> int:
        """Move ``chunks`` along ``path``, one hop per step from ``start``; returns the end step."""
        for h in range(len(path) - 1):
            self.send(start + h, path[h], path[h + 1], chunks)
        return start + len(path) - 1

    def end(self) -> int:
        return max((s for s, ts in self.by_step.items() if ts), default=-1) + 1

    def steps(self, topology: Topology, collective: Collective) -> tuple[Step, ...]:
        held: set[tuple[int, int]] | None = None
        if not collective.combining:
            held = {(r, c) for c, holders in enumerate(collective.pre) for r in holders}
        out = []
        for s in sorted(self.by_step):
            transfers = self.by_step[s]
            if held is not None:
                keep, new = [], set()
                for t in transfers:
                    slot = (t.dst, t.chunk)
                    if slot in held or slot in new:
                        continue
                    new.add(slot)
                    keep.append(t)
                held |= new
                transfers = keep
            if transfers:
                out.append(make_step(transfers, topology))
        return tuple(out)
