"""Read an NCCL system topology XML (``NCCL_TOPO_DUMP_FILE`` / ``NCCL_TOPO_FILE``) into a machine.

The format is NCCL's (``src/graph/xml.cc``, ``ncclTopoDumpXmlToFile``): ``<system>`` holds
``<cpu>`` elements (one per NUMA node), each a tree of ``<pci busid class link_speed link_width>``
devices. A GPU is a ``<pci>`` holding ``<gpu dev sm rank>`` with ``<nvlink target count
tclass>`` children (``tclass`` 0x068000 is an NVSwitch, 0x0302xx/0x0300xx another GPU); a NIC is a
``<pci>`` holding ``<nic>`` with ``<net name speed>`` children (``speed`` in Mbit/s). Cloud
"hint" files (Azure's ``azhpc-images/topology/*.xml``) give only the PCI tree: GPU and NIC slots
without ``<gpu>``/``<nic>``, so the NVLink fabric and NIC speeds must be assumed by the user.

The result is a :class:`~synth.topo_import.Machine`: plain topology data plus what was read,
inferred and assumed. Nothing here writes files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import networkx as nx
from lxml import etree

from ..errors import SynthError
from ..topology import rank_ranges
from . import hardware
from .machine import Machine, class_name

_PARSER = etree.XMLParser(remove_comments=True, resolve_entities=False, no_network=True,
                          huge_tree=False)

_KNOWN_TAGS = {"system", "cpu", "pci", "gpu", "nvlink", "nic", "net", "c2c", "pcilink"}
"""Elements NCCL writes (2.18-2.27). ``c2c`` (Grace) and ``pcilink`` (PCI P2P links) are read
and ignored, with a note."""

GPU_CLASSES = ("0x0302", "0x0300")
NIC_CLASSES = ("0x0200", "0x0207")
BRIDGE_CLASS = "0x0604"
NVSWITCH_TCLASS = "0x068000"


@dataclass
class _Gpu:
    el: etree._Element          # the <pci> element of the GPU
    busid: str
    chain: tuple[int, ...]      # ids of ancestor elements, root first (cpu, bridges), self last
    rank: int | None = None
    dev: int | None = None
    sm: int | None = None
    device: int | None = None
    hint: bool = False          # a bare PCI slot (no <gpu> child)
    nvlinks: list[tuple[str, int, str, int]] = field(default_factory=list)


@dataclass
class _Net:
    name: str
    speed_mbps: int | None
    chain: tuple[int, ...]
    line: int


def _fail(source: str, el: etree._Element, msg: str) -> SynthError:
    return SynthError(f"{source}:{el.sourceline}: <{el.tag}>: {msg}")


def _int(source: str, el: etree._Element, key: str, base: int = 10) -> int | None:
    value = el.get(key)
    if value is None:
        return None
    try:
        return int(value, base)
    except ValueError:
        raise _fail(source, el, f"attribute {key}=\"{value}\" is not a number") from None


def parse_nccl_xml(text: str, source: str, assume_nvlink: str | None = None,
                   assume_nic_gbps: float | None = None) -> Machine:
    """Build a :class:`Machine` from the text of an NCCL topology XML.

    ``assume_nvlink`` (``--gpu``: a GPU generation ``a100``, ``h100``, ``h200``, ``b200``; or
    ``none``) is
    needed for hint files whose GPUs have no ``<gpu>`` element; ``assume_nic_gbps`` for NICs that
    state no speed. Refuses what it cannot read with the file, line and element.
    """
    try:
        root = etree.fromstring(text.encode("utf-8"), _PARSER)
    except etree.XMLSyntaxError as exc:
        raise SynthError(f"{source}:{exc.lineno}: not well-formed XML: {exc.msg}") from None
    if root.tag != "system":
        raise _fail(source, root, "the root element of an NCCL topology file must be <system>")
    m = Machine(source=source, fmt="nccl-xml")
    ids: dict[etree._Element, int] = {}
    gpus: list[_Gpu] = []
    nets: list[_Net] = []
    cpus: dict[int, etree._Element] = {}
    ignored: set[str] = set()
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        if el.tag not in _KNOWN_TAGS:
            raise _fail(source, el, f"unknown element (NCCL topology files hold "
                                    f"{', '.join(sorted(_KNOWN_TAGS))})")
        ids[el] = len(ids)
        if el.tag in ("c2c", "pcilink"):
            ignored.add(el.tag)
        elif el.tag == "cpu":
            cpus[ids[el]] = el
        elif el.tag == "pci":
            cls = (el.get("class") or "").lower()
            children = {c.tag for c in el if isinstance(c.tag, str)}
            chain = _chain(el, ids)
            if "gpu" in children:
                gpus.append(_read_gpu(source, el, chain))
            elif cls.startswith(GPU_CLASSES) and not (children - {"pci"}):
                gpus.append(_Gpu(el, el.get("busid", "?"), chain, hint=True,
                                 device=_int(source, el, "device", 16)))
            elif "nic" not in children and cls.startswith(NIC_CLASSES):
                nets.append(_Net(f"nic{len(nets)}", None, chain, el.sourceline or 0))
        elif el.tag == "net":
            speed = _int(source, el, "speed")
            pci = el.getparent().getparent()
            chain = _chain(pci, ids) if pci is not None and pci.tag == "pci" else _chain(el, ids)
            nets.append(_Net(el.get("name") or f"net{len(nets)}", speed, chain,
                             el.sourceline or 0))
        elif el.tag == "gpu" and (el.getparent() is None or el.getparent().tag != "pci"):
            raise _fail(source, el, "a <gpu> must sit inside the <pci> element of its device")
    if not gpus:
        raise SynthError(f"{source}: the dump has no GPUs (no <gpu> element and no PCI device of "
                         "class 0x0302/0x0300); nothing to model")
    m.read.append(f"{len(cpus)} CPU/NUMA node(s), {len(gpus)} GPU(s), {len(nets)} NIC port(s)")
    if ignored:
        m.read.append(f"ignored elements: {', '.join(sorted(ignored))} (not modelled)")
    _order_ranks(gpus, m)
    hints = [g for g in gpus if g.hint]
    if hints and len(hints) != len(gpus):
        raise _fail(source, hints[0].el, "a GPU slot without <gpu> beside GPUs with one; the file "
                                         "mixes a dump and a hint")
    if hints:
        _hint_gpus(source, gpus, assume_nvlink, m)
    gen = _generation(source, gpus, m) if not hints else hardware.GENERATIONS.get(
        _ASSUME.get(assume_nvlink or "", 0))
    busids = {g.busid.lower(): g for g in gpus}
    has_nvlink = _nvlinks(source, gpus, busids, gen, m)
    if hints and gen is not None:
        _assumed_nvswitch(gpus, gen, m)
        has_nvlink = True
    if not has_nvlink and len(gpus) > 1:
        _pcie_tree(gpus, cpus, ids, m)
    _nics(source, gpus, nets, assume_nic_gbps, m)
    if gen is not None:
        model = next((hardware.PCI_DEVICES[g.device][0] for g in gpus
                      if g.device in hardware.PCI_DEVICES), gen.name.split("/")[0])
        m.meta["gpu"] = model
        m.meta["nvlinks_per_gpu"] = gen.nvlinks
        m.inferred.append(f"meta.gpu = {model} (NCCL's model is compared against it)")
    return m


_ASSUME = {"none": 0, "v100": 70, "a100": 80, "h100": 90, "h200": 90, "b200": 100}
"""``--assume-nvlink`` values -> sm (0: no NVLink, PCIe only)."""

ASSUME_CHOICES = tuple(_ASSUME)


def _chain(el: etree._Element, ids: dict[etree._Element, int]) -> tuple[int, ...]:
    chain = [ids[a] for a in el.iterancestors() if a in ids and a.tag in ("cpu", "pci")]
    return (*reversed(chain), ids[el])


def _read_gpu(source: str, pci: etree._Element, chain: tuple[int, ...]) -> _Gpu:
    gpu_el = next(c for c in pci if c.tag == "gpu")
    vendor = _int(source, pci, "vendor", 16)
    if vendor is not None and vendor != hardware.NVIDIA_VENDOR:
        raise _fail(source, pci, f"GPU vendor 0x{vendor:04x} is not NVIDIA; --format nccl-xml "
                                 "reads NVIDIA dumps (AMD machines: --format rocm-smi)")
    g = _Gpu(pci, pci.get("busid", "?"), chain, rank=_int(source, gpu_el, "rank"),
             dev=_int(source, gpu_el, "dev"), sm=_int(source, gpu_el, "sm"),
             device=_int(source, pci, "device", 16))
    for link in gpu_el:
        if not isinstance(link.tag, str):
            continue
        if link.tag != "nvlink":
            raise _fail(source, link, "a <gpu> holds only <nvlink> elements")
        count = _int(source, link, "count")
        target = link.get("target")
        if count is None or count < 1 or not target:
            raise _fail(source, link, "an <nvlink> needs a target and a count of at least 1")
        g.nvlinks.append((target.lower(), count, (link.get("tclass") or "").lower(),
                          link.sourceline or 0))
    return g


def _order_ranks(gpus: list[_Gpu], m: Machine) -> None:
    """Number the GPUs: by NCCL ``rank`` when every GPU has a distinct one, else by file order."""
    ranks = [g.rank for g in gpus]
    if all(r is not None for r in ranks) and len(set(ranks)) == len(ranks):
        gpus.sort(key=lambda g: g.rank)
        how = "the dump's rank attributes"
    else:
        how = "their order in the file"
    for i, g in enumerate(gpus):
        g.rank = i
    m.inferred.append(f"synth ranks 0..{len(gpus) - 1} follow {how}")
    m.ranks = len(gpus)


def _generation(source: str, gpus: list[_Gpu], m: Machine) -> hardware.GpuGeneration:
    gens = set()
    for g in gpus:
        gen, why = hardware.generation(g.sm, g.device, f"{source}:{g.el.sourceline}: <pci "
                                                       f"busid=\"{g.busid}\">")
        gens.add((gen, why))
    if len({gen for gen, _ in gens}) > 1:
        raise SynthError(f"{source}: GPUs of different generations in one machine "
                         f"({', '.join(sorted(g.name for g, _ in gens))}) are not modelled")
    gen, why = sorted(gens, key=lambda x: x[1])[0]
    m.inferred.append(f"GPU generation {gen.name} from {why}: {gen.nvlinks} NVLinks of "
                      f"{gen.nvlink_GBps:g} GB/s per direction ({gen.source})")
    return gen


def _hint_gpus(source: str, gpus: list[_Gpu], assume: str | None, m: Machine) -> None:
    lacks = "no <gpu> elements: no GPU model, no NVLink fabric"
    if assume is None:
        raise SynthError(f"{source}: a hint file ({len(gpus)} GPU PCI slots, {lacks}); pass "
                         f"--gpu MODEL ({'|'.join(c for c in ASSUME_CHOICES if c != 'none')}) to "
                         "import it with that GPU's NVSwitch board, or --gpu none for PCIe only")
    m.read.append(f"hint file: {lacks}")
    if assume not in _ASSUME:
        raise SynthError(f"--gpu {assume} is not an NVIDIA GPU ({'|'.join(ASSUME_CHOICES)})")
    m.assumed.append(f"--gpu {assume}: " + (
        "no NVLink; GPUs talk over the PCIe tree" if assume == "none"
        else f"every GPU on one {assume.upper()} NVSwitch board"))


def _nvlinks(source: str, gpus: list[_Gpu], busids: dict[str, _Gpu],
             gen: hardware.GpuGeneration | None, m: Machine) -> bool:
    """Direct NVLinks become links; NVLinks into NVSwitches become one switch per fabric."""
    direct: dict[tuple[int, int], int] = {}
    fabric = nx.Graph()
    dropped: list[str] = []
    for g in gpus:
        for target, count, tclass, line in g.nvlinks:
            if tclass == NVSWITCH_TCLASS:
                fabric.add_edge(("gpu", g.rank), ("nvs", target), count=count)
            elif tclass.startswith(GPU_CLASSES):
                peer = busids.get(target)
                if peer is None:
                    dropped.append(target)
                    continue
                direct[(g.rank, peer.rank)] = direct.get((g.rank, peer.rank), 0) + count
            else:
                raise SynthError(f"{source}:{line}: <nvlink target=\"{target}\" "
                                 f"tclass=\"{tclass}\">: NVLink to a device of class {tclass} "
                                 "(a CPU?) is not modelled")
    if dropped:
        m.read.append(f"NVLinks to {len(set(dropped))} GPU(s) not in the dump dropped "
                      f"({', '.join(sorted(set(dropped)))}): a partial dump")
    if not direct and fabric.number_of_edges() == 0:
        return False
    assert gen is not None
    lane = class_name(f"{gen.nvlink_class}")
    if direct:
        m.link_class(lane, hardware.NVLINK_ALPHA_US, gen.nvlink_GBps,
                     f"one {gen.name} NVLink, {gen.nvlink_GBps:g} GB/s per direction (nominal); "
                     "alpha assumed as the shipped DGX files")
    for (a, b), count in sorted(direct.items()):
        m.links.append({"src": a, "dst": b, "class": lane, **({"count": count} if count > 1 else {})})
        if (b, a) not in direct:
            m.links.append({"src": b, "dst": a, "class": lane,
                            **({"count": count} if count > 1 else {})})
            m.assumed.append(f"NVLink {a}->{b} listed one way only; the reverse direction added")
    if direct:
        m.inferred.append(f"{sum(direct.values())} direct GPU-GPU NVLink(s) between "
                          f"{len({tuple(sorted(k)) for k in direct})} pair(s)")
    comps = sorted((sorted(c, key=str) for c in nx.connected_components(fabric)), key=str)
    for i, comp in enumerate(comps):
        members = sorted(r for kind, r in comp if kind == "gpu")
        switches = sorted(t for kind, t in comp if kind == "nvs")
        lanes = {r: sum(d["count"] for _, _, d in fabric.edges(("gpu", r), data=True))
                 for r in members}
        name = "nvswitch" if len(comps) == 1 else f"nvswitch{i}"
        if len(members) < 2:
            m.read.append(f"only GPU {members[0]} of its NVSwitch fabric is in the dump")
            continue
        sw_class = class_name(f"nvswitch_{gen.nvlink_class}")
        m.link_class(sw_class, hardware.NVLINK_ALPHA_US, gen.nvlink_GBps,
                     f"one {gen.name} NVLink lane into NVSwitch, {gen.nvlink_GBps:g} GB/s per "
                     "direction; a GPU's port has one lane per NVLink; alpha assumed")
        m.switches.append({"name": name, "class": sw_class,
                           "ports": [{"name": f"gpu{r}", "ranks": [r], "lanes": lanes[r]}
                                     for r in members]})
        m.inferred.append(
            f"NVSwitch fabric '{name}' ({len(switches)} switch device(s) "
            f"{', '.join(switches[:6])}) joins GPUs {rank_ranges(members)}; lanes per GPU "
            f"{rank_ranges(sorted(set(lanes.values())))} x {gen.nvlink_GBps:g} GB/s = "
            f"{max(lanes.values()) * gen.nvlink_GBps:g} GB/s per direction per GPU "
            "(the fabric is modelled non-blocking: one switch, a port per GPU)")
    return True


def _assumed_nvswitch(gpus: list[_Gpu], gen: hardware.GpuGeneration, m: Machine) -> None:
    sw_class = class_name(f"nvswitch_{gen.nvlink_class}")
    m.link_class(sw_class, hardware.NVLINK_ALPHA_US, gen.nvlink_GBps,
                 f"one {gen.name} NVLink lane into NVSwitch (ASSUMED by --gpu), "
                 f"{gen.nvlink_GBps:g} GB/s per direction")
    m.switches.append({"name": "nvswitch", "class": sw_class, "ports": "per_rank",
                       "lanes": gen.nvlinks})
    m.assumed.append(f"NVSwitch board: {gen.nvlinks} NVLinks x {gen.nvlink_GBps:g} GB/s per GPU "
                     f"({gen.source})")


def _pcie_tree(gpus: list[_Gpu], cpus: dict[int, etree._Element], ids: dict[etree._Element, int],
               m: Machine) -> None:
    """GPUs without NVLink talk through PCIe: each bridge or CPU root complex above two or more
    GPU subtrees is a switch whose ports are those subtrees (their uplink's bandwidth); GPUs under
    different CPUs meet in a ``sockets`` switch at the CPU interconnect's bandwidth."""
    by_id = {v: k for k, v in ids.items()}
    below: dict[int, list[int]] = {}
    for g in gpus:
        for anc in g.chain[:-1]:
            below.setdefault(anc, []).append(g.rank)
    for node_id in sorted(below):
        node = by_id[node_id]
        if node.tag == "cpu" or len(below[node_id]) < 2:
            continue
        _pcie_switch(node, node_id, gpus, by_id, m)
    for cpu_id in sorted(set(below) & set(cpus)):
        _pcie_switch(cpus[cpu_id], cpu_id, gpus, by_id, m)
    sockets = [cpu_id for cpu_id in sorted(cpus) if below.get(cpu_id)]
    if len(sockets) > 1:
        vendor = cpus[sockets[0]].get("vendor", "")
        gbps = hardware.SOCKET_GBps.get(vendor, min(hardware.SOCKET_GBps.values()))
        m.link_class("sockets", hardware.PCIE_ALPHA_US, gbps,
                     f"CPU-to-CPU interconnect ({vendor or 'unknown vendor'}), ASSUMED from NCCL "
                     "src/graph/topo.h")
        m.switches.append({"name": "sockets", "class": "sockets",
                           "ports": [{"name": f"cpu{i}", "ranks": sorted(below[c])}
                                     for i, c in enumerate(sockets)]})
        m.assumed.append(f"cross-socket GPU traffic at {gbps:g} GB/s per direction (NCCL's figure "
                         f"for {vendor or 'an unknown CPU'})")
    m.inferred.append("no NVLink: GPUs communicate over the PCIe tree (a switch per bridge or root "
                      "complex above two or more GPUs)")


def _pcie_switch(node: etree._Element, node_id: int, gpus: list[_Gpu],
                 by_id: dict[int, etree._Element], m: Machine) -> None:
    """One switch at ``node``: a port per child subtree holding GPUs, lanes = its link width."""
    groups: dict[int, list[int]] = {}
    for g in gpus:
        if node_id in g.chain[:-1]:
            child = g.chain[g.chain.index(node_id) + 1]
            groups.setdefault(child, []).append(g.rank)
    if len(groups) < 2:
        return
    ports = []
    rates = []
    for child_id, ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
        child = by_id[child_id]
        gbps, why = hardware.pcie_GBps(child.get("link_speed"), child.get("link_width"))
        width = int(child.get("link_width") or 0)
        if gbps is None:
            width = 16
            m.assumed.append(f"line {child.sourceline}: PCIe link of {child.get('busid')} "
                             f"unknown ({why}); assumed x16")
        rate = float((child.get("link_speed") or "16").split()[0] or 16)
        rates.append(rate if rate in hardware.PCIE_LANE_GBps else 16.0)
        ports.append({"name": _safe(child.get("busid") or f"p{child_id}"), "ranks": ranks,
                      "lanes": max(1, width)})
    rate = min(rates)
    cls = class_name(f"pcie_{rate:g}gt")
    m.link_class(cls, hardware.PCIE_ALPHA_US, hardware.PCIE_LANE_GBps[rate],
                 f"one PCIe lane at {rate:g} GT/s, {hardware.PCIE_LANE_GBps[rate]:g} GB/s per "
                 "direction (PCI-SIG encoding); a port has one lane per link lane; alpha assumed "
                 "(NCCL hwLat)")
    label = "cpu" if node.tag == "cpu" else "pcie"
    name = _safe(f"{label}_{node.get('numaid') if node.tag == 'cpu' else node.get('busid')}")
    m.switches.append({"name": name, "class": cls, "ports": ports})
    m.inferred.append(f"PCIe {'root complex' if node.tag == 'cpu' else 'switch'} {name} (line "
                      f"{node.sourceline}) joins GPU groups "
                      f"{'; '.join(rank_ranges(p['ranks']) for p in ports)}")


def _nics(source: str, gpus: list[_Gpu], nets: list[_Net], assume_gbps: float | None,
          m: Machine) -> None:
    """Each GPU uses the nearest NIC in the PCI tree, NICs shared as evenly as distance allows."""
    if not nets:
        m.read.append("no NICs: the machine cannot be joined across nodes (--nodes)")
        return
    speeds = []
    for net in nets:
        if not net.speed_mbps:
            if assume_gbps is None:
                raise SynthError(f"{source}:{net.line}: NIC '{net.name}' states no speed (a hint "
                                 "file); pass --assume-nic-gbps N (e.g. 400)")
            speeds.append(assume_gbps)
        else:
            speeds.append(net.speed_mbps / 1000.0)
    if any(not n.speed_mbps for n in nets):
        m.assumed.append(f"NIC speed {assume_gbps:g} Gbit/s (--assume-nic-gbps) for NICs that "
                         "state none")
    users: dict[int, list[int]] = {i: [] for i in range(len(nets))}
    for g in gpus:
        dist = [_distance(g.chain, net.chain) for net in nets]
        best = min(dist)
        near = [i for i, d in enumerate(dist) if d == best]
        pick = min(near, key=lambda i: (len(users[i]), i))
        users[pick].append(g.rank)
    shared = False
    for i, net in enumerate(nets):
        if not users[i]:
            m.read.append(f"NIC {net.name} (line {net.line}) is nearest no GPU: not modelled "
                          "(storage or management?)")
            continue
        gbps = speeds[i]
        cls = class_name(f"net_{gbps:g}g")
        m.link_class(cls, hardware.NET_ALPHA_US, gbps / 8.0,
                     f"{gbps:g} Gbit/s NIC = {gbps / 8:g} GB/s per direction (the dump's speed); "
                     "alpha assumed (TACCL's measured InfiniBand figure)")
        m.nics.append({"name": _safe(net.name), "ranks": sorted(users[i]), "class": cls})
        shared |= len(users[i]) > 1
    m.inferred.append("NICs: " + ", ".join(f"{n['name']}->GPU {rank_ranges(n['ranks'])}"
                                           for n in m.nics) + " (nearest in the PCI tree)")
    if shared:
        m.inferred.append("some NICs are shared by several GPUs (a shared budget)")


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    return len(a) + len(b) - 2 * common + (1000 if common == 0 else 0)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", name)
