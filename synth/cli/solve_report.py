"""What ``synth solve`` prints: the summary, one table of what serves each size against NCCL, the
size ranges, the candidates, and the files written (or the same as one JSON object)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..encodings import auto_reason
from ..outputs.layout import runtime_lines
from ..outputs.report import ranges_table, served_sizes
from ..sizes import format_size
from ..solve import SolveOutcome
from ..solve_closed import ClosedOutcome, geomean
from ..timing.nccl import SOURCE
from .console import out


def _us(t: float | None) -> str:
    return "—" if t is None or not math.isfinite(t) else f"{t:.2f}"


def speedup_summary(vs_nccl: list[Any] | None) -> str | None:
    """Which sizes synth serves and how fast against NCCL's model, in one line (None without NCCL)."""
    if vs_nccl is None:
        return None
    mine = [c for c in vs_nccl if c.served_by == "synth"]
    kept = [c for c in vs_nccl if c.served_by == "nccl"]
    if not mine:
        return (f"NCCL's model is faster at every size ({format_size(vs_nccl[0].bytes)}.."
                f"{format_size(vs_nccl[-1].bytes)}): nothing to write, NCCL keeps them all")
    gains = [c.speedup for c in mine]
    geo = math.exp(sum(math.log(g) for g in gains) / len(gains))
    text = (f"synth serves {len(mine)} of {len(vs_nccl)} sizes at {geo:.2f}x NCCL's model "
            f"(geomean; worst {min(gains):.2f}x, best {max(gains):.2f}x)")
    if kept:
        text += (f"; NCCL keeps {len(kept)} ({', '.join(format_size(c.bytes) for c in kept[:6])}"
                 f"{', ...' if len(kept) > 6 else ''}): no file covers them")
    return text


def solve_json(done: SolveOutcome, sizes: tuple[int, ...]) -> dict[str, Any]:
    result, written = done.result, done.written
    best = result.best
    served = served_sizes(written, result) or [(p, best.name, None) for p in best.costs]
    return {
        "xml_verified_modes": [rep.mode for rep in written.xml_reports],
        "mscclpp_verified": bool(written.plan_reports),
        "notes": written.notes,
        "topology": result.topology.name,
        "collective": result.collective.name,
        "ranks": result.topology.num_ranks,
        "encoding": best.schedule.encoding,
        "why": best.schedule.meta.get("why"),
        "algorithm": best.schedule.algorithm,
        "chunks_per_rank": best.schedule.collective.chunks_per_rank,
        "verified": True,
        "steps": best.report.steps,
        "rounds": best.report.rounds,
        "solve_seconds": round(result.seconds, 3),
        "files": [str(f) for f in written.files],
        "bound": {"method": result.bound.method, "latency_us": result.bound.latency_us,
                  "steps": result.bound.steps},
        "costs": [{**p.to_dict(), "algorithm": name, "file": f} for p, name, f in served],
        "ranges": [r.to_dict(f, o) for r, f, o in zip(written.ranges, written.range_files,
                                                       written.oop_files or
                                                       [None] * len(written.ranges), strict=True)],
        "winners_by": written.winners_by,
        "range_table": ranges_table(result, written.ranges, written.range_files,
                                    written.winners_by, written.oop_files),
        "candidates": [{"name": c.name, "algorithm": c.schedule.algorithm, "steps": c.report.steps,
                        "score_pct": round(100 * c.score, 3),
                        "time_us": {str(p.bytes): round(p.time_us, 6) for p in c.costs}}
                       for c in result.candidates],
        "runtime": done.runtime.to_dict(),
        "vs_nccl": [c.to_dict() for c in done.vs_nccl] if done.vs_nccl is not None else None,
        "speedup_summary": speedup_summary(done.vs_nccl),
        "deploy": deploy_lines(done),
        "program_us": ({str(n): (round(t, 4) if math.isfinite(t) else None)
                        for n, t in zip(sizes, done.program_us, strict=True)}
                       if done.program_us is not None else None),
    }


