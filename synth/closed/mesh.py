"""The device mesh a closed-stack program runs on: named axes over the topology's hierarchy.

A closed stack addresses ranks through *replica groups*. synth builds every group from a
:class:`Mesh`: an ordered tuple of named axes (major to minor) whose row-major index is the rank
number of the topology. A group over a set of axes holds the ranks that differ only in those axes,
listed row-major in the axes' order; that order is the concatenation order of the vendor call.

* Trainium (``meta.torus`` + ``meta.ranks_per_chip``): ``node`` (when ``--nodes`` > 1), ``row`` and
  ``col`` of the chip torus (chip d at (d // C, d % C)), ``core`` inside a chip. On trn1_32 the
  ``core`` groups are ``[[0,1],[2,3],...]``, the ``col`` groups are the torus-row rings
  ``[[0,2,4,6],[1,3,5,7],...]`` and the ``row`` groups the torus-column rings ``[[0,8,16,24],...]``.
* TPU / plain tori (``meta.torus`` only): ``x``, ``y`` (, ``z``) ICI axes, one rank per chip.
* Anything else: ``node`` (when several) and one flat ``rank`` axis inside a node.

The mesh is checked against the topology: neighbours along a torus axis must be linked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from ..errors import SynthError
from ..topology import Link, Topology, beta_from_bandwidth

TPU_V5E_ICI_GBPS = 50.0
"""Per ICI link per direction: 400 GB/s bidirectional per v5e chip over 4 ports (INFERRED split)."""
TPU_V5E_ICI_ALPHA_US = 1.0
"""ASSUMED per-hop ICI latency (no published figure; same order as NeuronLink's 1-2 µs)."""


@dataclass(frozen=True)
class Axis:
    name: str
    size: int
    role: str
    """``node`` (between machines), ``torus`` (a ring of chip links), ``core`` (inside a chip),
    ``flat`` (every rank of a node)."""


@dataclass(frozen=True)
class Mesh:
    """Named axes, major to minor; rank = row-major index of the axis coordinates."""

    axes: tuple[Axis, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise SynthError(f"unknown mesh axis '{name}' (axes: {', '.join(self.names)})")

    def ordered(self, names: Sequence[str]) -> tuple[str, ...]:
        """``names`` in mesh (major to minor) order."""
        want = set(names)
        for n in want:
            self.axis(n)
        return tuple(n for n in self.names if n in want)

    def group_size(self, names: Sequence[str]) -> int:
        return math.prod(self.axis(n).size for n in names)

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for size in reversed(self.shape):
            out.append(rank % size)
            rank //= size
        return tuple(reversed(out))

    def rank(self, coords: Sequence[int]) -> int:
        r = 0
        for c, size in zip(coords, self.shape, strict=True):
            r = r * size + c
        return r

    @cached_property
    def _group_cache(self) -> dict:
        return {}

    def groups(self, names: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        """Replica groups over ``names`` (in the given order, major to minor).

        Groups are listed by the coordinates of the other axes (row-major); inside a group ranks
        are listed row-major over ``names`` in the order given.
        """
        key = tuple(names)
        if key in self._group_cache:
            return self._group_cache[key]
        idx = [self.names.index(n) for n in key]
        if len(set(idx)) != len(idx):
            raise SynthError(f"axis listed twice in group {key}")
        others = [i for i in range(len(self.axes)) if i not in idx]
        groups = []
        for oc in itertools.product(*(range(self.shape[i]) for i in others)):
            members = []
            for gc in itertools.product(*(range(self.shape[i]) for i in idx)):
                coords = [0] * len(self.axes)
                for i, c in zip(others, oc, strict=True):
                    coords[i] = c
                for i, c in zip(idx, gc, strict=True):
                    coords[i] = c
                members.append(self.rank(coords))
            groups.append(tuple(members))
        result = tuple(groups)
        self._group_cache[key] = result
        return result

    def position(self, rank: int, names: Sequence[str]) -> int:
        """Index of ``rank`` inside its group over ``names``."""
        c = self.coords(rank)
        p = 0
        for n in names:
            i = self.names.index(n)
            p = p * self.shape[i] + c[i]
        return p

    def describe(self) -> str:
        return " × ".join(f"{a.name}={a.size}" for a in self.axes)


# ------------------------------------------------------------------------------------ building
def _meta(topology: Topology) -> dict:
    return dict(topology.meta)


def mesh_for_topology(topology: Topology) -> Mesh:
    """The mesh of a topology, from its hierarchy facts (``meta``), checked against its links."""
    meta = _meta(topology)
    nodes = topology.num_nodes
    n = topology.num_ranks
    if n % nodes or any(tuple(m) != tuple(range(i * (n // nodes), (i + 1) * (n // nodes)))
                        for i, m in enumerate(topology.nodes)):
        raise SynthError(f"topology '{topology.name}': closed-stack programs need nodes of equal size "
                         "holding consecutive ranks (symmetric replica groups)")
    per_node = n // nodes
    axes: list[Axis] = [Axis("node", nodes, "node")] if nodes > 1 else []
    torus = meta.get("torus")
    if torus:
        dims = [int(d) for d in torus]
        chips = math.prod(dims)
        rpc = int(meta.get("ranks_per_chip", 1))
        if chips * rpc != per_node:
            raise SynthError(f"topology '{topology.name}': meta torus {dims} x ranks_per_chip {rpc} "
                             f"does not match {per_node} ranks per node")
        names = ("row", "col") if len(dims) == 2 and rpc > 1 else ("x", "y", "z")[: len(dims)]
        if len(dims) != 2 and rpc > 1:
            names = tuple(f"t{i}" for i in range(len(dims)))
        axes += [Axis(nm, d, "torus") for nm, d in zip(names, dims, strict=True)]
        if rpc > 1:
            axes.append(Axis("core", rpc, "core"))
    else:
        axes.append(Axis("rank", per_node, "flat"))
    axes = [a for a in axes if a.size > 1] or [Axis("rank", 1, "flat")]
    mesh = Mesh(tuple(axes))
    assert mesh.size == n
    _check_links(mesh, topology)
    return mesh


def _check_links(mesh: Mesh, topology: Topology) -> None:
    for a in mesh.axes:
        if a.role not in ("torus", "core"):
            continue
        i = mesh.names.index(a.name)
        for r in range(mesh.size):
            c = list(mesh.coords(r))
            c[i] = (c[i] + 1) % a.size
            nb = mesh.rank(c)
            if nb != r and not topology.has_channel(r, nb):
                raise SynthError(f"topology '{topology.name}': ranks {r} and {nb} are neighbours along "
                                 f"mesh axis '{a.name}' but are not linked; the hierarchy in its meta "
                                 "does not match its links")


def tpu_v5e(dims: Sequence[int] = (4, 4)) -> Topology:
    """A TPU v5e slice: chips on a 2D torus of ICI links, one rank per chip.

    TPU v5e: 4 ICI ports per chip, 400 GB/s bidirectional per chip (docs/reference/hardware.md);
    so 50 GB/s per link per direction (INFERRED split). Per-hop latency ASSUMED 1 µs.
    """
    from ..builders import torus

    dims = tuple(int(d) for d in dims)
    base = torus(dims)
    beta = beta_from_bandwidth(TPU_V5E_ICI_GBPS)
    links = tuple(Link(lk.src, lk.dst, TPU_V5E_ICI_ALPHA_US, beta, lk.count, "ici")
                  for lk in base.links)
    spec = "x".join(map(str, dims))
    return Topology(
        name=f"tpu_v5e_{spec}", num_ranks=base.num_ranks, links=links, nodes=base.nodes,
        description=f"TPU v5e {spec} slice: 2D torus of ICI links (50 GB/s per link per direction)",
        sources=("docs/reference/closed-stacks.md: TPU v5e is a 2D torus, 4 ICI ports per chip, "
                 "400 GB/s bidirectional per chip",),
        meta=(("chips", base.num_ranks), ("hbm_GBps", 819.0), ("platform", "tpu"),
              ("ranks_per_chip", 1), ("torus", list(dims))),
    )


def resolve_topology(spec: str, nodes: int = 1) -> Topology:
    """Like :func:`synth.topology_io.load_topology`, plus ``tpu_v5e_4x4`` / ``tpu_v5e:4x4``."""
    from ..builders import multinode
    from ..topology_io import load_topology

    for prefix in ("tpu_v5e_", "tpu_v5e:"):
        if spec.startswith(prefix):
            try:
                dims = tuple(int(d) for d in spec[len(prefix):].split("x"))
            except ValueError:
                raise SynthError(f"cannot read TPU slice '{spec}' (example: tpu_v5e_4x4)") from None
            if not 1 <= len(dims) <= 2 or any(d < 2 for d in dims):
                raise SynthError(f"TPU v5e slice '{spec}': expected 2D dims >= 2 like 4x4")
            topo = tpu_v5e(dims)
            return multinode(topo, nodes) if nodes > 1 else topo
    return load_topology(spec, nodes)


# ------------------------------------------------------------------------------------ rings
def ring_cycle(mesh: Mesh, names: Sequence[str], topology: Topology) -> tuple[int, ...] | None:
    """A Hamiltonian cycle over one group's positions (along ``names``) using only direct links.

    Built as a reflected mixed-radix Gray code (consecutive positions differ by ±1 along one axis)
    under each rotation of the axis order; the cycle must close and every hop must be a channel of
    the topology for every group (checked). Returns positions inside the group, or None.
    """
    names = tuple(names)
    g = mesh.group_size(names)
    if g == 1:
        return None
    groups = mesh.groups(names)
    sizes = [mesh.axis(n).size for n in names]
    for rot in range(len(names)):
        order = list(range(rot, len(names))) + list(range(rot))
        digits = _gray([sizes[i] for i in order])
        cycle = []
        for d in digits:
            full = [0] * len(names)
            for i, v in zip(order, d, strict=True):
                full[i] = v
            p = 0
            for v, s in zip(full, sizes, strict=True):
                p = p * s + v
            cycle.append(p)
        if g == 2:
            cycle = [0, 1]
        if all(topology.has_channel(G[cycle[k]], G[cycle[(k + 1) % g]])
               for G in groups for k in range(g)):
            return tuple(cycle)
    return None


def _gray(sizes: list[int]) -> list[tuple[int, ...]]:
    """Reflected mixed-radix Gray code, first digit most significant."""
    if not sizes:
        return [()]
    rest = _gray(sizes[1:])
    out = []
    for v in range(sizes[0]):
        seq = rest if v % 2 == 0 else list(reversed(rest))
        out += [(v, *r) for r in seq]
    return out
