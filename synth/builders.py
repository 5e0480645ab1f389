"""Parametric topologies (``ring:8``, ``torus:4x4``, ...) and the multi-node composition.

Builders are plain functions returning a :class:`~synth.topology.Topology`. Their links use one
generic class (:data:`GENERIC_LINK`) unless told otherwise, and every rank gets its own NIC so that
``--nodes N`` works on any of them.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable

from .errors import SynthError
from .topology import Link, Nic, Port, Switch, Topology, beta_from_bandwidth, check_size

GENERIC_LINK = ("link", 1.0, 50.0)
"""(kind, alpha µs, GB/s) of a builder's links: an NVLink-class link."""
GENERIC_SWITCH = ("switch", 1.0, 150.0)
"""(kind, alpha µs, GB/s per port) of a builder's switch."""
GENERIC_NIC = ("nic", 3.0, 25.0)
"""(kind, alpha µs, GB/s) of a builder's NICs: 200 Gb/s InfiniBand."""


def _bidirectional(pairs: list[tuple[int, int]], kind: str, alpha: float, gbps: float) -> list[Link]:
    """One directed link each way per undirected pair; a repeated pair becomes a parallel link."""
    counts: dict[tuple[int, int], int] = {}
    for a, b in pairs:
        for key in ((a, b), (b, a)):
            counts[key] = counts.get(key, 0) + 1
    beta = beta_from_bandwidth(gbps)
    return [Link(a, b, alpha, beta, count=c, kind=kind) for (a, b), c in sorted(counts.items())]


def _per_rank_nics(n: int) -> tuple[Nic, ...]:
    kind, alpha, gbps = GENERIC_NIC
    return tuple(Nic(f"nic{r}", (r,), alpha, beta_from_bandwidth(gbps), kind) for r in range(n))


def _from_pairs(name: str, n: int, pairs: list[tuple[int, int]], description: str,
                meta: tuple = ()) -> Topology:
    kind, alpha, gbps = GENERIC_LINK
    return Topology(name=name, num_ranks=n, links=tuple(_bidirectional(pairs, kind, alpha, gbps)),
                    nodes=(tuple(range(n)),), nics=_per_rank_nics(n), description=description,
                    meta=meta)


def ring(n: int) -> Topology:
    """n ranks on a bidirectional ring."""
    _need(n >= 2, f"ring needs at least 2 ranks, got {n}")
    check_size(f"ring:{n}", n, 2 * n)
    pairs = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)]
    return _from_pairs(f"ring:{n}", n, pairs, f"bidirectional ring of {n} ranks")


def line(n: int) -> Topology:
    """n ranks on a bidirectional line (a ring without the wraparound link)."""
    _need(n >= 2, f"line needs at least 2 ranks, got {n}")
    check_size(f"line:{n}", n, 2 * (n - 1))
    return _from_pairs(f"line:{n}", n, [(i, i + 1) for i in range(n - 1)], f"line of {n} ranks")


def fully_connected(n: int) -> Topology:
    """A direct link between every pair of ranks."""
    _need(n >= 2, f"fully_connected needs at least 2 ranks, got {n}")
    check_size(f"fully_connected:{n}", n, n * (n - 1))
    return _from_pairs(f"fully_connected:{n}", n, list(itertools.combinations(range(n), 2)),
                       f"{n} ranks, all pairs directly linked")


def switch(n: int) -> Topology:
    """n ranks behind one switch; each rank's port is its send/receive budget."""
    _need(n >= 2, f"switch needs at least 2 ranks, got {n}")
    check_size(f"switch:{n}", n)
    kind, alpha, gbps = GENERIC_SWITCH
    ports = tuple(Port(f"p{r}", (r,), beta_from_bandwidth(gbps)) for r in range(n))
    return Topology(name=f"switch:{n}", num_ranks=n, switches=(Switch("switch", alpha, ports, kind),),
                    nodes=(tuple(range(n)),), nics=_per_rank_nics(n),
                    description=f"{n} ranks behind one switch")


def torus(dims: tuple[int, ...]) -> Topology:
    """A torus with wraparound in every dimension; ranks numbered row-major."""
    shape = "x".join(map(str, dims)) if len(dims) <= 4 else f"{len(dims)} dimensions"
    _need(1 <= len(dims) <= 3 and all(d >= 2 for d in dims),
          f"torus needs 1 to 3 dimensions of size >= 2, got {shape}")
    n = math.prod(dims)
    check_size(f"torus:{'x'.join(map(str, dims))}", n, 2 * len(dims) * n)
    coords = list(itertools.product(*(range(d) for d in dims)))
    index = {c: i for i, c in enumerate(coords)}
    pairs = set()
    for c in coords:
        for axis, size in enumerate(dims):
            nxt = list(c)
            nxt[axis] = (c[axis] + 1) % size
            a, b = index[c], index[tuple(nxt)]
            if a != b:
                pairs.add((min(a, b), max(a, b)))
    spec = "x".join(map(str, dims))
    return _from_pairs(f"torus:{spec}", n, sorted(pairs), f"{spec} torus with wraparound",
                       meta=(("torus", list(dims)),))


