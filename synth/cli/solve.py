"""``synth solve``, ``synth verify``, ``synth simulate``: synthesize, check and cost schedules.

Parse arguments, call the library, print; nothing else lives here.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from .. import progress, relabel
from ..bounds import lower_bound
from ..calibrated import apply_calibration
from ..collectives import KINDS, load_collective, make_collective
from ..emit import XmlOptions
from ..emit.interpreter import MODES, verify_program
from ..emit.runtimes import normalize_coll
from ..emit.xml_parse import parse_program
from ..errors import SynthError
from ..files import check_output_file, check_writable_dir, dumps_json, read_input
from ..groups import Group, concurrent, induced, parse_partition
from ..guards import MAX_XML_STEPS, XML_SECONDS_PER_STEP, memory_backstop, parse_memory
from ..mscclpp import is_plan_text, verify_plan_file
from ..outputs import commit
from ..schedule import Schedule
from ..select.candidates import cost_profile
from ..sizes import DEFAULT_SIZES, format_size, parse_size, parse_sizes
from ..solve import SolveOutcome, SolveRequest, machine_of, run
from ..solve_closed import ClosedOutcome
from ..timing.program import program_model, program_time, sweep, write_trace
from ..topology import Topology
from ..topology_io import load_group, load_topology
from ..verify import verify
from .console import err, out
from .solve_report import closed_json, print_closed, print_solve, solve_json


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
                   "OUT/<group>/ (a group on an earlier group's machine, up to the name, gets "
                   "that group's files relabelled and verified again).")
@click.option("--encoding", default="auto", show_default=True, help="auto | baseline | ...")
@click.option("--algo", default=None, help="Baseline algorithm (ring, bidir_ring, direct, ...).")
@click.option("--chunks", type=int, default=None, help="Chunks per rank (default: per algorithm).")
@click.option("--root", type=int, default=None, help="Root rank of a rooted collective.")
@click.option("--inplace/--outofplace", default=None,
              help="Buffer layout: XML for that kind of call only. Default: one in-place and "
                   "one out-of-place file per size range where a file could serve both.")
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
@click.option("--proto", default=None, type=click.Choice(["Simple", "LL", "LL128"]),
              help="Compile every file in this protocol. Default: the program model times each "
                   "candidate in all three and each range's file is compiled in the fastest "
                   "(Simple where the lock-step model decides).")
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
@click.option("--format", "out_format", default="auto", show_default=True,
              type=click.Choice(["auto", "msccl", "mscclpp", "neuron", "jax"]),
              help="auto: msccl where the ranks are GPUs, neuron on Trainium, jax on TPU. msccl: "
                   "schedule + MSCCL-IR XML; mscclpp: an MSCCL++ execution plan (JSON), verified by "
                   "the plan interpreter (--proto Simple or LL); neuron/jax: one torch-neuronx / JAX "
                   "module running the fastest program per size range (synthesized schedules "
                   "lowered to permutes, or compositions of the vendor's calls), each proven on a "
                   "NumPy stand-in.")
@click.option("--target", default=None, hidden=True,
              type=click.Choice(["msccl", "neuron", "jax"]),
              help="Deprecated alias of --format (kept for one release).")
@click.option("--calibration", default=None, type=click.Path(),
              help="Calibration file from `synth calibrate`: msccl uses its measured α/β per link "
                   "class (`--format nccl-tests`); neuron/jax its closed-stack fit.")
@click.option("--out", "out_dir", default="out", show_default=True, type=click.Path(),
              help="Folder for the schedule files.")
@click.option("--max-memory", default=None,
              help="Memory budget (e.g. 8GB; default: half the machine's RAM): requests and "
                   "candidates estimated above it are refused before the work starts.")
@click.option("--max-xml-steps", type=int, default=None,
              help="XML work budget: a candidate whose program is estimated above this many steps "
                   f"over all ranks (default {MAX_XML_STEPS}: compiling and proving them took about"
                   f" {XML_SECONDS_PER_STEP * MAX_XML_STEPS / 60:.0f} min on 2 cores) is passed "
                   "over before it is compiled. 0: no limit.")
@click.option("--program-model/--no-program-model", "want_program", default=True,
              show_default=True,
              help="Also time the written XML with the timed program model (program_us).")
@click.option("--winners-by", default="auto", show_default=True,
              type=click.Choice(["auto", "program", "lockstep"]),
              help="The model that picks each size range's file: program = the timed program "
                   "model of each candidate's XML (what runs); lockstep = the α-β step model; "
                   "auto = program where its estimated cost fits the budget, else lockstep (a "
                   "note says why).")
@click.option("--nccl/--no-nccl", "compete", default=True, show_default=True,
              help="NCCL competes for every size (its own model, where NCCL runs): the sizes where "
                   "it is faster get no file and stay with NCCL. --no-nccl writes a file for "
                   "every size, however it compares (the comparison is still printed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def solve(topo_spec: str, coll_spec: str, nodes: int, group_spec: str | None,
          partition: str | None, encoding: str, algo: str | None,
          chunks: int | None, root: int | None, inplace: bool | None, sizes: str | None,
          time_limit: float | None, steps: int | None, rounds: int | None, least_steps: bool,
          engine: str | None, sketch: str | None, solver: str | None, want_xml: bool,
          xml_profile: str, proto: str | None, instances: int | None, max_threadblocks: int,
          min_bytes: str, max_bytes: str, out_format: str, target: str | None,
          calibration: str | None, out_dir: str, max_memory: str | None,
          max_xml_steps: int | None, want_program: bool, winners_by: str, compete: bool,
          as_json: bool) -> SolveOutcome | ClosedOutcome | None:
    """Synthesize verified schedules and write, per size range, the fastest, or leave the range
    to NCCL where NCCL is faster. Returns what was solved (None for a whole partition), so
    ``--concurrent`` can relabel one group's files for another on the same machine."""
    if target is not None:
        err.print("note: --target is deprecated; use --format (the same values)")
        if out_format != "auto" and out_format != target:
            raise SynthError(f"--target {target} and --format {out_format} disagree: "
                             "--format alone says what to write")
        out_format = target
    if partition is not None and group_spec is None:
        _solve_partition(click.get_current_context(), topo_spec, nodes, partition, coll_spec,
                         out_dir, as_json)
        return None
    extra = {k: v for k, v in (("steps", steps), ("rounds", rounds), ("engine", engine),
                               ("sketch", sketch), ("solver", solver)) if v is not None}
    if least_steps:
        extra["least_steps"] = True
    xml = XmlOptions(profile=xml_profile, min_bytes=_bytes(min_bytes),
                     max_bytes=_bytes(max_bytes), inplace=inplace,
                     max_threadblocks=max_threadblocks) if want_xml else None
    request = SolveRequest(
        topo=topo_spec, coll=coll_spec, nodes=nodes, group=group_spec, partition=partition,
        encoding=encoding, algorithm=algo, chunks=chunks, root=root, inplace=inplace,
        sizes=parse_sizes(sizes) if sizes else DEFAULT_SIZES, time_limit_s=time_limit,
        extra=extra, xml=xml, proto=proto, instances=instances, format=out_format,
        calibration=calibration, out_dir=Path(out_dir), max_memory=max_memory,
        max_xml_steps=max_xml_steps, time_program=want_program, winners_by=winners_by, nccl=compete)
    memory_backstop(parse_memory(max_memory))
    with progress.activate(console=err, quiet_on_terminal=as_json):
        done = run(request)
    if isinstance(done, ClosedOutcome):
        if as_json:
            click.echo(dumps_json(closed_json(done), indent=2))
            return done
        print_closed(done)
        return done
    if as_json:
        click.echo(dumps_json(solve_json(done, request.sizes), indent=2))
        return done
    print_solve(done)
    return done


