"""NCCL as it really runs: the algorithm, protocol and channels NCCL's tuner would pick, and its time.

Every other time synth prints is its own α-β model of a schedule. A "faster than NCCL" claim needs
NCCL's side priced the way NCCL itself prices it, with the same floors, so this module reproduces
NCCL's cost model (``ncclTopoTuneModel`` + ``ncclTopoGetAlgoTime``) over a synth topology.

**Source.** NVIDIA/nccl v2.30.7 (``makefiles/version.mk``), commit
5067397c2676d5aed50042fc39e5c8ee96eb0027. Every constant below names its file there:

* ``src/graph/tuning.cc`` — ``baseLatencies`` (µs, per algorithm × protocol), ``hwLatencies``
  (per NVLink / PCI / NET hop), ``llMaxBws``, ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``,
  ``perChMaxTreeBws``, ``perChMaxNVLSTreeBws`` (GB/s by GPU generation and node count),
  ``nvlsEfficiency``, the LL/LL128/tree/PAT bandwidth refinements, the bus→algorithm bandwidth
  ratio ``nRanks / nsteps`` (ring, NVLS) or 0.5 (tree), the latency sums per algorithm, the ring
  Simple multi-node "plateau" factor 1.4 (sm80+), ``treeCorrectionFactor`` and
  ``time = latency + bytes / (1000 · busBw)``;
* ``src/graph/search.cc`` — the channel search: the speed arrays (``speedArrayIntra/Inter``,
  ``sm90SpeedArrayIntra/Inter``, ``sm100...``), "decrease bw until a solution" with the 0.49 stop
  rule, ``ncclTopoDupChannels`` (double the channels, halve their speed when bwIntra ≥ 25 and,
  on sm90+, not when bwIntra < 50 with more than 4 channels), pass 2 raising bwIntra for trees on
  two nodes and bwInter for NVLS, and the NVLS search (each channel's head GPU moves 2 × its
  speed through the NVSwitch, the others 1 ×);
* ``src/graph/topo.h`` — NCCL's own per-NVLink figure (``SM80_NVLINK_BW`` 20.0,
  ``SM90_NVLINK_BW`` 20.6, ``SM100_NVLINK_BW`` 40.1 GB/s), not the datasheet's 25 GB/s;
* ``src/init.cc`` — ring ``maxChannels = MAXCHANNELS / 2`` = 32; ``src/include/device.h`` —
  ``NCCL_MAX_NVLS_ARITY`` 32;
* ``src/enqueue.cc`` — the tuner's size is ``elementSize · max(send, recv) count`` (nccl-tests'
  "size" for allgather, reducescatter and allreduce); NVLS on one node only, NVLS tree on more.

**How the search is reproduced.** NCCL searches paths in its own XML topology; synth has the
bandwidth figures it would find. For NVSwitch (and all-to-all NVLink) machines the search has a
closed form: a ring channel at speed ``s`` costs every GPU ``s`` of NVLink bandwidth (on more than
one node ``s·(g-1)/g`` on average: the chain's last GPU leaves through its NIC), a NIC carries
``floor(nicBw / s)`` channels, and the channel count is the largest that fits, at the first speed
(largest first) that gives the best ``channels × speed``. The result is checked in the tests
against channel counts NCCL prints on those machines (DGX A100: 12 × 20 GB/s on one node, 8 × 24
on two; DGX H100: 12 × 30 GB/s; NVLS 8 channels × 40 GB/s). NVLink meshes (DGX-1, NDv2) get the
same closed form, with the fastest GPU pair as the search's ``maxBw`` — an approximation of a path
search NCCL runs over the real mesh. Machines NCCL does not run on (MI300X: RCCL; Trainium:
Neuron; builder topologies with no GPU) raise :class:`~synth.errors.NotApplicable`: there is no
NCCL to compare with there.

**Floors.** NCCL's latency terms are its floors: ``baseLatencies`` is the per-call launch and
set-up cost, ``hwLatencies`` the per-step synchronisation. A calibration (:class:`NcclCalibration`,
fitted by :mod:`synth.calibrate.nccl_fit` / ``synth calibrate``) may add a launch floor and scale
the latency and bandwidth terms; NCCL's *choice* is always made with its own uncalibrated table (that is what
the library does), and only the chosen configuration's time is calibrated.

**Not modelled.** CollNet (SHARP in the InfiniBand switch: off unless a plugin provides it), the
tuner plugin, user environment overrides (``NCCL_ALGO``, ``NCCL_PROTO``), CPU-vendor-specific LL
caps (the Intel figures are used), and alltoall, which NCCL runs as grouped point-to-point
send/receive outside this tuning model: it is priced here as one step of every peer exchange at
NCCL's ring Simple latency and the GPU's NVLink / NIC bandwidth (stated in the choice's ``notes``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..calibration import NcclCalibration, calibration_of
from ..errors import NotApplicable, SynthError
from ..topology import Topology

NCCL_VERSION = "2.30.7"
NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"
SOURCE = f"NVIDIA/nccl v{NCCL_VERSION} @ {NCCL_COMMIT[:12]} (src/graph/tuning.cc, search.cc, topo.h)"

ALGOS = ("Tree", "Ring", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall")

# --- src/graph/tuning.cc: ncclTunerConstantsDefaults -------------------------------------------
BASE_LAT = {"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4), "NVLS": (0.0, 0.0, 0.0),
            "NVLSTree": (0.0, 0.0, 0.0), "PAT": (8.0, 8.0, 8.0)}
"""baseLatencies (µs), LL / LL128 / Simple."""
HW_LAT = {
    "nvlink": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4), "NVLS": (0.0, 0.0, 25.0),
               "NVLSTree": (0.0, 0.0, 25.0), "PAT": (0.0, 0.0, 4.0)},
    "pci": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7), "NVLS": (0.0, 0.0, 0.0),
            "NVLSTree": (0.0, 0.0, 0.0), "PAT": (0.0, 0.0, 4.0)},
    "net": {"Tree": (5.0, 8.5, 14.0), "Ring": (2.7, 4.0, 14.0), "NVLS": (0.0, 0.0, 18.0),
            "NVLSTree": (0.0, 0.0, 20.9), "PAT": (0.0, 0.0, 14.0)},
}
"""hwLatencies (µs per hop), LL / LL128 / Simple."""
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
LL_MAX_BW = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
             "hopper": (141.0, 45.0, 35.0), "blackwell": (282.0, 90.0, 70.0)}
"""llMaxBws rows: single node by generation (column N1); multi-node rows are by CPU vendor and this
module uses the Intel row (volta's, index1 = 0) for N2/N4."""
PER_CH_RING_LL128 = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                     "hopper": (36.7, 36.7, 36.7), "blackwell": (40.0, 40.0, 40.0)}
PER_CH_TREE_LL128 = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                     "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
PER_CH_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
               "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
