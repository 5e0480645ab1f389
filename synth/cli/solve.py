"""``synth solve``, ``synth verify``, ``synth simulate``: synthesize, check and cost schedules.

Parse arguments, call the library, print; nothing else lives here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from .. import progress
from ..collectives import KINDS, load_collective
from ..cost import DEFAULT_SIZES, format_size, parse_size, parse_sizes
from ..errors import SynthError
from ..files import dumps_json
from ..schedule import Schedule
from ..topology import Topology
from ..topology_io import load_topology
from .console import err, out


@click.command()
@click.option("--topo", "topo_spec", required=True, help="Shipped name, builder (ring:8) or file.")
@click.option("--coll", "coll_spec", required=True,
              help=f"One of {', '.join(KINDS)}, or a custom collective file.")
@click.option("--nodes", default=1, show_default=True, help="Join N copies through their NICs.")
@click.option("--group", "group_spec", default=None,
              help="Process group: 0,8,16 | stride:S | node:K | rail:R. Synthesizes on the "
                   "machine the group induces (relays only through members); the XML's ngpus is "
                   "the group size and <file>.ranks.json maps group ranks to global ranks.")
@click.option("--concurrent", "partition", default=None,
              help="A partition running all at once: stride:S | rail | node | 0,1|2,3. With "
                   "--group (one of its groups): synthesize for it with the ports and NICs it "
                   "shares at its share of their bandwidth; alone: every group, each into "
                   "OUT/<group>/.")
@click.option("--encoding", default="auto", show_default=True, help="auto | baseline | ...")
@click.option("--algo", default=None, help="Baseline algorithm (ring, bidir_ring, direct, ...).")
@click.option("--chunks", type=int, default=None, help="Chunks per rank (default: per algorithm).")
@click.option("--root", type=int, default=None, help="Root rank of a rooted collective.")
@click.option("--inplace/--outofplace", default=None,
              help="Buffer layout; XML defaults to one file valid for both where allowed.")
@click.option("--sizes", default=None, help="Message sizes: 1KB:1GB (powers of 2) or 1KB,1MB.")
@click.option("--time-limit", type=float, default=None,
              help="Solver work budget in deterministic seconds (smt, milp): the same effort and "
                   "answer on any machine; a wall-clock safety net of 10x only stops runaway "
                   "solves, and the notes say when it did.")
@click.option("--steps", type=int, default=None, help="SMT: number of steps S.")
@click.option("--rounds", type=int, default=None, help="SMT: total rounds R (default: S).")
@click.option("--least-steps", is_flag=True, help="SMT: the latency-optimal algorithm.")
@click.option("--engine", default=None, help="Solver engine for the encoding (e.g. cpsat, z3).")
@click.option("--sketch", default=None, help="MILP: communication sketch (shipped name or file).")
@click.option("--solver", default=None, help="MILP: highs (default) | cbc | cpsat | gurobi.")
@click.option("--xml/--no-xml", "want_xml", default=True, show_default=True,
              help="Also write the verified MSCCL-IR XML.")
@click.option("--xml-profile", default="exec", show_default=True,
              type=click.Choice(["exec", "legacy", "rccl"]), help="Runtime the XML is for.")
@click.option("--proto", default="Simple", show_default=True,
              type=click.Choice(["Simple", "LL", "LL128"]))
@click.option("--instances", type=int, default=None,
              help="XML instances (channel sets; every chunk split that many ways). Default: "
                   "the program model picks 1, 2, 4 or 8 per size range (each file names its "
                   "count); the lock-step model and --format mscclpp use 1.")
@click.option("--max-threadblocks", default=64, show_default=True,
              help="Threadblocks per rank an XML may use (all run at once, one SM each); a "
                   "candidate that needs more is passed over, with the count, in the notes.")
@click.option("--min-bytes", default="0", show_default=True, help="XML minBytes (e.g. 1MB).")
@click.option("--max-bytes", default="0", show_default=True,
              help="XML maxBytes, inclusive (legacy files get +1); 0 = unbounded.")
@click.option("--format", "out_format", default="msccl", show_default=True,
              type=click.Choice(["msccl", "mscclpp"]),
              help="msccl: MSCCL-IR XML; mscclpp: an MSCCL++ execution plan (JSON), verified by the "
                   "plan interpreter; --proto (Simple, LL), --instances, --min/max-bytes apply.")
@click.option("--target", default="msccl", show_default=True,
              type=click.Choice(["msccl", "neuron", "jax"]),
              help="msccl: schedule + MSCCL-IR XML; neuron/jax: a composed vendor-primitive program.")
@click.option("--tensors", default=1, show_default=True, help="neuron/jax: tensors per call site.")
@click.option("--bytes", "nbytes", default=None, help="neuron/jax: bytes per tensor (e.g. 64MB).")
@click.option("--calibration", default=None, type=click.Path(),
              help="Calibration file from `synth calibrate`: msccl uses its measured α/β per link "
                   "class (`--format nccl-tests`); neuron/jax its closed-stack fit.")
@click.option("--out", "out_dir", default="out", show_default=True, type=click.Path(),
              help="Folder for the schedule files.")
@click.option("--max-memory", default=None,
              help="Memory budget (e.g. 8GB; default: half the machine's RAM): requests and "
                   "candidates estimated above it are refused before the work starts.")
@click.option("--program-model/--no-program-model", "want_program", default=True,
              show_default=True,
              help="Also time the written XML with the timed program model (program_us).")
@click.option("--winners-by", default="auto", show_default=True,
              type=click.Choice(["auto", "program", "lockstep"]),
              help="The model that picks each size range's file: program = the timed program "
                   "model of each candidate's XML (what runs); lockstep = the α-β step model; "
                   "auto = program where its estimated cost fits the budget, else lockstep (a "
                   "note says why).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def solve(topo_spec: str, coll_spec: str, nodes: int, group_spec: str | None,
          partition: str | None, encoding: str, algo: str | None,
          chunks: int | None, root: int | None, inplace: bool | None, sizes: str | None,
          time_limit: float | None, steps: int | None, rounds: int | None, least_steps: bool,
          engine: str | None, sketch: str | None, solver: str | None, want_xml: bool,
          xml_profile: str, proto: str, instances: int | None, max_threadblocks: int,
          min_bytes: str, max_bytes: str, out_format: str, target: str, tensors: int,
          nbytes: str | None, calibration: str | None, out_dir: str, max_memory: str | None,
          want_program: bool, winners_by: str, as_json: bool) -> None:
    """Synthesize a verified schedule and print its cost against the bound."""
    if partition is not None and group_spec is None:
        _solve_partition(click.get_current_context(), topo_spec, nodes, partition, coll_spec,
                         out_dir, as_json)
        return
    if target != "msccl":
        if group_spec is not None:
            raise SynthError("--group applies to --target msccl (a neuron/jax program runs on the "
                             "framework's own groups)")
        _solve_closed(topo_spec, coll_spec, nodes, target, tensors, nbytes, calibration, out_dir,
                      as_json)
        return
    from ..catalog.select import INSTANCES
    from ..emit import XmlOptions
    from ..files import check_writable_dir
    from ..solve import commit, prepare_best, prepare_winners
    from ..solve import solve as run_solve

    if chunks is not None and chunks < 1:
        raise SynthError(f"--chunks must be at least 1, got {chunks}")
    if (sketch or solver) and encoding not in ("milp", "auto"):
        raise SynthError(f"--sketch and --solver are options of the milp encoding, not of "
                         f"'{encoding}' (use --encoding milp or auto)")
    if instances is not None and instances < 1:
        raise SynthError(f"--instances must be at least 1, got {instances}")
    tried = None if instances is not None else INSTANCES   # the program model's choice
    instances = instances or 1
    if out_format == "mscclpp" and proto not in ("Simple", "LL"):
        raise SynthError(f"--format mscclpp emits the Simple or LL protocol, not {proto}")
    size_list = parse_sizes(sizes) if sizes else DEFAULT_SIZES
    if max_threadblocks < 1:
        raise SynthError(f"--max-threadblocks must be at least 1, got {max_threadblocks}")
    xml = XmlOptions(profile=xml_profile, proto=proto, instances=instances,
                     min_bytes=_bytes(min_bytes), max_bytes=_bytes(max_bytes),
                     inplace=inplace, max_threadblocks=max_threadblocks) if want_xml else None
    if xml is not None and out_format == "msccl" and not any(
            s >= xml.min_bytes and (not xml.max_bytes or s <= xml.max_bytes) for s in size_list):
        # refused before solving (rank_sizes would refuse it after): no XML could serve any size
        raise SynthError(f"no size of the sweep ({size_list[0]}..{size_list[-1]} bytes) lies in the "
                         f"XML's byte range {xml.min_bytes}..{xml.max_bytes or 'unbounded'} "
                         "(--min-bytes/--max-bytes)")
    from ..guards import Budget, check_request
    from ..topology_io import load_group

    budget = Budget.of(max_memory, None if out_format == "mscclpp" else xml)
    base, group = load_group(topo_spec, nodes, group_spec, partition)
    topology = _with_calibration(base, calibration)
    if coll_spec in KINDS:  # sized before the collective is built (10^9 chunks do not fit)
        check_request(coll_spec, topology.num_ranks, chunks, budget)
    collective = load_collective(coll_spec, topology.num_ranks, chunks or 1, root, bool(inplace))
    target = check_writable_dir(Path(out_dir))  # created when the first file is written
    with progress.activate(console=err, quiet_on_terminal=as_json), \
            progress.phase(f"solving {collective.name} on {topology.name} ({encoding})"):
        extra = {k: v for k, v in (("steps", steps), ("rounds", rounds), ("engine", engine),
                                   ("sketch", sketch), ("solver", solver)) if v is not None}
        if least_steps:
            extra["least_steps"] = True
        nccl_cal = _nccl_calibration(calibration)
        result = run_solve(topology, collective, encoding=encoding, algorithm=algo,
                           sizes=size_list, time_limit_s=time_limit, chunks=chunks, extra=extra,
                           nccl_calibration=nccl_cal, budget=budget)
        plan = None
        if out_format == "mscclpp":
            from ..catalog.emit import sm_count
            from ..solve import PlanOptions, PlanTarget

            plan = PlanTarget(topology, PlanOptions(proto=proto, instances=instances,
                                                    max_threadblocks=sm_count(topology),
                                                    min_bytes=_bytes(min_bytes),
                                                    max_bytes=_bytes(max_bytes)))
        # every file is produced and verified in memory first, and written only after every
        # later stage that can fail (timing, comparison): a failure leaves nothing on disk
        if plan is not None:
            result.best, written = prepare_best(result, target, None, plan,
                                                _calibration_tag(calibration))
        else:
            from ..solve import winners_model

            model, decided_by, model_notes = winners_model(result, topology, xml, winners_by,
                                                           calibration, instances=tried)
            result.notes += model_notes
            written = prepare_winners(result, target, xml, model,
                                      _calibration_tag(calibration), decided_by)
            result.best = written.ranges[-1].candidate  # the one serving the largest size
    texts = dict(written.pending)
    rank_files: dict[Path, str] = {}
    if group is not None:
        from ..groups import rank_maps

        rank_files = rank_maps(written.files, group)
    from ..solve import compare_with_nccl

    runtime = _runtime(result, written, topology, size_list, proto, instances, calibration)
    program_us = (_program_times(written, texts, topology, size_list, xml_profile, calibration)
                  if want_program else None)
    vs_nccl = compare_with_nccl(result.best.schedule, topology, size_list, nccl_cal, calibration,
                                program_us)
    commit(written, rank_files)
    files = [str(f) for f in written.files]
    if as_json:
        data = _solve_json(result, files, written)
        data["runtime"] = runtime.to_dict()
        data["vs_nccl"] = [c.to_dict() for c in vs_nccl] if vs_nccl is not None else None
        data["program_us"] = ({str(n): (round(t, 4) if t != float("inf") else None)
                               for n, t in zip(size_list, program_us, strict=True)}
                              if program_us is not None else None)
        click.echo(dumps_json(data, indent=2))
        return
    _print_solve(result, files, written, vs_nccl, program_us, runtime)
    for note in written.notes:
        out.print(f"[yellow]{note}[/yellow]")
    for rep in written.xml_reports:
        out.print(f"XML verified by the interpreter ({rep.mode}): {rep.threadblocks} threadblocks, "
                  f"{rep.operations} operations, {rep.messages} messages")
    for rep in written.plan_reports:
        out.print(f"MSCCL++ plan verified by the plan interpreter: {rep.threadblocks} threadblocks, "
                  f"{rep.operations} operations, {rep.signals} signals, postcondition holds")


def _runtime(result: Any, written: Any, topology: Topology, sizes: list[int], proto: str,
             instances: int, calibration: str | None) -> Any:
    """:func:`synth.solve.runtime_profile` of what serves each size (the best candidate's file
    when no size ranges were chosen), each range with its file's instances; ``max_bytes`` and
    ``instances`` are the largest range's file's."""
    from ..solve import RuntimeProfile, runtime_profile

    if not written.ranges:
        return runtime_profile(result.best.schedule, topology, sizes, proto, instances, calibration)
    parts = [runtime_profile(r.candidate.schedule, topology, list(r.sizes), proto, r.instances,
                             calibration) for r in written.ranges if r.sizes]
    return RuntimeProfile(proto, parts[-1].instances, parts[-1].max_bytes, parts[-1].source,
                          [p for part in parts for p in part.points])


def _solve_partition(ctx: click.Context, topo_spec: str, nodes: int, partition: str,
                     coll_spec: str, out_dir: str, as_json: bool) -> None:
    """``solve --concurrent P`` without ``--group``: each group of P, into OUT/<group>/, after a
    table of each group's bound alone and with the others running. When a group fails, the
    folders this call created for the groups before it are removed (a folder that was there
    before keeps what the earlier groups wrote into it)."""
    from ..bounds import lower_bound
    from ..collectives import make_collective
    from ..groups import concurrent, induced, parse_partition

    if as_json:
        raise SynthError("--json with --concurrent needs --group (one JSON object per solve)")
    whole = load_topology(topo_spec, nodes)
    groups = parse_partition(partition, whole)
    together, shares = concurrent(whole, groups)
    table = Table(title=f"{len(groups)} concurrent groups ({partition}) on {whole.name}: "
                        f"{coll_spec} bandwidth bound (µs per MB of buffer)")
    for col in ("group", "ranks", "alone", "concurrent", "ratio"):
        table.add_column(col)
    for g, sub in zip(groups, together, strict=True):
        if coll_spec not in KINDS:
            break
        coll = make_collective(coll_spec, len(g.members))
        alone = lower_bound(induced(whole, g), coll).inv_bandwidth_us_per_byte * 1e6
        both = lower_bound(sub, coll).inv_bandwidth_us_per_byte * 1e6
        table.add_row(g.spec, str(len(g.members)), f"{alone:.4g}", f"{both:.4g}",
                      f"{both / alone:.3g}x" if alone else "-")
    out.print(table)
    out.print(f"{len(shares)} port(s)/NIC(s) shared between groups"
              + (f", e.g. {shares[0].resource} by {', '.join(shares[0].groups)}" if shares else ""))
    base = Path(out_dir)
    created = [p for p in (base, *(base / g.label for g in groups)) if not p.exists()]
    try:
        for g in groups:
            out.print(f"[bold]group {g.spec}[/bold]")
            ctx.invoke(solve, **{**ctx.params, "group_spec": g.spec, "out_dir": str(base / g.label)})
    except BaseException:
        # all groups or none: a later group's failure takes back the folders this call made
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        raise


def _program_times(written: Any, texts: dict[Path, str], topology: Topology, sizes: list[int],
                   profile: str, calibration: str | None) -> list[float] | None:
    """Per size, the time of the XML that serves it under the timed program model (None without
    an XML).

    ``texts``: the files to be written (path -> text); they are timed before anything is written,
    so a failure here leaves no file behind. Every XML was verified by the interpreter when it
    was produced (``emit_verified_xml``).
    """
    from ..emit.xml_parse import parse_program
    from ..program_model import program_times_us

    by_name = {str(path): text for path, text in texts.items()}
    serving = {p.bytes: f for p, _, f in _served(written)}
    if not any(serving.values()):
        xml = [f for f in by_name if f.endswith(".xml")]
        if not xml:
            return None
        serving = dict.fromkeys(sizes, xml[0])
    out: dict[int, float] = {}
    for f in dict.fromkeys(v for v in serving.values() if v):
        mine = [n for n in sizes if serving.get(n) == f]
        times = program_times_us(parse_program(by_name[f], f, profile), topology, mine,
                                 calibration=calibration, profile=profile)
        out.update(zip(mine, times, strict=True))
    return [out.get(n, float("inf")) for n in sizes]


def _calibration_tag(calibration: str | None) -> str:
    """``cal-<digest>`` for output names: a calibrated topology gives other schedules."""
    if calibration is None:
        return ""
    import hashlib

    return "cal-" + hashlib.sha256(Path(calibration).read_bytes()).hexdigest()[:8]


def _nccl_calibration(calibration: str | None) -> Any:
    """The ``nccl_model`` section of a calibration file (None: NCCL's own figures)."""
    if calibration is None:
        return None
    from ..calibrate.format import load_calibration
    from ..nccl_model import calibration_of
    return calibration_of(load_calibration(calibration))


def _with_calibration(topology: Topology, calibration: str | None) -> Topology:
    """``topology`` with a calibration's measured link-class α/β (unchanged without one).

    Encodings then optimise, and costs are predicted, for the measured machine. The topology keeps
    its name but not its content hash, so a schedule solved with a calibration is verified and
    simulated with the same ``--calibration``.
    """
    if calibration is None:
        return topology
    from ..calibrate.format import apply_calibration
    return apply_calibration(topology, calibration)


def _solve_closed(topo_spec: str, coll_spec: str, nodes: int, target: str, tensors: int,
                  nbytes: str | None, calibration: str | None, out_dir: str, as_json: bool) -> None:
    """`solve --target neuron|jax`: rank strategies, prove the winner on the stand-in, write it."""
    import time

    from ..closed import emit_closed_program, resolve_topology
    from ..files import check_writable_dir

    if tensors < 1:
        raise SynthError(f"--tensors must be at least 1, got {tensors}")
    if calibration is not None and not Path(calibration).exists():
        raise SynthError(f"calibration file '{calibration}' does not exist")
    topology = resolve_topology(topo_spec, nodes)
    size = parse_size(nbytes) if nbytes else None
    target_dir = check_writable_dir(Path(out_dir))  # created when the program is written
    start = time.perf_counter()
    files = emit_closed_program(topology, coll_spec, target, target_dir, nbytes=size,
                                tensors=tensors, calibration=calibration)
    report = json.loads(files[1].read_text())
    data = {"topology": topology.name, "collective": coll_spec, "ranks": topology.num_ranks,
            "target": target, "verified": True, "solve_seconds": round(time.perf_counter() - start, 3),
            "files": [str(f) for f in files], "strategy": report.get("winner", report)}
    if as_json:
        click.echo(dumps_json(data, indent=2))
        return
    out.print(f"[bold]{coll_spec}[/bold] on [bold]{topology.name}[/bold] for {target}: "
              f"program proven on the NumPy stand-in of the vendor primitives")
    for f in files:
        out.print(f"wrote {f}")


def _bytes(text: str) -> int:
    return 0 if text.strip() == "0" else parse_size(text)


def _served(written: Any) -> list[tuple[Any, Any, str | None]]:
    """Per swept size: (its cost point under the winner, the winner, the file serving it); empty
    when no size ranges were chosen (an MSCCL++ plan)."""
    out = []
    for r, f in zip(written.ranges, written.range_files, strict=True):
        at = {p.bytes: p for p in r.candidate.costs}
        out.extend((at[size], r.candidate, f) for size in r.sizes)
    return out


def _solve_json(result: Any, files: list[str], written: Any) -> dict[str, Any]:
    from ..solve import ranges_table

    best = result.best
    served = _served(written) or [(p, best, None) for p in best.costs]
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
        "files": files,
        "bound": {"method": result.bound.method, "latency_us": result.bound.latency_us,
                  "steps": result.bound.steps},
        "costs": [{**p.to_dict(), "algorithm": c.name, "file": f} for p, c, f in served],
        "ranges": [r.to_dict(f) for r, f in zip(written.ranges, written.range_files, strict=True)],
        "winners_by": written.winners_by,
        "range_table": ranges_table(result, written.ranges, written.range_files,
                                    written.winners_by),
        "candidates": [{"name": c.name, "algorithm": c.schedule.algorithm, "steps": c.report.steps,
                        "score_pct": round(100 * c.score, 3),
                        "time_us": {str(p.bytes): round(p.time_us, 6) for p in c.costs}}
                       for c in result.candidates],
    }