def _solve_partition(ctx: click.Context, topo_spec: str, nodes: int, partition: str,
                     coll_spec: str, out_dir: str, as_json: bool) -> None:
    """``solve --concurrent P`` without ``--group``: each group of P, into OUT/<group>/, after a
    table of each group's bound alone and with the others running. A group whose machine is an
    earlier group's up to its name (:func:`synth.relabel.same_machine`: the stride groups of a
    symmetric machine) is not solved again: it gets that group's files relabelled, verified
    again and committed as a solve commits them (:func:`synth.relabel.relabel`; off with
    ``synth.relabel.REUSE``). When a group fails, the folders this call created for the groups
    before it are removed (a folder that was there before keeps what the earlier groups wrote
    into it)."""
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
    solved: list[tuple[Group, Topology, SolveOutcome]] = []   # one per machine (relabel.REUSE)
    try:
        for g in groups:
            out.print(f"[bold]group {g.spec}[/bold]")
            params = {**ctx.params, "group_spec": g.spec, "out_dir": str(base / g.label)}
            if relabel.REUSE and _relabelled(params, g, solved):
                continue
            done = ctx.invoke(solve, **params)
            if relabel.REUSE and isinstance(done, SolveOutcome):
                solved.append((g, done.result.topology, done))
    except BaseException:
        # all groups or none: a later group's failure takes back the folders this call made
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        raise


