"""``synth pareto`` and ``synth analyze``: the SMT (SCCL) searches on the command line.

Only argument parsing and printing live here; the searches are :mod:`synth.encodings.smt.search`.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from .. import progress
from ..bounds import latency_floor, lower_bound
from ..calibrated import apply_calibration
from ..collectives import KINDS, load_collective, make_collective
from ..emit import XmlOptions
from ..encodings.baseline import baseline, preferred_chunks
from ..encodings.smt.encoding import SmtProblem
from ..encodings.smt.search import pareto as walk
from ..encodings.smt.search import pareto_sccl
from ..errors import LIMIT_REACHED, NotApplicable, SynthError
from ..files import atomic_write, check_output_file, check_writable_dir, dumps_json
from ..groups import group_of, rank_maps
from ..guards import Budget, check_encoding, check_schedule
from ..outputs import commit, prepare_outputs
from ..outputs.layout import MAP_FOLDER
from ..select.candidates import cost_profile
from ..sizes import DEFAULT_SIZES, format_size
from ..topology_io import load_group, load_topology
from ..verify import verify
from .console import err, out

SMALL, LARGE = 2**10, 2**30


def _problem(topo_spec: str, coll_spec: str, nodes: int, root: int | None, inplace: bool,
             engine: str | None, group: str | None = None, partition: str | None = None):
    topology = (load_group(topo_spec, nodes, group, partition)[0] if group or partition
                else load_topology(topo_spec, nodes))
    collective = load_collective(coll_spec, topology.num_ranks, 1, root, inplace)
    return topology, collective, SmtProblem(topology, collective, engine=engine)


def _common(f):
    f = click.option("--inplace/--outofplace", default=False, show_default=True)(f)
    f = click.option("--root", type=int, default=None, help="Root rank of a rooted collective.")(f)
    f = click.option("--nodes", default=1, show_default=True,
                     help="Join N copies through their NICs.")(f)
    f = click.option("--coll", "coll_spec", required=True,
                     help=f"One of {', '.join(KINDS)}, or a custom collective file.")(f)
    f = click.option("--topo", "topo_spec", required=True,
                     help="Shipped name, builder (ring:8) or file.")(f)
    return f


# ---------------------------------------------------------------------------------------- pareto
@click.command()
@_common
@click.option("--max-steps", type=int, default=None, help="Consider at most this many steps.")
@click.option("--max-chunks", type=int, default=None, help="Consider at most this many chunks.")
@click.option("--time-limit", type=float, default=600.0, show_default=True,
              help="Work budget for the whole walk, in deterministic seconds (CP-SAT's clock; z3: "
                   "wall-clock): the same walk on any machine.")
@click.option("--engine", default="auto", show_default=True, help="auto (= cpsat), cpsat or z3.")
@click.option("--sccl-walk", is_flag=True,
              help="Reproduce msccl-tools' walk literally, with its unproven monotonicity "
                   "assumption (can miss frontier points).")
@click.option("--out", "out_dir", default="out", show_default=True, type=click.Path(),
              help="Folder for the frontier's schedule files.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option("--plot", "plot_file", default=None, type=click.Path(),
              help="Write the frontier and the ring/tree/direct baselines to this PNG.")
@click.option("--calibration", default=None, type=click.Path(),
              help="Calibration JSON from `synth calibrate` (measured α/β per link class): the "
                   "frontier's times use it. The frontier itself (steps, rounds) does not depend on it.")
@click.option("--max-memory", default=None,
              help="Memory budget (e.g. 8GB; default: half the machine's RAM): a model or a "
                   "frontier schedule estimated above it is refused or written without XML.")
@click.option("-v", "--verbose", is_flag=True, help="Print every instance as it is decided.")
@click.option("--group", "group_spec", default=None,
              help="Process group (0,8,16 | stride:S | node:K | rail:R): the frontier on the "
                   "machine it induces; <file>.ranks.json maps group ranks to global ranks.")
@click.option("--concurrent", "partition", default=None,
              help="With --group: the partition running at the same time (stride:S | rail | node "
                   "| 0,1|2,3); shared ports and NICs count at the group's share.")
def pareto(topo_spec: str, coll_spec: str, nodes: int, root: int | None, inplace: bool,
           max_steps: int | None, max_chunks: int | None, time_limit: float, engine: str,
           sccl_walk: bool, out_dir: str, as_json: bool, plot_file: str | None,
           calibration: str | None, max_memory: str | None, verbose: bool,
           group_spec: str | None, partition: str | None) -> None:
    """The latency/bandwidth Pareto frontier of SCCL's (steps, rounds, chunks) algorithms.

    Walks chunks C = 1, 2, ..., rounds R from the rounds-per-chunk bound and steps S from the
    hop bound, keeps the algorithms no other beats in both steps and rounds per chunk, and stops
    when one meets the bandwidth bound (or at the time limit: exit code 3, with what was proven).
    """
    if max_steps is not None and max_steps < 1:
        raise SynthError(f"--max-steps must be at least 1, got {max_steps}")
    if max_chunks is not None and max_chunks < 1:
        raise SynthError(f"--max-chunks must be at least 1, got {max_chunks}")
    if not math.isfinite(time_limit) or time_limit <= 0:
        raise SynthError(f"--time-limit must be a positive number of seconds, got {time_limit:g}")
    if plot_file is not None:
        _check_plot_path(Path(plot_file))
    topology, collective, problem = _problem(topo_spec, coll_spec, nodes, root, inplace, engine,
                                             group_spec, partition)
    costed = topology
    if calibration is not None:
        costed = apply_calibration(topology, calibration)
    target = check_writable_dir(Path(out_dir))  # created when the first schedule is written


    budget = Budget.of(max_memory, XmlOptions())
    if collective.custom is None:  # the walk's largest model, sized before it is built
        check_encoding("smt", collective.kind, topology.num_ranks, len(topology.links),
                       max_chunks, Budget(budget.max_memory, None))

    def show(res) -> None:
        progress.detail(f"last: {res.describe()} {res.status} ({res.seconds:.1f} s)")
        if verbose:
            err.print(f"  {res.describe()}: {res.status} ({res.how}, {res.seconds:.2f} s)")

    search = pareto_sccl if sccl_walk else walk
    with progress.activate(console=err, quiet_on_terminal=as_json), \
            progress.phase(f"pareto walk: {collective.name} on {topology.name}"):
        report = search(problem, max_steps=max_steps, max_chunks=max_chunks,
                        time_limit_s=time_limit, on_instance=show)
    for note in report.safety_notes:
        err.print(f"note: {note}")

    bound = lower_bound(costed, collective) if report.points else None
    rows: list[dict[str, Any]] = []
    for point in report.points:
        sched = point.schedule
        assert sched is not None
        verify(sched, topology)
        costs = cost_profile(sched, costed, _sizes(), bound)
        try:
            check_schedule(sched, budget)  # sized before compiling (memory, runtime limits)
            written = prepare_outputs(sched, target)  # schedule JSON + interpreter-verified XML
        except SynthError as exc:  # TooBig included: the schedule alone, and why
            written = prepare_outputs(sched, target, None)
            written.notes.append(f"no XML: {exc.message}")
        rank_files = {}
        if group_spec is not None:
            rank_files = {f"{MAP_FOLDER}/{name}": text for name, text in
                          rank_maps(written.files, group_of(topology)).items()}
        commit(written, rank_files)  # a failed write is an error, not a reason to drop the XML
        for note in written.notes:
            err.print(f"(S{point.steps},R{point.rounds},C{point.chunks}) {note}")
        by = {p.bytes: p for p in costs}
        rows.append({"steps": point.steps, "rounds": point.rounds, "chunks": point.chunks,
                     "rounds_per_chunk": str(point.rpc),
                     "solve_seconds": round(point.seconds, 3),
                     "files": [str(f) for f in written.files],
                     "costs": [p.to_dict() for p in costs],
                     "_small": by[SMALL].time_us, "_large": by[LARGE].time_us})
    if plot_file is not None:
        _plot(Path(plot_file), costed, collective, rows)
    if as_json:
        click.echo(dumps_json([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
                              indent=2))
    else:
        out.print(f"[bold]{collective.name}[/bold] on [bold]{topology.name}[/bold] "
                  f"({topology.num_ranks} ranks): steps >= {report.steps_lb}, rounds per chunk >= "
                  f"{report.rpc_lb}; engine {problem.engine}; {len(report.tried)} instances in "
                  f"{report.seconds:.2f} s — {report.stop}"
                  + (f"; times use calibration {calibration}" if calibration else ""))
        table = Table(title="Pareto frontier (every schedule verified)")
        for col in ("steps", "rounds", "chunks", "rounds/chunk", f"time @{format_size(SMALL)} µs",
                    f"time @{format_size(LARGE)} µs", "solve s"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(str(r["steps"]), str(r["rounds"]), str(r["chunks"]),
                          r["rounds_per_chunk"], f"{r['_small']:.2f}", f"{r['_large']:.1f}",
                          f"{r['solve_seconds']:.2f}")
        out.print(table)
        for r in rows:
            for f in r['files']:
                out.print(f"wrote {f}")
        if plot_file is not None:
            out.print(f"wrote {plot_file}")
    if not report.complete:
        proven = [line for line in report.proven_lines() if "UNSAT" in line]
        best = ", ".join(f"(S{r['steps']},R{r['rounds']},C{r['chunks']})" for r in rows) or "none"
        raise SynthError(
            f"{report.stop} reached before the frontier was complete (bandwidth bound "
            f"{report.rpc_lb} rounds/chunk not met). Proven: {len(proven)} instance(s) UNSAT"
            + (f" (last: {proven[-1].split(':')[0]})" if proven else "")
            + f"; best found: {best}. Raise --time-limit or --max-chunks to go further.",
            exit_code=LIMIT_REACHED)


def _check_plot_path(path: Path) -> None:
    """Refuse a ``--plot`` file synth could not write, before the walk (and create no folder)."""
    if path.suffix.lower() != ".png":
        raise SynthError(f"--plot writes a PNG: give a file name ending in .png, not '{path}'")
    check_output_file(path, "--plot")


def _sizes() -> tuple[int, ...]:
    return DEFAULT_SIZES


def _plot(path: Path, topology, collective, rows: list[dict[str, Any]]) -> None:
    """Frontier and baselines on latency cost (time at 1 KB) vs bandwidth cost (µs per MB at 1 GB)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    mb = LARGE / 1e6
    if rows:
        pts = sorted((r["_small"], r["_large"] / mb, f"S{r['steps']} R{r['rounds']} C{r['chunks']}")
                     for r in rows)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="black",
                label="smt frontier")
        for x, y, label in pts:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    markers = {"ring": ("s", "tab:red"), "tree": ("^", "tab:orange"), "direct": ("D", "tab:green")}
    for name, (marker, color) in markers.items():
        try:
            k = 1 if collective.custom is not None else preferred_chunks(name, collective.kind,
                                                                         collective.num_ranks)
            coll = collective if collective.custom is not None else make_collective(
                collective.kind, collective.num_ranks, k, collective.root, collective.inplace)
            sched = baseline(topology, coll, name)
        except NotApplicable:
            continue
        costs = {p.bytes: p.time_us for p in cost_profile(sched, topology, (SMALL, LARGE))}
        ax.plot([costs[SMALL]], [costs[LARGE] / mb], marker, color=color, markersize=8,
                label=f"baseline {name}")
    ax.set_xlabel(f"latency cost: predicted time at {format_size(SMALL)} (µs)")
    ax.set_ylabel(f"bandwidth cost: time per MB at {format_size(LARGE)} (µs/MB)")
    ax.set_title(f"{collective.name} on {topology.name}: SCCL-style frontier vs baselines")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=110, metadata={"Software": None})
    finally:
        plt.close(fig)
    atomic_write(path, png.getvalue())