PER_CH_NVLS_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                    "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
}
"""treeCorrectionFactor: tree allreduce bandwidth × factor[log2(bytes / 64)] for 64 B .. 256 MB."""
NET_OVERHEAD_US = 1.0
"""getNetOverhead: 1 µs per inter-node ring step (Intel x86 and the default; 2 on AMD), × 3 for
Simple."""
RING_PLATEAU = 1.4
"""Ring Simple allreduce on several nodes: latency × 1.4 on sm80+ (1.9 before) once every channel
and rank has 64 B or more."""

# --- src/graph/search.cc, topo.h, init.cc, device.h -------------------------------------------
SPEED_INTRA = {"volta": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
               "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
               "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0,
                             18.0)}
SPEED_INTER = {"volta": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0,
                         4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
               "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                          3.0, 2.4, 1.2, 0.24, 0.12),
               "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                             17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
"""Speed arrays; Volta and Ampere share the pre-sm90 arrays."""
NVLINK_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
PCI_BW = 12.0
"""topo.h PCI_BW (PCIe Gen3 x16): the path between GPUs that no NVLink joins."""
"""GB/s NCCL assigns one NVLink (SM70/SM80/SM90/SM100_NVLINK_BW)."""
RING_MAX_CHANNELS = 32
NVLS_MAX_ARITY = 32


NVIDIA_GPUS = ("V100", "A100", "A800", "H100", "H200", "H800", "H20", "GH200", "B100", "B200",
               "GB200", "B300", "GB300")
"""GPU names (``meta.gpu`` prefixes) NCCL's model is applied to."""


def generation_of(gpu: str) -> str:
    """NCCL's compute-capability bucket of a GPU name (``meta.gpu``); Ampere for the unknown."""
    g = gpu.upper()
    if g.startswith(("B100", "B200", "GB200", "B300", "GB300")):
        return "blackwell"
    if g.startswith(("H100", "H200", "H800", "H20", "GH200")):
        return "hopper"
    if g.startswith("V100"):
        return "volta"
    return "ampere"


def _speeds(table: Mapping[str, tuple[float, ...]], gen: str) -> tuple[float, ...]:
    return table.get(gen, table["volta"])


@dataclass(frozen=True)
class Graph:
    """One of NCCL's channel graphs: channels and the per-channel speed inside / between nodes."""

    channels: int
    bw_intra: float
    bw_inter: float

    def to_dict(self) -> dict[str, Any]:
        return {"channels": self.channels, "bw_intra_GBps": self.bw_intra,
                "bw_inter_GBps": self.bw_inter}


@dataclass(frozen=True)
class NcclMachine:
    """What NCCL's topology detection sees of a synth topology, and the graphs it searches."""

    name: str
    generation: str
    ranks: int
    nodes: int
    gpus_per_node: int
    gpu_bw: float
    """NVLink (or the intra-node fabric's) bandwidth per GPU in NCCL's figures, GB/s."""
    pair_bw: float
    """The fastest GPU-to-GPU path bandwidth (maxBw of the intra-node search), GB/s."""
    min_peer_bw: float
    """The slowest path to another GPU of the node (PCI_BW where no NVLink joins them), GB/s."""
    nvlink: bool
    nvswitch: bool
    nics_per_node: int
    nic_bw: float
    ring: Graph
    tree: Graph
    nvls: Graph | None
    notes: tuple[str, ...] = ()
    a2a_floor_us_per_byte: float = 0.0
    """synth's alltoall cut bound (µs per byte): the point-to-point model is never faster."""

    @property
    def ppn(self) -> float:
        return self.ranks / self.nodes

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "generation": self.generation, "ranks": self.ranks,
                "nodes": self.nodes, "gpu_bw_GBps": round(self.gpu_bw, 6),
                "pair_bw_GBps": round(self.pair_bw, 6),
                "min_peer_bw_GBps": round(self.min_peer_bw, 6), "nvlink": self.nvlink,
                "nvswitch": self.nvswitch, "nics_per_node": self.nics_per_node,
                "nic_bw_GBps": round(self.nic_bw, 6), "ring": self.ring.to_dict(),
                "tree": self.tree.to_dict(),
                "nvls": self.nvls.to_dict() if self.nvls else None, "notes": list(self.notes),
                "source": SOURCE}


