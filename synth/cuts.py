"""Cuts of the physical graph, the machinery under :mod:`synth.bounds`.

* :class:`CutModel` gives B_in(S), the bandwidth entering a vertex set S, in closed form for many
  rank sets at once (the switch, port and hub vertices join S or not, whichever is cheaper), and
  :func:`tightest_cut` the rank set whose data crosses its cut slowest;
* :class:`ParamFlow` is a max-flow on the physical graph plus one vertex joined by edges of a
  common capacity x: the step of the Dinkelbach iterations that find the tightest cut of large
  topologies without enumerating subsets;
* :func:`structured_rank_sets` are the sets worth trying where enumerating is too much (single
  ranks, nodes, halves, torus slabs), and :func:`symmetry_generators` the verified automorphisms
  whose orbits let one sink stand for many (:func:`orbit_representatives`).

Units as in :mod:`synth.bounds`: GB/s, and µs per byte for the slopes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from .errors import SynthError
from .topology import Topology

BYTES_PER_US = 1e3
"""Bytes per µs through 1 GB/s."""

_INT_CAP = 1 << 30
"""scipy's max-flow works in 32-bit integers: every scaled capacity stays at or below this."""


# ====================================================================================== cut model
@dataclass(frozen=True)
class CutModel:
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

    def min_in(self, inside: np.ndarray, block: int = 4096) -> np.ndarray:
        """For each row of ``inside`` (K x N booleans: the ranks in S), the least B_in(S) in GB/s."""
        out = np.empty(inside.shape[0])
        for lo in range(0, inside.shape[0], block):
            a = inside[lo:lo + block]
            total = (a[:, self.link_dst] & ~a[:, self.link_src]).astype(np.float64) @ self.link_cap
            af = a.astype(np.float64)
            for members, sizes, caps in zip(self.switch_members, self.switch_sizes,
                                            self.switch_caps, strict=True):
                counts = (members @ af.T).T
                hub_out = (counts > 0.5).astype(np.float64) @ caps
                hub_in = (counts < sizes - 0.5).astype(np.float64) @ caps
                total += np.minimum(hub_out, hub_in)
            out[lo:lo + block] = total
        return out


def cut_model(topology: Topology) -> CutModel:
    """The cut model of ``topology``: parallel links summed, one member matrix per switch."""
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
    return CutModel(n, np.array([k[0] for k in keys], dtype=np.int64),
                    np.array([k[1] for k in keys], dtype=np.int64),
                    np.array([caps[k] for k in keys]), tuple(members), tuple(sizes), tuple(pcaps))


def min_in_cut(topology: Topology, inside: np.ndarray) -> np.ndarray:
    """For each row of ``inside`` (K x N booleans: the ranks in S), the least B_in(S) in GB/s."""
    return cut_model(topology).min_in(np.atleast_2d(np.asarray(inside, dtype=bool)))


def all_subsets(n: int) -> np.ndarray:
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


def tightest_cut(topology: Topology, masks: np.ndarray, need: np.ndarray, per: float = 1.0, *,
                 reverse: bool = False) -> tuple[float, tuple[int, ...] | None]:
    """The rank set among ``masks`` whose data crosses its cut slowest, and that time per byte:
    the largest ``need / (per · B_in(S) · 1e3)`` in µs per byte of the message (``need[i]``: the
    message's share that must enter the i-th set, times ``per``); ``reverse``: the data must
    leave the set (B_out(S), the B_in of its complement). None when no set needs data."""
    bin_ = cut_model(topology).min_in(~masks if reverse else masks)
    return _best(_safe_ratio(need, per * bin_ * BYTES_PER_US, topology), masks)


def _best(ratio: np.ndarray, masks: np.ndarray) -> tuple[float, tuple[int, ...] | None]:
    if ratio.size == 0:
        return 0.0, None
    i = int(np.argmax(ratio))
    if ratio[i] <= 0:
        return 0.0, None
    return float(ratio[i]), tuple(int(r) for r in np.flatnonzero(masks[i]))


# ========================================================================================== flow
@dataclass
class FlowNet:
    """The physical graph as arrays: ranks are vertices 0..N-1, then switch/port vertices."""

    n_ranks: int
    n_vertices: int
    src: np.ndarray
    dst: np.ndarray
    cap: np.ndarray
    """GB/s, inf on rank-port edges."""


def flow_net(topology: Topology, reverse: bool = False) -> FlowNet:
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
    return FlowNet(n, len(index), src, dst, np.array([e[2] for e in edges]))


def in_capacity(net: FlowNet, inside: np.ndarray) -> float:
    """B_in of a vertex set (boolean mask over the net's vertices), in GB/s."""
    crossing = inside[net.dst] & ~inside[net.src]
    return float(net.cap[crossing].sum())


class ParamFlow:
    """Max-flow on the physical graph plus one extra vertex joined by edges of a common capacity x.

    scipy's max-flow is integral and 32-bit, so each run scales capacities to put the parametric
    total x·k near 2^29 (edges above that, and infinite ones, are clipped: no cut below x·k uses
    them); rounding then moves a cut by about 1e-8 relative. Rounding can only make a cut found
    slightly suboptimal, never invalid: every ratio returned is recomputed exactly (in floats) from
    the vertex set itself.
    """

    def __init__(self, net: FlowNet, extra_src: np.ndarray, extra_dst: np.ndarray):
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


# ===================================================================================== structure
def structured_rank_sets(topology: Topology) -> np.ndarray:
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
