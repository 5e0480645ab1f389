"""Read ``nvidia-smi topo -m`` (the GPU/NIC connectivity matrix) into a machine.

The matrix gives, per pair, ``NV#`` (a bonded set of # NVLinks) or a PCIe distance (PIX, PXB,
PHB, NODE, SYS; the legend nvidia-smi prints). It names neither the GPU model nor link speeds nor
NIC speeds, so ``--gpu`` (for NVLink bandwidth) and ``--assume-nic-gbps`` (when NICs are listed)
are required where they matter. All pairs at ``NV<n>`` with n the GPU's full NVLink count means
the links go to NVSwitches (a GPU cannot have n direct links to each of its peers).
"""

from __future__ import annotations

import re

from ..errors import SynthError
from . import hardware
from .levels import pcie_switches
from .machine import Machine

PCIE_LEVELS = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
"""nvidia-smi's legend, nearest first (NVML ``nvmlGpuTopologyLevel_t``: SINGLE 10, MULTIPLE 20,
HOSTBRIDGE 30, NODE 40, SYSTEM 50; ``SOC`` is older drivers' name for SYS)."""

_DEVICE = re.compile(r"(GPU|NIC)[0-9]+$|mlx[0-9]+_[0-9]+$")


def parse_nvidia_smi(text: str, source: str, gpu: str | None,
                     assume_nic_gbps: float | None) -> Machine:
    lines = text.splitlines()
    header_at = next((i for i, ln in enumerate(lines) if re.match(r"\s+GPU0\b", ln)), None)
    if header_at is None:
        raise SynthError(f"{source}: no `nvidia-smi topo -m` header (a line starting with GPU0)")
    header = lines[header_at].split()
    devices = []
    for tok in header:
        if not _DEVICE.fullmatch(tok):
            break
        devices.append(tok)
    gpus = [d for d in devices if d.startswith("GPU")]
    if not gpus:
        raise SynthError(f"{source}:{header_at + 1}: the matrix lists no GPUs")
    cells: dict[tuple[str, str], str] = {}
    for k, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        tokens = line.split()
        if not tokens or not _DEVICE.fullmatch(tokens[0]):
            if tokens and tokens[0].startswith("Legend"):
                break
            continue
        row = tokens[0]
        vals = tokens[1:1 + len(devices)]
        if len(vals) < len(devices):
            raise SynthError(f"{source}:{k}: row {row} has {len(vals)} cells for "
                             f"{len(devices)} devices")
        for col, v in zip(devices, vals, strict=True):
            if v != "X" and not re.fullmatch(r"NV[0-9]+", v) and v not in PCIE_LEVELS:
                raise SynthError(f"{source}:{k}: row {row}, column {col}: unknown cell '{v}' "
                                 f"(expected X, NV#, {', '.join(PCIE_LEVELS)})")
            cells[(row, col)] = v
    m = Machine(source=source, fmt="nvidia-smi", ranks=len(gpus))
    nics = [d for d in devices if not d.startswith("GPU")]
    m.read.append(f"{len(gpus)} GPU(s), {len(nics)} NIC(s) from `nvidia-smi topo -m`")
    rank = {g: i for i, g in enumerate(gpus)}
    nv: dict[tuple[int, int], int] = {}
    level: dict[tuple[int, int], int] = {}
    for a in gpus:
        for b in gpus:
            if a == b or (a, b) not in cells:
                continue
            v = cells[(a, b)]
            if v.startswith("NV"):
                nv[(rank[a], rank[b])] = int(v[2:])
            elif rank[a] < rank[b]:
                level[(rank[a], rank[b])] = PCIE_LEVELS[v]
    if nv:
        gen = _generation(gpu, source)
        full = all(nv.get((i, j)) == gen.nvlinks for i in range(len(gpus))
                   for j in range(len(gpus)) if i != j)
        if full and len(gpus) > 2:
            cls = f"nvswitch_{gen.nvlink_class}"
            m.link_class(cls, hardware.NVLINK_ALPHA_US, gen.nvlink_GBps,
                         f"one {gen.name} NVLink lane into NVSwitch, {gen.nvlink_GBps:g} GB/s per "
                         "direction (--gpu); alpha assumed")
            m.switches.append({"name": "nvswitch", "class": cls, "ports": "per_rank",
                               "lanes": gen.nvlinks})
            m.inferred.append(f"every pair NV{gen.nvlinks} = all {gen.nvlinks} NVLinks of a "
                              f"{gen.name}: NVSwitch, one port per GPU")
        else:
            per_gpu = {i: sum(c for (a, _), c in nv.items() if a == i) for i in range(len(gpus))}
            if max(per_gpu.values()) > gen.nvlinks:
                raise SynthError(f"{source}: a GPU lists {max(per_gpu.values())} NVLinks but a "
                                 f"{gen.name} has {gen.nvlinks}; is --gpu right?")
            cls = gen.nvlink_class
            m.link_class(cls, hardware.NVLINK_ALPHA_US, gen.nvlink_GBps,
                         f"one {gen.name} NVLink, {gen.nvlink_GBps:g} GB/s per direction (--gpu); "
                         "alpha assumed")
            for (a, b), count in sorted(nv.items()):
                m.links.append({"src": a, "dst": b, "class": cls,
                                **({"count": count} if count > 1 else {})})
            m.inferred.append(f"{len(nv) // 2} GPU pair(s) joined by direct NVLinks")
        m.assumed.append(f"GPU {gen.name} (--gpu {gpu}): {gen.nvlink_GBps:g} GB/s per NVLink")
        m.meta["gpu"] = gen.name.split("/")[0]
    names = {v: k for k, v in PCIE_LEVELS.items() if k != "SOC"}
    pcie_switches(m, list(range(len(gpus))), level if not nv else {}, names,
                  PCIE_LEVELS["SYS"])
    if nv and level:
        m.read.append("PCIe distances between NVLink-joined GPUs ignored (NVLink carries the "
                      "traffic)")
    _nics(m, gpus, nics, cells, rank, assume_nic_gbps, source)
    return m


