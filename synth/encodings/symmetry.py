"""Rank symmetry for the scale encodings: solve one representative, replicate by automorphisms.

The scale encodings (:mod:`.trees`, :mod:`.flow`) work on a *semiregular* group ``H`` of rank
automorphisms: permutations of the ranks that map links onto links and switches onto switches with
the same bandwidth, latency and lanes, and in which no element but the identity fixes a rank. Such
a group splits the ranks into ``N / |H|`` orbits of equal size; the encodings plan the data of one
representative rank per orbit and obtain every other rank's plan by applying the unique ``h`` with
``h(rep) = rank``. Because ``H`` permutes bandwidth resources (links, switch ports) too, a plan
replicated this way loads every resource of one resource orbit ``O`` identically: each task of a
representative on a resource of ``O`` puts ``|H| / |O|`` chunks on *every* resource of ``O``. The
encodings therefore count load per resource orbit and never materialise per-rank state while
planning — this is what makes 512–1024 ranks cheap.

Candidate generators are the structure the topology declares: isomorphic rank groups (a cyclic
shift of the nodes), the local index inside every node (cyclic shift, bit flips of a power-of-two
index), the torus rows and columns of ``meta.torus`` (translations of chips, rotation of the ranks
on one chip). Each candidate is kept only if it is a verified automorphism and keeps the group
semiregular; the greedy stops when the group acts regularly (one orbit), which is the case for
every shipped multi-node machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..topology import Topology

Resource = tuple[str, ...]


@dataclass(frozen=True)
class RankGroup:
    """A semiregular automorphism group of the ranks and its orbits.

    ``perms[h]`` is element h as an array (``perms[0]`` is the identity); ``reps`` are one rank per
    orbit (the smallest); ``rep_index[r]`` is the orbit of rank r (an index into ``reps``) and
    ``element[r]`` the h with ``perms[h][reps[rep_index[r]]] == r``.
    """

    perms: np.ndarray
    generators: tuple[tuple[str, tuple[int, ...]], ...]
    reps: tuple[int, ...]
    rep_index: np.ndarray
    element: np.ndarray

    @property
    def order(self) -> int:
        return int(self.perms.shape[0])

    @property
    def regular(self) -> bool:
        return len(self.reps) == 1

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.generators) or "none"
        return (f"|H|={self.order} ({names}); {len(self.reps)} representative rank"
                f"{'s' if len(self.reps) != 1 else ''}")


def trivial_group(n: int) -> RankGroup:
    """The identity alone: every rank is its own representative."""
    return RankGroup(np.arange(n, dtype=np.int64)[None, :], (), tuple(range(n)),
                     np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64))


# ---------------------------------------------------------------------------------- automorphisms
def _signature(topology: Topology, perm: Sequence[int] | np.ndarray | None = None) -> tuple:
    """Links and switches as comparable data after renaming ranks by ``perm``."""
    def m(r: int) -> int:
        return r if perm is None else int(perm[r])

    links = sorted((m(lk.src), m(lk.dst), lk.alpha_us, lk.beta_us_per_mb, lk.count)
                   for lk in topology.links)
    switches = sorted(
        (sw.alpha_us, tuple(sorted((tuple(sorted(m(r) for r in p.ranks)), p.beta_us_per_mb, p.lanes)
                                   for p in sw.ports)))
        for sw in topology.switches)
    return tuple(links), tuple(switches)


def is_automorphism(topology: Topology, perm: Sequence[int] | np.ndarray,
                    base: tuple | None = None) -> bool:
    """True when ``perm`` maps the topology onto itself (links, switch ports, α, β, lanes)."""
    n = topology.num_ranks
    if sorted(int(x) for x in perm) != list(range(n)):
        return False
    return _signature(topology, perm) == (base if base is not None else _signature(topology))


def candidate_generators(topology: Topology) -> list[tuple[str, np.ndarray]]:
    """Structured rank permutations worth testing, with a name each (not yet verified)."""
    n = topology.num_ranks
    nodes = [tuple(m) for m in topology.nodes] or [tuple(range(n))]
    if sorted(r for m in nodes for r in m) != list(range(n)) or len({len(m) for m in nodes}) != 1:
        return []
    size = len(nodes[0])
    out: list[tuple[str, np.ndarray]] = []

    def local_map(f: Callable[[int], int]) -> np.ndarray:
        perm = np.empty(n, dtype=np.int64)
        for members in nodes:
            for j, r in enumerate(members):
                perm[r] = members[f(j)]
        return perm

    if len(nodes) > 1:
        perm = np.empty(n, dtype=np.int64)
        for i, members in enumerate(nodes):
            nxt = nodes[(i + 1) % len(nodes)]
            for j, r in enumerate(members):
                perm[r] = nxt[j]
        out.append((f"node shift (Z{len(nodes)})", perm))
    meta = dict(topology.meta)
    dims = meta.get("torus")
    if dims:
        shape = tuple(int(d) for d in dims)
        chips = math.prod(shape)
        per_chip = size // chips if chips and size % chips == 0 else 0
        if per_chip:
            def chip_map(g: Callable[[tuple[int, ...]], tuple[int, ...]]) -> Callable[[int], int]:
                def f(j: int) -> int:
                    chip, core = divmod(j, per_chip)
                    c = tuple(int(x) for x in np.unravel_index(chip, shape))
                    return int(np.ravel_multi_index(g(c), shape)) * per_chip + core
                return f

            for axis, extent in enumerate(shape):
                for step in (1, 2):
                    if step == 2 and (extent % 2 or extent <= 2):
                        continue

                    def shift(c: tuple[int, ...], axis: int = axis, step: int = step,
                              extent: int = extent) -> tuple[int, ...]:
                        d = list(c)
                        d[axis] = (d[axis] + step) % extent
                        return tuple(d)
                    out.append((f"torus axis {axis} translation by {step} (Z{extent // step})",
                                local_map(chip_map(shift))))
            if per_chip > 1:
                out.append((f"rotation of the {per_chip} ranks of a chip",
                            local_map(lambda j: (j // per_chip) * per_chip + (j % per_chip + 1)
                                      % per_chip)))
    if size > 1:
        out.append((f"local cyclic shift (Z{size})", local_map(lambda j: (j + 1) % size)))
    if size > 1 and size & (size - 1) == 0:
        for k in range(size.bit_length() - 1):
            out.append((f"local index bit flip {1 << k}", local_map(lambda j, k=k: j ^ (1 << k))))
    return out


def _closure(gens: list[np.ndarray], n: int, limit: int) -> np.ndarray | None:
    """All products of ``gens`` (with the identity first), or None past ``limit`` elements or
    when some non-identity element fixes a rank (the group would not be semiregular)."""
    ident = np.arange(n, dtype=np.int64)
    elems = [ident]
    seen = {ident.tobytes()}
    frontier = [ident]
    while frontier:
        nxt = []
        for g in frontier:
            for s in gens:
                h = s[g]  # h = s ∘ g
                key = h.tobytes()
                if key in seen:
                    continue
                if np.any(h == ident):
                    return None
                seen.add(key)
                elems.append(h)
                nxt.append(h)
                if len(elems) > limit:
                    return None
        frontier = nxt
    return np.array(elems)


def rank_group(topology: Topology, *, enabled: bool = True, nodes_only: bool = False,
               accept: Callable[[np.ndarray], bool] | None = None) -> RankGroup:
    """The largest semiregular group the structured candidates give (greedy, verified).

    ``nodes_only`` keeps the node shift alone (ranks keep their local index); ``accept`` vetoes
    generators that break something else the caller must preserve (a sketch's links)."""
    n = topology.num_ranks
    if not enabled or n <= 1:
        return trivial_group(n)
    base = _signature(topology)
    chosen: list[tuple[str, np.ndarray]] = []
    group = np.arange(n, dtype=np.int64)[None, :]
    members = {group[0].tobytes()}
    for name, perm in candidate_generators(topology):
        if group.shape[0] == n:
            break
        if nodes_only and not name.startswith("node shift"):
            continue
        if perm.tobytes() in members or not is_automorphism(topology, perm, base):
            continue
        if accept is not None and not accept(perm):
            continue
        trial = _closure([p for _, p in chosen] + [perm], n, n)
        if trial is None or trial.shape[0] <= group.shape[0]:
            continue
        chosen.append((name, perm))
        group = trial
        members = {g.tobytes() for g in group}
    return _finish(group, tuple((name, tuple(int(x) for x in p)) for name, p in chosen))


def _finish(perms: np.ndarray, gens: tuple) -> RankGroup:
    n = perms.shape[1]
    rep_index = np.full(n, -1, dtype=np.int64)
    element = np.zeros(n, dtype=np.int64)
    reps: list[int] = []
    for r in range(n):
        if rep_index[r] >= 0:
            continue
        i = len(reps)
        reps.append(r)
        images = perms[:, r]
        rep_index[images] = i
        element[images] = np.arange(perms.shape[0])
    # sort the group's elements so that element order does not depend on discovery order
    return RankGroup(perms, gens, tuple(reps), rep_index, element)


# --------------------------------------------------------------------------------- resource orbits
class ResourceMap:
    """The topology's bandwidth resources, their orbits under a group, and their figures.

    Resources are those of :meth:`Topology.channel` (``("link", a, b)``, ``("out"|"in", switch,
    port)``). ``orbit_of[res]`` is an orbit index; per orbit: its size, ``mult = |H| / size`` (the
    chunks a representative's task puts on every resource of the orbit), β (µs/MB per lane) and
    lanes.
    """

    def __init__(self, topology: Topology, group: RankGroup):
        self.topology = topology
        self.group = group
        self._port_ranks: dict[tuple[str, str], frozenset[int]] = {}
        self._switch_of_ports: dict[frozenset[frozenset[int]], str] = {}
        self._port_by_ranks: dict[tuple[str, frozenset[int]], str] = {}
        for sw in topology.switches:
            sets = []
            for p in sw.ports:
                key = frozenset(p.ranks)
                self._port_ranks[(sw.name, p.name)] = key
                self._port_by_ranks[(sw.name, key)] = p.name
                sets.append(key)
            self._switch_of_ports[frozenset(sets)] = sw.name
        self.orbit_of: dict[Resource, int] = {}
        self.size: list[int] = []
        self.beta: list[float] = []
        self.lanes: list[int] = []
        self.members: list[Resource] = []

    def image(self, res: Resource, perm: np.ndarray) -> Resource:
        if res[0] == "link":
            return ("link", str(int(perm[int(res[1])])), str(int(perm[int(res[2])])))
        sw = next(s for s in self.topology.switches if s.name == res[1])
        ports = frozenset(frozenset(int(perm[r]) for r in p.ranks) for p in sw.ports)
        target = self._switch_of_ports[ports]
        ranks = frozenset(int(perm[r]) for r in self._port_ranks[(res[1], res[2])])
        return (res[0], target, self._port_by_ranks[(target, ranks)])

    def add(self, res: Resource, beta: float, lanes: int) -> int:
        """The orbit of ``res`` (discovering the whole orbit the first time)."""
        found = self.orbit_of.get(res)
        if found is not None:
            return found
        idx = len(self.size)
        orbit = {res}
        frontier = [res]
        gens = [np.asarray(p, dtype=np.int64) for _, p in self.group.generators]
        while frontier:
            nxt = []
            for r in frontier:
                for g in gens:
                    im = self._image_cached(r, g)
                    if im not in orbit:
                        orbit.add(im)
                        nxt.append(im)
            frontier = nxt
        for r in orbit:
            self.orbit_of[r] = idx
        self.size.append(len(orbit))
        self.beta.append(beta)
        self.lanes.append(lanes)
        self.members.append(min(orbit))
        return idx

    def _image_cached(self, res: Resource, perm: np.ndarray) -> Resource:
        if res[0] == "link":
            return ("link", str(int(perm[int(res[1])])), str(int(perm[int(res[2])])))
        cache = self.__dict__.setdefault("_img", {})
        key = (res, id(perm))
        if key not in cache:
            cache[key] = self.image(res, perm)
        return cache[key]

    def mult(self, orbit: int) -> float:
        return self.group.order / self.size[orbit]

    @property
    def count(self) -> int:
        return len(self.size)


# ----------------------------------------------------------------------------- rank-group report
def isomorphic_groups(topology: Topology) -> dict[str, list[tuple[int, ...]]]:
    """Isomorphic rank groups the topology declares: nodes, and torus rows/columns inside a node.

    For reports and hierarchical decompositions; the encodings use :func:`rank_group`.
    """
    out: dict[str, list[tuple[int, ...]]] = {}
    nodes = [tuple(m) for m in topology.nodes if m]
    if len(nodes) > 1 and len({len(m) for m in nodes}) == 1:
        out["nodes"] = nodes
    dims = dict(topology.meta).get("torus")
    if dims and nodes:
        shape = tuple(int(d) for d in dims)
        chips = math.prod(shape)
        size = len(nodes[0])
        if chips and size % chips == 0:
            per = size // chips
            for axis in range(len(shape)):
                lines: list[tuple[int, ...]] = []
                for members in nodes:
                    coords = np.array(np.unravel_index(np.arange(chips), shape)).T
                    others = [a for a in range(len(shape)) if a != axis]
                    keyed: dict[tuple[int, ...], list[int]] = {}
                    for chip, c in enumerate(coords):
                        keyed.setdefault(tuple(int(c[a]) for a in others), []).append(chip)
                    for chips_on_line in keyed.values():
                        for core in range(per):
                            lines.append(tuple(members[ch * per + core] for ch in chips_on_line))
                out[f"torus axis {axis} lines"] = lines
    return out


def apply(perm: np.ndarray, ranks: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(perm[r]) for r in ranks)