def _relabelled(params: dict[str, Any], group: Group,
                solved: list[tuple[Group, Topology, SolveOutcome]]) -> bool:
    """Write ``group``'s files as those of an earlier group on the same machine relabelled
    (:mod:`synth.relabel`), committed as a solve commits them, and print them as ``solve`` does;
    False (nothing written) where no earlier group is this machine or its files cannot be
    relabelled (a note says why), so the caller solves the group."""
    member, _ = machine_of(SolveRequest(
        topo=params["topo_spec"], coll=params["coll_spec"], nodes=params["nodes"],
        group=group.spec, partition=params["partition"], calibration=params["calibration"]))
    for rep_group, rep, done in solved:
        if not relabel.same_machine(rep, member):
            continue
        try:
            mine, rank_files = relabel.relabel(done, rep, member, group,
                                               check_writable_dir(Path(params["out_dir"])))
        except relabel.NotRelabelled as exc:
            out.print(f"[yellow]same machine as group {rep_group.spec}, but its files are not "
                      f"relabelled ({exc}): solving it[/yellow]")
            return False
        memory_backstop(parse_memory(params["max_memory"]))
        commit(mine.written, rank_files)
        print_solve(mine)
        out.print(f"group {group.spec} is the same machine as group {rep_group.spec} (up to its "
                  f"name): its files are {rep_group.spec}'s relabelled, every schedule verified "
                  "again and every XML proven (a text identical to one already proven shares "
                  "its proof)")
        return True
    return False


def _with_calibration(topology: Topology, calibration: str | None) -> Topology:
    """``topology`` with a calibration's measured link-class α/β (unchanged without one).

    Encodings then optimise, and costs are predicted, for the measured machine. The topology keeps
    its name but not its content hash, so a schedule solved with a calibration is verified and
    simulated with the same ``--calibration``.
    """
    if calibration is None:
        return topology
    return apply_calibration(topology, calibration)


def _bytes(text: str) -> int:
    return 0 if text.strip() == "0" else parse_size(text)


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------------------------- verify
def _load_schedule(path: str, topo_spec: str | None, calibration: str | None = None,
                   check: bool = True) -> tuple[Schedule, Topology]:
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
    return file.endswith(".json") and is_plan_text(read_input(file))


def _verify_mscclpp(file: str, as_json: bool) -> None:
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
@click.option("--group", "group_spec", default=None,
              help="XML: the file runs on this process group of the machine (as `solve --group`: "
                   "rail:R, stride:S[+O], node:N or a rank list), its ranks numbered in the group.")
@click.option("--concurrent", "partition_spec", default=None,
              help="XML with --group: the partition whose groups all run at once (as `solve "
                   "--concurrent`), so shared links and NICs carry every group's traffic.")
@click.option("--sizes", default=None, help="Message sizes: 1KB:1GB or 1KB,1MB.")
@click.option("--calibration", default=None, type=click.Path(),
              help="Predict with measured α/β per link class (`synth calibrate --format nccl-tests`).")
@click.option("--xml-profile", default="exec", show_default=True,
              type=click.Choice(["exec", "legacy", "rccl"]), help="XML: the runtime's rules.")
@click.option("--trace", "trace_path", default=None, type=click.Path(),
              help="XML: write a Chrome/Perfetto trace of the largest size to this file.")
@click.option("--json", "as_json", is_flag=True)
def simulate(file: str, topo_spec: str | None, nodes: int, group_spec: str | None,
             partition_spec: str | None, sizes: str | None, calibration: str | None,
             xml_profile: str, trace_path: str | None, as_json: bool) -> None:
    """Predict a schedule's (α-β model) or an MSCCL-IR XML program's (timed model) time over sizes."""
    if partition_spec is not None and group_spec is None:
        raise SynthError("--concurrent needs --group (the group the file runs on)")
    if file.endswith(".xml"):
        _simulate_xml(file, topo_spec, nodes, sizes, calibration, xml_profile, trace_path, as_json,
                      group_spec, partition_spec)
        return
    if trace_path is not None or nodes != 1 or group_spec is not None:
        raise SynthError("--trace, --nodes and --group apply to MSCCL-IR XML files only (a "
                         "schedule names its topology, a group's included)")
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
                  as_json: bool, group_spec: str | None = None,
                  partition_spec: str | None = None) -> None:
    """Verify the XML with the interpreter (exit 1 with its message if it fails), then time it
    (on ``group_spec``'s induced topology when given, as ``solve --group`` compiled it)."""
    if topo_spec is None:
        raise SynthError("an XML file names no topology: pass --topo (and --nodes)")
    if trace_path is not None:
        check_output_file(Path(trace_path), "--trace")
    program = parse_program(read_input(file, "XML file"), file, profile)
    base = (load_group(topo_spec, nodes, group_spec, partition_spec)[0] if group_spec is not None
            else load_topology(topo_spec, nodes))
    topology = _with_calibration(base, calibration)
    if program.ngpus != topology.num_ranks:
        raise SynthError(f"{file} is for {program.ngpus} ranks (ngpus) but {topology.name} has "
                         f"{topology.num_ranks} ranks" + ("" if group_spec else
                                                          " (a group's file: pass --group)"))
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
