"""The communication sketch (TACCL, NSDI'23): a user's hint that shrinks a synthesizer's search.

A sketch says, for a family of machines (one base topology, several node counts):

* which **intra-node** connections a schedule may use (every physical one, or a logical subset);
* how **switches** are shared: each rank talks through a switch to at most / at least k distinct
  peers (hard versions of TACCL's ``uc-min`` / ``uc-max`` hyperedge strategies, which only
  penalise or reward the number of distinct connections in the objective);
* which ranks **relay** traffic between nodes (TACCL's ``internode_conn``) and whose data each relay
  may forward (TACCL's ``gpus_to_sender_rev_map``);
* **symmetry**: rotations ``(offset, group_size)`` the schedule must map onto itself, exactly
  TACCL's ``symmetry_offsets``: rank ``r`` goes to ``base + (r - base + offset) % group_size`` with
  ``base = r - r % group_size``;
* how many chunks each rank's buffer is split into (TACCL's ``input_chunkup``);
* solver **hints** (time limit, MIP gap, route length slack), a closed, documented set of keys.

Everything rank-related is written in **node-local indices** (a rank's position in its node's tuple
in ``topology.nodes``) so one sketch fits 2, 4 or 8 copies of a box. :meth:`Sketch.allowed_pairs`
and :meth:`Sketch.may_carry` translate them to global ranks for a concrete topology; an encoding
never reads the local form. The value is frozen and hashable; :attr:`Sketch.content_hash` keys
solve caches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from ..errors import SynthError
from ..topology import Topology

MAX_PAIRS = 2**18
"""The most rank pairs one hop apart a topology may have for a sketch that allows them all
(switch:512 and fully_connected:512 have 261,632): each is a channel lookup here (seconds for
this many) and variables in the MILP; a 16,384-port switch has 2.7 * 10^8 (tens of gigabytes, an
hour) before any check could answer."""

INTRANODE_MODES = ("all", "links")
"""``all``: every physical channel inside a node; ``links``: only the sketch's ``intranode_links``."""

INTERNODE_MODES = ("direct", "relay")
"""``direct``: every channel between nodes; ``relay``: only the declared relay pairs."""

ANY_SWITCH = "*"
"""Switch name in a :class:`SwitchPolicy` meaning every intra-node switch of the topology."""

