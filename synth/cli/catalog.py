"""``synth catalog``: regenerate a cluster's catalog. Parse, call :mod:`synth.catalog`, print.

Attached to the main group in :mod:`synth.cli`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from .. import progress
from ..catalog.cache import SolveCache, catalog_key, check_cache_dir, default_cache_dir
from ..catalog.executor import check_executor
from ..catalog.output import check_out_dir, write_files
from ..errors import SynthError, unknown_name
from ..guards import Budget, memory_backstop
from ..sizes import format_size, parse_sizes
from ..topology_io import group_spec as spec_with_group
from ..topology_io import load_group
from .console import err, stdout_console

out = stdout_console(piped_width=200)


class _Bars:
    """Rich progress bars: one per collective and one overall (from :class:`synth.catalog.Progress`)."""

    def __init__(self, progress: Progress) -> None:
        self.p = progress
        self.tasks: dict[str, TaskID] = {}
        self.overall: TaskID | None = None

    def planned(self, totals: dict[str, int]) -> None:
        self.overall = self.p.add_task("[bold]overall", total=sum(totals.values()))
        for kind, n in totals.items():
            self.tasks[kind] = self.p.add_task(kind, total=n)

    def advance(self, kind: str, what: str, count: int = 1) -> None:
        self.p.update(self.tasks[kind], advance=count, description=f"{kind} ({what})")
        if self.overall is not None:
            self.p.update(self.overall, advance=count)

    def more(self, kind: str, count: int) -> None:
        task = self.p.tasks[self.tasks[kind]]
        self.p.update(self.tasks[kind], total=(task.total or 0) + count)
        if self.overall is not None:
            over = self.p.tasks[self.overall]
            self.p.update(self.overall, total=(over.total or 0) + count)


class _Lines:
    """Catalog progress without a terminal: counts in the heartbeat lines of :mod:`synth.progress`."""

    def __init__(self) -> None:
        self.done: dict[str, int] = {}
        self.total: dict[str, int] = {}

    def _show(self, kind: str, what: str) -> None:
        progress.detail(f"{kind} {what}: {sum(self.done.values())}/{sum(self.total.values())} "
                        "units done")

    def planned(self, totals: dict[str, int]) -> None:
        self.total = dict(totals)
        self.done = dict.fromkeys(totals, 0)

    def advance(self, kind: str, what: str, count: int = 1) -> None:
        self.done[kind] = self.done.get(kind, 0) + count
        self._show(kind, what)

    def more(self, kind: str, count: int) -> None:
        self.total[kind] = self.total.get(kind, 0) + count


@click.command()
@click.option("--topo", "topo_spec", required=True, help="Shipped name, builder (ring:8) or file.")
@click.option("--nodes", default=1, show_default=True, help="Join N copies through their NICs.")
@click.option("--group", "group_spec", default=None,
              help="Process group (0,8,16 | stride:S | node:K | rail:R): the catalog of the machine "
                   "it induces; every XML gets <file>.ranks.json (group rank -> global rank).")
@click.option("--concurrent", "partition", default=None,
              help="With --group: the partition running at the same time (stride:S | rail | node "
                   "| 0,1|2,3); shared ports and NICs count at the group's share.")
@click.option("--collectives", default="allgather,reducescatter,allreduce,alltoall",
              show_default=True, help="Comma-separated collectives the catalog covers.")
@click.option("--sizes", default="1KB:4GB", show_default=True,
              help="Size range MIN:MAX (powers of two between) or a list 1KB,1MB,1GB.")
@click.option("--calibration", default=None, type=click.Path(),
              help="Calibration JSON from `synth calibrate` (link-class α/β, protocol overheads).")
@click.option("--tuner", default="cd", show_default=True, help="grid | tpe | cd")
@click.option("--workers", default=None, type=int,
              help="Solves in parallel (default: the CPU count, at most 8).")
@click.option("--executor", default="local", show_default=True, help="local | ray")
@click.option("--out", "out_dir", default=None, type=click.Path(),
              help="Catalog folder (default: results/catalogs/<topology>).")
@click.option("--cache-dir", default=None, type=click.Path(),
              help="Solve cache (default: $XDG_CACHE_HOME/synth or ~/.cache/synth).")
@click.option("--time-limit", default=60.0, show_default=True, type=float,
              help="Time limit per solve (seconds).")
@click.option("--seed", default=0, show_default=True, help="Tuner seed (tpe).")
@click.option("--no-xml-cache", "no_xml_cache", is_flag=True,
              help="Compile and run the interpreter on every file again, even when an identical "
                   "file was verified before.")
@click.option("--rebuild", is_flag=True,
              help="Build the catalog again even when a stored run had exactly these inputs (by "
                   "default that run's folder is written again at once); solves, verified XML "
                   "and program-model times still come from the cache.")
@click.option("--max-memory", default=None,
              help="Memory budget (e.g. 8GB; default: half the machine's RAM): candidates "
                   "estimated above it, or over the runtime's XML limits, are passed over.")
@click.option("--format", "out_format", default="msccl", show_default=True,
              type=click.Choice(["msccl", "mscclpp"]),
              help="mscclpp: also write each selected file as a verified MSCCL++ execution plan "
                   "(mscclpp-plans/; Simple and LL ranges).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def catalog(topo_spec: str, nodes: int, group_spec: str | None, partition: str | None,
            collectives: str, sizes: str,
            calibration: str | None,
            tuner: str, workers: int | None, executor: str, out_dir: str | None,
            cache_dir: str | None, time_limit: float, seed: int, no_xml_cache: bool,
            rebuild: bool, out_format: str, max_memory: str | None, quiet: bool) -> None:
    """Regenerate the per-cluster catalog: best verified algorithm per collective and size range."""
    from ..tuning import TUNERS

    start = time.perf_counter()
    if tuner not in TUNERS:
        raise unknown_name("tuner", tuner, TUNERS)
    workers = workers if workers is not None else max(1, min(os.cpu_count() or 1, 8))
    check_executor(executor, workers)
    if nodes < 1:
        raise SynthError(f"--nodes must be at least 1, got {nodes}")
    # as check_collectives spells them; checked when the catalog is built (no stored run holds
    # a collective it refused)
    kinds = tuple(dict.fromkeys(k.strip().lower() for k in collectives.split(",") if k.strip()))
    size_list = parse_sizes(sizes)
    topology, group = load_group(topo_spec, nodes, group_spec, partition)
    if calibration:
        from ..calibration import load_calibration

        cal = load_calibration(calibration)
    else:
        cal = None
    target = check_out_dir(Path(out_dir) if out_dir else Path("results") / "catalogs" / topology.name)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()

    budget = Budget.of(max_memory, None)
    memory_backstop(budget.max_memory)
    spec = spec_with_group(topo_spec, group, partition)
    # a rerun whose inputs did not change takes the whole folder from the cache (synth.catalog.cache)
    run_key = None if no_xml_cache else catalog_key(topology, {
        "spec": spec, "nodes": nodes, "collectives": list(kinds), "sizes": list(size_list),
        "tuner": tuner, "seed": seed, "time_limit_s": time_limit,
        "max_memory": budget.max_memory, "format": out_format, "out": str(target.resolve()),
        "calibration": calibration}, Path(calibration) if calibration else None)
    store = SolveCache(check_cache_dir(cache))
    if run_key is not None and not rebuild and _reuse(store, run_key, target, start):
        return
    # the pipeline (solvers, models, plots) loads only now: a rerun whose inputs did not change
    # (_reuse) starts in a fraction of the time
    from ..catalog.build import build_catalog, check_collectives

    kinds = check_collectives(kinds)
    mode = "off" if quiet else progress.choose_mode()
    kw = dict(topo_spec=spec, nodes=nodes, kinds=kinds,
              sizes=size_list, tuner=tuner, workers=workers, executor=executor,
              time_limit_s=time_limit, cache_dir=cache,
              calibration=cal, seed=seed, xml_cache=not no_xml_cache, budget=budget,
              plans=out_format == "mscclpp")
    if mode == "rich":
        with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=False) as bars:
            result = build_catalog(topology, progress=_Bars(bars), **kw)
    else:  # CI, logs, nohup: timestamped lines, a heartbeat at least every 10 s
        with progress.activate(mode, console=err), \
                progress.phase(f"catalog {topology.name} ({', '.join(kinds)})"):
            result = build_catalog(topology, progress=_Lines(), **kw)
    from ..catalog.output import render

    rendered = render(result, target, group)
    files = write_files(rendered, target)
    seconds = time.perf_counter() - start
    out.print(f"[bold]catalog[/bold] {topology.name} ({topology.num_ranks} ranks), "
              f"{format_size(size_list[0])} – {format_size(size_list[-1])}: "
              f"{result.solved} solved, {result.cached} cached; XML: "
              f"{sum(c.xml_verified for c in result.results)} verified by the interpreter now, "
              f"{sum(c.xml_reused for c in result.results)} verified before (cached); "
              f"{len(files)} files in {target} ({seconds:.1f} s)")
    written = json.loads(str(rendered["catalog.json"]))
    lines: list[str] = []
    for cr in result.results:
        rows = written["collectives"][cr.kind]["buckets"]
        finite = [b["speedup_vs_nccl"] for b in rows
                  if b["speedup_vs_nccl"] is not None and b["served_by"] == "synth"]
        left = [b for b in rows if b["served_by"] == "nccl"]
        lines.append(f"  {cr.kind}: {len(cr.emitted)} file(s), {len(cr.candidates)} candidates; "
                     + (f"vs NCCL (its own model) {min(finite):.2f}x .. {max(finite):.2f}x"
                        if finite else "every size left to NCCL" if left
                        else "no NCCL on this machine")
                     + (f"; {len(left)} of {len(rows)} size bucket(s) left to NCCL (no file)"
                        if left else "")
                     + (f"; {len(cr.choice.excluded)} passed over" if cr.choice.excluded else ""))
    if out_format == "mscclpp":
        plans = [e for cr in result.results for e in cr.emitted]
        made = sum(e.plan_json is not None for e in plans)
        lines.append(f"MSCCL++ plans: {made} of {len(plans)} written to {target}/mscclpp-plans, "
                     "each verified by the plan interpreter")
        lines += [f"[yellow]{e.range.config.family} {e.range.lo}-{e.range.hi}: "
                  f"{e.plan_note}[/yellow]" for e in plans if e.plan_note]
    lines += [f"[yellow]calibration: {n}[/yellow]" for n in result.calibration_notes]
    lines.append(f"MSCCL_ALGO_DIR={target}/msccl-algorithms   MSCCL_CONFIG={target}/msccl_config.xml")
    for line in lines[:-1]:
        out.print(line)
    for c in result.crashes:
        out.print(f"[yellow]solve failed (not cached): {c}[/yellow]")
    out.print(lines[-1])
    if run_key is not None and not result.crashes:  # a failed solve is retried next time
        store.put(run_key, {"files": store.put_files(rendered), "lines": lines}, "catalogs")


def _reuse(store: SolveCache, key: str, target: Path, start: float) -> bool:
    """Put back the folder a run with the same inputs stored (:mod:`synth.catalog.cache`) and
    print what that run printed; False on a miss. A folder that already holds exactly those
    bytes is left alone; otherwise it is written again, atomically, from the stored files."""
    stored = store.get(key, "catalogs")
    lines = stored.get("lines") if stored is not None else None
    if stored is None or not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        return False
    digests = stored.get("files")
    if isinstance(digests, dict) and _holds(target, digests):
        done = "already holds its files"
    else:
        files = store.get_files(digests)
        if files is None:
            return False
        write_files(dict(files), target)
        done = "its folder written again"
    out.print(f"[bold]catalog[/bold]: inputs unchanged since a stored run (key {key[:12]}): "
              f"{target} {done}; nothing solved, tuned, compiled or timed; {len(digests)} files "
              f"({time.perf_counter() - start:.1f} s)")
    for line in lines:
        out.print(line)
    return True


def _holds(folder: Path, digests: dict[str, Any]) -> bool:
    """Whether ``folder`` holds exactly the files of ``digests`` (path -> SHA-256), no other."""
    import hashlib

    if not folder.is_dir():
        return False
    found = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
    if set(found) != set(digests):
        return False
    return all(hashlib.sha256(found[rel].read_bytes()).hexdigest() == digest
               for rel, digest in digests.items())
