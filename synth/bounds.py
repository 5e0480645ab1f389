"""Lower bounds on the time of *any* algorithm for a collective on a topology.

Every schedule synth produces is reported against these floors ("x % of the physical limit"), so a
bound must never exceed what some algorithm can achieve: each number here is the value of an
explicit argument (a path a chunk must travel, a vertex set data must enter, a message count), never
an estimate. A bound that is not tight only makes results look worse than they are; a bound that is
too high would make them look impossible, which is the error these functions are built to avoid.

Two floors, both valid, so the time of a message of ``b`` bytes is at least their maximum:

* **latency** — a chunk needs one step per hop, and a step costs at least the α of the hop it
  carries, so ``time >= max over (chunk, destination) of the α-weighted distance`` it must travel
  (for combining collectives: from the *farthest* contributor). ``steps`` is the same in hops.
* **bandwidth** — ``time >= inv_bandwidth_us_per_byte * b``, from cuts of the physical graph
  (:meth:`synth.topology.Topology.physical_graph`: ranks, switch and port vertices, capacities in GB/s):
  for a vertex set S that holds some ranks and misses others, the data the ranks in S need from
  outside must cross the edges entering S.

  - allgather (ForestColl, arXiv 2402.06787): ``max_S |ranks outside S| / (N · B_in(S))`` per byte;
    ForestColl proves it tight. Exact (all rank subsets) up to :data:`EXACT_MAX_RANKS` ranks, else a
    Dinkelbach iteration over max-flows, with sinks reduced to one per symmetry orbit.
  - reducescatter: the mirror (data must *leave* S), i.e. the same on the reversed graph.
  - allreduce: the data entering any S is the whole buffer, ``1 / B_in(S)``; and a message-count
    argument (gossip: every element needs ``2(k-1)`` messages between ``k`` groups) gives
    ``2(k-1) / (total bandwidth leaving the groups)`` for the singleton and per-node partitions.
    The often-quoted ``RS + AG`` sum is **not** a lower bound in general: on ``line:3`` a pipelined
    reduce-to-the-middle-and-back runs in ``M/B`` while ``RS + AG = 4M/3B`` (see the tests); it
    coincides with the gossip bound on symmetric machines (ring, switch, fully connected), where it
    is valid. :func:`rs_plus_ag_inv_bandwidth` still reports it, for comparison with two-phase
    algorithms.
  - alltoall: ``|outside| · |inside| / (N · B_in(S))`` over all subsets (small) or structured cuts
    (single ranks, nodes, halves, torus slabs), and a distance-volume bound
    (every byte of pair (s, d) loads at least ``dist(s, d)`` capacity edges).
  - broadcast / reduce: the whole buffer must cross the min cut between the root and each rank.
  - scatter / gather: ``|ranks in S| / (N · B_in(S))`` over sets S without (resp. with) the root.
  - anything else (custom collectives): the per-chunk demand of every cut, exact when small.

Model assumptions (those of :mod:`synth.timing.lockstep`): point-to-point transfers, no in-network reduction
(switches forward, they do not add), no compression. Units: µs, bytes, GB/s = 10^9 B/s, so a cut of
B GB/s passes ``B * 1e3`` bytes per µs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, dijkstra, maximum_flow

from .collectives import Collective
from .errors import SynthError
from .topology import Topology

EXACT_MAX_RANKS = 16
"""Up to this many ranks every rank subset is enumerated (2^16 subsets, vectorised)."""

BYTES_PER_US = 1e3
"""Bytes per µs through 1 GB/s."""

_INT_CAP = 1 << 30
"""scipy's max-flow works in 32-bit integers: every scaled capacity stays at or below this."""


@dataclass(frozen=True)
class Bound:
    """A floor for one (topology, collective): ``time_us(b) >= max(latency, slope * b)``.

    ``steps`` is the hop floor (least number of synchronous steps); ``method`` says how the
    bandwidth term was found ("exact", "maxflow", "cuts", "partition", "distance", ...); ``cut`` is
    the rank set of the tightest vertex set found (None when the binding term is not a cut).
    """

    latency_us: float
    steps: int
    inv_bandwidth_us_per_byte: float
    method: str
    cut: tuple[int, ...] | None

    def time_us(self, nbytes: float) -> float:
        """Least possible time for a message of ``nbytes``: both floors hold, so their max does."""
        return max(self.latency_us, self.inv_bandwidth_us_per_byte * nbytes)

    def algbw_limit_GBps(self) -> float:
        """The asymptotic algorithm bandwidth (bytes / time) no schedule can exceed, in GB/s."""
        s = self.inv_bandwidth_us_per_byte
        return math.inf if s <= 0 else 1.0 / (s * BYTES_PER_US)


def bound_table(topology: Topology, collective: Collective, sizes: Iterable[float]) -> list[float]:
    """The bound in µs for each message size (bytes, the collective's size convention)."""
    bound = lower_bound(topology, collective)
    return [bound.time_us(s) for s in sizes]


