"""The topology model: ranks, point-to-point links, switches with shared port budgets, nodes, NICs.

Units, everywhere in synth: latency ``alpha_us`` in microseconds, inverse bandwidth
``beta_us_per_mb`` in microseconds per megabyte with **MB = 10^6 bytes**, so a link of B GB/s has
``beta = 1000 / B``. A bandwidth is always per direction.

Two kinds of connection exist, because real machines have both:

* a :class:`Link` joins two ranks directly (NVLink, NeuronLink, xGMI); ``count`` parallel links
  multiply its bandwidth and the chunks it may carry per round;
* a :class:`Switch` joins every pair of ranks that sit on *different* ports (NVSwitch, the
  inter-node fabric). Each :class:`Port` is a budget shared by the ranks on it: a rank's total send
  (and total receive) through the switch, or a NIC shared by several ranks. These are TACCL's
  hyperedges. Switch pairs are never materialised as links, so a 1024-rank fabric stays small.

The model is a frozen value; derived views (rank graph, physical graph for max-flow, channels) are
computed lazily and cached on the instance.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

MB = 1_000_000
"""Bytes in the MB of ``beta_us_per_mb``."""


MAX_RANKS = 16_384
"""The most ranks a topology may have: the largest published training job, Llama 3 405B on 16,384
H100 GPUs (Meta, "The Llama 3 Herd of Models", arXiv:2407.21783, section 3.3.1). A bigger number is
a typo; refusing it at parse time costs nothing, where building it costs minutes and gigabytes."""

MAX_LINKS = 2**18
"""The most directed point-to-point links a topology may have (fully_connected:512 has 261,632):
building 2^20 of them took 8 s here before any solving started. Switches scale past this."""

MAX_CLASSES = 1024
"""The most link classes a topology or calibration file may name. Real machines have a handful
(NVLink, NVSwitch, PCIe, a NIC); a file with 300,000 took 12 s to read before anything ran."""

MAX_PARALLEL = 1024
"""The most parallel links (``count``) or lanes one link or port may bundle."""

MAX_ALPHA_US = 1e6
"""The largest latency a link class may have: one second, 10^4 times a slow network's."""

BETA_RANGE_US_PER_MB = (1e-3, 1e6)
"""Inverse bandwidths a link class may have: 1 PB/s (1e-3 µs/MB) down to 1 MB/s (1e6 µs/MB)."""


def check_size(what: str, ranks: int, links: int = 0) -> None:
    """Refuse an absurdly large topology before it is built (a SynthError naming the limit)."""
    from .errors import SynthError

    if ranks > MAX_RANKS:
        raise SynthError(f"{what} has {ranks} ranks; synth handles at most {MAX_RANKS} (MAX_RANKS, "
                         "the largest published training job)")
    if links > MAX_LINKS:
        raise SynthError(f"{what} has {links} point-to-point links; synth handles at most "
                         f"{MAX_LINKS} (MAX_LINKS); a switch (switch:N) models all-to-all "
                         "connectivity without materialising every pair")


def check_link_figures(alpha_us: float, beta_us_per_mb: float, where: str) -> None:
    """Refuse link figures that are not finite or outside :data:`MAX_ALPHA_US`/:data:`BETA_RANGE_US_PER_MB`.

    Beyond them every predicted time overflows to ``inf`` (alpha 1e308) or loses all precision.
    """
    import math

    from .errors import SynthError

    lo, hi = BETA_RANGE_US_PER_MB
    if not (math.isfinite(alpha_us) and 0 <= alpha_us <= MAX_ALPHA_US):
        raise SynthError(f"{where}: alpha_us must be a number of microseconds in 0..{MAX_ALPHA_US:g} "
                         f"(MAX_ALPHA_US), got {alpha_us:g}")
    if not (math.isfinite(beta_us_per_mb) and lo <= beta_us_per_mb <= hi):
        got = bandwidth_from_beta(beta_us_per_mb) if beta_us_per_mb else math.inf
        raise SynthError(f"{where}: bandwidth must be within {bandwidth_from_beta(hi):g}.."
                         f"{bandwidth_from_beta(lo):g} GB/s ({lo:g}..{hi:g} µs/MB, "
                         f"BETA_RANGE_US_PER_MB), got {got:g} GB/s ({beta_us_per_mb:g} µs/MB)")


