"""Read ``rocm-smi --showtopo`` (weight, hops and link-type matrices) into a machine.

``Link Type`` says XGMI or PCIE per GPU pair. Hops are not a count of xGMI links (ROCm/rocm-systems
issue 5763: 1 for any xGMI-reachable pair), so direct links are read from the weights: the KFD
io_link weight is 15 per xGMI hop (ROCm/rocm-systems PR 7372, amd-smi docs), so the lightest xGMI
pairs are the directly linked ones. PCIE pairs: hops 2 = through one CPU socket, 3 = across
sockets (AMD's MI200 system-optimization guide). The output names no GPU and no NIC: ``--gpu``
(mi250x, mi300x) gives the xGMI bandwidth, and NICs are not modelled.
"""

from __future__ import annotations

import re

from ..errors import SynthError
from .levels import pcie_switches
from .machine import Machine

XGMI_GBps = {"mi300x": (64.0, "AMD CDNA 3 white paper: x16 Infinity Fabric links, 128 GB/s "
                              "bidirectional per link (as topologies/mi300x.yaml)"),
             "mi250x": (50.0, "AMD Instinct MI250X data sheet: Infinity Fabric links of 100 GB/s "
                              "peak bidirectional each")}
XGMI_ALPHA_US = 0.8
"""RCCL src/graph/tuning.cc: about 0.8 µs per intra-node xGMI hop (LL), as mi300x.yaml."""


def _matrices(text: str, source: str) -> dict[str, tuple[list[str], dict[tuple[str, str], str]]]:
    out: dict[str, tuple[list[str], dict[tuple[str, str], str]]] = {}
    title, cols, cells = None, [], {}
    for k, line in enumerate(text.splitlines(), start=1):
        head = re.fullmatch(r"=+\s*(.*?)\s*=+", line.strip())
        if head:
            if title is not None and cols:
                out[title] = (cols, cells)
            title, cols, cells = head.group(1), [], {}
            continue
        tokens = line.split()
        if not tokens or title is None:
            continue
        if all(re.fullmatch(r"GPU[0-9]+", t) for t in tokens):
            cols = tokens
        elif cols and re.fullmatch(r"GPU[0-9]+", tokens[0]):
            if len(tokens) - 1 != len(cols):
                raise SynthError(f"{source}:{k}: row {tokens[0]} of '{title}' has "
                                 f"{len(tokens) - 1} cells for {len(cols)} GPUs")
            for c, v in zip(cols, tokens[1:], strict=True):
                cells[(tokens[0], c)] = v
    if title is not None and cols:
        out[title] = (cols, cells)
    return out


def parse_rocm_smi(text: str, source: str, gpu: str | None) -> Machine:
    mats = _matrices(text, source)
    kinds = mats.get("Link Type between two GPUs")
    if kinds is None:
        raise SynthError(f"{source}: no 'Link Type between two GPUs' matrix (the output of "
                         "`rocm-smi --showtopo`)")
    gpus, types = kinds
    weights = mats.get("Weight between two GPUs", (gpus, {}))[1]
    hops = mats.get("Hops between two GPUs", (gpus, {}))[1]
    m = Machine(source=source, fmt="rocm-smi", ranks=len(gpus))
    m.read.append(f"{len(gpus)} GPU(s); matrices: {', '.join(sorted(mats))}")
    rank = {g: i for i, g in enumerate(gpus)}
    xgmi: dict[tuple[int, int], int] = {}
    level: dict[tuple[int, int], int] = {}
    for a in gpus:
        for b in gpus:
            if a == b:
                continue
            t = types.get((a, b), "")
            if t == "XGMI":
                w = weights.get((a, b))
                xgmi[(rank[a], rank[b])] = int(w) if w and w.isdigit() else 15
            elif t == "PCIE":
                h = hops.get((a, b))
                if rank[a] < rank[b]:
                    level[(rank[a], rank[b])] = 5 if h == "3" else 3
            else:
                raise SynthError(f"{source}: link type '{t}' between {a} and {b} is not XGMI or "
                                 "PCIE")
    if xgmi:
        if gpu not in XGMI_GBps:
            raise SynthError(f"{source}: the GPUs are joined by xGMI but rocm-smi does not name "
                             f"them; pass --gpu {'|'.join(XGMI_GBps)}")
        gbps, why = XGMI_GBps[gpu]
        m.link_class("xgmi", XGMI_ALPHA_US, gbps, f"one xGMI link, {gbps:g} GB/s per direction "
                     f"({why}); alpha assumed (RCCL's per-hop figure)")
        lightest = min(xgmi.values())
        direct = sorted(p for p, w in xgmi.items() if w == lightest)
        for a, b in direct:
            m.links.append({"src": a, "dst": b, "class": "xgmi"})
        m.inferred.append(f"{len(direct) // 2} direct xGMI pair(s) (weight {lightest}); "
                          f"{(len(xgmi) - len(direct)) // 2} pair(s) reach each other over more "
                          "than one xGMI hop")
        m.assumed.append(f"GPU {gpu} (--gpu): {gbps:g} GB/s per xGMI link")
        m.meta["gpu"] = gpu.upper()
    pcie_switches(m, list(range(len(gpus))), level, {3: "PHB", 5: "SYS"}, 5)
    m.read.append("rocm-smi lists no NICs: the machine cannot be joined across nodes (--nodes)")
    if not xgmi and not level:
        raise SynthError(f"{source}: no GPU pair is connected")
    return m
