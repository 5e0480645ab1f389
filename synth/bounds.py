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
from scipy.sparse.csgraph import dijkstra

from .collectives import Collective
from .cuts import (
    BYTES_PER_US,
    FlowNet,
    ParamFlow,
    all_subsets,
    cut_model,
    flow_net,
    in_capacity,
    orbit_representatives,
    structured_rank_sets,
    tightest_cut,
)
from .errors import SynthError
from .topology import Topology

EXACT_MAX_RANKS = 16
"""Up to this many ranks every rank subset is enumerated (2^16 subsets, vectorised)."""



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
    masks = all_subsets(n)
    # broadcast: S without the root needs the whole buffer; reduce: S with the root needs it
    keep = ~masks[:, root] if kind == "broadcast" else masks[:, root]
    return tightest_cut(topology, masks, keep.astype(float))


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
    masks = all_subsets(n)
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
    return tightest_cut(topology, masks, demand / collective.buffer_chunks)


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
        masks = all_subsets(n)
        outside = (~masks).sum(axis=1).astype(float)
        return (*tightest_cut(topology, masks, outside, n, reverse=reverse), "exact")
    x, cut = _dinkelbach_allgather(topology, reverse)
    return 1.0 / (n * x * BYTES_PER_US), cut, "maxflow"


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
    candidates = structured_rank_sets(topology)
    bin_ = cut_model(topology).min_in(~candidates if reverse else candidates)
    outside = (~candidates).sum(axis=1)
    ratios = bin_ / outside
    i = int(np.argmin(ratios))
    x, cut = float(ratios[i]), tuple(int(r) for r in np.flatnonzero(candidates[i]))
    if x <= 0:
        raise SynthError(f"topology '{topology.name}' is disconnected: ranks {cut[:6]} receive "
                         "nothing from the others")
    if start is not None and start > x:
        x, cut = start, ()
    net = flow_net(topology, reverse)
    ranks = np.arange(n)
    flow = ParamFlow(net, np.full(n, net.n_vertices), ranks)
    for v in orbit_representatives(topology):
        while True:
            sink_side = flow.run(x, flow.extra, v)
            if sink_side is None:
                break
            inside = sink_side[:net.n_vertices]
            out_ranks = n - int(inside[:n].sum())
            ratio = in_capacity(net, inside) / out_ranks if out_ranks else math.inf
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
        masks = all_subsets(n)
        # gather: the data leaves A (B_out); A excludes the root either way
        count = np.where(masks[:, root], 0, masks.sum(axis=1)).astype(float)
        return (*tightest_cut(topology, masks, count, n, reverse=gather), "exact")
    net = flow_net(topology, reverse=gather)
    others = np.array([r for r in range(n) if r != root])
    singles = np.zeros((others.size, n), dtype=bool)
    singles[np.arange(others.size), others] = True
    bin_ = cut_model(topology).min_in(~singles if gather else singles)
    i = int(np.argmin(bin_))
    x, cut = float(bin_[i]), (int(others[i]),)
    if x <= 0:
        raise SynthError(f"topology '{topology.name}' is disconnected: rank {cut[0]} is cut off")
    if _start is not None and _start > x:  # tests: exercise the iteration from far above
        x, cut = _start, ()
    flow = ParamFlow(net, others, np.full(others.size, net.n_vertices))
    while True:
        sink_side = flow.run(x, root, flow.extra)
        if sink_side is None:
            break
        inside = sink_side[:net.n_vertices]
        held = int(inside[:n].sum())
        ratio = in_capacity(net, inside) / held if held else math.inf
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
    net = flow_net(topology, reverse=reduce)
    model = cut_model(topology)
    best_bw, best_cut = math.inf, None
    for v in range(n):
        if v == root:
            continue
        single = np.zeros((1, n), dtype=bool)
        single[0, v] = True
        upper = float(model.min_in(~single if reduce else single)[0])
        if upper <= 0:
            raise SynthError(f"topology '{topology.name}' is disconnected: rank {v} is cut off")
        # one parametric edge v -> extra with capacity x = upper: the flow saturates it iff the
        # root -> v min cut is at least ``upper``; otherwise the sink side is a smaller cut
        flow = ParamFlow(net, np.array([v]), np.array([net.n_vertices]))
        sink_side = flow.run(upper, root, flow.extra)
        bw, cut = upper, (v,)
        if sink_side is not None:
            inside = sink_side[:net.n_vertices]
            value = in_capacity(net, inside)
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
    masks = structured_rank_sets(topology)
    extra = [allgather_inv_bandwidth(topology)[1], reducescatter_inv_bandwidth(topology)[1]]
    rows = [masks]
    for cut in extra:
        if cut:
            m = np.zeros((1, topology.num_ranks), dtype=bool)
            m[0, list(cut)] = True
            rows.append(m)
    masks = np.vstack(rows)
    # data enters A (B_in(A)) and leaves A (B_in of the complement): both carry the whole buffer
    both = np.vstack([masks, ~masks])
    slope, cut = tightest_cut(topology, both, np.ones(both.shape[0]))
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
    nets = (flow_net(topology), flow_net(topology, reverse=True))
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


def _leaving_capacity(net: FlowNet, groups: Sequence[Sequence[int]]) -> float | None:
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
    masks = structured_rank_sets(topology)
    inside = masks.sum(axis=1).astype(float)
    return tightest_cut(topology, masks, inside * (n - inside), n)


def alltoall_distance_inv_bandwidth(topology: Topology) -> float:
    """Volume bound: each byte of pair (s, d) loads at least dist(s, d) finite-capacity edges of the
    physical graph (a switch hop loads the sender's out-port and the receiver's in-port), and all
    edges together carry at most the sum of their capacities per µs."""
    net = flow_net(topology)
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
    masks = structured_rank_sets(topology)
    masks = np.vstack([masks, ~masks])
    demand = np.zeros(masks.shape[0])
    pairs = Counter((pre, post) for pre, post in zip(collective.pre, collective.post, strict=True)
                    if post)
    for (pre, post), count in pairs.items():
        has_post = masks[:, list(post)].any(axis=1)
        pre_in = masks[:, list(pre)]
        need = has_post & (~pre_in.all(axis=1) if collective.combining else ~pre_in.any(axis=1))
        demand += count * need
    return tightest_cut(topology, masks, demand / collective.buffer_chunks)