# ================================================================================ machine + search
def machine_of(topology: Topology) -> NcclMachine:
    """The machine NCCL would detect: generation, NVLink and NIC bandwidth, and its channel graphs."""
    meta = dict(topology.meta)
    gpu = str(meta.get("gpu", ""))
    if not gpu.upper().startswith(NVIDIA_GPUS):
        raise NotApplicable(f"NCCL does not run on '{topology.name}' "
                            f"({'GPU ' + gpu if gpu else 'no NVIDIA GPU named in its meta.gpu'}); "
                            "its tuning model is NVIDIA's (RCCL, Neuron and builder topologies "
                            "have no NCCL to compare with)")
    gen = generation_of(gpu)
    nodes = topology.num_nodes
    if topology.num_ranks % nodes:
        raise SynthError(f"'{topology.name}': {topology.num_ranks} ranks do not split evenly over "
                         f"{nodes} nodes")
    g = topology.num_ranks // nodes
    first = topology.nodes[0] if topology.nodes else tuple(range(g))
    r0 = first[0]
    intra = [r for r in topology.neighbors(r0) if topology.node_of[r] == topology.node_of[r0]]
    nvlink_gpu = bool(meta.get("nvlinks_per_gpu"))
    notes: list[str] = []
    switch_lanes = 0
    for sw in topology.switches:
        for port in sw.ports:
            if r0 in port.ranks and port.domain < 0:
                switch_lanes = max(switch_lanes, port.lanes)
    nvswitch = switch_lanes > 0 and len(intra) == g - 1
    local = [r for r in first if r != r0]
    if nvlink_gpu:
        links = int(meta["nvlinks_per_gpu"])
        gpu_bw = links * NVLINK_BW[gen]
        peer = {}
        for r in local:
            ch = topology.channel(r0, r)
            if ch is None:
                peer[r] = PCI_BW
            elif ch.via == "link":
                count = next((lk.count for lk in topology.links if lk.src == r0 and lk.dst == r), 1)
                peer[r] = count * NVLINK_BW[gen]
            else:
                peer[r] = gpu_bw
        pair_bw = max(peer.values(), default=gpu_bw)
        min_peer = min(peer.values(), default=gpu_bw)
    else:
        gpu_bw = topology.send_bandwidth_GBps(r0)
        nics_bw = sum(n.bandwidth_GBps / len(n.ranks) for n in topology.nics if r0 in n.ranks)
        if nodes > 1:
            gpu_bw -= nics_bw  # the fabric port is counted in the send bandwidth; NCCL's is NVLink
        pair_bw = max((bw for r in intra if (bw := _pair_bw(topology, r0, r))), default=gpu_bw)
        min_peer = min((_pair_bw(topology, r0, r) or PCI_BW for r in local), default=gpu_bw)
    per_node_nics = [n for n in topology.nics if all(topology.node_of[r] == 0 for r in n.ranks)]
    nics = len(per_node_nics)
    nic_bw = min((n.bandwidth_GBps for n in per_node_nics), default=0.0)
    ring = _search_ring(gen, g, nodes, gpu_bw, pair_bw, nics, nic_bw)
    tree = _tree_graph(gen, nodes, gpu_bw, ring, nics, nic_bw)
    nvls = None
    if nvswitch and gen in ("hopper", "blackwell") and nvlink_gpu:
        nvls = _search_nvls(gen, g, nodes, gpu_bw, nics, nic_bw)
    return NcclMachine(topology.name, gen, topology.num_ranks, nodes, g, gpu_bw, pair_bw,
                       min_peer, nvlink_gpu or bool(intra), nvswitch, nics, nic_bw, ring, tree, nvls,
                       tuple(notes))


