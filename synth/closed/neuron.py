"""What one of Neuron's own collective calls costs on Trainium (the physics behind the closed model).

A call of a vendor collective (all-gather, reduce-scatter, all-reduce, all-to-all, permute) on a
replica group is priced the way the Neuron runtime documents that it runs it, with every figure
either read from AWS's pages or fitted to the public nccom-test outputs of
``tests/data/nccom-test/`` (its README lists each file's source; ``benchmarks/reality_trainium.py``
measures the fit, in and out of sample):

    time = launch + per_rank · R + Σ_stages steps · hop + Σ_stages bytes / throughput

**Stages.** A group spans ``nodes`` instances, a sub-grid of ``chips`` on the instance's 2D
NeuronLink torus, and ``per_chip`` NeuronCores (ranks) of each chip. The runtime composes a call
hierarchically (runtime docs, "Inter-node Collective Communications": all-gather runs the inter-node
stage first, reduce-scatter last, all-reduce = intra-node reduce-scatter, inter-node all-reduce,
intra-node all-gather), and inside an instance every algorithm it documents ("Intra-node
Collective Communications": Mesh, RDH, KangaRing) is an inter-chip stage among the same-index
cores plus an intra-chip stage among a chip's cores. So a call is up to three stages, each with its
own steps and bandwidth; an all-reduce runs the chip and link stages twice (``w = 2``):

* **chip** (``per_chip`` ≥ 2): one exchange through the chip's HBM per pass; each rank moves
  ``w (k-1)/k · S`` bytes at ``core_GBps`` (core-to-core bandwidth inside a chip, fitted).
* **link** (``chips`` ≥ 2): each chip moves ``w (c-1)/c · S`` bytes over NeuronLink. The runtime
  picks the algorithm by message size (documented sweet ranges, :data:`MESH_MAX_BYTES`,
  :data:`RDH_MAX_BYTES`):

  - *mesh* (below ~1 MB): 1 step; every chip writes to every other chip through routed links, so
    the chip's ``L`` links carry each byte over the mean hop distance ``h̄`` of the sub-grid:
    throughput ``L · link_GBps · mesh_efficiency / h̄``;
  - *RDH* (recursive halving-doubling, ~1-56 MB): ``log2 c`` steps, one torus direction at a time:
    throughput ``link_GBps · ring_efficiency`` (one link);
  - *ring* / KangaRing (above ~56 MB): ``c - 1`` steps over every link of the sub-grid:
    throughput ``L · link_GBps · ring_efficiency``.

* **node** (``nodes`` ≥ 2): an inter-node collective among same-index ranks over EFA: the instance
  moves ``w (n-1)/n · S`` bytes through the EFA devices of the chips the group spans (one device per
  ``chips_per_efa`` chips), each at ``efa_GBps / efa_devices · efa_efficiency``, in ``n - 1`` steps
  (ring; RDH with ``log2 n`` steps from runtime 2.24 on, per its release notes).

``link_GBps`` and ``efa_GBps`` are the documented hardware figures (:data:`FAMILIES`); the fitted
efficiencies say how much of them a call gets. All-to-all sends distinct data to every rank (the
link and node stages carry ``per_chip`` times an all-gather's bytes); permute is one step to one
neighbour. An nccom-test run is one group alone on the machine; a composed program's call runs on
every rank at once, so its sibling groups share the chips' links and the EFA devices
(:class:`Group`'s sharing factors divide the throughputs).

**Floors.** ``launch``, ``per_rank`` and the hop latencies belong to a runtime release
(:data:`FLOORS`): the published floors fell more than tenfold between the 2023 and the 2025 pages
(32-rank all-gather of 1 KiB: 151 µs in the SDK 2.10 docs, 6.16 µs in the 2.24 docs), so a single
set of floors cannot describe both, and the model keeps one profile per release range. The
default profile is the current one (:data:`DEFAULT_RUNTIME`).

What the fitted figures say on trn1 (per call, smallest messages; µs):

===============================  =====================  ==========================
call                              SDK 2.21 and later      SDK 2.10-2.16 (2.17-2.20)
===============================  =====================  ==========================
2 ranks, one chip, all-reduce     4.2                     55 (measured 58)
32 ranks, one instance, gather    6.4 (measured 6.2)      148 (measured 151)
trn2, 8 ranks, gather             5.5 (measured 10.0)     -
64 ranks on 2 instances, reduce   41 (no published run)   1078 (2.17: 644; measured
                                                          840-1419, 540-1019 at 1 KiB+)
===============================  =====================  ==========================

Bandwidths: 56 GB/s per rank between the two cores of a chip; per NeuronLink 22 GB/s in mesh
traffic (after routing) and 59 GB/s in RDH/ring traffic; EFA 100 GB/s per instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ..errors import SynthError
from ..topology import MB

MiB = 1 << 20

MESH_MAX_BYTES = 1 * MiB
"""Mesh below this message size (runtime docs, "Intra-node Collective Communications", algorithm
summary: Mesh's sweet range "< 1MB"). The one published run that names its algorithms (16-rank
all-reduce, 2.28 docs) used mesh at 128 KiB and RDH at 2 MiB, which agrees."""
RDH_MAX_BYTES = 56 * MiB
"""RDH up to this message size, ring/KangaRing above (same table: RDH "1-56MB", KangaRing
">56MB"). The 2.28 run above already used KangaRing at 32 MiB for its all-reduce, so for
all-reduce the switch can come earlier; the documented value is kept (no trn1 run shows the
switch)."""


@dataclass(frozen=True)
class Family:
    """Hardware figures of one Trainium instance type, as documented (not fitted)."""

    name: str
    ranks_per_chip: int
    torus: tuple[int, int]
    link_GBps: float
    """One NeuronLink between two chips, per direction (per-chip figure / 4 links)."""
    efa_GBps: float
    """EFA bandwidth of one instance, per direction."""
    efa_devices: int
    """EFA devices per instance, each hanging off ``chips / efa_devices`` chips."""
    core_GBps: float
    """Prior for the core-to-core bandwidth inside a chip (HBM bandwidth / 2 / 2)."""
    sources: tuple[str, ...]


FAMILIES: dict[str, Family] = {
    "trn1": Family(
        "trn1", 2, (4, 4), 96.0, 100.0, 8, 205.0,
        ("AWS Neuron docs, 'Trainium2 Architecture' (Trainium1 column): 384 GB/s chip-to-chip per chip "
         "over 4 NeuronLink-v2 links -> 96 GB/s per link (per direction ASSUMED)",
         "AWS Neuron docs, 'Amazon EC2 Trn1/Trn1n Architecture': 800 Gbps EFA per trn1.32xlarge "
         "-> 100 GB/s; 'How to prepare trn1.32xlarge for multi-node execution': 8 EFA devices "
         "(which chips each serves is not documented: 2 adjacent chips ASSUMED, as trn1_32.yaml)",
         "AWS Neuron docs, 'Trainium Architecture': 820 GB/s HBM per chip -> 205 GB/s core-to-core "
         "prior (read + write, both directions)")),
    "trn1n": Family(
        "trn1n", 2, (4, 4), 192.0, 200.0, 16, 205.0,
        ("AWS Neuron docs, 'Amazon EC2 Trn1/Trn1n Architecture': trn1n doubles NeuronLink-v2 "
         "(768 GB/s per chip) and EFA (1600 Gbps, 16 devices)",)),
    "trn2": Family(
        "trn2", 4, (4, 4), 256.0, 400.0, 16, 725.0,
        ("AWS Neuron docs, 'Amazon EC2 Trn2 Architecture': 1,024 GB/s intra-instance NeuronLink-v3 "
         "per chip over 4 links -> 256 GB/s per link; EFAv3 3,200 Gbps per instance -> 400 GB/s, 16 "
         "devices (runtime 'Neuron Collectives' page: one 200 Gbps EFA per Trainium2 chip)",
         "AWS Neuron docs, 'Trainium2 Architecture': 2.9 TB/s HBM per chip -> 725 GB/s core-to-core "
         "prior")),
}


@dataclass(frozen=True)
class Floor:
    """Per-call costs that are not bytes, for one runtime release range (all µs)."""

    launch_us: float
    per_rank_us: float
    chip_hop_us: float
    link_hop_us: float
    efa_hop_us: float
    inter_node_rdh: bool = True
    """Inter-node stage in ``log2 n`` steps (RDH, runtime 2.24+) instead of ``n - 1`` (ring)."""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"launch_us": self.launch_us, "per_rank_us": self.per_rank_us,
                "chip_hop_us": self.chip_hop_us, "link_hop_us": self.link_hop_us,
                "efa_hop_us": self.efa_hop_us, "inter_node_rdh": self.inter_node_rdh}


DOCUMENTED_HOPS = {"chip_hop_us": 1.0, "link_hop_us": 1.5, "efa_hop_us": 15.0}
"""Priors of the hop latencies: "the per-hop latency of Ring/KangaRing is about 1-2 us" (intra-node
page; 1.0 inside a chip, 1.5 between chips) and "the per-hop or point-to-point latency is ~15us"
(inter-node page)."""

# The figures below are the fit of tests/data/nccom-test (synth.calibrate.closed_fit.fit_suite, run
# by benchmarks/reality_trainium.py; tests/test_closed_calibrate.py checks that a re-fit reproduces
# them). Which files inform which figure is said next to it.
FLOORS: dict[str, Floor] = {
    "2.21": Floor(2.0, 0.038, 1.07, 2.09, 15.0, True,
                  "SDK 2.21 and later: launch, per-rank floor and the two on-instance hops from the "
                  "32-rank all-gathers of the 2.21 profiler and 2.24 nccom-test pages (their 6.2 µs "
                  "floor splits between launch and hops with ± 120% each: only the sum is pinned); "
                  "the EFA hop is the documented ~15 µs: no multi-instance figure was published for "
                  "these releases"),
    "2.17": Floor(46.7, 3.07, 1.07, 2.09, 197.0, False,
                  "SDK 2.17-2.20: the 2024 awsome-distributed-training 2-instance all-reduce fits "
                  "the EFA hop; launch and per-rank floor are 2.10's, the hops the hardware's"),
    "2.10": Floor(46.7, 3.07, 1.07, 2.09, 414.0, False,
                  "SDK 2.10-2.16: launch, per-rank floor and EFA hop from the 2.10 nccom-test page "
                  "(2-rank all-reduce 58 µs, 32-rank all-gather 151 µs, 2-instance 64-rank "
                  "all-reduce 840 µs at 1 KiB); the on-chip and NeuronLink hops are the hardware's"),
}
DEFAULT_RUNTIME = "2.21"


def runtime_profile(release: str) -> str:
    """The floor profile of an SDK release ``"2.19"`` (or a profile name itself)."""
    if release in FLOORS:
        return release
    try:
        major, minor = (int(x) for x in release.split(".")[:2])
    except ValueError:
        raise SynthError(f"unknown Neuron runtime release '{release}' (give one like 2.24; profiles: "
                         f"{', '.join(sorted(FLOORS))})") from None
    if (major, minor) < (2, 10):
        raise SynthError(f"no published nccom-test figure covers Neuron SDK {release} (the oldest is 2.10)")
    if (major, minor) <= (2, 16):
        return "2.10"
    if (major, minor) <= (2, 20):
        return "2.17"
    return "2.21"


@dataclass(frozen=True)
class Bandwidths:
    """The fitted throughput terms (shared by every runtime release: the hardware did not change)."""

    core_GBps: float
    mesh_efficiency: float
    ring_efficiency: float
    efa_efficiency: float

    def to_dict(self) -> dict[str, float]:
        return {"core_GBps": self.core_GBps, "mesh_efficiency": self.mesh_efficiency,
                "ring_efficiency": self.ring_efficiency, "efa_efficiency": self.efa_efficiency}


BANDWIDTHS: dict[str, Bandwidths] = {
    # core_GBps 56.3 GB/s per rank (± 10%): the 2.10 page's 2-rank (intra-chip) all-reduce, 1 MiB to
    #   1 GiB (its 1 GiB row: 52.83 GiB/s busbw = 56.7 GB/s). A quarter of the HBM-derived 205 GB/s
    #   the topology file assumed.
    # mesh_efficiency 0.233 (± 11%): the 32-rank all-gathers at 64 KiB and 512 KiB of the 2.10,
    #   2.21 and 2.24 pages: a mesh moves 0.233 x 96 = 22 GB/s per NeuronLink (each byte routed
    #   over 2.13 links on average on the 4x4 torus).
    # ring_efficiency 0.616 and efa_efficiency 1.0: the 2.10 page's 2-instance 64-rank all-reduce,
    #   16 MiB to 1 GiB (37.5 µs/MB): 59 GB/s per NeuronLink for RDH and ring, EFA at its 100 GB/s
    #   line rate (the bound). One curve fixes only their sum (± 51% and ± 60% apart); no trn1
    #   single-instance run above 512 KiB was published to split them.
    "trn1": Bandwidths(56.3, 0.233, 0.616, 1.0),
}
BANDWIDTHS["trn1n"] = BANDWIDTHS["trn1"]
BANDWIDTHS["trn2"] = Bandwidths(FAMILIES["trn2"].core_GBps * 56.3 / FAMILIES["trn1"].core_GBps,
                                0.233, 0.616, 1.0)
"""Trn2: not fitted (two trn2-class runs were published, neither with its instance named): trn1's
efficiencies on trn2's documented figures, and the core-to-core bandwidth scaled by the HBM ratio
(ASSUMED). The 2.28 page's 8-rank all-gather is predicted from these, out of sample."""


