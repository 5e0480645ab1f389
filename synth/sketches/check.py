"""Does a sketch fit a topology? Every way it can fail, each as one sentence.

A sketch is written in node-local indices for a family of machines, so whether it fits is only
known against a concrete topology: the node count, the node sizes, which channels exist, which
switches are there, whether the rotations it declares are symmetries of the machine and of the
sketch itself, and whether the pairs it allows can still deliver every rank's data to every rank.
An encoding that ran on a sketch failing any of these would either crash on a missing channel or
prove a meaningless "infeasible"; checking first turns that into a message saying what to change.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable

import networkx as nx

from ..errors import SynthError
from ..topology import Switch, Topology
from .model import ANY_SWITCH, Sketch, SwitchPolicy, local_indices
from .schema import symmetry_problem


def check_sketch(sketch: Sketch, topology: Topology) -> list[str]:
    """The problems that keep ``sketch`` from fitting ``topology``; empty when it fits.

    Field-level problems (counts, indices, names, channels) come first; the graph-level checks
    (symmetry is an automorphism, every rank's data can reach every rank) run only when those
    pass, since a dropped relay or link would otherwise be reported twice.
    """
    problems: list[str] = []
    nodes = topology.nodes or (tuple(topology.ranks),)
    if topology.num_nodes not in sketch.nodes:
        problems.append(f"the sketch is written for {_nodes_text(sketch.nodes)}, the topology has "
                        f"{topology.num_nodes}")
    if sketch.chunks_per_rank < 1:
        problems.append(f"chunks_per_rank must be at least 1, got {sketch.chunks_per_rank}")
    index_problem = _index_checker(nodes)
    if sketch.intranode == "links":
        problems += _link_problems(sketch, topology, nodes, index_problem)
    if sketch.internode == "relay":
        problems += _relay_problems(sketch, topology, nodes, index_problem)
    pairs = sketch.allowed_pairs(topology)
    for i, policy in enumerate(sketch.switch_policies):
        problems += _policy_problems(i, policy, topology, pairs)
    for offset, group in sketch.symmetry:
        problem = symmetry_problem(offset, group)
        if problem is None and topology.num_ranks % group:
            problem = f"group size {group} does not divide the {topology.num_ranks} ranks"
        if problem:
            problems.append(f"symmetry ({offset}, {group}): {problem}")
    if problems:
        return problems
    for offset, group in sketch.symmetry:
        problems += _symmetry_problems(sketch, topology, pairs, offset, group)
    problems += _delivery_problems(sketch, topology, pairs)
    return problems


def require_fit(sketch: Sketch, topology: Topology) -> None:
    """Raise a :class:`SynthError` listing every problem when ``sketch`` does not fit ``topology``."""
    problems = check_sketch(sketch, topology)
    if problems:
        raise SynthError(f"sketch '{sketch.name}' does not fit topology '{topology.name}' "
                         f"({topology.num_ranks} ranks, {topology.num_nodes} node(s)): "
                         + "; ".join(problems))


# ---------------------------------------------------------------------------------------- fields
def _nodes_text(counts: tuple[int, ...]) -> str:
    return " or ".join(map(str, counts)) + " node(s)"


def _index_checker(nodes: tuple[tuple[int, ...], ...]) -> Callable[[int, str], str | None]:
    """A function telling whether a node-local index exists in every node (nodes may differ)."""
    smallest = min(range(len(nodes)), key=lambda i: (len(nodes[i]), i))
    size = len(nodes[smallest])

    def problem(index: int, what: str) -> str | None:
        if index < size:
            return None
        where = "every node has" if all(len(m) == size for m in nodes) else f"node {smallest} has"
        return f"{what}: local index {index} is out of range ({where} {size} ranks, 0..{size - 1})"

    return problem


def _link_problems(sketch: Sketch, topology: Topology, nodes: tuple[tuple[int, ...], ...],
                   index_problem: Callable[[int, str], str | None]) -> list[str]:
    problems = []
    for s, d in sketch.intranode_links:
        what = f"intranode link {s}->{d}"
        bad = [p for p in (index_problem(s, what), index_problem(d, what)) if p]
        if s == d:
            bad.append(f"{what} joins a rank to itself")
        if bad:
            problems.append(bad[0])
            continue
        for i, members in enumerate(nodes):
            if not topology.has_channel(members[s], members[d]):
                problems.append(f"{what} does not exist: ranks {members[s]}->{members[d]} of node {i} "
                                "are not one hop apart in the topology")
                break
    return problems


def _relay_problems(sketch: Sketch, topology: Topology, nodes: tuple[tuple[int, ...], ...],
                    index_problem: Callable[[int, str], str | None]) -> list[str]:
    problems = []
    for relay in sketch.relays:
        what = f"relay {relay.sender}->{relay.receiver}"
        bad = [index_problem(relay.sender, what + " sender"),
               index_problem(relay.receiver, what + " receiver")]
        bad += [index_problem(c, what + " carries") for c in relay.carries]
        bad = [p for p in bad if p]
        if bad:
            problems.append(bad[0])
            continue
        missing = next(((a, b) for a in range(len(nodes)) for b in range(len(nodes))
                        if a != b and not topology.has_channel(nodes[a][relay.sender],
                                                               nodes[b][relay.receiver])), None)
        if missing:
            a, b = missing
            problems.append(f"{what} has no inter-node channel: rank {nodes[a][relay.sender]} (node "
                            f"{a}) cannot send to rank {nodes[b][relay.receiver]} (node {b}) in one "
                            "hop (no NIC path between them)")
    return problems


def _base(name: str) -> str:
    """A per-node switch copy 'nvswitch@1' answers to the base topology's name 'nvswitch'."""
    base, sep, suffix = name.rpartition("@")
    return base if sep and suffix.isdigit() else name


def _intra_node(switch: Switch, topology: Topology) -> bool:
    owners = {topology.node_of[r] for port in switch.ports for r in port.ranks}
    return len(owners) <= 1


def _policy_problems(i: int, policy: SwitchPolicy, topology: Topology,
                     pairs: frozenset[tuple[int, int]]) -> list[str]:
    what = f"switch policy {i} ('{policy.switch}')"
    problems = []
    if policy.max_peers is None and policy.min_peers is None:
        problems.append(f"{what} sets neither max_peers nor min_peers")
    for key in ("max_peers", "min_peers"):
        value = getattr(policy, key)
        if value is not None and value < 1:
            problems.append(f"{what}: {key} must be at least 1, got {value}")
    if policy.min_peers is not None and policy.max_peers is not None \
            and policy.min_peers > policy.max_peers:
        problems.append(f"{what}: min_peers {policy.min_peers} is more than max_peers "
                        f"{policy.max_peers}")
    if policy.switch == ANY_SWITCH:
        switches = [s for s in topology.switches if _intra_node(s, topology)]
        if not switches:
            return [*problems, f"{what}: the topology has no intra-node switch"]
    else:
        switches = [s for s in topology.switches if _base(s.name) == policy.switch]
        if not switches:
            known = sorted({_base(s.name) for s in topology.switches})
            close = difflib.get_close_matches(policy.switch, known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return [*problems, f"{what}: unknown switch '{policy.switch}'{hint} (switches of the "
                    f"topology: {', '.join(known) or 'none'}; '*' means every intra-node switch)"]
    peers: dict[tuple[str, int], int] = {}
    names = {s.name for s in switches}
    for u, v in pairs:
        channel = topology.channel(u, v)
        if channel is not None and channel.via in names:
            peers[(channel.via, u)] = peers.get((channel.via, u), 0) + 1
    on_switch = [(s.name, r) for s in switches for p in s.ports for r in p.ranks]
    counts = [(peers.get(key, 0), key) for key in on_switch]
    fewest, most = min(counts), max(counts)
    if policy.min_peers is not None and policy.min_peers > fewest[0]:
        problems.append(f"{what}: min_peers {policy.min_peers} is more than the {fewest[0]} peer(s) "
                        f"rank {fewest[1][1]} can reach through {fewest[1][0]}")
    if policy.max_peers is not None and policy.max_peers > most[0]:
        problems.append(f"{what}: max_peers {policy.max_peers} is more than the {most[0]} peer(s) "
                        "any rank can reach through it, so it restricts nothing")
    return problems


# ---------------------------------------------------------------------------------------- graph
def rotate(rank: int, offset: int, group: int) -> int:
    """TACCL's symmetry map: rotate ``rank`` by ``offset`` inside its block of ``group`` ranks."""
    return rank - rank % group + (rank % group + offset) % group


def _symmetry_problems(sketch: Sketch, topology: Topology, pairs: frozenset[tuple[int, int]],
                       offset: int, group: int) -> list[str]:
    """A rotation the schedule must respect has to be a symmetry of the machine and the sketch.

    Otherwise an encoding that ties a transfer to its rotated image would tie it to a pair that
    is forbidden (forcing it to zero) or to a channel of another speed or port sharing.
    """
    what = f"symmetry ({offset}, {group})"

    def sigma(r: int) -> int:
        return rotate(r, offset, group)

    for u, v in sorted(pairs):
        image = (sigma(u), sigma(v))
        if image not in pairs:
            return [f"{what} maps allowed pair {u}->{v} onto {image[0]}->{image[1]}, which the "
                    "sketch does not allow"]
        a, b = topology.channel(u, v), topology.channel(*image)
        assert a is not None and b is not None
        if not (math.isclose(a.alpha_us, b.alpha_us) and math.isclose(a.beta_us_per_mb,
                                                                        b.beta_us_per_mb)):
            return [f"{what} maps pair {u}->{v} (alpha {a.alpha_us:g} us, beta "
                    f"{a.beta_us_per_mb:g} us/MB) onto {image[0]}->{image[1]} (alpha "
                    f"{b.alpha_us:g} us, beta {b.beta_us_per_mb:g} us/MB): not a symmetry of the "
                    "machine"]
    port_sets = {frozenset(p.ranks) for s in topology.switches for p in s.ports}
    for switch in topology.switches:
        for port in switch.ports:
            image_set = frozenset(sigma(r) for r in port.ranks)
            if image_set not in port_sets:
                return [f"{what} maps the ranks {_ranks(port.ranks)} sharing port {port.name} of "
                        f"{switch.name} onto {_ranks(image_set)}, which share no port: not a "
                        "symmetry of the machine"]
    if sketch.internode == "relay":
        problem = _carries_symmetry_problem(sketch, topology, sigma)
        if problem:
            return [f"{what} does not respect the relays' carries: {problem}"]
    return []


def _carries_symmetry_problem(sketch: Sketch, topology: Topology,
                              sigma: Callable[[int], int]) -> str | None:
    """The rotation must map the ranks whose data a relay pair may carry onto its image's.

    Compared as rank sets, one per distinct carries set, so the cost is per relay pair, not per
    relay pair and origin.
    """
    carriers = sketch.carriers(topology)
    local = local_indices(topology)
    everyone = frozenset(topology.ranks)
    origins: dict[frozenset[int] | None, frozenset[int]] = {None: everyone}

    def allowed(carried: frozenset[int] | None) -> frozenset[int]:
        if carried not in origins:
            origins[carried] = frozenset(r for r in topology.ranks if local[r] in carried)
        return origins[carried]

    rotated: dict[frozenset[int] | None, frozenset[int]] = {}
    for (u, v), carried in sorted(carriers.items(), key=lambda kv: kv[0]):
        image = (sigma(u), sigma(v))
        if carried not in rotated:
            rotated[carried] = frozenset(sigma(r) for r in allowed(carried))
        mine = rotated[carried]
        theirs = allowed(carriers.get(image, frozenset()))
        if mine != theirs:
            extra = sorted(mine ^ theirs)
            return (f"the data of ranks {_ranks(allowed(carried))} may cross {u}->{v}, the data of "
                    f"ranks {_ranks(theirs)} may cross {image[0]}->{image[1]} (they differ at rank "
                    f"{extra[0]})")
    return None


def _ranks(ranks) -> str:
    s = sorted(ranks)
    return "{" + ", ".join(map(str, s[:6])) + (", ..." if len(s) > 6 else "") + "}"


def _delivery_problems(sketch: Sketch, topology: Topology,
                       pairs: frozenset[tuple[int, int]]) -> list[str]:
    """Every rank's data must be able to reach every other rank over what the sketch allows."""
    if topology.num_ranks == 1:
        return []
    graph = nx.DiGraph()
    graph.add_nodes_from(topology.ranks)
    graph.add_edges_from(pairs)
    blocked = _first_unreachable(graph, topology.ranks)
    if blocked:
        u, v, count = blocked
        return [f"the allowed pairs cannot deliver: rank {u} cannot reach rank {v} ({count} rank(s) "
                f"out of its reach); allow more intranode links or relays"]
    if sketch.internode != "relay" or all(r.carries == () for r in sketch.relays):
        return []
    # carries restrict which relays an origin's data may use; the graph depends on the origin
    # only through its node-local index, so build one graph per index
    by_index: dict[int, list[int]] = {}
    for members in topology.nodes:
        for i, r in enumerate(members):
            by_index.setdefault(i, []).append(r)
    inter = [(u, v) for u, v in pairs if topology.node_of[u] != topology.node_of[v]]
    for index in sorted(by_index):
        origin = by_index[index][0]
        sub = graph.copy()
        sub.remove_edges_from((u, v) for u, v in inter
                              if not sketch.may_carry(topology, origin, u, v))
        blocked = _first_unreachable(sub, by_index[index])
        if blocked:
            u, v, count = blocked
            return [f"the relays' carries cannot deliver: the data of rank {u} cannot reach rank "
                    f"{v} ({count} rank(s) out of reach), since no relay on the way may carry "
                    f"node-local index {index}"]
    return []


def _first_unreachable(graph: nx.DiGraph, sources) -> tuple[int, int, int] | None:
    """The first (source, unreachable rank, how many unreachable), or None when all reach all."""
    if nx.is_strongly_connected(graph):
        return None
    everyone = set(graph.nodes)
    for u in sorted(sources):
        missing = everyone - nx.descendants(graph, u) - {u}
        if missing:
            return u, min(missing), len(missing)
    return None
