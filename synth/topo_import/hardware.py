"""Hardware facts the importers need: GPU generations, NVLink lanes, PCIe and socket bandwidths.

Every figure is nominal (a data sheet or a specification), per direction, in GB/s = 10^9 B/s, the
unit of the shipped topologies. NCCL's own figures (``src/graph/topo.h``: ``SM80_NVLINK_BW 20.0``,
``SM90_NVLINK_BW 20.6`` and so on) are *effective* ones, lower than these; a calibration file
(``synth calibrate``) replaces the nominal α/β with measured ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SynthError


@dataclass(frozen=True)
class GpuGeneration:
    """What a GPU generation brings to a topology: its NVLink lanes and their speed."""

    name: str
    sm: int
    nvlinks: int
    """NVLinks per GPU on the SXM board (0: PCIe only)."""
    nvlink_GBps: float
    """One NVLink per direction."""
    nvlink_class: str
    source: str


GENERATIONS: dict[int, GpuGeneration] = {g.sm: g for g in (
    GpuGeneration("V100", 70, 6, 25.0, "nvlink2",
                  "NVIDIA Tesla V100 data sheet: 6 NVLink2, 300 GB/s bidirectional (25 GB/s per "
                  "link per direction)"),
    GpuGeneration("A100", 80, 12, 25.0, "nvlink3",
                  "NVIDIA A100 data sheet: 12 NVLink3, 600 GB/s bidirectional (25 GB/s per link "
                  "per direction)"),
    GpuGeneration("H100/H200", 90, 18, 25.0, "nvlink4",
                  "NVIDIA H100 data sheet / Hopper white paper: 18 NVLink4, 900 GB/s bidirectional "
                  "(25 GB/s per link per direction); H200 the same"),
    GpuGeneration("B200", 100, 18, 50.0, "nvlink5",
                  "NVIDIA Blackwell (B200) data sheet: 18 NVLink5, 1.8 TB/s bidirectional (50 GB/s "
                  "per link per direction)"),
)}
"""Compute capability (``sm`` in an NCCL dump, ``major*10+minor``) -> generation. NCCL's
``src/graph/xml.cc`` writes ``sm`` from ``cudaDeviceProp.major/minor``."""

PCI_DEVICES: dict[int, tuple[str, int]] = {
    # NVIDIA (vendor 0x10de) device ids, from the PCI ID Repository (pci-ids.ucw.cz, vendor 10de)
    0x1DB1: ("V100-SXM2-16GB", 70),
    0x1DB5: ("V100-SXM2-32GB", 70),
    0x1DB4: ("V100-PCIE-16GB", 70),
    0x1DB6: ("V100-PCIE-32GB", 70),
    0x20B0: ("A100-SXM4-40GB", 80),
    0x20B2: ("A100-SXM4-80GB", 80),
    0x20F1: ("A100-PCIE-40GB", 80),
    0x20B5: ("A100-PCIE-80GB", 80),
    0x2330: ("H100-SXM5-80GB", 90),
    0x2331: ("H100-PCIe", 90),
    0x2324: ("H800", 90),
    0x2335: ("H200-SXM-141GB", 90),
    0x2901: ("B200", 100),
}
"""NVIDIA PCI device id -> (model, sm), for dumps without ``sm`` (hint files)."""

NVIDIA_VENDOR = 0x10DE

PCIE_LANE_GBps: dict[float, float] = {
    2.5: 0.25, 5.0: 0.5,          # Gen1/2: 8b/10b encoding
    8.0: 0.985, 16.0: 1.969,      # Gen3/4: 128b/130b
    32.0: 3.938, 64.0: 7.877,     # Gen5 128b/130b; Gen6 (PAM4, FLIT) taken at the same efficiency
}
"""GB/s per lane per direction by transfer rate (GT/s), from the PCI-SIG base specifications'
rates and encodings (e.g. Gen4: 16 GT/s x 128/130 / 8 = 1.969 GB/s per lane)."""

PCIE_ALPHA_US = 1.0
"""NCCL src/graph/tuning.cc ``hwLat``: about 1 µs per PCIe hop (LL protocol); an assumption."""

NVLINK_ALPHA_US = 0.7
"""As the shipped topologies (dgx_a100.yaml, dgx_h100.yaml): between TACCL's measured 0.3 µs and
NCCL's 0.6 µs NVLink hop; an assumption."""

NET_ALPHA_US = 2.6
"""TACCL's measured InfiniBand α (examples/topo/topo-ndv2-1MB.json), as the shipped topologies."""

SOCKET_GBps: dict[str, float] = {"GenuineIntel": 22.0, "AuthenticAMD": 16.0}
"""CPU-to-CPU bandwidth per direction assumed for cross-socket PCIe traffic: NCCL
src/graph/topo.h ``SRP_QPI_BW 22.0`` (Intel Sapphire Rapids) and ``AMD_BW 16.0``."""


def generation(sm: int | None, device: int | None, where: str) -> tuple[GpuGeneration, str]:
    """The generation of a GPU from its ``sm`` or, failing that, its PCI device id."""
    if sm is not None:
        if sm in GENERATIONS:
            return GENERATIONS[sm], f"sm={sm}"
        raise SynthError(f"{where}: GPU compute capability sm={sm} is not one synth knows "
                         f"(known: {', '.join(str(s) for s in sorted(GENERATIONS))})")
    if device is not None and device in PCI_DEVICES:
        model, sm_of = PCI_DEVICES[device]
        return GENERATIONS[sm_of], f"PCI device 0x{device:04x} ({model})"
    if device is None:
        raise SynthError(f"{where}: the GPU has neither an sm attribute nor a PCI device id")
    raise SynthError(f"{where}: unknown NVIDIA PCI device id 0x{device:04x} and no sm attribute "
                     f"(known ids: {', '.join(f'0x{d:04x}' for d in sorted(PCI_DEVICES))})")


def pcie_GBps(speed: str | None, width: str | None) -> tuple[float | None, str]:
    """Bandwidth of a PCIe link from NCCL's ``link_speed`` ('16.0 GT/s PCIe') and ``link_width``.

    None when the dump does not say (a width of 0, as virtual machines report, or no attribute).
    """
    if not speed or not width:
        return None, "no link_speed/link_width"
    try:
        rate = float(speed.split()[0])
        lanes = int(width)
    except (ValueError, IndexError):
        return None, f"unreadable link '{speed}' x{width}"
    if lanes <= 0 or rate not in PCIE_LANE_GBps:
        return None, f"link '{speed}' x{width} unknown"
    return PCIE_LANE_GBps[rate] * lanes, f"{rate:g} GT/s x{lanes}"
