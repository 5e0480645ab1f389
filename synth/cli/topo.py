"""``synth topo``: list the shipped topologies and show what synth believes a machine is."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ..builders import multinode
from ..errors import SynthError
from ..files import atomic_write, check_output_file, dumps_json, parse_data
from ..summary import topology_summary
from ..topo_import import import_topology
from ..topology import Topology
from ..topology_io import load_topology, parse_topology, shipped_files, shipped_names
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


@topo.command("import")
@click.argument("file", type=click.Path())
@click.option("--format", "fmt", required=True,
              type=click.Choice(["nccl-xml", "nvidia-smi", "rocm-smi", "neuron-ls"]),
              help="nccl-xml: an NCCL_TOPO_DUMP_FILE / NCCL_TOPO_FILE system XML; nvidia-smi: "
                   "`nvidia-smi topo -m`; rocm-smi: `rocm-smi --showtopo`; neuron-ls: "
                   "`neuron-ls --json-output`.")
@click.option("--out", "out_file", required=True, type=click.Path(),
              help="The topology YAML to write (then: --topo FILE).")
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@click.option("--nodes", default=1, show_default=True,
              help="Check that N copies join through their NICs and print that cluster's bound; "
                   "the file describes one node (use --topo FILE --nodes N).")
@click.option("--gpu", "gpu", default=None,
              type=click.Choice(["none", "v100", "a100", "h100", "h200", "b200", "mi250x",
                                 "mi300x", "trn1", "trn2"]),
              help="The device model where the file does not name it: nccl-xml hint files (the "
                   "NVSwitch board to assume, or none: PCIe only; never applied to a file that "
                   "states its GPUs), nvidia-smi NV# links, rocm-smi xGMI links, neuron-ls family.")
@click.option("--assume-nic-gbps", type=float, default=None,
              help="For NICs that state no speed: their speed in Gbit/s.")
def topo_import(file: str, fmt: str, out_file: str, name: str | None, nodes: int,
                gpu: str | None, assume_nic_gbps: float | None) -> None:
    """Build a topology FILE for --topo from what a machine reports about itself.

    Prints what it read, what it inferred and what it assumed; refuses a file it cannot read
    with the line and element.
    """
    if assume_nic_gbps is not None and not 0 < assume_nic_gbps < 1e5:
        raise SynthError(f"--assume-nic-gbps must be a speed in Gbit/s, got {assume_nic_gbps:g}")
    target = check_output_file(Path(out_file), "--out")
    machine, t, text = import_topology(file, fmt, name, gpu, assume_nic_gbps)
    if fmt == "nccl-xml" and gpu is not None and not any("--gpu" in a for a in machine.assumed):
        raise SynthError("--gpu applies to nccl-xml hint files only; this file states its GPUs")
    cluster = load_topology_from_text(text, out_file, nodes) if nodes > 1 else t
    atomic_write(target, text)
    for title, items, style in (("read", machine.read, ""), ("inferred", machine.inferred, ""),
                                ("assumed", machine.assumed, "yellow")):
        for item in items:
            out.print(f"{title}: {item}", markup=False, soft_wrap=True, highlight=False,
                      style=style or None)
    b = topology_summary(cluster)["bounds"]["allgather"]
    out.print(f"{cluster.name}: {cluster.num_ranks} ranks, {len(cluster.links)} links, "
              f"{len(cluster.switches)} switches, {len(cluster.nics)} NICs; allgather algbw <= "
              f"{b['algbw_limit_GBps']:.4g} GB/s", markup=False)
    out.print(f"wrote {target}", markup=False)


def load_topology_from_text(text: str, path: str, nodes: int) -> Topology:
    """The N-node cluster of an imported node (validated like --topo FILE --nodes N)."""
    return multinode(parse_topology(parse_data(text, path), path), nodes)