# ---------------------------------------------------------------------------------------- analyze
@click.command()
@click.argument("what", type=click.Choice(["steps", "rounds"]))
@_common
@click.option("--json", "as_json", is_flag=True)
def analyze(what: str, topo_spec: str, coll_spec: str, nodes: int, root: int | None,
            inplace: bool, as_json: bool) -> None:
    """Lower bounds of the SMT encoding: least STEPS (hop distance) or ROUNDS per chunk (LPs)."""
    topology, collective, problem = _problem(topo_spec, coll_spec, nodes, root, inplace, None)
    if what == "steps":
        steps = problem.steps_lower_bound()
        hops, alpha = latency_floor(topology, collective)
        data = {"topology": topology.name, "collective": collective.name, "steps": steps,
                "latency_floor_us": round(alpha, 6), "latency_floor_hops": hops}
        if as_json:
            click.echo(dumps_json(data, indent=2))
            return
        out.print(f"{collective.name} on {topology.name}: every algorithm needs at least "
                  f"[bold]{steps}[/bold] steps (the farthest a chunk must travel, in hops); "
                  f"latency floor {alpha:.3g} µs")
        return
    sccl = problem.sccl_rpc_lower_bound()
    strong = problem.rpc_lower_bound(strong=True)
    data = {"topology": topology.name, "collective": collective.name,
            "rounds_per_chunk": str(strong), "rounds_per_chunk_float": float(strong),
            "sccl_lp": str(sccl),
            "rounds_for_chunks": {str(c): problem.rounds_lower_bound(c) for c in range(1, 9)},
            "bandwidth_optimal_needs_chunks": strong.denominator}
    if as_json:
        click.echo(dumps_json(data, indent=2))
        return
    out.print(f"{collective.name} on {topology.name}: every algorithm needs at least "
              f"[bold]{strong}[/bold] rounds per chunk (SCCL's LP: {sccl}; flow LP where "
              "it is larger)")
    table = Table(title="least rounds by chunks per rank")
    table.add_column("chunks", justify="right")
    table.add_column("rounds >=", justify="right")
    for c, r in data["rounds_for_chunks"].items():
        table.add_row(c, str(r))
    out.print(table)
    out.print(f"a bandwidth-optimal algorithm needs a multiple of {strong.denominator} chunks")