def print_solve(done: SolveOutcome) -> None:
    result, written = done.result, done.written
    best, s = result.best, result.best.schedule
    out.print(f"[bold]{result.collective.name}[/bold] on [bold]{result.topology.name}[/bold] "
              f"({result.topology.num_ranks} ranks): {len(result.candidates)} verified "
              f"candidate(s) in {result.seconds:.2f} s; best overall {s.encoding}/{s.algorithm}, "
              f"{best.report.steps} steps, {s.collective.chunks_per_rank} chunk(s)/rank")
    if result.encoding == "auto":
        out.print(f"auto: {auto_reason(result.topology, result.collective)}; each size range "
                  f"gets its fastest candidate (by the {written.winners_by} model)")
    if s.meta.get("why"):
        out.print(f"why: {s.meta['why']}")
    summary = speedup_summary(done.vs_nccl)
    if summary:
        out.print(f"[bold]{summary}[/bold]")
    _per_size(done)
    if len(written.ranges) > 1:
        _ranges(done)
    if len(result.candidates) > 1:
        _candidates(done)
    for note in written.notes:
        out.print(f"[yellow]{note}[/yellow]")
    for rep in written.xml_reports:
        out.print(f"XML verified by the interpreter ({rep.mode}): {rep.threadblocks} threadblocks, "
                  f"{rep.operations} operations, {rep.messages} messages")
    for rep in written.plan_reports:
        out.print(f"MSCCL++ plan verified by the plan interpreter: {rep.threadblocks} threadblocks, "
                  f"{rep.operations} operations, {rep.signals} signals, postcondition holds")
    for f in written.files:
        out.print(f"wrote {f}")
    lines = deploy_lines(done)
    if lines:
        out.print("[bold]to use them:[/bold]")
        for line in lines:
            out.print(line, markup=False)
    elif written.ranges and all(r.candidate is None for r in written.ranges):
        out.print("nothing to deploy: NCCL as it is serves every size")


def deploy_lines(done: SolveOutcome) -> list[str]:
    """The environment each runtime needs to load what the run wrote."""
    w = done.written
    return runtime_lines(w.out_dir, w.folders) if w.out_dir is not None and w.files else []


def _per_size(done: SolveOutcome) -> None:
    """One row per swept size: what serves it, its wire time against the bound, its time as the
    runtime runs it, and NCCL's."""
    result, written = done.result, done.written
    served = served_sizes(written, result) or [(p, result.best.name, None) for p in result.best.costs]
    vs = {c.bytes: c for c in done.vs_nccl or ()}
    runtime = {p.bytes: p.time_us for p in done.runtime.points}
    program = dict(zip((p.bytes for p in result.best.costs), done.program_us or (), strict=False))
    table = Table(title=f"what serves each size (bound: {result.bound.method})")
    cols = ["size", "served by", "lock-step µs", "% of bound", "runtime µs", "timed by"]
    if vs:
        cols += ["NCCL µs", "NCCL runs", "vs NCCL"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("served by", "timed by", "NCCL runs")
                         else "right")
    for p, name, _ in served:
        c = vs.get(p.bytes)
        nccl = name == "nccl"
        if nccl:
            run, by = p.time_us, "NCCL (no file)"
        elif math.isfinite(program.get(p.bytes, math.inf)):
            run, by = program[p.bytes], "program"
        else:
            run, by = runtime.get(p.bytes, math.inf), f"{done.runtime.proto} (protocol)"
        row = [format_size(p.bytes), name, "—" if nccl else _us(p.time_us),
               f"{p.pct_of_bound:.1f}", _us(run), by]
        if vs:
            row += ([_us(c.nccl_us), f"{c.nccl_algo}/{c.nccl_proto} x{c.nccl_channels}",
                     f"{c.speedup:.2f}x"] if c else ["—", "—", "—"])
        table.add_row(*row)
    out.print(table)
    out.print("[dim]lock-step: the α-β step model, the wire alone (what the bound is compared "
              "with); runtime: the file as the MSCCL runtime runs it — 'program': the written XML "
              "under the timed program model (synth.timing.program, validated in "
              "results/reality_msccl.md); '<proto> (protocol)': the step model plus that "
              f"protocol's floors (synth.timing.protocol). NCCL: its own tuner and time ({SOURCE};"
              " validated in results/reality.md). Every time is a model's prediction.[/dim]")


def _ranges(done: SolveOutcome) -> None:
    result, written = done.result, done.written
    by = written.winners_by
    both = by != "lockstep"
    rt = Table(title=f"size range -> file, winners by the {by} model (times and % of bound at the "
                     "range's largest size)")
    cols = ["min bytes", "max bytes", "algorithm", "form", *([f"{by} µs"] if both else []),
            "lock-step µs", "% of bound", "file"]
    for col in cols:
        rt.add_column(col, justify="left" if col in ("algorithm", "file") else "right")
    for row in ranges_table(result, written.ranges, written.range_files, by, written.oop_files):
        cells = [str(row["min_bytes"]), str(row["max_bytes"] or "unbounded"),
                 row["algorithm"] + (" (lock-step)" if row["winners_by"] not in (by, "nccl")
                                     else ""),
                 f"{row['proto']} x{row['instances']}" if row["instances"] is not None else "—"]
        if both:
            cells.append(_us(row["decided_us"]))
        cells += [_us(row["time_us"]), f"{row['pct_of_bound']:.1f}" if row["pct_of_bound"] else "—",
                  Path(row["file"]).name if row["file"] else "— (NCCL)"]
        if row["oop_file"]:     # one file per call kind: the in-place one's time, then this one
            oop_us = f", {_us(row['oop_us'])} µs" if both else ""
            cells[-1] += (f" (in-place calls)\n{Path(row['oop_file']).name} (out-of-place calls"
                          f"{oop_us})")
        rt.add_row(*cells)
    out.print(rt)


