"""``synth sketch list|show|check``: the communication sketches on the command line.

Only argument parsing and printing live here; the model, loading and checks are
:mod:`synth.sketches`. A sketch that does not fit its topology is bad input: one line, exit 2.
"""

from __future__ import annotations

from collections import Counter

import click
from rich.table import Table

from ..errors import SynthError
from ..files import dumps_json
from ..sketches import Sketch, base_topology_name, load_sketch, require_fit, shipped_sketches
from ..topology import Topology
from ..topology_io import load_topology
from .console import out


@click.group()
def sketch() -> None:
    """Communication sketches (TACCL): the hints that shrink the MILP's search."""


# ---------------------------------------------------------------------------------------- helpers
def _topology_for(sk: Sketch, topo_spec: str | None, nodes: int | None) -> Topology:
    """--topo as given (1 node unless --nodes), else the sketch's own topology at its first count."""
    if topo_spec is not None:
        return load_topology(topo_spec, 1 if nodes is None else nodes)
    try:
        return load_topology(sk.topology, sk.nodes[0] if nodes is None else nodes)
    except SynthError as exc:
        raise SynthError(f"{exc.message}; sketch '{sk.name}' is written for topology "
                         f"'{sk.topology}', pass --topo NAME|FILE to pick the machine") from None


def _channel_class(topology: Topology, kinds: dict[tuple[int, int], str], u: int, v: int) -> str:
    channel = topology.channel(u, v)
    assert channel is not None
    if channel.via == "link":
        return kinds[(u, v)]
    return next(s.kind for s in topology.switches if s.name == channel.via)


def pair_counts(sk: Sketch, topology: Topology) -> list[dict[str, object]]:
    """Allowed vs physical one-hop pairs, per (scope, connection class), sorted."""
    kinds = {(lk.src, lk.dst): lk.kind for lk in topology.links}
    allowed = sk.allowed_pairs(topology)
    physical: Counter[tuple[str, str]] = Counter()
    granted: Counter[tuple[str, str]] = Counter()
    for u in topology.ranks:
        for v in topology.neighbors(u):
            scope = "intra-node" if topology.node_of[u] == topology.node_of[v] else "inter-node"
            key = (scope, _channel_class(topology, kinds, u, v))
            physical[key] += 1
            granted[key] += (u, v) in allowed
    return [{"scope": scope, "class": klass, "allowed": granted[(scope, klass)],
             "physical": physical[(scope, klass)]}
            for scope, klass in sorted(physical, key=lambda k: (k[0] != "intra-node", k[1]))]


def _policy_text(sk: Sketch) -> str:
    parts = []
    for p in sk.switch_policies:
        bounds = [f"{k} {v}" for k, v in (("min_peers", p.min_peers), ("max_peers", p.max_peers))
                  if v is not None]
        parts.append(f"{p.switch}: {', '.join(bounds)}")
    return "; ".join(parts) or "-"


def _relay_text(sk: Sketch) -> str:
    if sk.internode == "direct":
        return "direct (every inter-node channel)"
    lines = [f"{r.sender} -> {r.receiver}" + (f" carrying {list(r.carries)}" if r.carries else
                                              " carrying any data")
             for r in sk.relays]
    return "relay:\n" + "\n".join(lines)


# ---------------------------------------------------------------------------------------- list
@sketch.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def sketch_list(as_json: bool) -> None:
    """List the shipped sketches."""
    rows = [{"name": s.name, "topology": s.topology, "nodes": list(s.nodes),
             "intranode": s.intranode, "internode": s.internode, "relays": len(s.relays),
             "switch_policies": len(s.switch_policies), "symmetry": [list(x) for x in s.symmetry],
             "chunks_per_rank": s.chunks_per_rank, "description": s.description}
            for s in shipped_sketches().values()]
    if as_json:
        click.echo(dumps_json(rows, indent=2))
        return
    table = Table(title="shipped sketches (synth sketch show NAME)")
    for col in ("name", "nodes", "intra", "inter", "switch policy", "symmetry", "chunks"):
        table.add_column(col, no_wrap=col == "name", overflow="fold")
    for s in shipped_sketches().values():
        table.add_row(s.name, ", ".join(map(str, s.nodes)), s.intranode,
                      s.internode + (f" x{len(s.relays)}" if s.relays else ""),
                      _policy_text(s).replace("max_peers ", "<=").replace("min_peers ", ">="),
                      " ".join(f"[{o},{g}]" for o, g in s.symmetry) or "-", str(s.chunks_per_rank))
    out.print(table)


