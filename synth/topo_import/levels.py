"""PCIe distance matrices (``nvidia-smi topo -m``, ``rocm-smi --showtopo``) as nested switches.

Vendor tools report, per GPU pair, how far apart they sit in the PCIe tree (NVIDIA: PIX < PXB <
PHB < NODE < SYS, NVML's ``nvmlGpuTopologyLevel_t``), not the tree itself or its link speeds.
The tree is recovered level by level: at each level, the GPUs connected by pairs at that distance
or closer form one group; a group that joins two or more groups of the level below is a switch
whose ports are those groups. Two GPUs then meet in exactly one switch, their lowest common one.
Link speeds are not in these outputs: PCIe ports are ASSUMED x16 Gen4 and the socket link
NCCL's AMD figure, and the import says so.
"""

from __future__ import annotations

import networkx as nx

from . import hardware
from .machine import Machine

ASSUMED_PCIE_GTS = 16.0
ASSUMED_PCIE_WIDTH = 16


def pcie_switches(m: Machine, ranks: list[int], level: dict[tuple[int, int], int],
                  names: dict[int, str], system_level: int) -> None:
    """Add the switches implied by ``level`` (pair -> distance; larger is farther) to ``m``.

    Pairs absent from ``level`` (NVLink-joined, say) are ignored. ``system_level`` is the
    distance at which traffic crosses CPU sockets (modelled at the socket bandwidth).
    """
    if not level:
        return
    prev = [frozenset([r]) for r in ranks]
    made = False
    for lv in sorted(set(level.values())):
        g = nx.Graph()
        g.add_nodes_from(ranks)
        g.add_edges_from(pair for pair, d in level.items() if d <= lv)
        for comp in sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0]):
            children = [sorted(p) for p in prev if p <= frozenset(comp)]
            if len(children) < 2:
                continue
            socket = lv >= system_level
            if socket:
                cls, gbps = "sockets", min(hardware.SOCKET_GBps.values())
                note = ("CPU-to-CPU interconnect, ASSUMED (NCCL src/graph/topo.h AMD_BW; the "
                        "output does not name the CPU)")
                lanes = 1
            else:
                cls = class_name_for_pcie()
                gbps = hardware.PCIE_LANE_GBps[ASSUMED_PCIE_GTS]
                note = (f"one PCIe lane, ASSUMED {ASSUMED_PCIE_GTS:g} GT/s (the output gives no "
                        "link speeds); a port has 16 lanes; alpha assumed (NCCL hwLat)")
                lanes = ASSUMED_PCIE_WIDTH
            m.link_class(cls, hardware.PCIE_ALPHA_US, gbps, note)
            name = f"{'sockets' if socket else 'pcie'}_{names[lv]}_{comp[0]}"
            m.switches.append({"name": name, "class": cls,
                               "ports": [{"name": f"g{c[0]}", "ranks": c, "lanes": lanes}
                                         for c in children]})
            m.inferred.append(f"{names[lv]}: switch {name} joins GPU groups "
                              f"{'; '.join(','.join(map(str, c)) for c in children)}")
            made = True
        prev = [frozenset(c) for c in nx.connected_components(g)]
    if made:
        m.assumed.append(f"PCIe ports x{ASSUMED_PCIE_WIDTH} at {ASSUMED_PCIE_GTS:g} GT/s and "
                         f"{min(hardware.SOCKET_GBps.values()):g} GB/s between sockets (the tool "
                         "reports distances, not speeds)")


def class_name_for_pcie() -> str:
    return f"pcie_{ASSUMED_PCIE_GTS:g}gt"