# ====================================================================================== dispatch
def lower_bound(topology: Topology, collective: Collective, *, method: str = "auto") -> Bound:
    """The floor any algorithm for ``collective`` on ``topology`` must meet.

    ``method`` forces the cut search for allgather/reducescatter/scatter/gather ("exact" enumerates
    every rank subset, "maxflow" runs the flow formulation); "auto" picks exact up to
    :data:`EXACT_MAX_RANKS` ranks. Other collectives ignore it beyond exact/large.
    """
    n = topology.num_ranks
    if collective.num_ranks != n:
        raise SynthError(f"the collective has {collective.num_ranks} ranks but topology "
                         f"'{topology.name}' has {n}")
    if method not in ("auto", "exact", "maxflow"):
        raise SynthError(f"unknown bound method '{method}' (known: auto, exact, maxflow)")
    steps, latency = latency_floor(topology, collective)
    if n <= 1:
        return Bound(latency, steps, 0.0, "trivial", None)
    exact = method == "exact" or (method == "auto" and n <= EXACT_MAX_RANKS)
    kind = collective.kind
    standard = collective.custom is None
    if exact:
        if standard and kind in ("allgather", "reducescatter", "scatter", "gather", "broadcast",
                                 "reduce"):
            slope, cut = _exact_standard(topology, collective)
        else:
            slope, cut = exact_demand_bound(topology, collective)
        terms = [(slope, "exact", cut)]
    elif not standard:
        slope, cut = cut_candidates_demand(topology, collective)
        terms = [(slope, "cuts", cut)]
    elif kind == "allgather":
        terms = [_tag(allgather_inv_bandwidth(topology, method="maxflow"))]
    elif kind == "reducescatter":
        terms = [_tag(reducescatter_inv_bandwidth(topology, method="maxflow"))]
    elif kind in ("scatter", "gather"):
        terms = [_tag(rooted_spread_inv_bandwidth(topology, collective.root or 0,
                                                  gather=kind == "gather", method="maxflow"))]
    elif kind in ("broadcast", "reduce"):
        slope, cut = root_mincut_inv_bandwidth(topology, collective.root or 0,
                                               reduce=kind == "reduce")
        terms = [(slope, "maxflow", cut)]
    elif kind == "allreduce":
        terms = [_allreduce_cut_candidates(topology)]
    elif kind == "alltoall":
        slope, cut = alltoall_cut_candidates(topology)
        terms = [(slope, "cuts", cut)]
    else:  # a standard kind this module does not know: fall back to its demand on candidate cuts
        slope, cut = cut_candidates_demand(topology, collective)
        terms = [(slope, "cuts", cut)]
    if standard and kind == "allreduce":
        terms.append((partition_inv_bandwidth(topology), "partition", None))
    if standard and kind == "alltoall":
        terms.append((alltoall_distance_inv_bandwidth(topology), "distance", None))
    slope, how, cut = max(terms, key=lambda t: t[0])
    return Bound(latency, steps, slope, how, cut)


def _tag(result: tuple[float, tuple[int, ...] | None, str]) -> tuple[float, str, tuple[int, ...] | None]:
    slope, cut, how = result
    return slope, how, cut


# ====================================================================================== latency
def latency_floor(topology: Topology, collective: Collective) -> tuple[int, float]:
    """(steps, µs): the farthest any chunk must travel, in hops and in summed per-hop α.

    Non-combining chunk c must reach each r in post[c] from its *nearest* holder in pre[c]; a
    combining chunk must carry the contribution of *every* pre[c] rank to each post rank. Distances
    are shortest paths over links (weighted by their α, the smallest if a pair is declared twice)
    and switch hops (α of the switch, never between two ranks of one port); see
    :func:`_latency_graphs`. Where a link and a switch join the same pair, the cheaper α counts,
    which can only lower the floor.
    """
    n = topology.num_ranks
    if n <= 1:
        return 0, 0.0
    groups: dict[tuple[int, ...], set[int]] = {}
    for pre, post in zip(collective.pre, collective.post, strict=True):
        if post:
            if not pre:
                raise SynthError(f"collective '{collective.name}': a chunk must end on ranks "
                                 f"{list(post)[:6]} but no rank holds it at the start")
            groups.setdefault(pre, set()).update(post)
    if not groups:
        return 0, 0.0
    sources = sorted({r for pre in groups for r in pre})
    row = {r: i for i, r in enumerate(sources)}
    hops_graph, alpha_graph = _latency_graphs(topology)
    hops = dijkstra(hops_graph, directed=True, indices=sources)[:, :n]
    alpha = dijkstra(alpha_graph, directed=True, indices=sources)[:, :n]
    worst_hops, worst_alpha = 0.0, 0.0
    for pre, post in groups.items():
        rows = [row[r] for r in pre]
        cols = np.fromiter(post, dtype=np.int64)
        if collective.combining:
            h = hops[np.ix_(rows, cols)].max()
            a = alpha[np.ix_(rows, cols)].max()
        else:
            h = hops[rows][:, cols].min(axis=0).max()
            a = alpha[rows][:, cols].min(axis=0).max()
        if math.isinf(h):
            raise SynthError(f"topology '{topology.name}' cannot carry collective "
                             f"'{collective.name}': some rank in {list(post)[:6]} cannot be reached "
                             f"from ranks {list(pre)[:6]}")
        worst_hops, worst_alpha = max(worst_hops, h), max(worst_alpha, a)
    return round(worst_hops), float(worst_alpha)