def _pair_bw(topology: Topology, a: int, b: int) -> float:
    ch = topology.channel(a, b)
    if ch is None:
        return 0.0
    return min(1000.0 * lanes / beta for _, beta, lanes in ch.resources)


def _ring_channels(s: float, g: int, nodes: int, gpu_bw: float, nics: int, nic_bw: float) -> int:
    """Channels of speed ``s`` that fit: NVLink per GPU, and NICs across nodes."""
    per_gpu = s if nodes == 1 else s * (g - 1) / g
    # one GPU per node (a --group of one rank per node): its ring runs NIC to NIC and loads no
    # NVLink, so only the NICs limit the channels (0 here fell back to one 0.1 GB/s channel)
    n = math.floor(gpu_bw / per_gpu + 1e-9) if per_gpu > 0 else RING_MAX_CHANNELS
    if nodes > 1:
        n = min(n, nics * math.floor(nic_bw / s + 1e-9))
    return min(n, RING_MAX_CHANNELS)


def _search_ring(gen: str, g: int, nodes: int, gpu_bw: float, pair_bw: float, nics: int,
                 nic_bw: float) -> Graph:
    """search.cc's ring search in closed form (see the module docstring), then DupChannels."""
    speeds = _speeds(SPEED_INTRA if nodes == 1 else SPEED_INTER, gen)
    max_bw = pair_bw if nodes == 1 else min(nic_bw, pair_bw)
    i = 0
    while i < len(speeds) - 1 and (speeds[i] > max_bw or speeds[i] > gpu_bw):
        i += 1
    best = Graph(0, 0.0, 0.0)
    while True:
        s = speeds[i]
        n = _ring_channels(s, g, nodes, gpu_bw, nics, nic_bw)
        if n and n * s > best.channels * best.bw_intra:
            best = Graph(n, s, s)
        if best.channels and best.channels * best.bw_intra >= gpu_bw - 1e-9:
            break
        if i >= len(speeds) - 1 or (best.channels and speeds[i + 1] / best.bw_inter <= 0.49):
            break
        i += 1
    if not best.channels:
        return Graph(1, 0.1, 0.1)  # search.cc's fallback: one slow channel
    best = _dup_channels(best, gen)
    # pass 2: a ring tries a higher speed with the same channel count
    j = next((k for k, s in enumerate(speeds) if s <= best.bw_inter), len(speeds) - 1)
    while j > 0:
        s = speeds[j - 1]
        if _ring_channels(s, g, nodes, gpu_bw, nics, nic_bw) < best.channels:
            break
        best, j = Graph(best.channels, s, s), j - 1
    return best