def rank_ranges(ranks: list[int]) -> str:
    """How a sorted list of ranks (or any whole numbers) is written in messages: ``0-3,6`` for
    [0, 1, 2, 3, 6]."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def beta_from_bandwidth(gbps: float) -> float:
    """µs/MB for a bandwidth in GB/s (10^9 bytes per second)."""
    return 1000.0 / gbps


def bandwidth_from_beta(beta_us_per_mb: float) -> float:
    """GB/s for an inverse bandwidth in µs/MB."""
    return 1000.0 / beta_us_per_mb


@dataclass(frozen=True)
class Link:
    """A directed point-to-point link (or ``count`` identical parallel links)."""

    src: int
    dst: int
    alpha_us: float
    beta_us_per_mb: float
    count: int = 1
    kind: str = "link"

    @property
    def bandwidth_GBps(self) -> float:
        return self.count * bandwidth_from_beta(self.beta_us_per_mb)


@dataclass(frozen=True)
class Port:
    """One port of a switch: the ranks behind it share its bandwidth in each direction."""

    name: str
    ranks: tuple[int, ...]
    beta_us_per_mb: float
    lanes: int = 1
    """Chunks the port may carry per round in each direction (SCCL's switch bandwidth)."""
    domain: int = -1
    """Ports of one domain (>= 0) do not reach each other through the switch: the inter-node
    fabric joins NICs of *different* nodes only, traffic inside a node stays on its own links."""

    def reaches(self, other: Port) -> bool:
        return other is not self and (self.domain < 0 or self.domain != other.domain)

    @property
    def bandwidth_GBps(self) -> float:
        return self.lanes * bandwidth_from_beta(self.beta_us_per_mb)


@dataclass(frozen=True)
class Switch:
    """A switch: any rank can reach any rank on another port; ports are shared budgets."""

    name: str
    alpha_us: float
    ports: tuple[Port, ...]
    kind: str = "switch"


@dataclass(frozen=True)
class Nic:
    """A network interface: the ranks that reach other nodes through it, and its speed."""

    name: str
    ranks: tuple[int, ...]
    alpha_us: float
    beta_us_per_mb: float
    kind: str = "nic"

    @property
    def bandwidth_GBps(self) -> float:
        return bandwidth_from_beta(self.beta_us_per_mb)


Resource = tuple[str, ...]
"""A bandwidth resource: ``("link", src, dst)``, ``("out", switch, port)`` or ``("in", switch, port)``."""


@dataclass(frozen=True)
class Channel:
    """How a transfer from ``src`` to ``dst`` travels: one link, or one switch between two ports.

    ``resources`` lists what the transfer loads, each with its β and its lanes (parallel capacity):
    a link loads itself; a switch transfer loads the sender's out-port and the receiver's in-port.
    """

    src: int
    dst: int
    alpha_us: float
    resources: tuple[tuple[Resource, float, int], ...]
    via: str

    @property
    def beta_us_per_mb(self) -> float:
        """Effective β of an unloaded transfer: its slowest resource."""
        return max(beta / lanes for _, beta, lanes in self.resources)


@dataclass(frozen=True)
class Topology:
    """A machine (or cluster) as synth sees it. Ranks are ``0..num_ranks-1``."""

    name: str
    num_ranks: int
    links: tuple[Link, ...] = ()
    switches: tuple[Switch, ...] = ()
    nodes: tuple[tuple[int, ...], ...] = ()
    nics: tuple[Nic, ...] = ()
    description: str = ""
    sources: tuple[str, ...] = ()
    meta: tuple[tuple[str, Any], ...] = field(default=(), compare=False)
    """Free-form facts the file states (e.g. the torus shape); not part of the identity."""

    # ------------------------------------------------------------------ derived views
    @property
    def ranks(self) -> range:
        return range(self.num_ranks)

    @property
    def num_nodes(self) -> int:
        return max(1, len(self.nodes))

    @cached_property
    def node_of(self) -> tuple[int, ...]:
        """``node_of[r]``: index of the node holding rank r."""
        owner = [0] * self.num_ranks
        for i, members in enumerate(self.nodes):
            for r in members:
                owner[r] = i
        return tuple(owner)

    @cached_property
    def _direct(self) -> dict[tuple[int, int], Link]:
        return {(link.src, link.dst): link for link in self.links}

    @cached_property
    def _ports_of(self) -> dict[int, list[tuple[int, int]]]:
        """rank -> [(switch index, port index)], in switch order."""
        ports: dict[int, list[tuple[int, int]]] = {r: [] for r in self.ranks}
        for s, switch in enumerate(self.switches):
            for p, port in enumerate(switch.ports):
                for r in port.ranks:
                    ports[r].append((s, p))
        return ports

    def channel(self, src: int, dst: int) -> Channel | None:
        """The connection a transfer ``src -> dst`` uses, or None when the ranks are not adjacent.

        A direct link wins over a switch; among switches the one with the fastest ports wins
        (ties by declaration order), so the choice is deterministic.
        """
        cache = self.__dict__.setdefault("_channel_cache", {})
        key = (src, dst)
        if key in cache:
            return cache[key]
        found: Channel | None = None
        link = self._direct.get(key)
        if link is not None:
            found = Channel(src, dst, link.alpha_us,
                            ((("link", str(src), str(dst)), link.beta_us_per_mb, link.count),),
                            via="link")
        elif src != dst:
            best_beta = float("inf")
            dst_ports = dict(self._ports_of.get(dst, ()))
            for s, p in self._ports_of.get(src, ()):
                q = dst_ports.get(s)
                if q is None:
                    continue
                switch = self.switches[s]
                out_port, in_port = switch.ports[p], switch.ports[q]
                if not out_port.reaches(in_port):
                    continue
                resources = (
                    (("out", switch.name, out_port.name), out_port.beta_us_per_mb, out_port.lanes),
                    (("in", switch.name, in_port.name), in_port.beta_us_per_mb, in_port.lanes),
                )
                beta = max(b / lanes for _, b, lanes in resources)
                if beta < best_beta:
                    best_beta = beta
                    found = Channel(src, dst, switch.alpha_us, resources, via=switch.name)
        cache[key] = found
        return found

    def pair_bound(self) -> int:
        """An upper bound on the ordered rank pairs one hop apart, counted without listing them.

        A switch joins every pair of ranks on ports that reach each other, so a 16,384-port switch
        has 2.7 * 10^8 pairs: code that walks pairs (sketches, graphs) checks this bound first,
        in time linear in the ports.
        """
        total = len(self.links)
        for switch in self.switches:
            on_switch = sum(len(p.ranks) for p in switch.ports)
            in_domain: dict[int, int] = {}
            for p in switch.ports:
                if p.domain >= 0:
                    in_domain[p.domain] = in_domain.get(p.domain, 0) + len(p.ranks)
            for p in switch.ports:
                unreachable = len(p.ranks) if p.domain < 0 else in_domain[p.domain]
                total += len(p.ranks) * (on_switch - unreachable)
        return total

    def has_channel(self, src: int, dst: int) -> bool:
        return self.channel(src, dst) is not None

    def neighbors(self, rank: int) -> tuple[int, ...]:
        """Ranks reachable from ``rank`` in one hop (a link or a switch), sorted."""
        cache = self.__dict__.setdefault("_neighbor_cache", {})
        if rank not in cache:
            out = set(self._out_links.get(rank, ()))
            for s, p in self._ports_of.get(rank, ()):
                mine = self.switches[s].ports[p]
                for port in self.switches[s].ports:
                    if mine.reaches(port):
                        out.update(port.ranks)
            out.discard(rank)
            cache[rank] = tuple(sorted(out))
        return cache[rank]

    @cached_property
    def _out_links(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for link in self.links:
            out.setdefault(link.src, []).append(link.dst)
        return out

    def graph(self) -> nx.DiGraph:
        """Rank-level directed graph: an edge per adjacent pair, with ``alpha_us``/``beta_us_per_mb``.

        Switches become all-pairs edges here, so this is quadratic for large fabrics; algorithms
        that only need cuts or reachability should use :meth:`physical_graph`.
        """
        cached = self.__dict__.get("_graph")
        if cached is None:
            cached = nx.DiGraph()
            cached.add_nodes_from(self.ranks)
            for a in self.ranks:
                for b in self.neighbors(a):
                    ch = self.channel(a, b)
                    assert ch is not None
                    cached.add_edge(a, b, alpha_us=ch.alpha_us, beta_us_per_mb=ch.beta_us_per_mb)
            self.__dict__["_graph"] = cached
        return cached

    def physical_graph(self) -> nx.DiGraph:
        """Graph with switch and port vertices and ``capacity`` in GB/s on every edge.

        Ranks are the integers; a switch ``s`` adds the vertex ``("switch", s)`` and, per port,
        ``("out", s, p)`` and ``("in", s, p)``: rank -> out-port -> switch -> in-port -> rank, with
        the port's bandwidth on the port-switch edges. This is the graph for cut bounds (ForestColl
        treats switches as vertices) and stays linear in the size of the machine.
        """
        cached = self.__dict__.get("_physical")
        if cached is None:
            g = nx.DiGraph()
            g.add_nodes_from(self.ranks)
            for link in self.links:
                if g.has_edge(link.src, link.dst):
                    g[link.src][link.dst]["capacity"] += link.bandwidth_GBps
                else:
                    g.add_edge(link.src, link.dst, capacity=link.bandwidth_GBps)
            for switch in self.switches:
                hub = ("switch", switch.name)
                for port in switch.ports:
                    out_v, in_v = ("out", switch.name, port.name), ("in", switch.name, port.name)
                    g.add_edge(out_v, hub, capacity=port.bandwidth_GBps)
                    g.add_edge(hub, in_v, capacity=port.bandwidth_GBps)
                    for r in port.ranks:
                        g.add_edge(r, out_v, capacity=float("inf"))
                        g.add_edge(in_v, r, capacity=float("inf"))
            self.__dict__["_physical"] = g
            cached = g
        return cached

    def send_bandwidth_GBps(self, rank: int) -> float:
        """Total bandwidth a rank can push out at once (links plus its switch ports)."""
        total = sum(link.bandwidth_GBps for link in self.links if link.src == rank)
        for s, p in self._ports_of.get(rank, ()):
            port = self.switches[s].ports[p]
            total += port.bandwidth_GBps / len(port.ranks)
        return total

    def recv_bandwidth_GBps(self, rank: int) -> float:
        total = sum(link.bandwidth_GBps for link in self.links if link.dst == rank)
        for s, p in self._ports_of.get(rank, ()):
            port = self.switches[s].ports[p]
            total += port.bandwidth_GBps / len(port.ranks)
        return total

    # ------------------------------------------------------------------ identity
    def to_dict(self) -> dict[str, Any]:
        """Plain data, stable key order: the JSON form and the input of :meth:`content_hash`."""
        return {
            "name": self.name,
            "ranks": self.num_ranks,
            "description": self.description,
            "sources": list(self.sources),
            "nodes": [list(n) for n in self.nodes],
            "links": [
                {"src": lk.src, "dst": lk.dst, "alpha_us": lk.alpha_us,
                 "beta_us_per_mb": lk.beta_us_per_mb, "count": lk.count, "kind": lk.kind}
                for lk in self.links
            ],
            "switches": [
                {"name": sw.name, "kind": sw.kind, "alpha_us": sw.alpha_us,
                 "ports": [{"name": p.name, "ranks": list(p.ranks),
                            "beta_us_per_mb": p.beta_us_per_mb, "lanes": p.lanes,
                            "domain": p.domain}
                           for p in sw.ports]}
                for sw in self.switches
            ],
            "nics": [
                {"name": n.name, "ranks": list(n.ranks), "alpha_us": n.alpha_us,
                 "beta_us_per_mb": n.beta_us_per_mb, "kind": n.kind}
                for n in self.nics
            ],
            "meta": {k: v for k, v in self.meta},
        }

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON of everything that affects a schedule."""
        data = self.to_dict()
        data.pop("description")
        data.pop("sources")
        data.pop("meta")
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def link_classes(self) -> dict[str, tuple[float, float]]:
        """kind -> (alpha_us, bandwidth GB/s per link or port), for display and calibration."""
        classes: dict[str, tuple[float, float]] = {}
        for link in self.links:
            classes.setdefault(link.kind, (link.alpha_us, bandwidth_from_beta(link.beta_us_per_mb)))
        for switch in self.switches:
            for port in switch.ports:
                classes.setdefault(switch.kind, (switch.alpha_us, port.bandwidth_GBps))
        for nic in self.nics:
            classes.setdefault(nic.kind, (nic.alpha_us, nic.bandwidth_GBps))
        return classes
