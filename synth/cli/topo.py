"""``synth topo``: list the shipped topologies and show what synth believes a machine is."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ..files import dumps_json
from ..topology_io import load_topology, shipped_files, shipped_names
from .console import out


@click.group()
def topo() -> None:
    """Inspect the topologies synth knows."""


@topo.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def topo_list(as_json: bool) -> None:
    """List the shipped topologies.

    Builders need no file: ring:N line:N fully_connected:N switch:N torus:AxB hypercube:D.
    """
    rows = []
    aliases: dict[str, list[str]] = {}
    for name, file in shipped_files().items():
        if Path(file).stem != name:
            aliases.setdefault(Path(file).stem, []).append(name)
    for name in shipped_names():
        t = load_topology(name)
        rows.append({"name": name, "aliases": aliases.get(name, []), "ranks": t.num_ranks,
                     "links": len(t.links), "switches": len(t.switches), "nics": len(t.nics),
                     "description": t.description})
    if as_json:
        click.echo(dumps_json(rows, indent=2))
        return
    table = Table(title="shipped topologies (multi-node: --nodes N)")
    for col in ("name", "aliases", "ranks", "links", "switches", "NICs", "machine"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["name"], ", ".join(r["aliases"]), str(r["ranks"]), str(r["links"]),
                      str(r["switches"]), str(r["nics"]), r["description"].split(":")[0])
    out.print(table)


@topo.command("show")
@click.argument("name")
@click.option("--nodes", default=1, show_default=True, help="Join N copies through their NICs.")
@click.option("--json", "as_json", is_flag=True, help="Print the full topology as JSON.")
def topo_show(name: str, nodes: int, as_json: bool) -> None:
    """What synth believes the machine NAME is: ranks, links, bandwidth per rank, bounds."""
    from ..summary import topology_summary

    t = load_topology(name, nodes)
    summary = topology_summary(t)
    if as_json:
        click.echo(dumps_json({**t.to_dict(), "summary": summary}, indent=2))
        return
    out.print(f"[bold]{t.name}[/bold]: {t.description}")
    out.print(f"ranks {t.num_ranks}, nodes {t.num_nodes}, links {len(t.links)}, "
              f"switches {len(t.switches)}, NICs {len(t.nics)}")
    table = Table(title="link classes")
    for col in ("class", "alpha µs", "GB/s per link/port", "links/ports"):
        table.add_column(col)
    for c in summary["link_classes"]:
        table.add_row(c["class"], f"{c['alpha_us']:g}", f"{c['bandwidth_GBps']:g}", str(c["count"]))
    out.print(table)
    bw = summary["bandwidth_per_rank_GBps"]
    out.print(f"send bandwidth per rank: {bw['min']:g}..{bw['max']:g} GB/s")
    b = summary["bounds"]["allgather"]
    out.print(f"allgather bound: latency >= {b['latency_us']:.3g} µs ({b['steps']} hops), "
              f"algbw <= {b['algbw_limit_GBps']:.4g} GB/s ({b['method']})")
    for src in t.sources:
        out.print(f"[dim]source: {src}[/dim]")