def _dup_channels(graph: Graph, gen: str) -> Graph:
    """ncclTopoDupChannels: twice the channels at half the speed, where the rules allow."""
    if graph.bw_intra < 25.0:
        return graph
    if gen in ("hopper", "blackwell") and graph.bw_intra < 50.0 and graph.channels > 4:
        return graph
    dup = min(graph.channels * 2, RING_MAX_CHANNELS)
    div = math.ceil(dup / graph.channels)
    return Graph(dup, graph.bw_intra / div, graph.bw_inter / div)


def _tree_graph(gen: str, nodes: int, gpu_bw: float, ring: Graph, nics: int, nic_bw: float
                ) -> Graph:
    """The tree graph: the ring's channels; on two nodes pass 2 raises bwIntra (up to 2× bwInter)."""
    if nodes != 2:
        return ring
    speeds = _speeds(SPEED_INTER, gen)
    bw = ring.bw_intra
    for s in sorted(s for s in speeds if bw < s < 2 * ring.bw_inter + 1e-9):
        if ring.channels * s > gpu_bw + 1e-9:
            break
        bw = s
    return Graph(ring.channels, bw, ring.bw_inter)


def _search_nvls(gen: str, g: int, nodes: int, gpu_bw: float, nics: int, nic_bw: float
                 ) -> Graph | None:
    """The NVLS search: ``g`` heads at most; a GPU carries (channels + 1) × speed through NVSwitch."""
    max_ch = min(NVLS_MAX_ARITY, g)
    speeds = _speeds(SPEED_INTRA if nodes == 1 else SPEED_INTER, gen)
    total = gpu_bw * g / (g - 1)  # search.cc: non-ring patterns see totalBw × ndevs / (ndevs - 1)
    min_ch = max_ch if nodes == 1 else 1
    i = 0
    while i < len(speeds) - 1 and (speeds[i] > (gpu_bw if nodes == 1 else min(nic_bw, gpu_bw))
                                   or speeds[i] * min_ch > total):
        i += 1
    best: Graph | None = None
    while True:
        s = speeds[i]
        n = min(max_ch, math.floor(gpu_bw / s + 1e-9) - 1)
        if nodes > 1:
            n = min(n, nics * math.floor(nic_bw / s + 1e-9))
        if n >= min_ch and (best is None or n > best.channels
                            or n * s > best.channels * best.bw_inter):
            best = Graph(n, s, s)
        if i >= len(speeds) - 1 or (best and speeds[i + 1] / best.bw_inter <= 0.49):
            break
        i += 1
    if best is None:
        return None
    # pass 2: raise bwInter while it stays under twice bwIntra (NICs permitting)
    k = speeds.index(best.bw_inter)
    inter = best.bw_inter
    while k > 0 and inter < 2 * best.bw_intra:
        s = speeds[k - 1]
        if nodes > 1 and nics * math.floor(nic_bw / s + 1e-9) < best.channels:
            break
        inter, k = s, k - 1
    return Graph(best.channels, best.bw_intra, inter)


# ===================================================================================== the table
@dataclass(frozen=True)
class Entry:
    """One (algorithm, protocol) of NCCL's table for a collective: latency (µs), busBw (GB/s)."""

    algo: str
    proto: str
    latency_us: float
    bandwidth_GBps: float


def _hw(m: NcclMachine) -> str:
    return "nvlink" if m.nvlink else "pci"


def _log2i(n: int) -> int:
    return max(0, n.bit_length() - 1)