# ------------------------------------------------------------------------------------------ groups
@dataclass(frozen=True)
class Group:
    """The ranks of one replica group as the runtime sees them.

    ``chip_dims``: the chips spanned along each torus dimension and whether that dimension closes
    into a ring inside the group (a whole row or column of the torus does; a segment does not).
    Throughputs are divided by the sharing factors: what one group gets when its siblings run too.
    """

    nodes: int
    chip_dims: tuple[tuple[int, bool], ...]
    per_chip: int
    link_sharing: int = 1
    """Groups of the same call that run at once on the same chips and share their links: 1 for a
    lone group (nccom-test), ranks-per-chip / per_chip when every rank issues the call (a group
    over the torus axes alone has one sibling group per core index on every chip)."""
    efa_sharing: int = 1
    """Groups of the same call that share the group's EFA devices at once (likewise)."""

    @property
    def chips(self) -> int:
        return math.prod(size for size, _ in self.chip_dims) if self.chip_dims else 1

    @property
    def ranks(self) -> int:
        return self.nodes * self.chips * self.per_chip

    @property
    def ranks_per_node(self) -> int:
        return self.chips * self.per_chip

    def efa_devices(self, family: Family) -> int:
        """EFA devices of the chips the group spans on one instance (at least one)."""
        chips_per_device = max(1, family.torus[0] * family.torus[1] // family.efa_devices)
        return min(family.efa_devices, max(1, math.ceil(self.chips / chips_per_device)))

    def links(self) -> int:
        """Outgoing NeuronLinks per chip inside the group's sub-grid (a ring or path of 3+ chips
        gives each chip 2 along that dimension, a pair 1)."""
        return sum(1 if size == 2 else 2 for size, _ in self.chip_dims if size >= 2)

    def mean_hops(self) -> float:
        """Mean torus distance from a chip to the group's other chips."""
        return _mean_hops(self.chip_dims)

    def describe(self) -> str:
        grid = "x".join(str(s) for s, _ in self.chip_dims) or "1"
        return f"{self.nodes} node(s) x {grid} chips x {self.per_chip} core(s)"


@lru_cache(maxsize=256)
def _mean_hops(chip_dims: tuple[tuple[int, bool], ...]) -> float:
    c = math.prod(size for size, _ in chip_dims) if chip_dims else 1
    if c <= 1:
        return 0.0
    total = 0.0
    for size, wrap in chip_dims:
        pairs = [min(abs(a - b), size - abs(a - b)) if wrap else abs(a - b)
                 for a in range(size) for b in range(size)]
        total += sum(pairs) / (size * size)
    return total * c / (c - 1)


def consecutive_group(family: Family, ranks: int, nodes: int = 1) -> Group:
    """The group nccom-test runs: ranks ``0 .. R/N - 1`` of each of ``nodes`` instances.

    Ranks fill a chip's cores first, chips fill torus rows first (chip ``d`` at row ``d // C``), so
    8 ranks on trn1 are one torus row of 4 chips x 2 cores, 32 ranks the whole 4x4 torus.
    """
    if ranks < 1 or nodes < 1 or ranks % nodes:
        raise SynthError(f"{ranks} ranks do not split evenly over {nodes} node(s)")
    per_node = ranks // nodes
    rows, cols = family.torus
    rpc = family.ranks_per_chip
    if per_node > rows * cols * rpc:
        raise SynthError(f"{per_node} ranks per node is more than a {family.name} instance has "
                         f"({rows * cols * rpc})")
    if per_node <= rpc:
        return Group(nodes, (), per_node)
    if per_node % rpc:
        raise SynthError(f"{per_node} ranks per node do not fill whole {family.name} chips of {rpc} cores")
    chips = per_node // rpc
    if chips <= cols:
        return Group(nodes, ((chips, chips == cols),), rpc)
    if chips % cols:
        raise SynthError(f"{chips} chips do not fill whole torus rows of {cols}")
    r = chips // cols
    return Group(nodes, ((r, r == rows), (cols, True)), rpc)


# ------------------------------------------------------------------------------------------ costing
@dataclass(frozen=True)
class CallTime:
    """One call: ``latency_us`` (everything but the launch and the bytes) and ``bytes_us``."""

    latency_us: float
    bytes_us: float
    algorithm: str


def wire_factor(prim: str, g: int) -> float:
    """Bytes each rank moves per buffer byte: nccom-test's busbw / algbw (its "Bus Bandwidth
    Calculation" table: 2(r-1)/r all-reduce, (r-1)/r all-gather, reduce-scatter, all-to-all, 1 for
    permute and send-receive)."""
    if g <= 1:
        return 0.0
    if prim == "all_reduce":
        return 2.0 * (g - 1) / g
    if prim == "permute":
        return 1.0
    return (g - 1) / g


PASSES = {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2, "all_to_all": 1, "permute": 1}


def link_algorithm(nbytes: int) -> str:
    """Neuron's inter-chip algorithm for a message of ``nbytes`` (:data:`MESH_MAX_BYTES`, ...)."""
    if nbytes < MESH_MAX_BYTES:
        return "mesh"
    if nbytes <= RDH_MAX_BYTES:
        return "rdh"
    return "ring"


@dataclass(frozen=True)
class NeuronModel:
    """A family's documented figures, the fitted throughputs, and one runtime's floors."""

    family: Family
    bandwidths: Bandwidths
    floor: Floor
    runtime: str = DEFAULT_RUNTIME
    mesh_max_bytes: int = MESH_MAX_BYTES
    rdh_max_bytes: int = RDH_MAX_BYTES
    notes: tuple[str, ...] = field(default_factory=tuple)

    def with_runtime(self, release: str) -> NeuronModel:
        profile = runtime_profile(release)
        return replace(self, floor=FLOORS[profile], runtime=profile)

    def algorithm(self, nbytes: int) -> str:
        if nbytes < self.mesh_max_bytes:
            return "mesh"
        if nbytes <= self.rdh_max_bytes:
            return "rdh"
        return "ring"

    def call(self, prim: str, group: Group, nbytes: float) -> CallTime:
        """Latency and byte time (µs, launch excluded) of one call moving ``nbytes`` (see module doc).

        Memoized: the strategy search prices the same (group, size) many times."""
        return _call(self, prim, group, nbytes)

    def _compute(self, prim: str, group: Group, nbytes: float) -> CallTime:
        if prim not in PASSES:
            raise SynthError(f"unknown collective '{prim}' for the Neuron model")
        if group.ranks <= 1:
            return CallTime(0.0, 0.0, "none")
        f, b, fam = self.floor, self.bandwidths, self.family
        w = PASSES[prim]
        k, c, n = group.per_chip, group.chips, group.nodes
        latency = f.per_rank_us * group.ranks
        byte_us = 0.0
        algorithm = "local"
        if prim == "permute":
            # one send of the whole buffer to one neighbour, on the slowest level it crosses; every
            # rank of the group sends at once, so a chip's link carries its k ranks' buffers and an
            # instance's EFA its ranks' buffers
            if n >= 2:
                return CallTime(latency + f.efa_hop_us,
                                nbytes * group.ranks_per_node * group.efa_sharing
                                / (self.efa_throughput(group)) / 1e3, "p2p-efa")
            if c >= 2:
                return CallTime(latency + f.link_hop_us,
                                nbytes * k * group.link_sharing / (fam.link_GBps * b.ring_efficiency)
                                / 1e3, "p2p-link")
            return CallTime(latency + f.chip_hop_us, nbytes / b.core_GBps / 1e3, "p2p-chip")
        fan = k if prim == "all_to_all" else 1
        if k >= 2:
            latency += w * f.chip_hop_us
            byte_us += w * (k - 1) / k * nbytes / b.core_GBps / 1e3
        if c >= 2:
            algorithm = self.algorithm(int(nbytes))
            links = group.links()
            if algorithm == "mesh":
                steps = 1
                thr = links * fam.link_GBps * b.mesh_efficiency / max(group.mean_hops(), 1.0)
            elif algorithm == "rdh":
                steps = math.ceil(math.log2(c))
                thr = fam.link_GBps * b.ring_efficiency
            else:
                steps = c - 1
                thr = links * fam.link_GBps * b.ring_efficiency
            latency += w * steps * f.link_hop_us
            byte_us += w * fan * group.link_sharing * (c - 1) / c * nbytes / thr / 1e3
        if n >= 2:
            steps = math.ceil(math.log2(n)) if f.inter_node_rdh else n - 1
            latency += w * steps * f.efa_hop_us
            ranks_fan = group.ranks_per_node if prim == "all_to_all" else 1
            byte_us += (w * ranks_fan * group.efa_sharing * (n - 1) / n * nbytes
                        / self.efa_throughput(group) / 1e3)
            algorithm = f"hier({algorithm})" if algorithm != "local" else "inter-node"
        return CallTime(latency, byte_us, algorithm)

    def efa_throughput(self, group: Group) -> float:
        """GB/s a group gets through the EFA devices of its chips (before sharing)."""
        fam = self.family
        return (group.efa_devices(fam) * fam.efa_GBps / fam.efa_devices
                * self.bandwidths.efa_efficiency)

    def time_us(self, prim: str, group: Group, nbytes: float) -> float:
        """Launch + latency + bytes: what nccom-test reports for one call."""
        t = self.call(prim, group, nbytes)
        return self.floor.launch_us + t.latency_us + t.bytes_us

    def large_message_terms(self, prim: str, group: Group) -> tuple[float, float]:
        """(α µs, β µs per MB of wire bytes) of the ring regime: the model as one α-β line.

        What :mod:`synth.calibrated` relates a calibration's terms to; the byte slope is taken
        between two ring-regime sizes so the latency does not leak into it.
        """
        big = max(self.rdh_max_bytes * 4, 1 << 30)
        t1, t2 = self.call(prim, group, big), self.call(prim, group, 2 * big)
        wire = wire_factor(prim, group.ranks)
        if wire <= 0:
            return t1.latency_us, 0.0
        beta = (t2.bytes_us - t1.bytes_us) / (wire * big / MB)
        return t1.latency_us, beta

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family.name, "runtime": self.runtime, **self.bandwidths.to_dict(),
                **{k: v for k, v in self.floor.to_dict().items()},
                "mesh_max_bytes": self.mesh_max_bytes, "rdh_max_bytes": self.rdh_max_bytes}


@lru_cache(maxsize=1 << 16)
def _call(model: NeuronModel, prim: str, group: Group, nbytes: float) -> CallTime:
    return model._compute(prim, group, nbytes)


def family_of(name: str, ranks_per_chip: int | None = None) -> Family:
    """The Trainium family of a topology name (``trn1_32`` -> trn1, ``trn2_64`` -> trn2)."""
    for key in ("trn1n", "trn2", "trn1"):
        if name.startswith(key):
            return FAMILIES[key]
    if ranks_per_chip == 4:
        return FAMILIES["trn2"]
    return FAMILIES["trn1"]


def shipped_model(family: Family | str = "trn1", runtime: str = DEFAULT_RUNTIME) -> NeuronModel:
    """The uncalibrated model: documented hardware, fitted throughputs, a release's floors."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    profile = runtime_profile(runtime)
    return NeuronModel(fam, BANDWIDTHS[fam.name], FLOORS[profile], profile)


