"""The MILP encoding's problem: representative chunks, the sketch's logical links, and symmetry.

TACCL (NSDI'23) solves for every chunk of every rank. synth solves for the chunks of one
representative rank per orbit of a rank group ``H`` (:mod:`.symmetry`) that also preserves the
sketch (its allowed links and which data each relay may carry): every other rank's routes and
steps are the representative's mapped by the unique ``h`` with ``h(rep) = rank``. Because ``H``
permutes bandwidth resources too, the load of the replicated schedule on a resource orbit ``O`` is
``|H| / |O|`` times the representative's load on ``O`` (:class:`.symmetry.ResourceMap`), so every
model below counts load per orbit and stays the size of one rank's demand.

Each representative chunk gets a sparse set of candidate links: those the sketch allows that lie on
a shortest path (in hops of the sketch's logical graph) from the chunk's origin toward its
destinations, plus ``max_extra_hops`` of slack for single-destination chunks. Only these
(chunk, link) pairs become routing variables.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ...collectives import Collective
from ...errors import NotApplicable, SynthError
from ...topology import Topology
from ..symmetry import RankGroup, ResourceMap, rank_group, trivial_group

MILP_KINDS = ("allgather", "alltoall", "reducescatter", "allreduce")
"""Collectives the MILP encoding synthesises (reducescatter and allreduce via reversed allgather)."""

Edge = tuple[int, int]


@dataclass(frozen=True)
class LogicalLinks:
    """The one-hop pairs a schedule may use, and which origins' data may cross each of them."""

    pairs: frozenset[Edge]
    may_carry: Callable[[int, int, int], bool]
    """``may_carry(origin, u, v)``: may data that started at ``origin`` travel ``u -> v``?"""

    def out_edges(self, n: int) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(n)]
        for u, v in sorted(self.pairs):
            out[u].append(v)
        return out


def all_links(topology: Topology) -> LogicalLinks:
    """No sketch: every channel of the topology, any data on any of them."""
    pairs = frozenset((u, v) for u in topology.ranks for v in topology.neighbors(u))
    return LogicalLinks(pairs, lambda o, u, v: True)


@dataclass
class RepChunk:
    """A representative chunk: its id, origin, destinations and candidate links."""

    chunk: int
    origin: int
    dests: tuple[int, ...]
    edges: list[Edge]
    depth: int
    """Hops from the origin to its farthest destination on the sketch's graph."""
    layered: bool = False
    """Candidate links are not a DAG (a tree with extra hops): routing indexes each use by its hop."""
    levels: dict[Edge, tuple[int, ...]] = field(default_factory=dict)
    """Layered trees: the hop numbers (1 = leaves the origin) at which each link may be used."""