# ---------------------------------------------------------------------------------------- show
@sketch.command("show")
@click.argument("spec", metavar="NAME|FILE")
@click.option("--topo", "topo_spec", default=None,
              help="Also count the pairs it allows on this topology (name, builder or file).")
@click.option("--nodes", type=int, default=None, help="Join N copies of --topo through their NICs.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the sketch in its file form (loadable again as a .json sketch).")
def sketch_show(spec: str, topo_spec: str | None, nodes: int | None, as_json: bool) -> None:
    """What the sketch NAME (or the file FILE) says, field by field."""
    sk = load_sketch(spec)
    topology = None
    if topo_spec is not None or nodes is not None:
        topology = _topology_for(sk, topo_spec, nodes)
        require_fit(sk, topology)
    if as_json:
        click.echo(dumps_json(sk.to_dict(), indent=2))
        return
    out.print(f"[bold]{sk.name}[/bold]: {sk.description}", soft_wrap=True)
    table = Table(show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("topology", sk.topology)
    table.add_row("nodes", ", ".join(map(str, sk.nodes)))
    table.add_row("chunks per rank", str(sk.chunks_per_rank))
    intra = sk.intranode if sk.intranode == "all" else (
        "links: " + ", ".join(f"{a}->{b}" for a, b in sk.intranode_links))
    table.add_row("intranode", intra)
    table.add_row("switch policies", _policy_text(sk))
    table.add_row("internode", _relay_text(sk))
    table.add_row("symmetry", ", ".join(f"(offset {o}, group {g})" for o, g in sk.symmetry) or "-")
    table.add_row("hints", ", ".join(f"{k}={v}" for k, v in sk.hints.items()) or "-")
    table.add_row("content hash", sk.content_hash[:16])
    out.print(table)
    if topology is not None:
        _print_pairs(sk, topology)


def _print_pairs(sk: Sketch, topology: Topology) -> None:
    table = Table(title=f"one-hop pairs on {topology.name} ({topology.num_ranks} ranks, "
                        f"{topology.num_nodes} node(s))")
    for col in ("scope", "class", "allowed", "physical"):
        table.add_column(col, justify="right" if col in ("allowed", "physical") else "left")
    for row in pair_counts(sk, topology):
        table.add_row(str(row["scope"]), str(row["class"]), str(row["allowed"]),
                      str(row["physical"]))
    out.print(table)


# ---------------------------------------------------------------------------------------- check
@sketch.command("check")
@click.argument("spec", metavar="NAME|FILE")
@click.option("--topo", "topo_spec", default=None,
              help="Topology to check against (default: the sketch's own, at its first node count).")
@click.option("--nodes", type=int, default=None,
              help="Node count (default: the sketch's first with its own topology, else 1).")
def sketch_check(spec: str, topo_spec: str | None, nodes: int | None) -> None:
    """Does the sketch fit the topology? OK with pair counts, or every problem and exit 2."""
    sk = load_sketch(spec)
    topology = _topology_for(sk, topo_spec, nodes)
    require_fit(sk, topology)
    totals: Counter[str] = Counter()
    physical: Counter[str] = Counter()
    for row in pair_counts(sk, topology):
        totals[str(row["scope"])] += int(str(row["allowed"]))
        physical[str(row["scope"])] += int(str(row["physical"]))
    counts = ", ".join(f"{totals[s]} of {physical[s]} {s} pairs" for s in sorted(physical,
                                                                                   reverse=True))
    out.print(f"OK: sketch '{sk.name}' fits {topology.name} ({topology.num_ranks} ranks, "
              f"{topology.num_nodes} node(s)): {counts or 'no pairs'} allowed; "
              f"{len(sk.symmetry)} symmetry rotation(s), {sk.chunks_per_rank} chunk(s) per rank",
              soft_wrap=True)
    base = base_topology_name(topology)
    if base != sk.topology:
        out.print(f"note: the sketch is written for '{sk.topology}', checked on '{base}'")