def _print_solve(result: Any, files: list[str], written: Any, vs_nccl: Any = None,
                 program_us: list[float] | None = None, runtime: Any = None) -> None:
    best = result.best
    s = best.schedule
    out.print(f"[bold]{result.collective.name}[/bold] on [bold]{result.topology.name}[/bold] "
              f"({result.topology.num_ranks} ranks): {s.encoding}/{s.algorithm}, "
              f"{best.report.steps} steps, {best.report.rounds} rounds, "
              f"{s.collective.chunks_per_rank} chunk(s)/rank — [green]verified[/green] "
              f"in {result.seconds:.2f} s")
    if result.encoding == "auto":
        from ..encodings import auto_reason

        out.print(f"auto: {auto_reason(result.topology, result.collective)}; each size range "
                  f"gets its fastest candidate (by the {written.winners_by} model)")
    if s.meta.get("why"):
        out.print(f"why: {s.meta['why']}")
    model = ("NCCL's tuning model" if s.meta.get("time_model") == "nccl"
             else "step model, no runtime floors")
    table = Table(title=f"predicted cost of what is written ({model}; bound: "
                        f"{result.bound.method})")
    cols = ["size", "algorithm", "model_us", "algbw GB/s", "bound µs", "% of bound"]
    if program_us is not None:
        runtime = None      # the written file, timed, already runs its --proto and --instances
    if runtime is not None:
        cols.append("runtime_us")
    if program_us is not None:
        cols.append("program_us")
    for col in cols:
        table.add_column(col, justify="right")
    run_at = {p.bytes: p.time_us for p in runtime.points} if runtime is not None else {}
    served = _served(written) or [(p, best, None) for p in best.costs]
    for i, (p, c, _) in enumerate(served):
        row = [format_size(p.bytes), c.name, f"{p.time_us:.2f}", f"{p.algbw_GBps:.2f}",
               f"{p.bound_us:.2f}", f"{p.pct_of_bound:.1f}"]
        if runtime is not None:
            t = run_at[p.bytes]
            row.append(f"{t:.2f}" if t != float("inf") else "too large")
        if program_us is not None:
            t = program_us[i]
            row.append(f"{t:.2f}" if t != float("inf") else "deadlock")
        table.add_row(*row)
    out.print(table)
    if len(written.ranges) > 1:
        from ..solve import ranges_table

        by = written.winners_by
        rt = Table(title=f"size range -> file, winners by the {by} model (times and % of bound "
                         "at the range's largest size)")
        for col in ("min bytes", "max bytes", "algorithm", "x", f"{by} µs", "lock-step µs",
                    "% of bound", "file"):
            rt.add_column(col, justify="left" if col in ("algorithm", "file") else "right")
        for row_ in ranges_table(result, written.ranges, written.range_files, by):
            rt.add_row(str(row_["min_bytes"]), str(row_["max_bytes"] or "unbounded"),
                       row_["algorithm"] + (" (lock-step)" if row_["winners_by"] != by else ""),
                       str(row_["instances"]),
                       f"{row_['decided_us']:.2f}" if row_["decided_us"] is not None else "—",
                       f"{row_['time_us']:.2f}" if row_["time_us"] else "—",
                       f"{row_['pct_of_bound']:.1f}" if row_["pct_of_bound"] else "—",
                       Path(row_["file"]).name if row_["file"] else "—")
        out.print(rt)
    if runtime is not None:
        too_large = any(t == float("inf") for t in run_at.values())
        out.print(f"[dim]runtime_us: run by the MSCCL runtime with --proto {runtime.proto} "
                  f"--instances {runtime.instances} (synth.protocols, the catalogs' model: launch, "
                  "per-step synchronisation, channel caps)"
                  + (f"; too large: beyond the {runtime.max_bytes} bytes the file can run"
                     if too_large else "") + "[/dim]")
    if program_us is not None:
        out.print("[dim]model_us: the lock-step model above; program_us: the written XML run by the "
                  "timed program model (synth.program_model: threadblocks, grid iterations, FIFO "
                  "slots, shared links; validated in results/reality_msccl.md)[/dim]")
    if vs_nccl is not None:
        from ..nccl_model import SOURCE

        cmp = Table(title="against NCCL (both with their runtime floors)")
        for col in ("size", "runtime µs", "timed by", "NCCL µs", "NCCL runs", "vs NCCL"):
            cmp.add_column(col, justify="right")
        for c in vs_nccl:
            cmp.add_row(format_size(c.bytes), f"{c.runtime_us:.2f}", c.runtime_proto,
                        f"{c.nccl_us:.2f}", f"{c.nccl_algo}/{c.nccl_proto} x{c.nccl_channels}",
                        f"{c.speedup:.2f}x")
        out.print(cmp)
        out.print("[dim]runtime: this schedule as the MSCCL runtime runs it — 'program': the "
                  "written XML under the timed program model; a protocol name: the step model "
                  "plus that protocol's launch and per-step floors (synth.protocols). NCCL: what "
                  f"NCCL's tuner runs and its time ({SOURCE}; validated in results/reality.md). "
                  "vs NCCL = NCCL / runtime[/dim]")
    if len(result.candidates) > 1:
        sizes = [best.costs[0].bytes, best.costs[len(best.costs) // 2].bytes, best.costs[-1].bytes]
        cand = Table(title="candidates (time µs; best first)")
        cand.add_column("algorithm")
        cand.add_column("steps", justify="right")
        for size in sizes:
            cand.add_column(format_size(size), justify="right")
        cand.add_column("mean % of bound", justify="right")
        for c in result.candidates:
            by = {p.bytes: p.time_us for p in c.costs}
            cand.add_row(c.name, str(c.report.steps), *(f"{by[z]:.1f}" for z in sizes),
                         f"{100 * c.score:.1f}")
        out.print(cand)
    for f in files:
        out.print(f"wrote {f}")


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------------------------- verify
def _load_schedule(path: str, topo_spec: str | None, calibration: str | None = None,
                   check: bool = True) -> tuple[Schedule, Topology]:
    from ..files import read_input

    schedule = Schedule.from_json(read_input(path, "schedule file"), path)
    topology = _with_calibration(load_topology(topo_spec or schedule.topology), calibration)
    if (check and schedule.topology_hash and schedule.topology_hash != topology.content_hash
            and schedule.topology == topology.name):
        raise SynthError(f"'{path}' was made for another version of '{topology.name}' (different "
                         "link figures): if it was solved with --calibration, pass the same "
                         "--calibration here")
    return schedule, topology


@click.command("verify")
@click.argument("file")
@click.option("--topo", "topo_spec", default=None, help="Topology, if not the one the file names.")
@click.option("--mode", default="both", show_default=True,
              type=click.Choice(["inplace", "outofplace", "both"]),
              help="XML: which declared modes to execute.")
@click.option("--xml-profile", default="exec", show_default=True,
              type=click.Choice(["exec", "legacy", "rccl"]), help="XML: the runtime's rules.")
@click.option("--root", type=int, default=None, help="XML broadcast/reduce: the root rank.")
@click.option("--calibration", default=None, type=click.Path(),
              help="Schedule JSON solved with `solve --calibration`: the same calibration file.")
@click.option("--json", "as_json", is_flag=True)
def verify_cmd(file: str, topo_spec: str | None, mode: str, xml_profile: str, root: int | None,
               calibration: str | None, as_json: bool) -> None:
    """Verify a schedule JSON, MSCCL-IR XML or MSCCL++ plan JSON: exit 0 if correct, 1 if not."""
    from ..verify import verify

    # options that do not apply to the file are refused, not ignored: "verified" after
    # `--topo ring:4` on an 8-rank XML read as a check against ring:4 that never happened
    ignored = [name for name, value in (("--topo", topo_spec), ("--calibration", calibration))
               if value is not None]
    verb = "do" if len(ignored) > 1 else "does"
    if file.endswith(".xml"):
        if ignored:
            raise SynthError(f"{' and '.join(ignored)} {verb} not apply to an MSCCL-IR XML: the "
                             "interpreter checks it against the runtime's rules, not a topology "
                             "(time it on one with `synth simulate FILE --topo T`)")
        _verify_xml(file, mode, xml_profile, root, as_json)
        return
    if root is not None:
        raise SynthError("--root applies to an MSCCL-IR XML (a schedule JSON or MSCCL++ plan "
                         "states its root)")
    if _is_mscclpp_plan(file):
        if ignored:
            raise SynthError(f"{' and '.join(ignored)} {verb} not apply to an MSCCL++ plan: the "
                             "plan interpreter checks it per rank, not against a topology")
        _verify_mscclpp(file, as_json)
        return
    schedule, topology = _load_schedule(file, topo_spec, calibration)
    with progress.activate(console=err, quiet_on_terminal=as_json), \
            progress.phase(f"verify {file} ({schedule.num_transfers:,} transfers)"):
        report = verify(schedule, topology)
    if as_json:
        click.echo(dumps_json({"file": file, "verified": True, "steps": report.steps,
                               "rounds": report.rounds, "transfers": report.transfers}, indent=2))
        return
    out.print(f"[green]verified[/green]: {schedule.collective.name} on {topology.name}, "
              f"{report.steps} steps, {report.rounds} rounds, {report.transfers} transfers")


def _is_mscclpp_plan(file: str) -> bool:
    from ..files import read_input
    from ..mscclpp import is_plan_text

    return file.endswith(".json") and is_plan_text(read_input(file))


def _verify_mscclpp(file: str, as_json: bool) -> None:
    from ..mscclpp import verify_plan_file

    _, r = verify_plan_file(file)
    if as_json:
        click.echo(dumps_json({"file": file, "verified": True, "format": "mscclpp",
                               "collective": r.collective, "protocol": r.protocol,
                               "ranks": r.ranks, "threadblocks": r.threadblocks,
                               "operations": r.operations, "signals": r.signals,
                               "postcondition": r.postcondition}, indent=2))
        return
    post = "postcondition holds" if r.postcondition else \
        f"no postcondition known for '{r.collective}': checked for races, deadlocks and ranges only"
    out.print(f"[green]verified[/green]: {file} (MSCCL++ plan '{r.name}', {r.collective}, "
              f"{r.protocol}, {r.ranks} ranks): {r.threadblocks} threadblocks, {r.operations} "
              f"operations, {r.signals} signals; {post}")


def _verify_xml(file: str, mode: str, profile: str, root: int | None, as_json: bool) -> None:
    from ..emit.interpreter import MODES, verify_program
    from ..emit.xml_parse import normalize_coll, parse_program
    from ..files import read_input

    program = parse_program(read_input(file, "XML file"), file, profile)
    expected = None
    if root is not None:
        kind = normalize_coll(program.coll)
        chunks = program.nchunksperloop
        expected = load_collective(kind, program.ngpus, chunks, root)
    modes = MODES if mode == "both" else (mode,)
    with progress.activate(console=err, quiet_on_terminal=as_json), \
            progress.phase(f"interpreter: {file} ({', '.join(modes)})"):
        reports = verify_program(program, modes, collective=expected, profile=profile)
    if as_json:
        click.echo(dumps_json({"file": file, "verified": True, "profile": profile,
                               "modes": [r.mode for r in reports],
                               "threadblocks": reports[0].threadblocks,
                               "operations": reports[0].operations,
                               "warnings": reports[0].warnings}, indent=2))
        return
    for w in reports[0].warnings:   # advice: portability rules the runtimes do not enforce
        err.print(f"warning: {w}", markup=False, soft_wrap=True)
    for r in reports:
        out.print(f"[green]verified[/green]: {file} ({r.collective}, {program.ngpus} ranks, "
                  f"{r.mode}): {r.threadblocks} threadblocks, {r.operations} operations, "
                  f"{r.messages} messages")


@click.command()
@click.argument("file")
@click.option("--topo", "topo_spec", default=None,
              help="Topology, if not the one the file names (required for an XML file).")
@click.option("--nodes", default=1, show_default=True, help="XML: join N copies through their NICs.")
@click.option("--sizes", default=None, help="Message sizes: 1KB:1GB or 1KB,1MB.")
@click.option("--calibration", default=None, type=click.Path(),
              help="Predict with measured α/β per link class (`synth calibrate --format nccl-tests`).")
@click.option("--xml-profile", default="exec", show_default=True,
              type=click.Choice(["exec", "legacy", "rccl"]), help="XML: the runtime's rules.")
@click.option("--trace", "trace_path", default=None, type=click.Path(),
              help="XML: write a Chrome/Perfetto trace of the largest size to this file.")
@click.option("--json", "as_json", is_flag=True)
def simulate(file: str, topo_spec: str | None, nodes: int, sizes: str | None,
             calibration: str | None, xml_profile: str, trace_path: str | None,
             as_json: bool) -> None:
    """Predict a schedule's (α-β model) or an MSCCL-IR XML program's (timed model) time over sizes."""
    from ..solve import cost_profile
    from ..verify import verify

    if file.endswith(".xml"):
        _simulate_xml(file, topo_spec, nodes, sizes, calibration, xml_profile, trace_path, as_json)
        return
    if trace_path is not None or nodes != 1:
        raise SynthError("--trace and --nodes apply to MSCCL-IR XML files only")
    schedule, base = _load_schedule(file, topo_spec, None, check=calibration is None)
    topology = _with_calibration(base, calibration)
    # a schedule solved without the calibration is checked on the file's figures, then costed
    # with the measured ones; one solved with it names the calibrated topology itself
    with progress.activate(console=err, quiet_on_terminal=as_json), \
            progress.phase(f"simulate {file} ({schedule.num_transfers:,} transfers)"):
        verify(schedule, base if schedule.topology_hash == base.content_hash else topology)
        points = cost_profile(schedule, topology, parse_sizes(sizes) if sizes else DEFAULT_SIZES)
    if as_json:
        click.echo(dumps_json({"file": file, "costs": [p.to_dict() for p in points]}, indent=2))
        return
    table = Table(title=f"{schedule.algorithm}: {schedule.collective.name} on {topology.name}")
    for col in ("size", "time µs", "algbw GB/s", "% of bound"):
        table.add_column(col, justify="right")
    for p in points:
        table.add_row(format_size(p.bytes), f"{p.time_us:.2f}", f"{p.algbw_GBps:.2f}",
                      f"{p.pct_of_bound:.1f}")
    out.print(table)


def _simulate_xml(file: str, topo_spec: str | None, nodes: int, sizes: str | None,
                  calibration: str | None, profile: str, trace_path: str | None,
                  as_json: bool) -> None:
    """Verify the XML with the interpreter (exit 1 with its message if it fails), then time it."""
    from ..emit.interpreter import verify_program
    from ..emit.xml_parse import parse_program
    from ..files import read_input
    from ..program_model import program_model, program_time, sweep, write_trace

    if topo_spec is None:
        raise SynthError("an XML file names no topology: pass --topo (and --nodes)")
    if trace_path is not None:
        from ..files import check_output_file
        check_output_file(Path(trace_path), "--trace")
    program = parse_program(read_input(file, "XML file"), file, profile)
    topology = _with_calibration(load_topology(topo_spec, nodes), calibration)
    verify_program(program, profile=profile)
    size_list = parse_sizes(sizes) if sizes else DEFAULT_SIZES
    model = program_model(topology, program.proto, calibration)
    points = sweep(program, topology, size_list, model=model, profile=profile)
    if trace_path is not None:
        timing = program_time(program, topology, max(size_list), model=model, profile=profile,
                              trace=True)
        write_trace(timing, program, trace_path)
    if as_json:
        click.echo(dumps_json({"file": file, "topology": topology.name, "model": model.to_dict(),
                               "costs": [p.to_dict() for p in points]}, indent=2))
        return
    table = Table(title=f"{program.name or file}: {program.coll} ({program.proto}, "
                        f"{program.nchannels} channels) on {topology.name}, timed program model")
    for col in ("size", "time µs", "algbw GB/s", "busbw GB/s", "% of bound", "iters", "M",
                "messages"):
        table.add_column(col, justify="right")
    for p in points:
        size = format_size(p.bytes) + ("" if p.in_range else " *")
        if p.time_us == float("inf"):
            table.add_row(size, "deadlock", "-", "-", "-", str(p.iterations), str(p.max_count), "-")
            continue
        table.add_row(size, f"{p.time_us:.2f}", f"{p.algbw_GBps:.2f}", f"{p.busbw_GBps:.2f}",
                      f"{p.pct_of_bound:.1f}", str(p.iterations), str(p.max_count), str(p.messages))
    out.print(table)
    if not all(p.in_range for p in points):
        out.print("* outside the file's minBytes..maxBytes: the runtime would not select it there")
    if trace_path is not None:
        out.print(f"trace ({format_size(max(size_list))}): {trace_path}")