def _latency_graphs(topology: Topology) -> tuple[sp.csr_array, sp.csr_array]:
    """Sparse (hops, α) graphs: ranks, then per switch its port vertices and hub vertices.

    A switch hop is rank -> port -> hub -> port -> rank, each edge a quarter of the hop (1 hop,
    α of the switch). When every port has one rank a single hub is exact. When ports are shared
    (a NIC behind several ranks), ranks on one port must not reach each other through the switch,
    so there is one hub per (bit b of the port index, value v): ports whose bit b is v send into
    it, ports whose bit b differs receive from it. Two ports are joined through some hub exactly
    when they differ, in 2·log2(ports) hubs, so the graph stays linear (no all-pairs edges).
    """
    n = topology.num_ranks
    alpha_of: dict[tuple[int, int], float] = {}
    for link in topology.links:
        key = (link.src, link.dst)
        alpha_of[key] = min(alpha_of.get(key, math.inf), link.alpha_us)
    rows = [a for a, _ in alpha_of]
    cols = [b for _, b in alpha_of]
    hop_w = [1.0] * len(rows)
    alpha_w = list(alpha_of.values())
    size = n

    def edge(a: int, b: int, quarter: float) -> None:
        rows.append(a)
        cols.append(b)
        hop_w.append(0.25)
        alpha_w.append(quarter)

    for switch in topology.switches:
        q = max(switch.alpha_us, 0.0) / 4
        ports = [port for port in switch.ports if port.ranks]
        outs = list(range(size, size + len(ports)))
        ins = list(range(size + len(ports), size + 2 * len(ports)))
        size += 2 * len(ports)
        for port, o, i in zip(ports, outs, ins, strict=True):
            for r in port.ranks:
                edge(r, o, q)
                edge(i, r, q)
        if all(len(port.ranks) == 1 for port in ports):
            hub = size
            size += 1
            for o, i in zip(outs, ins, strict=True):
                edge(o, hub, q)
                edge(hub, i, q)
            continue
        for b in range(max(1, (len(ports) - 1).bit_length())):
            for v in (0, 1):
                hub = size
                size += 1
                for p, (o, i) in enumerate(zip(outs, ins, strict=True)):
                    if (p >> b) & 1 == v:
                        edge(o, hub, q)
                    else:
                        edge(hub, i, q)
    shape = (size, size)
    index = (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64))
    hops = sp.csr_array((np.asarray(hop_w), index), shape=shape)
    alph = sp.csr_array((np.maximum(np.asarray(alpha_w), 0.0), index), shape=shape)
    return hops, alph


# ====================================================================================== cut model
@dataclass(frozen=True)
class _CutModel:
    """The physical graph's cuts in closed form, for a given set A of ranks inside S.

    Links contribute when they enter A. Per switch the extra vertices (hub, in/out ports) are free
    to join S or not; :meth:`Topology.physical_graph` gives rank -> out-port -> hub -> in-port -> rank
    with infinite rank-port edges, so the best choice is either the hub outside S (pay the in-port
    of every port with a rank in A) or the hub inside S (pay the out-port of every port with a rank
    outside A), whichever is smaller. This is the exact minimum of B_in over all S with S ∩ ranks = A
    (checked against max-flow in the tests), with no flow computation.
    """

    n: int
    link_src: np.ndarray
    link_dst: np.ndarray
    link_cap: np.ndarray
    switch_members: tuple[sp.csr_array, ...]
    """Per switch: (ports x ranks) 0/1 sparse matrix."""
    switch_sizes: tuple[np.ndarray, ...]
    switch_caps: tuple[np.ndarray, ...]


def _cut_model(topology: Topology) -> _CutModel:
    caps: dict[tuple[int, int], float] = {}
    for link in topology.links:
        key = (link.src, link.dst)
        caps[key] = caps.get(key, 0.0) + link.bandwidth_GBps
    keys = sorted(caps)
    n = topology.num_ranks
    members, sizes, pcaps = [], [], []
    for switch in topology.switches:
        rows = [r for port in switch.ports for r in port.ranks]
        cols = [p for p, port in enumerate(switch.ports) for _ in port.ranks]
        m = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(n, len(switch.ports)))
        members.append(sp.csr_array(m.T))  # ports x ranks: sparse @ dense is cheap
        sizes.append(np.array([float(len(port.ranks)) for port in switch.ports]))
        pcaps.append(np.array([port.bandwidth_GBps for port in switch.ports]))
    return _CutModel(n, np.array([k[0] for k in keys], dtype=np.int64),
                     np.array([k[1] for k in keys], dtype=np.int64),
                     np.array([caps[k] for k in keys]), tuple(members), tuple(sizes), tuple(pcaps))


def min_in_cut(topology: Topology, inside: np.ndarray) -> np.ndarray:
    """For each row of ``inside`` (K x N booleans: the ranks in S), the least B_in(S) in GB/s."""
    return _min_in_cut(_cut_model(topology), np.atleast_2d(np.asarray(inside, dtype=bool)))


def _min_in_cut(model: _CutModel, inside: np.ndarray, block: int = 4096) -> np.ndarray:
    out = np.empty(inside.shape[0])
    for lo in range(0, inside.shape[0], block):
        a = inside[lo:lo + block]
        total = (a[:, model.link_dst] & ~a[:, model.link_src]).astype(np.float64) @ model.link_cap
        af = a.astype(np.float64)
        for members, sizes, caps in zip(model.switch_members, model.switch_sizes, model.switch_caps,
                                        strict=True):
            counts = (members @ af.T).T
            hub_out = (counts > 0.5).astype(np.float64) @ caps
            hub_in = (counts < sizes - 0.5).astype(np.float64) @ caps
            total += np.minimum(hub_out, hub_in)
        out[lo:lo + block] = total
    return out


def _all_subsets(n: int) -> np.ndarray:
    """Every proper non-empty subset of n ranks as a (2^n - 2) x n boolean matrix."""
    codes = np.arange(1, (1 << n) - 1, dtype=np.int64)
    return ((codes[:, None] >> np.arange(n)) & 1).astype(bool)


