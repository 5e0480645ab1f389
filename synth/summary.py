"""Summaries of a topology for people: link classes, bandwidth per rank, headline bounds."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .bounds import lower_bound
from .collectives import make_collective
from .topology import Topology


def topology_summary(topology: Topology) -> dict[str, Any]:
    """Plain data for ``synth topo show``: what the tool believes the machine is."""
    counts: Counter = Counter()
    for link in topology.links:
        counts[link.kind] += link.count
    for switch in topology.switches:
        counts[switch.kind] += len(switch.ports)
    for nic in topology.nics:
        counts[nic.kind] += 0 if any(s.kind == nic.kind for s in topology.switches) else 1
    classes = [{"class": kind, "alpha_us": a, "bandwidth_GBps": round(bw, 6), "count": counts[kind]}
               for kind, (a, bw) in sorted(topology.link_classes().items())]
    send = [topology.send_bandwidth_GBps(r) for r in topology.ranks]
    bounds: dict[str, Any] = {}
    for kind in ("allgather", "reducescatter", "allreduce", "alltoall"):
        if kind == "alltoall" and topology.num_ranks > 64:
            continue
        b = lower_bound(topology, make_collective(kind, topology.num_ranks))
        slope = b.inv_bandwidth_us_per_byte
        bounds[kind] = {"latency_us": b.latency_us, "steps": b.steps, "method": b.method,
                        "us_per_MB": slope * 1e6,
                        "algbw_limit_GBps": (1e-3 / slope) if slope > 0 else float("inf")}
    return {
        "ranks": topology.num_ranks,
        "nodes": topology.num_nodes,
        "num_links": sum(link.count for link in topology.links),
        "link_classes": classes,
        "bandwidth_per_rank_GBps": {"min": round(min(send), 6), "max": round(max(send), 6)},
        "bounds": bounds,
    }