def _generation(gpu: str | None, source: str) -> hardware.GpuGeneration:
    sm = {"v100": 70, "a100": 80, "h100": 90, "h200": 90, "b200": 100}.get(gpu or "")
    if sm is None:
        raise SynthError(f"{source}: the matrix shows NVLinks but `nvidia-smi topo -m` does not "
                         "name the GPU; pass --gpu v100|a100|h100|h200|b200")
    return hardware.GENERATIONS[sm]


def _nics(m: Machine, gpus: list[str], nics: list[str], cells: dict[tuple[str, str], str],
          rank: dict[str, int], assume_gbps: float | None, source: str) -> None:
    if not nics:
        m.read.append("no NICs listed: the machine cannot be joined across nodes (--nodes)")
        return
    if assume_gbps is None:
        raise SynthError(f"{source}: `nvidia-smi topo -m` lists {len(nics)} NIC(s) but not their "
                         "speed; pass --assume-nic-gbps N (e.g. 400)")
    users: dict[str, list[int]] = {n: [] for n in nics}
    for g in gpus:
        dist = {n: PCIE_LEVELS.get(cells.get((g, n), "SYS"), 9) for n in nics}
        best = min(dist.values())
        pick = min((n for n in nics if dist[n] == best), key=lambda n: (len(users[n]), nics.index(n)))
        users[pick].append(rank[g])
    cls = f"net_{assume_gbps:g}g"
    m.link_class(cls, hardware.NET_ALPHA_US, assume_gbps / 8,
                 f"{assume_gbps:g} Gbit/s NIC (--assume-nic-gbps); alpha assumed")
    for n in nics:
        if users[n]:
            m.nics.append({"name": n, "ranks": sorted(users[n]), "class": cls})
        else:
            m.read.append(f"{n} is nearest no GPU: not modelled")
    m.assumed.append(f"NIC speed {assume_gbps:g} Gbit/s (--assume-nic-gbps)")
    m.inferred.append("NICs: " + ", ".join(f"{n['name']}->GPU {n['ranks']}" for n in m.nics))