def _candidates(done: SolveOutcome) -> None:
    """Every verified candidate, those serving sizes first (smallest sizes first), then the rest
    by their mean % of bound: lock-step times at three sizes."""
    result, written = done.result, done.written
    costs = result.best.costs
    sizes = [costs[0].bytes, costs[len(costs) // 2].bytes, costs[-1].bytes]
    serves: dict[str, list[int]] = {}
    for r in written.ranges:
        if r.candidate is not None:
            serves.setdefault(r.candidate.name, []).extend(r.sizes)
    order = sorted(result.candidates, key=lambda c: (
        0 if c.name in serves else 1, min(serves.get(c.name) or [0]), -c.score, c.name))
    table = Table(title="candidates (lock-step µs; those serving sizes first)")
    table.add_column("algorithm")
    table.add_column("serves", justify="left")
    table.add_column("steps", justify="right")
    for size in sizes:
        table.add_column(format_size(size), justify="right")
    table.add_column("mean % of bound", justify="right")
    for c in order:
        at = {p.bytes: p.time_us for p in c.costs}
        mine = serves.get(c.name)
        span = f"{format_size(min(mine))}..{format_size(max(mine))}" if mine else "—"
        table.add_row(c.name, span, str(c.report.steps), *(f"{at[z]:.1f}" for z in sizes),
                      f"{100 * c.score:.1f}")
    out.print(table)


# ------------------------------------------------------------------ Trainium / TPU (closed stacks)
def closed_json(done: ClosedOutcome) -> dict[str, Any]:
    """What :func:`print_closed` prints, as one JSON object."""
    result = done.result
    return {
        "topology": result.topology.name, "collective": result.collective.name,
        "ranks": result.topology.num_ranks, "format": done.platform, "verified": True,
        "solve_seconds": round(result.seconds, 3), "program_seconds": round(done.seconds, 3),
        "candidates": done.candidates, "schedules": [c.name for c in result.candidates],
        "vendor_call": done.vendor, "cost_model": done.cost_model,
        "ranges": [r.to_dict() for r in done.ranges],
        "sizes": [row.to_dict() for row in done.sizes],
        "speedup_geomean": round(geomean([row.speedup for row in done.sizes]), 4),
        "proven": done.proven, "files": [str(f) for f in done.files], "run": done.launch,
        "notes": [*result.notes, *done.notes],
    }


def print_closed(done: ClosedOutcome) -> None:
    """The program per size range on Trainium/TPU: strategy, predicted time, speed-up over the
    runtime's own call; the stand-in proofs; the files and how to run them."""
    result = done.result
    runtime = "torch-neuronx" if done.platform == "neuron" else "JAX"
    out.print(f"[bold]{result.collective.name}[/bold] on [bold]{result.topology.name}[/bold] "
              f"({result.topology.num_ranks} ranks) for {runtime}: {len(result.candidates)} "
              f"verified schedule(s) in {result.seconds:.2f} s; {done.candidates} programs "
              f"(lowered schedules and compositions of the runtime's calls) priced, chosen and "
              f"proven in {done.seconds:.2f} s")
    gains = [row.speedup for row in done.sizes]
    out.print(f"[bold]{geomean(gains):.2f}x the runtime's own call ({escape(done.vendor)}) over "
              f"{len(gains)} sizes (geomean; worst {min(gains):.2f}x, best {max(gains):.2f}x), "
              "by the closed-stack model[/bold]")
    table = Table(title=f"size range -> strategy ({done.cost_model}; times at the range's largest "
                        "size)")
    for col in ("min bytes", "max bytes", "strategy", "from", "calls", "µs", "own call µs",
                "speed-up"):
        table.add_column(col, justify="left" if col in ("strategy", "from") else "right")
    for r in done.ranges:
        table.add_row(str(r.lo), str(r.hi), escape(r.strategy), r.origin, str(r.calls), _us(r.time_us),
                      _us(r.vendor_us), f"{r.speedup:.2f}x")
    out.print(table)
    out.print("[dim]µs: synth.closed.cost, Neuron's calls priced by synth.closed.neuron (fitted to "
              "public nccom-test runs: results/reality_trainium.md); every time is a model's "
              "prediction.[/dim]")
    for note in [*result.notes, *done.notes]:
        out.print(f"[yellow]{escape(note)}[/yellow]")
    for line in done.proven:
        out.print(f"proven: {line}", markup=False)
    for f in done.files:
        out.print(f"wrote {f}")
    if done.launch:
        out.print("[bold]to run it:[/bold]")
        for line in done.launch:
            out.print(line, markup=False)