def hypercube(d: int) -> Topology:
    """2^d ranks; rank i links to i xor 2^k for every k."""
    _need(1 <= d <= 12, f"hypercube dimension must be 1..12, got {d}")
    n = 1 << d
    pairs = [(i, i ^ (1 << k)) for i in range(n) for k in range(d) if i < i ^ (1 << k)]
    return _from_pairs(f"hypercube:{d}", n, pairs, f"{d}-dimensional hypercube, {n} ranks")


def multinode(node: Topology, count: int) -> Topology:
    """``count`` copies of a one-node topology joined by an inter-node switch fabric.

    Each copy keeps its own links and switches (renamed ``name@i``); every NIC of every copy becomes
    one port of a non-blocking fabric switch, so a NIC shared by several ranks is a shared budget.
    The fabric joins NICs of different nodes only (port domains): intra-node traffic stays inside.
    Ranks of node i are ``i*n .. i*n+n-1`` (local indices preserved: symmetric groups).
    """
    _need(count >= 1, f"--nodes must be at least 1, got {count}")
    if count == 1:
        return node
    if node.num_nodes > 1:
        raise SynthError(f"topology '{node.name}' already spans {node.num_nodes} nodes; "
                         "--nodes replicates a single-node topology")
    if not node.nics:
        raise SynthError(f"topology '{node.name}' has no NICs, so it cannot be joined across nodes")
    n = node.num_ranks
    check_size(f"{count} nodes of '{node.name}' (--nodes {count})", n * count,
               len(node.links) * count)
    links, switches, nics, nodes, ports = [], [], [], [], []
    for i in range(count):
        off = i * n
        links += [Link(lk.src + off, lk.dst + off, lk.alpha_us, lk.beta_us_per_mb, lk.count, lk.kind)
                  for lk in node.links]
        switches += [Switch(f"{sw.name}@{i}", sw.alpha_us,
                            tuple(Port(p.name, tuple(r + off for r in p.ranks), p.beta_us_per_mb,
                                       p.lanes) for p in sw.ports), sw.kind)
                     for sw in node.switches]
        for nic in node.nics:
            ranks = tuple(r + off for r in nic.ranks)
            nics.append(Nic(f"{nic.name}@{i}", ranks, nic.alpha_us, nic.beta_us_per_mb, nic.kind))
            ports.append(Port(f"{nic.name}@{i}", ranks, nic.beta_us_per_mb, domain=i))
        nodes.append(tuple(range(off, off + n)))
    kinds = sorted({nic.kind for nic in node.nics})
    fabric = Switch("fabric", max(nic.alpha_us for nic in node.nics), tuple(ports), "+".join(kinds))
    return Topology(
        name=multinode_name(node.name, count), num_ranks=n * count, links=tuple(links),
        switches=(*switches, fabric), nodes=tuple(nodes), nics=tuple(nics),
        description=f"{count} x {node.name} joined through their NICs by a non-blocking fabric",
        sources=node.sources, meta=(*node.meta, ("nodes", count)),
    )


def multinode_name(name: str, count: int) -> str:
    """'dgx_a100x4' for shipped names; 'torus:2x2-x2' for builders, whose specs contain 'x'."""
    return f"{name}-x{count}" if ":" in name else f"{name}x{count}"


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise SynthError(message)


def _int(text: str, spec: str) -> int:
    shown = spec if len(spec) <= 40 else f"{spec[:40]}... ({len(spec)} characters)"
    if not re.fullmatch(r"[0-9]+", text):
        got = text if len(text) <= 20 else f"{text[:20]}..."
        raise SynthError(f"'{shown}': expected a whole number, got '{got}'")
    if len(text) > 9:  # int() of thousands of digits is itself an error; no size is this large
        raise SynthError(f"'{shown}': {text[:12]}... is too large a size")
    return int(text)


BUILDERS: dict[str, Callable[[str, str], Topology]] = {
    "ring": lambda arg, spec: ring(_int(arg, spec)),
    "line": lambda arg, spec: line(_int(arg, spec)),
    "fully_connected": lambda arg, spec: fully_connected(_int(arg, spec)),
    "switch": lambda arg, spec: switch(_int(arg, spec)),
    "torus": lambda arg, spec: torus(tuple(_int(x, spec) for x in arg.split("x"))),
    "hypercube": lambda arg, spec: hypercube(_int(arg, spec)),
}
"""``name:arg`` builders, e.g. ``ring:8``, ``torus:4x4x2``, ``hypercube:3``."""


def build(spec: str) -> Topology:
    """Build ``kind:arg``; raises a :class:`SynthError` naming the known builders otherwise."""
    kind, _, arg = spec.partition(":")
    if kind not in BUILDERS:
        from .errors import unknown_name
        raise unknown_name("topology builder", kind, BUILDERS)
    if not arg:
        raise SynthError(f"builder '{kind}' needs a size, e.g. '{kind}:8'")
    return BUILDERS[kind](arg, spec)