HINTS: dict[str, tuple[dict[str, Any], str]] = {
    # upper bounds: a week of solving, a route through every rank of the largest topology, a batch
    # of every chunk synth can name; beyond them a figure is a typo that would overflow the solver
    "time_limit_s": ({"type": "number", "exclusiveMinimum": 0, "maximum": 7 * 86400},
                     "wall-clock seconds the solver may spend on one stage before returning its best "
                     "schedule so far"),
    "mip_gap": ({"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                "relative MIP gap at which the solver may stop (0 = prove optimality)"),
    "max_extra_hops": ({"type": "integer", "minimum": 0, "maximum": 16_384},
                       "a chunk's route may be at most this many hops longer than its shortest path "
                       "over the allowed pairs (TACCL restricts routes to shortest-path sets: 0)"),
    "relay_own_first": ({"type": "boolean"},
                        "a relay sends its own chunks across nodes before the chunks it forwards "
                        "(TACCL's enforce_ordering)"),
    "max_batch": ({"type": "integer", "minimum": 1, "maximum": 2**20},
                  "at most this many chunks travel together in one transfer (TACCL's contiguity "
                  "stage pays alpha once per batch)"),
}
"""Documented solver hints: key -> (JSON schema of its value, what it means). No other key loads."""


@dataclass(frozen=True)
class SwitchPolicy:
    """How ranks share one switch: each rank sends through it to between min and max distinct peers.

    Fewer peers means fewer connections, hence fewer threadblocks and larger transfers per
    connection (TACCL ``uc-min``); more peers spreads load (TACCL ``uc-max``). ``switch`` is a switch
    name of the base topology (its per-node copies ``name@i`` are meant too) or ``"*"``.
    """

    switch: str
    max_peers: int | None = None
    min_peers: int | None = None


@dataclass(frozen=True)
class Relay:
    """An inter-node relay: node-local rank ``sender`` of any node sends to ``receiver`` of any other.

    ``carries`` lists the node-local indices of the ranks whose data this sender may forward across
    (whatever node that data started on); empty means any data.
    """

    sender: int
    receiver: int
    carries: tuple[int, ...] = ()


@dataclass(frozen=True)
class Sketch:
    """A communication sketch; see the module docstring. Build it with keywords or load a file."""

    name: str
    description: str
    topology: str
    nodes: tuple[int, ...]
    intranode: str = "all"
    intranode_links: tuple[tuple[int, int], ...] = ()
    switch_policies: tuple[SwitchPolicy, ...] = ()
    internode: str = "direct"
    relays: tuple[Relay, ...] = ()
    symmetry: tuple[tuple[int, int], ...] = ()
    chunks_per_rank: int = 1
    hints: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Normalise to canonical, hashable values so equal sketches compare and hash equal."""
        if self.intranode not in INTRANODE_MODES:
            raise SynthError(f"sketch '{self.name}': intranode must be one of "
                             f"{', '.join(INTRANODE_MODES)}, got '{self.intranode}'")
        if self.internode not in INTERNODE_MODES:
            raise SynthError(f"sketch '{self.name}': internode must be one of "
                             f"{', '.join(INTERNODE_MODES)}, got '{self.internode}'")
        if self.intranode == "all" and self.intranode_links:
            raise SynthError(f"sketch '{self.name}': intranode_links are only read with intranode "
                             "'links'")
        if self.internode == "direct" and self.relays:
            raise SynthError(f"sketch '{self.name}': relays are only read with internode 'relay'")
        unknown = sorted(set(self.hints) - set(HINTS))
        if unknown:
            raise SynthError(f"sketch '{self.name}': unknown hint(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(HINTS))})")
        if not self.nodes:
            raise SynthError(f"sketch '{self.name}': nodes must list at least one node count")
        setv = object.__setattr__
        setv(self, "nodes", tuple(sorted(set(self.nodes))))
        setv(self, "intranode_links", tuple(sorted({(int(a), int(b)) for a, b in self.intranode_links})))
        setv(self, "switch_policies", tuple(sorted(self.switch_policies, key=lambda p: p.switch)))
        setv(self, "relays", tuple(sorted(
            (Relay(r.sender, r.receiver, tuple(sorted(set(r.carries)))) for r in self.relays),
            key=lambda r: (r.sender, r.receiver, r.carries))))
        setv(self, "symmetry", tuple(sorted({(int(o), int(g)) for o, g in self.symmetry})))
        setv(self, "hints", MappingProxyType(dict(sorted(self.hints.items()))))

    # ------------------------------------------------------------------ identity
    def to_dict(self) -> dict[str, Any]:
        """The file form (loadable again by :func:`synth.sketches.parse_sketch`), stable key order."""
        intranode: dict[str, Any] = {"strategy": self.intranode}
        if self.intranode == "links":
            intranode["links"] = [list(p) for p in self.intranode_links]
        internode: dict[str, Any] = {"strategy": self.internode}
        if self.internode == "relay":
            internode["relays"] = [{"sender": r.sender, "receiver": r.receiver,
                                    "carries": list(r.carries)} for r in self.relays]
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "topology": self.topology,
            "nodes": list(self.nodes),
            "chunks_per_rank": self.chunks_per_rank,
            "intranode": intranode,
            "internode": internode,
        }
        if self.switch_policies:
            data["switches"] = [
                {k: v for k, v in (("switch", p.switch), ("max_peers", p.max_peers),
                                   ("min_peers", p.min_peers)) if v is not None}
                for p in self.switch_policies]
        data["symmetry"] = [list(s) for s in self.symmetry]
        data["hints"] = dict(self.hints)
        return data

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON of everything that shapes a schedule (not the prose)."""
        data = self.to_dict()
        data.pop("description")
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def __hash__(self) -> int:
        return hash(self.content_hash)

    # ------------------------------------------------------------------ global view
    def allowed_pairs(self, topology: Topology) -> frozenset[tuple[int, int]]:
        """Global rank pairs ``(u, v)`` that are one topology hop and that the sketch allows.

        Same-node pairs follow the intranode rule; pairs across nodes follow the internode rule
        (a relay ``s -> r`` joins ``nodes[a][s] -> nodes[b][r]`` for every ordered pair of distinct
        nodes). Local indices out of range for a node are skipped here; :func:`check_sketch`
        reports them. Cached per topology (by its content hash).
        """
        return self._view(topology).pairs

    def may_carry(self, topology: Topology, origin: int, u: int, v: int) -> bool:
        """May data that started at rank ``origin`` cross the inter-node hop ``u -> v``?

        Always true for a same-node pair and under ``direct``; under ``relay`` the pair must be a
        relay and ``origin``'s node-local index must be in one of its ``carries`` (or carries empty).
        """
        view = self._view(topology)
        if topology.node_of[u] == topology.node_of[v] or self.internode == "direct":
            return True
        if (u, v) not in view.carriers:
            return False
        allowed = view.carriers[(u, v)]
        return allowed is None or view.local[origin] in allowed

    def carriers(self, topology: Topology) -> Mapping[tuple[int, int], frozenset[int] | None]:
        """Inter-node relay pair ``(u, v)`` -> node-local origin indices it may carry (None: any).

        Empty under ``direct``. The bulk form of :meth:`may_carry`, for encodings that build one
        constraint per relay pair rather than asking per chunk.
        """
        return MappingProxyType(self._view(topology).carriers)

    def _view(self, topology: Topology) -> _GlobalView:
        cache: dict[str, _GlobalView] = self.__dict__.setdefault("_views", {})
        key = topology.content_hash
        if key not in cache:
            cache[key] = _GlobalView.build(self, topology)
        return cache[key]


def local_indices(topology: Topology) -> tuple[int, ...]:
    """``local[r]``: the position of rank r in its node's tuple."""
    local = [0] * topology.num_ranks
    for members in topology.nodes:
        for i, r in enumerate(members):
            local[r] = i
    return tuple(local)


@dataclass(frozen=True)
class _GlobalView:
    """A sketch translated to one topology's global ranks (what encodings actually consume)."""

    pairs: frozenset[tuple[int, int]]
    carriers: dict[tuple[int, int], frozenset[int] | None]
    """Relay pair -> node-local origin indices it may carry (None: any). Empty unless relaying."""
    local: tuple[int, ...]

    @staticmethod
    def build(sketch: Sketch, topology: Topology) -> _GlobalView:
        if sketch.intranode == "all" or sketch.internode == "direct":
            bound = topology.pair_bound()
            if bound > MAX_PAIRS:
                raise SynthError(
                    f"sketch '{sketch.name}' on topology '{topology.name}': the topology has up to "
                    f"{bound} rank pairs one hop apart (its switches join every pair of their "
                    f"ranks) and a sketch is checked and encoded pair by pair; synth handles at "
                    f"most {MAX_PAIRS} (MAX_PAIRS): restrict the pairs with intranode 'links' and "
                    "internode 'relay'")
        local = local_indices(topology)
        nodes = topology.nodes or (tuple(topology.ranks),)
        pairs: set[tuple[int, int]] = set()
        # intra-node
        if sketch.intranode == "all":
            for members in nodes:
                inside = set(members)
                for u in members:
                    pairs.update((u, v) for v in topology.neighbors(u) if v in inside)
        else:
            for members in nodes:
                for s, d in sketch.intranode_links:
                    if max(s, d) < len(members) and s != d and topology.has_channel(members[s], members[d]):
                        pairs.add((members[s], members[d]))
        # inter-node
        carriers: dict[tuple[int, int], frozenset[int] | None] = {}
        node_of = topology.node_of
        if sketch.internode == "direct":
            for u in topology.ranks:
                pairs.update((u, v) for v in topology.neighbors(u) if node_of[v] != node_of[u])
        else:
            for a, src_node in enumerate(nodes):
                for b, dst_node in enumerate(nodes):
                    if a == b:
                        continue
                    for relay in sketch.relays:
                        if relay.sender >= len(src_node) or relay.receiver >= len(dst_node):
                            continue
                        u, v = src_node[relay.sender], dst_node[relay.receiver]
                        if not topology.has_channel(u, v):
                            continue
                        pairs.add((u, v))
                        carried = frozenset(relay.carries) if relay.carries else None
                        if (u, v) in carriers:
                            old = carriers[(u, v)]
                            carried = None if old is None or carried is None else old | carried
                        carriers[(u, v)] = carried
        return _GlobalView(frozenset(pairs), carriers, local)
