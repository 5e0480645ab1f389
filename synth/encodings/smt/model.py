"""The SCCL (PPoPP'21) steps/rounds/chunks model, written once as plain linear constraints.

An *instance* is ``(S steps, R total rounds, C chunks per rank)``. The model decides, for every
chunk ``c``, directed send edge ``e = (a, b)`` and step ``s`` in ``1..S``, whether ``a`` sends ``c``
to ``b`` in step ``s`` (``x[c, e, s]``); rank ``b`` then holds ``c`` from the end of step ``s`` on,
so SCCL's ``time[c, b]`` is ``s``. Every step ``s`` takes ``r_s >= 1`` rounds with ``sum r_s = R``,
and a resource (a link of ``count`` parallel links, a switch port of ``lanes`` lanes) carries at most
``capacity * r_s`` chunks in step ``s`` — exactly :func:`synth.verify.verify`'s bandwidth rule.

The constraints are the same as SCCL's (a rank that does not start with a chunk gets it from exactly
one neighbour that held it in an earlier step; postcondition ranks get it by step S; the bandwidth
rule per step). Everything added on top is either implied or holds *without loss of generality*
(some solution of every satisfiable instance keeps it), so the answer SAT/UNSAT is SCCL's:

* hop-distance pruning: ``x[c, (a, b), s]`` exists only if ``a`` can hold ``c`` by step ``s-1``
  (``dist(pre[c], a) <= s-1``) and the copy at ``b`` can still matter (``b`` needs it, or ``b`` can
  reach a rank that needs it in the steps left); other variables are fixed to 0 (not created);
* no rank receives a chunk twice, no rank receives a chunk it starts with, and a rank that neither
  needs nor starts with a chunk forwards it if it receives it (a useless copy can be deleted);
* a chunk needed by exactly one rank travels along a path (alltoall, gather, scatter): every relay
  forwards exactly once, the destination never forwards, exactly one holder sends first;
* symmetry breaking (optional, sound): interchangeable chunks (same pre- and postcondition) are
  ordered lexicographically by their arrival times at the first ranks, and for automorphisms ``g`` of
  the network that preserve the collective, the arrival vector of the first moving chunk is
  lexicographically no larger than its image under ``g``. Both are truncations of one lex-leader
  order (chunk-major, then rank), so together they keep the lex-least member of every orbit.

A *restricted* variant ties the schedule to a group ``H`` of automorphisms acting freely on the
chunks (``x[h c, h e, s] = x[c, e, s]``): a small model that finds symmetric schedules fast. It is
only used to find solutions; its UNSAT proves nothing and the full model decides then.

Variables are booleans ``0..nbool-1`` and the per-step round counts; constraints are
``Imp(a, b)`` (``a -> b``), ``Lin(terms, lo, hi)`` over booleans and ``Cap(terms, cap, step)``
(``sum terms <= cap * r_step``). :mod:`.backend_cpsat` and :mod:`.backend_z3` translate them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from ...collectives import Collective
from ...topology import Topology

UNREACHABLE = 1 << 20


# ======================================================================================= network
@dataclass(frozen=True)
class Network:
    """The send graph: directed edges with the bandwidth resources each one loads."""

    name: str
    n: int
    edges: tuple[tuple[int, int], ...]
    edge_res: tuple[tuple[int, ...], ...]
    caps: tuple[int, ...]
    """Chunks per round of each resource (link count, port lanes)."""
    reversed: bool = False

    # derived indexes, computed once (a frozen dataclass keeps cached_property's values)
    @cached_property
    def out_edges(self) -> list[list[int]]:
        """The edges leaving each rank (indices into ``edges``)."""
        return self._edges_at(0)

    @cached_property
    def in_edges(self) -> list[list[int]]:
        """The edges entering each rank (indices into ``edges``)."""
        return self._edges_at(1)

    def _edges_at(self, end: int) -> list[list[int]]:
        at: list[list[int]] = [[] for _ in range(self.n)]
        for i, edge in enumerate(self.edges):
            at[edge[end]].append(i)
        return at

    @cached_property
    def edge_index(self) -> dict[tuple[int, int], int]:
        return {e: i for i, e in enumerate(self.edges)}

    @cached_property
    def dist(self) -> list[list[int]]:
        """Hop distances ``dist[a][b]`` (UNREACHABLE when b cannot be reached from a)."""
        g = nx.DiGraph()
        g.add_nodes_from(range(self.n))
        g.add_edges_from(self.edges)
        dist = [[UNREACHABLE] * self.n for _ in range(self.n)]
        for a, lengths in nx.all_pairs_shortest_path_length(g):
            for b, d in lengths.items():
                dist[a][b] = d
        return dist


def network(topology: Topology, *, reverse: bool = False) -> Network:
    """The send graph of ``topology``; ``reverse`` flips every edge (for combining duals)."""
    res_index: dict[tuple, int] = {}
    caps: list[int] = []
    edges: list[tuple[int, int]] = []
    edge_res: list[tuple[int, ...]] = []
    for a in topology.ranks:
        for b in topology.neighbors(a):
            ch = topology.channel(a, b)
            assert ch is not None
            ids = []
            for res, _beta, lanes in ch.resources:
                q = res_index.get(res)
                if q is None:
                    q = res_index[res] = len(caps)
                    caps.append(int(lanes))
                ids.append(q)
            edges.append((b, a) if reverse else (a, b))
            # the last resource is the receive side (the link itself, or the in-port)
            edge_res.append(tuple(ids) if not reverse else tuple(reversed(ids)))
    order = sorted(range(len(edges)), key=lambda i: edges[i])
    return Network(topology.name, topology.num_ranks, tuple(edges[i] for i in order),
                   tuple(edge_res[i] for i in order), tuple(caps), reverse)


# ======================================================================================= demand
@dataclass(frozen=True)
class Demand:
    """A non-combining collective as the model sees it: who holds and who needs each chunk."""

    n: int
    pre: tuple[frozenset[int], ...]
    post: tuple[frozenset[int], ...]
    no_relay: frozenset[int] = frozenset()
    """Ranks that may not hold a chunk they do not need (used by combining duals)."""

    @property
    def num_chunks(self) -> int:
        return len(self.pre)

    def need(self, c: int) -> frozenset[int]:
        return self.post[c] - self.pre[c]

    def classes(self) -> list[list[int]]:
        """Groups of interchangeable chunks (same pre and post), each sorted, in first-seen order."""
        groups: dict[tuple, list[int]] = {}
        for c in range(self.num_chunks):
            groups.setdefault((tuple(sorted(self.pre[c])), tuple(sorted(self.post[c]))), []).append(c)
        return list(groups.values())


def demand_of(collective: Collective) -> Demand:
    return Demand(collective.num_ranks, tuple(frozenset(p) for p in collective.pre),
                  tuple(frozenset(p) for p in collective.post))


# ======================================================================================= symmetry
def _compose(p: Sequence[int], q: Sequence[int]) -> tuple[int, ...]:
    """(p o q)(i) = p[q[i]]."""
    return tuple(p[i] for i in q)


def edge_permutation(net: Network, perm: Sequence[int]) -> tuple[int, ...] | None:
    """The edge map of a rank permutation, or None when it is not an automorphism of ``net``.

    An automorphism maps edges onto edges and resources onto resources of the same capacity,
    consistently (two edges sharing a resource map to two edges sharing its image).
    """
    idx = net.edge_index
    res_map: dict[int, int] = {}
    out = []
    for e, (a, b) in enumerate(net.edges):
        f = idx.get((perm[a], perm[b]))
        if f is None or len(net.edge_res[e]) != len(net.edge_res[f]):
            return None
        for q, q2 in zip(net.edge_res[e], net.edge_res[f], strict=True):
            if net.caps[q] != net.caps[q2] or res_map.setdefault(q, q2) != q2:
                return None
        out.append(f)
    if len(set(res_map.values())) != len(res_map):
        return None
    return tuple(out)


def chunk_permutation(demand: Demand, perm: Sequence[int]) -> tuple[int, ...] | None:
    """How a rank permutation maps chunks (i-th of a class to the i-th of its image class)."""
    by_key: dict[tuple, list[int]] = {}
    for c in range(demand.num_chunks):
        by_key.setdefault((demand.pre[c], demand.post[c]), []).append(c)
    out = [0] * demand.num_chunks
    for (pre, post), members in by_key.items():
        image = by_key.get((frozenset(perm[r] for r in pre), frozenset(perm[r] for r in post)))
        if image is None or len(image) != len(members):
            return None
        for c, d in zip(members, image, strict=True):
            out[c] = d
    if demand.no_relay and {perm[r] for r in demand.no_relay} != set(demand.no_relay):
        return None
    return tuple(out)


@dataclass(frozen=True)
class Symmetry:
    """A network automorphism that preserves the demand: its maps on ranks, edges and chunks."""

    ranks: tuple[int, ...]
    edges: tuple[int, ...]
    chunks: tuple[int, ...]


def symmetries(net: Network, demand: Demand, candidates: Sequence[Sequence[int]]) -> list[Symmetry]:
    """The candidates that are automorphisms of ``net`` and preserve ``demand`` (identity dropped)."""
    found: list[Symmetry] = []
    seen = set()
    ident = tuple(range(net.n))
    for perm in candidates:
        perm = tuple(perm)
        if perm == ident or perm in seen or sorted(perm) != list(ident):
            continue
        seen.add(perm)
        emap = edge_permutation(net, perm)
        if emap is None:
            continue
        cmap = chunk_permutation(demand, perm)
        if cmap is None:
            continue
        found.append(Symmetry(perm, emap, cmap))
    return found


def free_group(syms: Sequence[Symmetry], demand: Demand, limit: int | None = None) -> list[Symmetry]:
    """A group generated by some of ``syms`` acting freely on the chunks that move.

    Greedy: add a generator when the group it generates with the ones kept stays free (no element
    but the identity fixes a chunk some rank needs) and no larger than the number of such chunks.
    Returns every element of the group, identity first.
    """
    moving = [c for c in range(demand.num_chunks) if demand.need(c)]
    bound = limit or max(1, len(moving))
    n = len(syms[0].ranks) if syms else 0
    ident = Symmetry(tuple(range(n)), tuple(range(len(syms[0].edges))) if syms else (),
                     tuple(range(demand.num_chunks)))
    group = [ident]
    for g in syms:
        if any(h.ranks == g.ranks for h in group):
            continue
        trial = _closure([*group, g], bound)
        if trial is None:
            continue
        if all(all(h.chunks[c] != c for c in moving) for h in trial[1:]):
            group = trial
    return group


def _closure(gens: Sequence[Symmetry], bound: int) -> list[Symmetry] | None:
    elems = {gens[0].ranks: gens[0]}
    frontier = list(gens)
    for g in gens:
        elems[g.ranks] = g
    while frontier:
        nxt = []
        for a in frontier:
            for b in gens:
                prod = Symmetry(_compose(a.ranks, b.ranks), _compose(a.edges, b.edges),
                                _compose(a.chunks, b.chunks))
                if prod.ranks not in elems:
                    elems[prod.ranks] = prod
                    nxt.append(prod)
                    if len(elems) > bound:
                        return None
        frontier = nxt
    ident = tuple(range(len(gens[0].ranks)))
    rest = sorted(k for k in elems if k != ident)
    return [elems[ident], *(elems[k] for k in rest)]


def group_elements(syms: Sequence[Symmetry], bound: int) -> list[Symmetry]:
    """All elements of the group the symmetries generate (identity excluded), or the generators
    alone when the group has more than ``bound`` elements."""
    if not syms:
        return []
    n = len(syms[0].ranks)
    ident = Symmetry(tuple(range(n)), tuple(range(len(syms[0].edges))),
                     tuple(range(len(syms[0].chunks))))
    closed = _closure([ident, *syms], bound)
    if closed is None:
        return list(syms)
    return closed[1:]


# ======================================================================================= model
@dataclass(frozen=True)
class Imp:
    a: int
    b: int


@dataclass(frozen=True)
class Lin:
    terms: tuple[tuple[int, int], ...]
    """(coefficient, boolean variable) pairs."""
    lo: int | None
    hi: int | None

    def empty_holds(self) -> bool:
        """For a row with no terms (its sum is 0): whether the range admits 0. Both engines
        turn an empty row into nothing or into a contradiction by this."""
        lo = self.lo if self.lo is not None else 0
        hi = self.hi if self.hi is not None else 0
        return lo <= 0 <= hi


@dataclass(frozen=True)
class Cap:
    vars: tuple[int, ...]
    cap: int
    step: int
    """``sum vars <= cap * rounds[step]`` (step is 0-based)."""


@dataclass
class Model:
    """The constraints of one (S, C) family; R is set per solve (``sum rounds == R``)."""

    steps: int
    nbool: int
    constraints: list
    sends: dict[tuple[int, int, int], int]
    """(chunk, edge, step 1..S) -> boolean variable, for the chunks the model carries."""
    images: list[tuple[int, Symmetry | None]]
    """For every chunk: (representative chunk, symmetry mapping it there) — restricted models."""


class ModelBuilder:
    """Builds :class:`Model` for a network, a demand and a step count."""

    def __init__(self, net: Network, demand: Demand) -> None:
        self.net = net
        self.demand = demand
        dist = net.dist
        self.dsrc: list[list[int]] = []
        self.dneed: list[list[int]] = []
        for c in range(demand.num_chunks):
            pre, need = demand.pre[c], demand.need(c)
            self.dsrc.append([min((dist[p][r] for p in pre), default=UNREACHABLE)
                              for r in range(net.n)])
            self.dneed.append([min((dist[r][p] for p in need), default=UNREACHABLE)
                               for r in range(net.n)])

    # ------------------------------------------------------------------ bounds
    def steps_lower_bound(self) -> int | None:
        """The farthest a needed chunk must travel (None: some rank can never get its chunk)."""
        worst = 0
        for c in range(self.demand.num_chunks):
            for r in self.demand.need(c):
                worst = max(worst, self.dsrc[c][r])
        return None if worst >= UNREACHABLE else worst

    # ------------------------------------------------------------------ windows
    def window(self, c: int, r: int, S: int) -> tuple[int, int] | None:
        """Steps at which rank r may receive chunk c (inclusive), or None."""
        d = self.demand
        if r in d.pre[c]:
            return None
        lo = max(1, self.dsrc[c][r])
        if r in d.need(c):
            hi = S
        else:
            if r in d.no_relay:
                return None
            dn = self.dneed[c][r]
            if dn >= UNREACHABLE:
                return None
            hi = S - dn
        return (lo, hi) if lo <= hi else None

    # ------------------------------------------------------------------ build
    def build(self, S: int, *, restrict: Sequence[Symmetry] | None = None,
              symmetry_break: Sequence[Symmetry] = (), order_classes: bool = True) -> Model:
        net, d = self.net, self.demand
        nchunks = d.num_chunks
        # which chunks carry variables: all, or one representative per orbit of the free group
        images: list[tuple[int, Symmetry | None]] = [(c, None) for c in range(nchunks)]
        reps = list(range(nchunks))
        if restrict:
            seen: dict[int, tuple[int, Symmetry]] = {}
            reps = []
            for c in range(nchunks):
                if c in seen:
                    continue
                reps.append(c)
                for h in restrict:
                    seen.setdefault(h.chunks[c], (c, h))
            images = [(seen[c][0], seen[c][1]) for c in range(nchunks)]
        nb = 0
        cons: list = []
        sends: dict[tuple[int, int, int], int] = {}
        held: dict[tuple[int, int, int], int] = {}  # (c, r, s) -> var "r holds c after step s"
        for c in reps:
            need = d.need(c)
            if not need:
                continue
            pre = d.pre[c]
            single = len(need) == 1
            wins = [self.window(c, r, S) for r in range(net.n)]
            mine: list[tuple[int, int, int]] = []  # (edge, step, var)
            arrivals: list[list[tuple[int, int]]] = [[] for _ in range(net.n)]
            for s in range(1, S + 1):
                for e, (a, b) in enumerate(net.edges):
                    w = wins[b]
                    if w is None or not w[0] <= s <= w[1]:
                        continue
                    if a not in pre and (wins[a] is None or wins[a][0] > s - 1):
                        continue  # a cannot hold c yet
                    if single and a in need:
                        continue  # the destination of a path never forwards
                    sends[(c, e, s)] = nb
                    mine.append((e, s, nb))
                    arrivals[b].append((s, nb))
                    nb += 1
            # held[c, r, s]: r holds c at the end of step s; a 0/1 chain, so r gets c at most once
            for r in range(net.n):
                w = wins[r]
                if w is None:
                    if r in need:
                        cons.append(Lin((), 1, 1))  # r can never get c: infeasible
                    continue
                by_step: dict[int, list[int]] = {}
                for s, v in arrivals[r]:
                    by_step.setdefault(s, []).append(v)
                last = S if r in need else S - 1
                prev: int | None = None
                for s in range(w[0], last + 1):
                    here = by_step.get(s, [])
                    if prev is not None and not here:
                        hv = prev
                    else:
                        hv = nb
                        nb += 1
                        terms = [(1, v) for v in here]
                        if prev is not None:
                            terms.append((1, prev))
                        cons.append(Lin((*terms, (-1, hv)), 0, 0))
                    held[(c, r, s)] = hv
                    prev = hv
                if r in need:
                    cons.append(Lin(((1, held[(c, r, S)]),), 1, 1))
            # a send needs the sender to hold the chunk at the end of the previous step
            outs: list[list[int]] = [[] for _ in range(net.n)]
            for e, s, v in mine:
                a = net.edges[e][0]
                outs[a].append(v)
                if a not in pre:
                    cons.append(Imp(v, held[(c, a, s - 1)]))
            # relays forward what they get; on a path they forward exactly once
            for r in range(net.n):
                if r in pre or r in need:
                    continue
                got = [(1, v) for _, v in arrivals[r]]
                sent = [(-1, v) for v in outs[r]]
                if not got:
                    continue
                cons.append(Lin((*got, *sent), 0 if single else None, 0))
            if single:
                cons.append(Lin(tuple((1, v) for r in pre for v in outs[r]), 1, 1))
        # bandwidth: per step and resource
        caps = net.caps
        per_res: dict[tuple[int, int], list[int]] = {}
        for c in range(nchunks):
            if not d.need(c):
                continue
            rep, h = images[c]
            for s in range(1, S + 1):
                for e in range(len(net.edges)):
                    key = (rep, e, s)
                    v = sends.get(key)
                    if v is None:
                        continue
                    e2 = e if h is None else h.edges[e]
                    for q in net.edge_res[e2]:
                        per_res.setdefault((q, s), []).append(v)
        for (q, s), vs in per_res.items():
            cons.append(Cap(tuple(vs), caps[q], s - 1))
        # symmetry breaking (full models only)
        if not restrict:
            self._break_symmetry(S, cons, held, sends, symmetry_break, order_classes)
        return Model(S, nb, cons, sends, images)

    # ------------------------------------------------------------------ symmetry breaking
    def _time_terms(self, c: int, r: int, S: int, held: dict) -> tuple[list[tuple[int, int]], int]:
        """``time(c, r)`` as (terms, constant): the step r first holds c, S+1 if never, 0 if at start.

        time = S+1 - sum_{s in window} held[c, r, s] (held is monotone), windows end at S.
        """
        if r in self.demand.pre[c]:
            return [], 0
        terms = []
        for s in range(1, S + 1):
            hv = held.get((c, r, s))
            if hv is None and s == S:
                hv = held.get((c, r, S - 1))  # a relay gets nothing in the last step
            if hv is not None:
                terms.append((-1, hv))
        return terms, S + 1

    def _break_symmetry(self, S: int, cons: list, held: dict, sends: dict,
                        syms: Sequence[Symmetry], order_classes: bool) -> None:
        d, n = self.demand, self.net.n
        base = S + 2
        width = max(1, min(n, int(50 / math.log2(base))))
        # the ranks compared: the first `width` ranks that receive something (time is not constant)
        def vector(c: int, ranks: Sequence[int]) -> tuple[list[tuple[int, int]], int]:
            terms: list[tuple[int, int]] = []
            const = 0
            for j, r in enumerate(ranks):
                w = base ** (len(ranks) - 1 - j)
                tt, k = self._time_terms(c, r, S, held)
                terms.extend((w * a, v) for a, v in tt)
                const += w * k
            return terms, const

        def lex_le(left: tuple, right: tuple) -> None:
            (lt, lk), (rt, rk) = left, right
            acc: dict[int, int] = {}
            for a, v in lt:
                acc[v] = acc.get(v, 0) + a
            for a, v in rt:
                acc[v] = acc.get(v, 0) - a
            terms = tuple((a, v) for v, a in sorted(acc.items()) if a)
            if terms:
                cons.append(Lin(terms, None, rk - lk))

        if order_classes:
            for group in d.classes():
                if len(group) < 2 or not d.need(group[0]):
                    continue
                ranks = [r for r in range(n) if r not in d.pre[group[0]]
                         and self.window(group[0], r, S) is not None][:width]
                if not ranks:
                    continue
                for c1, c2 in itertools.pairwise(group):
                    lex_le(vector(c1, ranks), vector(c2, ranks))
        if syms:
            first = next((c for c in range(d.num_chunks) if d.need(c)), None)
            if first is None:
                return
            ranks = list(range(n))[:width]
            inv_cache = []
            for g in syms:
                inv = [0] * n
                for r, img in enumerate(g.ranks):
                    inv[img] = r
                cinv = [0] * d.num_chunks
                for c, img in enumerate(g.chunks):
                    cinv[img] = c
                inv_cache.append((inv, cinv))
            left = vector(first, ranks)
            for inv, cinv in inv_cache:
                # (g.x)[first, r] = x[g^-1 first, g^-1 r]
                c2 = cinv[first]
                terms: list[tuple[int, int]] = []
                const = 0
                for j, r in enumerate(ranks):
                    w = base ** (len(ranks) - 1 - j)
                    tt, k = self._time_terms(c2, inv[r], S, held)
                    terms.extend((w * a, v) for a, v in tt)
                    const += w * k
                lex_le(left, (terms, const))