def _safe_ratio(num: np.ndarray, den: np.ndarray, topology: Topology) -> np.ndarray:
    """num / den, with a zero-capacity cut that has to carry data reported as a user error."""
    bad = (den <= 0) & (num > 0)
    if bad.any():
        raise SynthError(f"topology '{topology.name}' is disconnected: some rank set has no "
                         "incoming bandwidth but needs data")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(num > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _best(ratio: np.ndarray, masks: np.ndarray) -> tuple[float, tuple[int, ...] | None]:
    if ratio.size == 0:
        return 0.0, None
    i = int(np.argmax(ratio))
    if ratio[i] <= 0:
        return 0.0, None
    return float(ratio[i]), tuple(int(r) for r in np.flatnonzero(masks[i]))


# ====================================================================================== exact
def _exact_standard(topology: Topology, collective: Collective) -> tuple[float, tuple[int, ...] | None]:
    """Exact cut bound (µs per byte) for the standard single-demand collectives."""
    kind, n = collective.kind, topology.num_ranks
    if kind == "allgather":
        return allgather_inv_bandwidth(topology, method="exact")[:2]
    if kind == "reducescatter":
        return reducescatter_inv_bandwidth(topology, method="exact")[:2]
    root = collective.root or 0
    if kind in ("scatter", "gather"):
        return rooted_spread_inv_bandwidth(topology, root, gather=kind == "gather", method="exact")[:2]
    masks = _all_subsets(n)
    bin_ = _min_in_cut(_cut_model(topology), masks)
    # broadcast: S without the root needs the whole buffer; reduce: S with the root needs it
    keep = ~masks[:, root] if kind == "broadcast" else masks[:, root]
    ratio = _safe_ratio(keep.astype(float), bin_ * BYTES_PER_US, topology)
    return _best(ratio, masks)


def exact_demand_bound(topology: Topology, collective: Collective
                       ) -> tuple[float, tuple[int, ...] | None]:
    """max over every rank subset A of (bytes that must enter S) / B_in(S), per message byte.

    A chunk must enter S (S ∩ ranks = A) when some rank of A needs it and no rank of A holds it
    (non-combining), or when some rank of A needs it and some contributor is outside A (combining:
    the sum depends on it). The mirror condition (data that must leave A) is the same condition on
    the complement, so enumerating all subsets covers both. Only for small N (2^N subsets).
    """
    n = topology.num_ranks
    if n > 24:
        raise SynthError(f"exact cut enumeration is for small topologies; '{topology.name}' has {n} "
                         "ranks")
    masks = _all_subsets(n)
    codes = np.arange(1, (1 << n) - 1, dtype=np.int64)
    pairs = Counter((_bits(pre), _bits(post)) for pre, post in
                    zip(collective.pre, collective.post, strict=True) if post)
    demand = np.zeros(codes.size)
    for (pre, post), count in pairs.items():
        needs = (codes & post) != 0
        if collective.combining:
            needs &= (codes & pre) != pre
        else:
            needs &= (codes & pre) == 0
        demand += count * needs
    bin_ = _min_in_cut(_cut_model(topology), masks)
    ratio = _safe_ratio(demand / collective.buffer_chunks, bin_ * BYTES_PER_US, topology)
    return _best(ratio, masks)


def _bits(ranks: Iterable[int]) -> int:
    v = 0
    for r in ranks:
        v |= 1 << r
    return v


# ====================================================================================== allgather
def allgather_inv_bandwidth(topology: Topology, *, method: str = "auto"
                            ) -> tuple[float, tuple[int, ...] | None, str]:
    """ForestColl's allgather bound: (µs per byte, ranks of the tightest S, method).

    slope = max over S of |ranks outside S| / (N · B_in(S) · 1e3): the ranks outside S each own
    bytes/N that every rank in S needs, and all of it must come in over the edges entering S.
    """
    return _spread_bound(topology, reverse=False, method=method)


def reducescatter_inv_bandwidth(topology: Topology, *, method: str = "auto"
                                ) -> tuple[float, tuple[int, ...] | None, str]:
    """The mirror of allgather: each rank outside S needs its bytes/N reduced over S's ranks, which
    must leave S: slope = max over S of |ranks outside S| / (N · B_out(S) · 1e3)."""
    return _spread_bound(topology, reverse=True, method=method)


def _spread_bound(topology: Topology, reverse: bool, method: str
                  ) -> tuple[float, tuple[int, ...] | None, str]:
    n = topology.num_ranks
    if n <= 1:
        return 0.0, None, "trivial"
    if method == "exact" or (method == "auto" and n <= EXACT_MAX_RANKS):
        masks = _all_subsets(n)
        model = _cut_model(topology)
        # B_out of (A plus the best extra vertices) = B_in of the complement: use ~A
        bin_ = _min_in_cut(model, ~masks if reverse else masks)
        outside = (~masks).sum(axis=1).astype(float)
        ratio = _safe_ratio(outside, n * bin_ * BYTES_PER_US, topology)
        slope, cut = _best(ratio, masks)
        return slope, cut, "exact"
    x, cut = _dinkelbach_allgather(topology, reverse)
    return 1.0 / (n * x * BYTES_PER_US), cut, "maxflow"


# ------------------------------------------------------------------------------- flow machinery
@dataclass
class _Net:
    """The physical graph as arrays: ranks are vertices 0..N-1, then switch/port vertices."""

    n_ranks: int
    n_vertices: int
    src: np.ndarray
    dst: np.ndarray
    cap: np.ndarray
    """GB/s, inf on rank-port edges."""


def _net(topology: Topology, reverse: bool = False) -> _Net:
    g = topology.physical_graph()
    n = topology.num_ranks
    index = {r: r for r in range(n)}
    for v in g.nodes:
        if v not in index:
            index[v] = len(index)
    edges = [(index[a], index[b], float(d["capacity"])) for a, b, d in g.edges(data=True)]
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    if reverse:
        src, dst = dst, src
    return _Net(n, len(index), src, dst, np.array([e[2] for e in edges]))


def _in_capacity(net: _Net, inside: np.ndarray) -> float:
    """B_in of a vertex set (boolean mask over the net's vertices), in GB/s."""
    crossing = inside[net.dst] & ~inside[net.src]
    return float(net.cap[crossing].sum())


class _ParamFlow:
    """Max-flow on the physical graph plus one extra vertex joined by edges of a common capacity x.

    scipy's max-flow is integral and 32-bit, so each run scales capacities to put the parametric
    total x·k near 2^29 (edges above that, and infinite ones, are clipped: no cut below x·k uses
    them); rounding then moves a cut by about 1e-8 relative. Rounding can only make a cut found
    slightly suboptimal, never invalid: every ratio returned is recomputed exactly (in floats) from
    the vertex set itself.
    """

    def __init__(self, net: _Net, extra_src: np.ndarray, extra_dst: np.ndarray):
        self.net = net
        self.extra = net.n_vertices
        self.size = net.n_vertices + 1
        self.k = len(extra_src)
        rows = np.concatenate([net.src, extra_src])
        cols = np.concatenate([net.dst, extra_dst])
        order = np.lexsort((cols, rows))
        self.indices = cols[order].astype(np.int32)
        self.indptr = np.searchsorted(rows[order], np.arange(self.size + 1)).astype(np.int32)
        self.cap = np.concatenate([net.cap, np.zeros(self.k)])[order]
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        self.param_pos = inverse[len(net.src):]

    def run(self, x: float, source: int, sink: int) -> np.ndarray | None:
        """None when the flow saturates every parametric edge; else the sink side (vertex mask)."""
        scale = (_INT_CAP / 2) / max(x * self.k, 1e-300)
        data = np.minimum(np.round(np.minimum(self.cap, 4.0 * _INT_CAP / scale) * scale), _INT_CAP)
        unit = math.floor(x * scale)
        data[self.param_pos] = unit
        graph = sp.csr_array((data.astype(np.int32), self.indices, self.indptr),
                             shape=(self.size, self.size))
        result = maximum_flow(graph, source, sink)
        if result.flow_value >= unit * self.k:
            return None
        residual = (graph.astype(np.int64) - result.flow.astype(np.int64)).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        reached = breadth_first_order(residual, source, directed=True, return_predecessors=False)
        sink_side = np.ones(self.size, dtype=bool)
        sink_side[reached] = False
        return sink_side


def _dinkelbach_allgather(topology: Topology, reverse: bool, start: float | None = None
                          ) -> tuple[float, tuple[int, ...]]:
    """x* = min over S of B_in(S) / |ranks outside S| (S holds a rank and misses one), by max-flow.

    "B_in(S) >= x |ranks outside S| for all S" holds iff, for every rank v, the max-flow from a
    super-source (an edge of capacity x to every rank) to v is x·N: a cut with v on the sink side T
    costs B_in(T) + x |ranks in T|. Start from the best structured cut (an upper bound on x*), and
    for each sink, while its min cut is below x·N, replace x by the ratio of that cut's sink side
    (Dinkelbach/Newton: strictly decreasing, finite). A sink satisfied at x stays satisfied at any
    smaller x, so one pass over the sinks suffices; sinks are one rank per symmetry orbit.
    ``start`` (tests only) replaces the structured starting point by a larger x, to exercise the
    iteration; the result is still the ratio of a set the flows found.
    """
    n = topology.num_ranks
    model = _cut_model(topology)
    candidates = _structured_rank_sets(topology)
    bin_ = _min_in_cut(model, ~candidates if reverse else candidates)
    outside = (~candidates).sum(axis=1)
    ratios = bin_ / outside
    i = int(np.argmin(ratios))
    x, cut = float(ratios[i]), tuple(int(r) for r in np.flatnonzero(candidates[i]))
    if x <= 0:
        raise SynthError(f"topology '{topology.name}' is disconnected: ranks {cut[:6]} receive "
                         "nothing from the others")
    if start is not None and start > x:
        x, cut = start, ()
    net = _net(topology, reverse)
    ranks = np.arange(n)
    flow = _ParamFlow(net, np.full(n, net.n_vertices), ranks)
    for v in orbit_representatives(topology):
        while True:
            sink_side = flow.run(x, flow.extra, v)
            if sink_side is None:
                break
            inside = sink_side[:net.n_vertices]
            out_ranks = n - int(inside[:n].sum())
            ratio = _in_capacity(net, inside) / out_ranks if out_ranks else math.inf
            if not ratio < x * (1 - 1e-9):
                break
            x, cut = ratio, tuple(int(r) for r in np.flatnonzero(inside[:n]))
    assert cut, "the iteration must end on the ratio of a real cut"
    return x, cut


# ====================================================================================== rooted
def rooted_spread_inv_bandwidth(topology: Topology, root: int, *, gather: bool = False,
                                method: str = "auto", _start: float | None = None
                                ) -> tuple[float, tuple[int, ...] | None, str]:
    """Scatter (gather mirrored): S without the root needs bytes/N per rank it holds.

    slope = max over S not holding the root of |ranks in S| / (N · B_in(S) · 1e3); for gather the
    ranks in S must send theirs out, i.e. the same on the reversed graph. Large topologies use one
    max-flow per Dinkelbach step: root -> every other rank -> a super-sink with edges of capacity x.
    """
    n = topology.num_ranks
    if n <= 1:
        return 0.0, None, "trivial"
    if method == "exact" or (method == "auto" and n <= EXACT_MAX_RANKS):
        masks = _all_subsets(n)
        model = _cut_model(topology)
        # gather: B_out(A) = B_in of the complement; A excludes the root either way
        bin_ = _min_in_cut(model, ~masks if gather else masks)
        count = np.where(masks[:, root], 0, masks.sum(axis=1)).astype(float)
        ratio = _safe_ratio(count, n * bin_ * BYTES_PER_US, topology)
        slope, cut = _best(ratio, masks)
        return slope, cut, "exact"
    net = _net(topology, reverse=gather)
    others = np.array([r for r in range(n) if r != root])
    model = _cut_model(topology)
    singles = np.zeros((others.size, n), dtype=bool)
    singles[np.arange(others.size), others] = True
    bin_ = _min_in_cut(model, ~singles if gather else singles)
    i = int(np.argmin(bin_))
    x, cut = float(bin_[i]), (int(others[i]),)
    if x <= 0:
        raise SynthError(f"topology '{topology.name}' is disconnected: rank {cut[0]} is cut off")
    if _start is not None and _start > x:  # tests: exercise the iteration from far above
        x, cut = _start, ()
    flow = _ParamFlow(net, others, np.full(others.size, net.n_vertices))
    while True:
        sink_side = flow.run(x, root, flow.extra)
        if sink_side is None:
            break
        inside = sink_side[:net.n_vertices]
        held = int(inside[:n].sum())
        ratio = _in_capacity(net, inside) / held if held else math.inf
        if not ratio < x * (1 - 1e-9):
            break
        x, cut = ratio, tuple(int(r) for r in np.flatnonzero(inside[:n]))
    assert cut, "the iteration must end on the ratio of a real cut"
    return 1.0 / (n * x * BYTES_PER_US), cut, "maxflow"


def root_mincut_inv_bandwidth(topology: Topology, root: int, *, reduce: bool = False
                              ) -> tuple[float, tuple[int, ...] | None]:
    """Broadcast (reduce mirrored): every rank needs the whole buffer from the root, so
    slope = 1 / (min over ranks v of maxflow(root -> v) · 1e3). N-1 max-flows."""
    n = topology.num_ranks
    net = _net(topology, reverse=reduce)
    model = _cut_model(topology)
    best_bw, best_cut = math.inf, None
    for v in range(n):
        if v == root:
            continue
        single = np.zeros((1, n), dtype=bool)
        single[0, v] = True
        upper = float(_min_in_cut(model, ~single if reduce else single)[0])
        if upper <= 0:
            raise SynthError(f"topology '{topology.name}' is disconnected: rank {v} is cut off")
        # one parametric edge v -> extra with capacity x = upper: the flow saturates it iff the
        # root -> v min cut is at least ``upper``; otherwise the sink side is a smaller cut
        flow = _ParamFlow(net, np.array([v]), np.array([net.n_vertices]))
        sink_side = flow.run(upper, root, flow.extra)
        bw, cut = upper, (v,)
        if sink_side is not None:
            inside = sink_side[:net.n_vertices]
            value = _in_capacity(net, inside)
            if value < bw:
                bw, cut = value, tuple(int(r) for r in np.flatnonzero(inside[:n]))
        if bw < best_bw:
            best_bw, best_cut = bw, cut
    if best_bw <= 0:
        raise SynthError(f"topology '{topology.name}' is disconnected from root {root}")
    return 1.0 / (best_bw * BYTES_PER_US), best_cut


# ====================================================================================== allreduce
def _allreduce_cut_candidates(topology: Topology) -> tuple[float, str, tuple[int, ...] | None]:
    """max over structured S (and the allgather/reducescatter optima) of 1 / B_in(S)."""
    masks = _structured_rank_sets(topology)
    extra = [allgather_inv_bandwidth(topology)[1], reducescatter_inv_bandwidth(topology)[1]]
    rows = [masks]
    for cut in extra:
        if cut:
            m = np.zeros((1, topology.num_ranks), dtype=bool)
            m[0, list(cut)] = True
            rows.append(m)
    masks = np.vstack(rows)
    model = _cut_model(topology)
    # data enters A (B_in(A)) and leaves A (B_in of the complement): both carry the whole buffer
    both = np.vstack([masks, ~masks])
    bin_ = _min_in_cut(model, both)
    ratio = _safe_ratio(np.ones(both.shape[0]), bin_ * BYTES_PER_US, topology)
    slope, cut = _best(ratio, both)
    return slope, "cuts", cut


def partition_inv_bandwidth(topology: Topology,
                            partitions: Sequence[Sequence[Sequence[int]]] | None = None) -> float:
    """Allreduce floor from message counting, µs per byte of the buffer.

    Split the ranks into k groups. Per element, consider the first message after which some group
    (as a whole) knows the full sum: before it every other group has sent at least one message out
    of itself (its contributions are needed), after it every other group must receive at least one
    (its ranks still lack the sum) — 2(k-1) inter-group messages, the one-way gossip bound. Each
    crosses at least one finite edge leaving its sender's group (and one entering its receiver's),
    so time >= 2(k-1)·bytes / (capacity of those edges), for either side. Default partitions:
    single ranks, and the nodes when there are several.
    """
    n = topology.num_ranks
    if partitions is None:
        partitions = [[(r,) for r in range(n)]]
        if len(topology.nodes) > 1:
            partitions.append(list(topology.nodes))
    nets = (_net(topology), _net(topology, reverse=True))
    best = 0.0
    for groups in partitions:
        k = len(groups)
        if k < 2:
            continue
        for net in nets:
            total = _leaving_capacity(net, groups)
            if total is not None and total > 0:
                best = max(best, 2 * (k - 1) / (total * BYTES_PER_US))
    return best


def _leaving_capacity(net: _Net, groups: Sequence[Sequence[int]]) -> float | None:
    """Capacity of the finite edges a message must cross to leave its group, or None if some group
    reaches another over infinite edges only (then the count says nothing).

    Group g's vertex set G_g: its ranks, the switch/port vertices whose rank neighbours all lie in
    g, and hubs whose neighbours all joined g. Its closure C_g adds what G_g reaches over infinite
    (rank-port) edges. A path from g to another group leaves C_g by a finite edge (C_g is closed
    under infinite edges) into a vertex outside G_g; those edges are the ones counted.
    """
    n, size = net.n_ranks, net.n_vertices
    label = np.full(size, -1, dtype=np.int64)
    for i, members in enumerate(groups):
        label[list(members)] = i
    nbrs: list[set[int]] = [set() for _ in range(size)]
    inf_out: list[list[int]] = [[] for _ in range(size)]
    for a, b, c in zip(net.src.tolist(), net.dst.tolist(), net.cap.tolist(), strict=True):
        nbrs[a].add(b)
        nbrs[b].add(a)
        if math.isinf(c):
            inf_out[a].append(b)
    for v in range(n, size):  # ports: all rank neighbours in one group
        ls = {int(label[u]) for u in nbrs[v] if u < n}
        if len(ls) == 1:
            label[v] = ls.pop()
    for v in range(n, size):  # hubs: every neighbour already in one group
        if label[v] < 0 and nbrs[v] and all(u >= n for u in nbrs[v]):
            ls = {int(label[u]) for u in nbrs[v]}
            if len(ls) == 1 and -1 not in ls:
                label[v] = ls.pop()
    closure_groups: list[set[int]] = [set() for _ in range(size)]
    members_of: list[list[int]] = [[] for _ in groups]
    for v in range(size):
        if label[v] >= 0:
            members_of[label[v]].append(v)
    for g, start in enumerate(members_of):
        stack, seen = list(start), set(start)
        while stack:
            u = stack.pop()
            closure_groups[u].add(g)
            for w in inf_out[u]:
                if w not in seen:
                    if w < n and label[w] != g:
                        return None
                    seen.add(w)
                    stack.append(w)
    total = 0.0
    for a, b, c in zip(net.src.tolist(), net.dst.tolist(), net.cap.tolist(), strict=True):
        if math.isinf(c) or not closure_groups[a]:
            continue
        if any(g != label[b] for g in closure_groups[a]):
            total += c
    return total


def rs_plus_ag_inv_bandwidth(topology: Topology) -> float:
    """reducescatter + allgather slopes: the floor of *two-phase* allreduce algorithms only.

    Not a lower bound for allreduce in general (see the module docstring); report it as a reference
    for RS-then-AG schedules.
    """
    return reducescatter_inv_bandwidth(topology)[0] + allgather_inv_bandwidth(topology)[0]


# ====================================================================================== alltoall
def alltoall_cut_candidates(topology: Topology) -> tuple[float, tuple[int, ...] | None]:
    """max over structured S of |ranks in S| · |ranks outside| / (N · B_in(S) · 1e3) per byte.

    Alltoall's buffer holds N pieces per rank, so each ordered pair carries bytes/N; every pair
    from outside S to inside must enter S. Valid for any S, tight for the sets that matter on
    common machines (single ranks, nodes, bisections); not a search over all S.
    """
    n = topology.num_ranks
    masks = _structured_rank_sets(topology)
    inside = masks.sum(axis=1).astype(float)
    bin_ = _min_in_cut(_cut_model(topology), masks)
    ratio = _safe_ratio(inside * (n - inside), n * bin_ * BYTES_PER_US, topology)
    return _best(ratio, masks)


def alltoall_distance_inv_bandwidth(topology: Topology) -> float:
    """Volume bound: each byte of pair (s, d) loads at least dist(s, d) finite-capacity edges of the
    physical graph (a switch hop loads the sender's out-port and the receiver's in-port), and all
    edges together carry at most the sum of their capacities per µs."""
    net = _net(topology)
    n = net.n_ranks
    finite = np.isfinite(net.cap)
    weight = np.where(finite, 1.0, 0.0)  # explicit zeros are edges for csgraph
    graph = sp.csr_array((weight, (net.src, net.dst)), shape=(net.n_vertices, net.n_vertices))
    dist = dijkstra(graph, directed=True, indices=np.arange(n))[:, :n]
    if np.isinf(dist).any():
        raise SynthError(f"topology '{topology.name}' is disconnected")
    total_cap = float(net.cap[finite].sum())
    if total_cap <= 0:
        return 0.0
    # per byte of the buffer: each of the N(N-1) pairs carries 1/N of it
    return float(np.round(dist).sum()) / n / (total_cap * BYTES_PER_US)


# ====================================================================================== generic
def cut_candidates_demand(topology: Topology, collective: Collective
                          ) -> tuple[float, tuple[int, ...] | None]:
    """The per-chunk demand bound of :func:`exact_demand_bound` on structured rank sets only."""
    masks = _structured_rank_sets(topology)
    masks = np.vstack([masks, ~masks])
    demand = np.zeros(masks.shape[0])
    pairs = Counter((pre, post) for pre, post in zip(collective.pre, collective.post, strict=True)
                    if post)
    for (pre, post), count in pairs.items():
        has_post = masks[:, list(post)].any(axis=1)
        pre_in = masks[:, list(pre)]
        need = has_post & (~pre_in.all(axis=1) if collective.combining else ~pre_in.any(axis=1))
        demand += count * need
    bin_ = _min_in_cut(_cut_model(topology), masks)
    ratio = _safe_ratio(demand / collective.buffer_chunks, bin_ * BYTES_PER_US, topology)
    return _best(ratio, masks)


# ====================================================================================== structure
def _structured_rank_sets(topology: Topology) -> np.ndarray:
    """Rank sets worth trying as cuts: single ranks, nodes, contiguous halves of the nodes and of
    the ranks, and half-slabs along each torus axis (meta 'torus', applied inside every node)."""
    n = topology.num_ranks
    sets: list[np.ndarray] = []
    eye = np.eye(n, dtype=bool)
    sets.append(eye)
    nodes = [tuple(m) for m in topology.nodes if m]
    rows: list[np.ndarray] = []

    def add(members: Iterable[int]) -> None:
        m = np.zeros(n, dtype=bool)
        m[list(members)] = True
        if 0 < m.sum() < n:
            rows.append(m)

    if len(nodes) > 1:
        for members in nodes:
            add(members)
        add(r for members in nodes[: len(nodes) // 2] for r in members)
    add(range(n // 2))
    dims = dict(topology.meta).get("torus")
    local = nodes if nodes else [tuple(range(n))]
    if dims and all(len(m) == math.prod(dims) for m in local):
        shape = tuple(int(d) for d in dims)
        coords = np.array(np.unravel_index(np.arange(math.prod(shape)), shape)).T
        for axis, size in enumerate(shape):
            for lo in range(size):
                picks = np.flatnonzero(coords[:, axis] == lo)
                add(m[i] for m in local[:1] for i in picks)
                half = np.flatnonzero((coords[:, axis] - lo) % size < size // 2)
                add(m[i] for m in local[:1] for i in half)
                add(m[i] for m in local for i in half)
    if rows:
        sets.append(np.array(rows))
    return np.vstack(sets)


def orbit_representatives(topology: Topology) -> list[int]:
    """One rank per orbit of the automorphisms found by :func:`symmetry_generators`."""
    n = topology.num_ranks
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for perm in symmetry_generators(topology):
        for r, image in enumerate(perm):
            a, b = find(r), find(image)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return sorted({find(r) for r in range(n)})


def symmetry_generators(topology: Topology) -> list[tuple[int, ...]]:
    """Rank permutations that are verified automorphisms of the physical graph.

    Candidates are cheap structured maps (shift every node's ranks to the next node; a cyclic shift,
    torus translations or hypercube flips of the local index inside every node); each is kept only
    if it maps links onto links of the same bandwidth and switches onto switches with the same port
    groups and bandwidths, so the orbits it yields are sound, never guessed from invariants.
    """
    n = topology.num_ranks
    nodes = [tuple(m) for m in topology.nodes] or [tuple(range(n))]
    if sorted(r for m in nodes for r in m) != list(range(n)) or len({len(m) for m in nodes}) != 1:
        return []
    size = len(nodes[0])
    cands: list[list[int]] = []

    def local_map(f) -> list[int]:
        perm = [0] * n
        for members in nodes:
            for j, r in enumerate(members):
                perm[r] = members[f(j)]
        return perm

    if len(nodes) > 1:
        perm = [0] * n
        for i, members in enumerate(nodes):
            nxt = nodes[(i + 1) % len(nodes)]
            for j, r in enumerate(members):
                perm[r] = nxt[j]
        cands.append(perm)
    if size > 1:
        cands.append(local_map(lambda j: (j + 1) % size))
    dims = dict(topology.meta).get("torus")
    if dims and math.prod(dims) == size:
        shape = tuple(int(d) for d in dims)
        for axis in range(len(shape)):
            def shift(j: int, axis: int = axis) -> int:
                c = list(np.unravel_index(j, shape))
                c[axis] = (c[axis] + 1) % shape[axis]
                return int(np.ravel_multi_index(tuple(c), shape))
            cands.append(local_map(shift))
    if size > 1 and size & (size - 1) == 0:
        for k in range(size.bit_length() - 1):
            cands.append(local_map(lambda j, k=k: j ^ (1 << k)))
    signature = _signature(topology)
    return [tuple(p) for p in cands if _signature(topology, p) == signature]


def _signature(topology: Topology, perm: Sequence[int] | None = None) -> tuple:
    """Links and switches as comparable data, after renaming ranks by ``perm``."""
    def m(r: int) -> int:
        return r if perm is None else perm[r]

    caps: Counter = Counter()
    for link in topology.links:
        caps[(m(link.src), m(link.dst))] += link.bandwidth_GBps
    switches = Counter(
        tuple(sorted((tuple(sorted(m(r) for r in port.ranks)), port.bandwidth_GBps)
                     for port in sw.ports))
        for sw in topology.switches)
    return tuple(sorted(caps.items())), tuple(sorted(switches.items()))