@dataclass
class MilpProblem:
    topology: Topology
    collective: Collective
    """The copy collective that is routed (allgather or alltoall); RS/AR reuse it reversed."""
    group: RankGroup
    links: LogicalLinks
    resources: ResourceMap
    chunks: list[RepChunk]
    edge_orbits: dict[Edge, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    """edge -> ((resource orbit, chunks one use puts on each resource of it), ...)"""
    chunk_image: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    """``chunk_image[h, c]``: the chunk that group element h maps chunk c to."""
    reverse: bool = False
    """Routing a reduction: logical ``u -> v`` is the real transfer ``v -> u`` (reversed allgather)."""

    def channel(self, edge: Edge):
        u, v = edge
        return self.topology.channel(v, u) if self.reverse else self.topology.channel(u, v)

    def orbits_of(self, edge: Edge) -> tuple[tuple[int, float], ...]:
        found = self.edge_orbits.get(edge)
        if found is None:
            ch = self.channel(edge)
            if ch is None:
                raise SynthError(f"the sketch allows {edge[0]}->{edge[1]} but the topology has no such "
                                 "channel")
            rm = self.resources
            found = tuple((rm.add(res, beta, lanes), rm.mult(rm.add(res, beta, lanes)))
                          for res, beta, lanes in ch.resources)
            self.edge_orbits[edge] = found
        return found

    def tau(self, orbit: int) -> float:
        """µs one MB puts on one resource of the orbit (β per lane)."""
        return self.resources.beta[orbit] / self.resources.lanes[orbit]

    def alpha(self, edge: Edge) -> float:
        ch = self.channel(edge)
        assert ch is not None
        return ch.alpha_us

    @property
    def num_candidate_pairs(self) -> int:
        return sum(len(c.edges) for c in self.chunks)


# ------------------------------------------------------------------------------------- symmetry
def sketch_group(topology: Topology, links: LogicalLinks, *, enabled: bool = True) -> RankGroup:
    """The largest semiregular automorphism group (greedy) that also maps the sketch onto itself.

    A generator is kept only if it maps allowed pairs to allowed pairs and each relay's carry rule
    onto itself; otherwise solving one representative and rotating would break the sketch.
    """
    n = topology.num_ranks
    if not enabled or n <= 1:
        return trivial_group(n)
    inter = sorted((u, v) for u, v in links.pairs if topology.node_of[u] != topology.node_of[v])

    def preserves(perm: np.ndarray) -> bool:
        for u, v in links.pairs:
            if (int(perm[u]), int(perm[v])) not in links.pairs:
                return False
        for u, v in inter:
            pu, pv = int(perm[u]), int(perm[v])
            for o in range(n):
                if links.may_carry(o, u, v) != links.may_carry(int(perm[o]), pu, pv):
                    return False
        return True

    return rank_group(topology, accept=preserves)


def chunk_images(collective: Collective, group: RankGroup) -> np.ndarray:
    """``[h, c]`` -> image chunk: a chunk is named by (sources, destinations, ordinal among equals)."""
    key_of: list[tuple] = []
    index: dict[tuple, int] = {}
    seen: dict[tuple, int] = {}
    for c in range(collective.num_chunks):
        base = (tuple(sorted(collective.pre[c])), tuple(sorted(collective.post[c])))
        ordinal = seen.get(base, 0)
        seen[base] = ordinal + 1
        key = (*base, ordinal)
        key_of.append(key)
        index[key] = c
    out = np.empty((group.order, collective.num_chunks), dtype=np.int64)
    for h in range(group.order):
        perm = group.perms[h]
        for c, (pre, post, ordinal) in enumerate(key_of):
            image = (tuple(sorted(int(perm[r]) for r in pre)), tuple(sorted(int(perm[r]) for r in post)),
                     ordinal)
            found = index.get(image)
            if found is None:
                raise SynthError(f"symmetry maps chunk {c} outside {collective.name}: the group does "
                                 "not preserve the collective")
            out[h, c] = found
    return out


# ------------------------------------------------------------------------------ candidate links
def _bfs(out: list[list[int]], start: int, allowed: Callable[[int, int], bool]) -> np.ndarray:
    dist = np.full(len(out), -1, dtype=np.int64)
    dist[start] = 0
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in out[u]:
            if dist[v] < 0 and allowed(u, v):
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _reverse(out: list[list[int]]) -> list[list[int]]:
    rev: list[list[int]] = [[] for _ in out]
    for u, vs in enumerate(out):
        for v in vs:
            rev[v].append(u)
    return rev


def candidate_edges(out: list[list[int]], origin: int, dests: Iterable[int],
                    allowed: Callable[[int, int], bool], extra_hops: int,
                    rev: list[list[int]] | None = None) -> tuple[list[Edge], int]:
    """Links a chunk may use, and its depth; SynthError when a destination cannot be reached.

    Several destinations (a broadcast tree): the links that go one hop further from the origin,
    a DAG, so any choice of one parent per rank is a tree. One destination (a path): links on a
    path at most ``extra_hops`` longer than the shortest.
    """
    dests = tuple(dests)
    d_from = _bfs(out, origin, allowed)
    missing = [d for d in dests if d_from[d] < 0]
    if missing:
        raise SynthError(f"with the sketch's links, data of rank {origin} cannot reach rank {missing[0]}: "
                         "the sketch disconnects them (check its relays and intranode links)")
    depth = int(max((d_from[d] for d in dests), default=0))
    edges: list[Edge] = []
    if len(dests) == 1:
        t = dests[0]
        rev = rev if rev is not None else _reverse(out)
        d_to = _bfs(rev, t, lambda a, b: allowed(b, a))
        limit = d_from[t] + extra_hops
        for u in range(len(out)):
            if d_from[u] < 0 or d_to[u] < 0 or u == t:
                continue
            for v in out[u]:
                if v != origin and d_to[v] >= 0 and allowed(u, v) and d_from[u] + 1 + d_to[v] <= limit:
                    edges.append((u, v))
    else:
        for u in range(len(out)):
            if d_from[u] < 0:
                continue
            for v in out[u]:
                if not allowed(u, v) or v == origin:
                    continue
                if d_from[v] == d_from[u] + 1 or (extra_hops and d_from[u] + 1 <= depth + extra_hops):
                    edges.append((u, v))
    return edges, depth


def reversed_links(links: LogicalLinks) -> LogicalLinks:
    """The links of a reduction routed as a reversed allgather: logical ``u -> v`` is ``v -> u``."""
    carry = links.may_carry
    return LogicalLinks(frozenset((v, u) for u, v in links.pairs), lambda o, u, v: carry(o, v, u))


def build_problem(topology: Topology, routed: Collective, links: LogicalLinks, *,
                  symmetry: bool = True, extra_hops: int = 0, reverse: bool = False,
                  tree_extra_hops: int = 0) -> MilpProblem:
    """Representative chunks with their candidate links, under the sketch-preserving group.

    With ``reverse`` the allgather is routed over the reversed links (``links`` must already be
    reversed with :func:`reversed_links`) and costed on the real, opposite channels.
    ``extra_hops`` is the slack of single-destination paths, ``tree_extra_hops`` that of broadcast
    trees (0: the shortest-path DAG, no level variables needed).
    """
    if routed.combining or routed.kind not in ("allgather", "alltoall"):
        raise NotApplicable(f"milp routes allgather and alltoall (and reversed allgather); not "
                            f"{routed.name}")
    n = topology.num_ranks
    group = sketch_group(topology, links, enabled=symmetry)
    rm = ResourceMap(topology, group)
    out = links.out_edges(n)
    rev = _reverse(out)
    reps = set(group.reps)
    chunks: list[RepChunk] = []
    trees: dict[int, tuple[list[Edge], int, dict[Edge, tuple[int, ...]]]] = {}
    for c in range(routed.num_chunks):
        (origin,) = routed.pre[c]
        if origin not in reps:
            continue
        dests = tuple(r for r in routed.post[c] if r != origin)
        if not dests:
            continue

        def allowed(u: int, v: int, origin: int = origin) -> bool:
            return links.may_carry(origin, u, v)

        if len(dests) == 1:
            edges, depth = candidate_edges(out, origin, dests, allowed, extra_hops, rev)
            chunks.append(RepChunk(c, origin, dests, edges, depth))
            continue
        if origin not in trees:  # every chunk of one origin has the same candidate tree links
            edges, depth = candidate_edges(out, origin, dests, allowed, tree_extra_hops, rev)
            levels: dict[Edge, tuple[int, ...]] = {}
            if tree_extra_hops:
                d_from = _bfs(out, origin, allowed)
                top = depth + tree_extra_hops
                levels = {(u, v): ((1,) if u == origin else tuple(range(int(d_from[u]) + 1, top + 1)))
                          for u, v in edges}
            trees[origin] = (edges, depth, levels)
        edges, depth, levels = trees[origin]
        chunks.append(RepChunk(c, origin, dests, list(edges), depth, bool(tree_extra_hops), levels))
    problem = MilpProblem(topology, routed, group, links, rm, chunks, reverse=reverse)
    problem.chunk_image = chunk_images(routed, group)
    for ch in chunks:
        for e in ch.edges:
            problem.orbits_of(e)
    return problem