def tuning_table(m: NcclMachine, collective: str) -> list[Entry]:
    """``ncclTopoTuneModel`` for one collective: every enabled (algo, proto) with its terms."""
    if collective == "alltoall":
        return []
    n, nodes, ppn, gen = m.ranks, m.nodes, m.ppn, m.generation
    func = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
            "broadcast": "Broadcast", "reduce": "Reduce"}.get(collective)
    if func is None:
        raise NotApplicable(f"NCCL has no {collective} collective (it runs only allreduce, "
                            "allgather, reducescatter, broadcast, reduce, and alltoall as "
                            "point-to-point)")
    nsteps = 2 * (n - 1) if func == "AllReduce" else (n - 1 if func in ("AllGather",
                                                                         "ReduceScatter") else n)
    col = min(nodes, 3) - 1
    ll_max = LL_MAX_BW[gen][0] if nodes == 1 else LL_MAX_BW["volta"][col]
    tree_cap = PER_CH_TREE[gen][col]
    ring_ll128_cap = PER_CH_RING_LL128[gen][col]
    tree_ll128_cap = PER_CH_TREE_LL128[gen][col]
    nvls_tree_cap = PER_CH_NVLS_TREE[gen][col]
    graphs = {"Ring": m.ring, "Tree": m.tree, "PAT": m.ring, "NVLS": m.nvls, "NVLSTree": m.nvls}
    intra_hw = _hw(m)
    pat_ok = nodes == n
    out: list[Entry] = []
    for a in ALGOS:
        if func in ("Broadcast", "Reduce") and a != "Ring":
            continue
        if func in ("AllGather", "ReduceScatter") and a not in ("PAT", "Ring", "NVLS"):
            continue
        if func == "AllReduce" and a == "PAT":
            continue
        graph = graphs[a]
        if graph is None or graph.channels == 0:
            continue
        # enable/disable rules (tuning.cc end, enqueue.cc): NVLS tree needs >1 node; NVLS on more
        # than one node needs CollNet; NVLS allgather/reducescatter across nodes needs CollNet
        if a == "NVLSTree" and nodes == 1:
            continue
        if a == "NVLS" and nodes > 1:
            continue
        for pi, p in enumerate(PROTOS):
            if a in ("NVLS", "NVLSTree") and p != "Simple":
                continue
            if a == "PAT" and (p != "Simple" or not pat_ok):
                continue
            if p == "LL128" and not m.nvlink:
                continue  # LL128 is enabled by default only over NVLink (typeIntra <= NVB)
            bw = graph.bw_intra if nodes <= 2 else graph.bw_inter
            if a in ("NVLS", "NVLSTree"):
                if graph.channels < 2:
                    continue
                intra_bw = graph.bw_intra * NVLS_EFFICIENCY[gen] * (graph.channels - 1) / graph.channels
                intra_bw *= 2.0 if func == "AllReduce" else (ppn - 1) / ppn
                inter_bw = graph.bw_inter * (2 if nodes <= 2 and a == "NVLSTree" else 1)
                bw = min(intra_bw, inter_bw, nvls_tree_cap if a == "NVLSTree" else math.inf)
            bus = graph.channels * bw
            if a == "Ring" and p == "LL":
                bus = min(ll_max, bus * 0.5)
            if a == "Ring" and p == "LL128":
                bus = min(bus * 0.92, graph.channels * ring_ll128_cap)
            if a == "Tree" and func == "AllReduce":
                bus = min(bus * 0.92, graph.channels * tree_cap)
            if a == "Tree" and p == "LL":
                bus = min(bus / 3.8, ll_max)
            if a == "Tree" and p == "LL128":
                bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0),
                          graph.channels * tree_ll128_cap)
            if a == "PAT":
                bus *= 0.75
            if not (a != "Ring" and func in ("AllGather", "ReduceScatter")):
                bus *= (n / nsteps) if a in ("Ring", "NVLS", "NVLSTree") else 0.5
            lat = BASE_LAT[a][pi]
            intra_lat = HW_LAT[intra_hw][a][pi]
            inter_lat = HW_LAT["net"]["Tree" if ppn == 1 else a][pi]  # latencyInter = 0 (IB)
            if a == "Ring":
                hw = intra_hw if nodes == 1 else "net"
                step = HW_LAT[hw][a][pi]
                if func in ("Broadcast", "Reduce"):
                    lat += step  # sameChannels graphs (rail-aligned rings)
                else:
                    overhead = 0.0
                    if nodes > 1:
                        overhead = NET_OVERHEAD_US * (3 if p == "Simple" else 1)
                    il = max(intra_lat, overhead)
                    inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if func == "AllReduce"
                                                        else nodes - 1)
                    lat += (nsteps - inter_steps) * il + inter_steps * inter_lat
            elif a == "Tree":
                if func == "AllReduce":
                    lat += 2 * ((n // nodes - 1) * intra_lat + _log2i(nodes) * inter_lat)
            elif a == "NVLS":
                lat = intra_lat + (inter_lat if nodes > 1 else 0.0)
            elif a == "NVLSTree":
                lat += intra_lat + 2 * _log2i(nodes) * inter_lat
            elif a == "PAT":
                lat += _log2i(nodes) * (inter_lat / 3.5) + n * 2.8
            if bus > 0:
                out.append(Entry(a, p, lat, bus))
    return out


def entry_terms(m: NcclMachine, collective: str, e: Entry, nbytes: float) -> tuple[float, float]:
    """``ncclTopoGetAlgoTime`` for one size (numPipeOps = 1), as (latency µs, bandwidth µs)."""
    bw, lat = e.bandwidth_GBps, e.latency_us
    log_size = _log2i(int(nbytes) >> 6) if nbytes >= 64 else -1
    if e.algo == "Tree" and collective == "allreduce" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[e.proto][log_size]
    if e.algo == "NVLSTree" and collective == "allreduce" and 0 <= log_size < 24 \
            and m.generation == "blackwell":
        bw *= TREE_CORRECTION[e.proto][log_size]
    if (e.algo == "Ring" and e.proto == "Simple" and m.nodes > 1 and collective == "allreduce"
            and nbytes / (m.ring.channels * m.ranks) >= 64):
        lat *= 1.9 if m.generation == "volta" else RING_PLATEAU
    return lat, nbytes / (1000.0 * bw)


# ===================================================================================== prediction
@dataclass(frozen=True)
class Choice:
    """What NCCL runs for one call, and how long it takes."""

    bytes: int
    algo: str
    proto: str
    channels: int
    bandwidth_GBps: float
    """NCCL's modelled bus bandwidth of the choice (algorithm bandwidth for the tuner's bytes)."""
    latency_term_us: float
    bandwidth_term_us: float
    time_us: float
    """Calibrated time of the chosen configuration (NCCL's own model when uncalibrated)."""

    @property
    def model_time_us(self) -> float:
        """NCCL's tuning-model time of the choice (what its tuner compared)."""
        return self.latency_term_us + self.bandwidth_term_us

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "algo": self.algo, "proto": self.proto,
                "channels": self.channels, "latency_us": round(self.latency_term_us, 6),
                "bandwidth_term_us": round(self.bandwidth_term_us, 6),
                "model_bw_GBps": round(self.bandwidth_GBps, 6),
                "time_us": round(self.time_us, 6), "model_time_us": round(self.model_time_us, 6)}


def _alltoall(m: NcclMachine, nbytes: float, cal: NcclCalibration) -> Choice:
    """Alltoall as NCCL runs it (grouped send/recv to every peer), priced as one exchange step."""
    n, g = m.ranks, m.gpus_per_node
    intra_frac = (g - 1) / n
    inter_frac = (n - g) / n
    t_intra = 0.0
    if intra_frac:  # the GPU's NVLink total, and its slowest peer's path, each a limit
        t_intra = max(nbytes * intra_frac / (1000.0 * m.gpu_bw),
                      nbytes / n / (1000.0 * m.min_peer_bw))
    t_inter = 0.0
    if inter_frac:
        per_gpu_nic = m.nics_per_node * m.nic_bw / g if m.nics_per_node else m.nic_bw
        t_inter = nbytes * inter_frac / (1000.0 * per_gpu_nic)
    lat = BASE_LAT["Ring"][2] + HW_LAT["net" if m.nodes > 1 else _hw(m)]["Ring"][2]
    t_bw = max(t_intra, t_inter, nbytes * m.a2a_floor_us_per_byte)
    bw = nbytes / (1000.0 * t_bw) if t_bw > 0 else math.inf
    return Choice(int(nbytes), "P2P", "Simple", m.ring.channels, bw, lat, t_bw,
                  cal.time(lat, t_bw))


def choose(m: NcclMachine, collective: str, nbytes: int,
           calibration: NcclCalibration | None = None, algos: Sequence[str] | None = None) -> Choice:
    """The (algorithm, protocol) NCCL's tuner picks for one call of ``nbytes``, and its time.

    ``algos`` restricts the algorithms as ``NCCL_ALGO`` does (names as in :data:`ALGOS`).
    """
    cal = calibration or NcclCalibration()
    if collective == "alltoall":
        return _alltoall(m, nbytes, cal)
    table = tuning_table(m, collective)
    if algos:
        wanted = {a.lower() for a in algos}
        unknown = wanted - {a.lower() for a in ALGOS}
        if unknown:
            raise SynthError(f"unknown NCCL algorithm(s) {sorted(unknown)} (known: {', '.join(ALGOS)})")
        table = [e for e in table if e.algo.lower() in wanted]
    if not table:
        raise NotApplicable(f"NCCL's tuning model has no algorithm for {collective} on '{m.name}'"
                            + (f" among {list(algos)}" if algos else ""))
    best: tuple[float, Entry, float, float] | None = None
    for e in table:  # enqueue.cc topoGetAlgoInfo: the minimum time, first in table order on ties
        lat, t_bw = entry_terms(m, collective, e, nbytes)
        if best is None or lat + t_bw < best[0]:
            best = (lat + t_bw, e, lat, t_bw)
    assert best is not None
    _, e, lat, t_bw = best
    channels = (m.nvls.channels if e.algo in ("NVLS", "NVLSTree") and m.nvls
                else m.tree.channels if e.algo == "Tree" else m.ring.channels)
    return Choice(int(nbytes), e.algo, e.proto, channels, e.bandwidth_GBps, lat, t_bw,
                  cal.time(lat, t_bw))


def predict(topology: Topology, collective: str, sizes: Sequence[int],
            calibration: Any = None, algos: Sequence[str] | None = None) -> list[Choice]:
    """NCCL's choice and time for every size (nccl-tests' size convention)."""
    m = machine_of(topology)
    if collective == "alltoall":
        m = with_alltoall_floor(m, topology)
    cal = calibration_of(calibration)
    return [choose(m, collective, int(s), cal, algos) for s in sizes]


def with_alltoall_floor(m: NcclMachine, topology: Topology) -> NcclMachine:
    """The machine with synth's alltoall cut bound attached (NCCL's PCIe paths between GPUs no
    NVLink joins are not in synth's topologies, so the point-to-point estimate is clamped to the
    topology's own limit)."""
    from ..bounds import lower_bound
    from ..collectives import make_collective

    bound = lower_bound(topology, make_collective("alltoall", topology.num_ranks))
    return replace(m, a2a_floor_us_per_byte=bound.inv_bandwidth_us_per_byte)


def times_us(topology: Topology, collective: str, sizes: Sequence[int],
             calibration: Any = None) -> np.ndarray:
    """Predicted NCCL time (µs) per size."""
    return np.array([c.time_us for c in predict(topology, collective, sizes, calibration)])


def plan_ranges(topology: Topology, collective: str, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Contiguous size ranges over which NCCL keeps the same (algorithm, protocol)."""
    out: list[dict[str, Any]] = []
    for c in predict(topology, collective, sizes):
        key = (c.algo, c.proto)
        if out and (out[-1]["algo"], out[-1]["proto"]) == key:
            out[-1]["max_bytes"] = c.bytes
        else:
            out.append({"algo": c.algo, "proto": c.proto, "channels": c.channels,
                        "min_bytes": c.bytes, "max_bytes": c.bytes})
    return out


class NcclTimes:
    """NCCL's own tuning model as a :class:`synth.timing.TimeModel`: prices a collective kind
    (``allreduce``, ...) as NCCL runs it on the topology; the calibration's ``nccl_model`` section
    applies. Raises :class:`synth.errors.NotApplicable` where NCCL does not run."""

    name = "nccl"

    def __init__(self, topology: Topology, calibration: Any = None) -> None:
        self.topology = topology
        self.calibration = calibration_of(calibration)
        self.source = SOURCE

    def choices(self, subject: str, sizes: Sequence[int]) -> list[Choice]:
        """What NCCL runs at each size (algorithm, protocol, channels) and its time."""
        return predict(self.topology, subject, sizes, self.calibration)

    def times_us(self, subject: str, sizes: Sequence[int]) -> list[float]:
        return [c.time_us for c in self.choices(subject, sizes)]
