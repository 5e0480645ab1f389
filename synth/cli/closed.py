"""``synth strategies`` and ``synth calibrate``: the closed-stack strategy layer on the command line.

Parse, call :mod:`synth.closed`, print. Attached to the main group at the end of :mod:`synth.cli`.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ..calibrate.closed_fit import calibrate as run_calibrate
from ..calibrate.closed_logs import nodes_in_log
from ..calibrate.link_fit import calibrate_file
from ..calibrate.program_fit import fit_floors, read_measurements
from ..calibration import class_figures
from ..closed.cost import hardware_of
from ..closed.mesh import resolve_topology
from ..closed.search import rank_strategies
from ..emit.interpreter import verify_program
from ..emit.xml_parse import read_program
from ..errors import SynthError
from ..files import atomic_write, check_writable_dir, dumps_json, ensure_writable_dir, read_data
from ..groups import induced, parse_group
from ..sizes import format_size, parse_size
from ..topology import bandwidth_from_beta
from ..topology_io import load_topology
from .console import stdout_console

out = stdout_console(piped_width=180)
COLLS = ("allgather", "reducescatter", "allreduce", "alltoall")


def _platform_for(topology, platform: str | None) -> str:
    """Whose rules rank the strategies. A GPU machine has no closed stack to default to: ranking
    Neuron programs on it without being asked would be a silent answer to another question."""
    if platform:
        return platform
    gpu = dict(topology.meta).get("gpu")
    if gpu:
        raise SynthError(f"{topology.name} is a GPU machine ({gpu}): strategies ranks closed-stack "
                         "programs (Trainium, TPU); use `synth solve` for MSCCL XML, or pass "
                         "--platform neuron|jax to rank them anyway")
    return "jax" if hardware_of(topology) == "tpu" else "neuron"


@click.command()
@click.option("--topo", "topo_spec", required=True,
              help="Shipped name (trn1_32, trn2_64), builder, file, or tpu_v5e_4x4.")
@click.option("--coll", "coll", required=True, help=f"One of {', '.join(COLLS)}.")
@click.option("--nodes", default=1, show_default=True, help="Join N copies through their NICs.")
@click.option("--bytes", "size", default="1MB", show_default=True,
              help="Per tensor: allgather output, reducescatter input, allreduce buffer, alltoall "
                   "per-rank buffer (nccl-tests convention).")
@click.option("--tensors", default=1, show_default=True,
              help="M tensors (e.g. one per microbatch): per-tensor calls vs one bundled call.")
@click.option("--platform", type=click.Choice(["neuron", "jax"]), default=None,
              help="Whose rules apply (default: jax on TPU, neuron otherwise).")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--reduce", "reduce_op", default="add", show_default=True, help="add | min | max")
@click.option("--calibration", type=click.Path(), default=None,
              help="Calibration JSON from `synth calibrate` (default: documented figures).")
@click.option("--limit", default=15, show_default=True, help="Rows of the ranked table (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (every strategy).")
@click.option("--group", "group_spec", default=None,
              help="Process group (0,8,16 | stride:S | node:K | rail:R): rank the strategies on "
                   "the machine the group induces.")
def strategies(topo_spec: str, coll: str, nodes: int, size: str, tensors: int, platform: str | None,
               dtype: str, reduce_op: str, calibration: str | None, limit: int,
               as_json: bool, group_spec: str | None) -> None:
    """Rank the composed vendor-primitive strategies for a closed stack (Trainium, TPU)."""
    topology = resolve_topology(topo_spec, nodes)
    if group_spec is not None:
        topology = induced(topology, parse_group(group_spec, topology))
    nbytes = parse_size(size)
    plat = _platform_for(topology, platform)
    r = rank_strategies(topology, coll, plat, nbytes, tensors, calibration, dtype=dtype,
                        reduce_op=reduce_op)
    best = r.best
    if as_json:
        click.echo(dumps_json(r.to_dict(), indent=2))
        return
    out.print(f"[bold]{coll}[/bold] on [bold]{topology.name}[/bold] ({r.mesh.size} ranks, mesh "
              f"{r.mesh.describe()}), {format_size(nbytes)} {dtype} × {r.tensors} tensor(s), "
              f"platform {plat}, cost model: {r.model.source}")
    shown = r.ranked if limit <= 0 else r.ranked[:limit]
    # always show the best of every family
    fams = {}
    for s in r.ranked:
        for f in s.families(r.mesh):
            fams.setdefault(f, s)
    extra = [s for s in fams.values() if s not in shown]
    table = Table(title=f"{len(r.ranked)} valid strategies, best first"
                  + (f" (top {len(shown)} + best of each family)" if extra else ""))
    for col in ("#", "strategy", "families", "calls", "predicted µs", "launch", "α", "bytes",
                "memcopy", "vs best"):
        table.add_column(col, justify="right" if col not in ("strategy", "families") else "left",
                         overflow="fold")
    t0 = best.estimate.time_us
    for s in shown + extra:
        e = s.estimate
        table.add_row(str(r.ranked.index(s) + 1), escape(s.name), ", ".join(s.families(r.mesh)),
                      str(e.calls), f"{e.time_us:.2f}", f"{e.launch_us:.1f}", f"{e.alpha_us:.1f}",
                      f"{e.bytes_us:.1f}", f"{e.memcopy_us:.1f}", f"{e.time_us / t0:.2f}x")
    out.print(table)
    out.print(f"[bold]winner[/bold]: {escape(best.name)} — {best.estimate.time_us:.2f} µs")
    out.print(f"[bold]why[/bold]: {escape(r.reason())}")
    gain = r.bundling_gain()
    if gain:
        out.print(f"[bold]bundling[/bold] {r.tensors} tensors: {escape(gain['bundled'])} "
                  f"{gain['bundled_us']:.2f} µs vs {escape(gain['per_tensor'])} "
                  f"{gain['per_tensor_us']:.2f} µs "
                  f"— modeled gain {gain['gain']:.2f}x ({gain['calls'][0]} calls -> "
                  f"{gain['calls'][1]}, launch tax saved {gain['launch_saved_us']:.1f} µs)")
    out.print("families (best of each): " + ", ".join(
        f"{f} {s.estimate.time_us:.1f} µs" for f, s in fams.items()))
    if r.infeasible:
        reasons: dict[str, int] = {}
        for s in r.infeasible:
            for p in s.problems:
                reasons[p.rule] = reasons.get(p.rule, 0) + 1
        example = r.infeasible[0]
        out.print(f"rejected on {plat}: {len(r.infeasible)} strategies ("
                  + ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
                  + f"), e.g. {escape(example.name)}: {escape(str(example.problems[0]))}")


@click.command()
@click.argument("log", type=click.Path())
@click.option("--format", "log_format",
              type=click.Choice(["nccom-test", "nccl-tests", "msccl"]),
              default="nccom-test", show_default=True,
              help="nccom-test: Neuron's nccom-test text or a synth-timings JSON (closed-stack model); "
                   "nccl-tests: all_gather_perf/all_reduce_perf/... output (α/β per link class); "
                   "msccl: measured MSCCL times (JSON) of the XML files in --xml-dir (the timed "
                   "program model's launch per protocol and step cost).")
@click.option("--xml-dir", default=None, type=click.Path(),
              help="msccl: folder of the algorithm files the runs loaded (default: beside LOG).")
@click.option("--platform", type=click.Choice(["neuron", "jax"]), default=None,
              help="nccom-test format: neuron (nccom-test output) or jax (a synth-timings JSON).")
@click.option("--topo", "topo_spec", default=None,
              help="Topology the log was measured on, one node (nccom-test default: trn1_32 for "
                   "neuron, tpu_v5e_4x4 for jax; required for nccl-tests).")
@click.option("--nodes", default=None, type=int, help="Nodes (default: as many as the log uses).")
@click.option("--rings", default=None, type=int,
              help="nccl-tests: parallel rings on multi-node runs (default: NICs per node).")
@click.option("--out", "out_path", default=None, type=click.Path(),
              help="Calibration JSON to write (default: calibration.json beside the log).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration (with the fit) as JSON.")
def calibrate(log: str, log_format: str, xml_dir: str | None, platform: str | None,
              topo_spec: str | None, nodes: int | None, rings: int | None, out_path: str | None,
              as_json: bool) -> None:
    """Fit a cost model from a benchmark LOG and write a calibration JSON.

    nccom-test / timing JSON: the closed-stack model (launch tax, α/β per key, amortization,
    memcopy). nccl-tests: α/β per link class and the per-call floor, for solve/pareto/catalog.
    """
    if nodes is not None and nodes < 1:
        raise SynthError(f"--nodes must be at least 1, got {nodes}")
    if xml_dir is not None and log_format != "msccl":
        raise SynthError("--xml-dir applies to --format msccl only")
    if log_format == "msccl":
        if platform is not None or rings is not None:
            raise SynthError("--platform and --rings do not apply to --format msccl")
        _calibrate_msccl(log, xml_dir, topo_spec, nodes or 1, out_path, as_json)
        return
    if log_format == "nccl-tests":
        if platform is not None:
            raise SynthError("--platform applies to --format nccom-test only")
        _calibrate_nccl(log, topo_spec, nodes, rings, out_path, as_json)
        return
    if rings is not None:
        raise SynthError("--rings applies to --format nccl-tests only")
    if platform is None:
        raise SynthError("--format nccom-test needs --platform neuron (nccom-test output) or "
                         "--platform jax (a synth-timings JSON)")

    spec = topo_spec or ("trn1_32" if platform == "neuron" else "tpu_v5e_4x4")
    if nodes is None:
        nodes = nodes_in_log(log)
    topology = resolve_topology(spec, nodes)
    fit = run_calibrate(log, topology, platform)
    data = fit.to_json()
    target = Path(out_path) if out_path else Path(log).with_name("calibration.json")
    ensure_writable_dir(target.parent)
    atomic_write(target, dumps_json(data, indent=2) + "\n")
    if as_json:
        click.echo(dumps_json({**data, "file": str(target)}, indent=2))
        return
    out.print(f"calibrated [bold]{topology.name}[/bold] ({platform}) from {log}: "
              f"{fit.records} records, rms relative error {100 * fit.rms_rel_error:.2f}%")
    table = Table(title="parameters")
    for col in ("term", "value", "± std err", "source"):
        table.add_column(col)
    for name, t in fit.params.items():
        d = t.to_dict()
        err = f"{d['stderr_pct']:.2f}%" if d["stderr_pct"] is not None else "-"
        table.add_row(name, f"{t.value:.4g}", err, t.source)
    out.print(table)
    terms = Table(title="α/β per (primitive, group, link class)")
    for col in ("primitive", "group", "class", "α µs", "± α", "β µs/MB", "± β", "busbw GB/s",
                "points", "fit rms", "fit max", "default max err"):
        terms.add_column(col, justify="right")
    for t in fit.terms:
        terms.add_row(t["primitive"], f"{t['group'][0]}x{t['group'][1]}", t["link_class"],
                      f"{t['alpha_us']:.3f}", _pct(t["alpha_stderr_pct"]), f"{t['beta_us_per_mb']:.3f}",
                      _pct(t["beta_stderr_pct"]),
                      f"{t['busbw_GBps']:.2f}" if t["busbw_GBps"] else "-", str(t["points"]),
                      _pct(100 * t["rms_rel_error"]), _pct(100 * t["max_rel_error"]),
                      _pct(100 * t["default_max_rel_error"]))
    out.print(terms)
    for note in fit.notes:
        out.print(f"[dim]note: {escape(note)}[/dim]")
    out.print(f"wrote {target}")


def _calibrate_msccl(log: str, xml_dir: str | None, topo_spec: str | None, nodes: int,
                     out_path: str | None, as_json: bool) -> None:
    """`calibrate --format msccl`: fit the program model's floors to measured MSCCL times."""
    if topo_spec is None:
        raise SynthError("--format msccl needs --topo: the machine the times were measured on")
    data = read_data(log, "measurement file", fmt="json")
    measurements = read_measurements(data, log)
    folder = Path(xml_dir) if xml_dir else Path(log).parent
    if not folder.is_dir():
        raise SynthError(f"--xml-dir '{folder}' is not a folder")
    paths = sorted(folder.glob("*.xml"))
    if not paths:
        raise SynthError(f"no *.xml algorithm files in '{folder}'")
    programs = {}
    for path in paths:
        program = read_program(path)
        verify_program(program)          # a file the interpreter rejects is not used
        programs[path.name] = program
    topology = load_topology(topo_spec, nodes)
    fit = fit_floors(programs, measurements, topology)
    cal = {"format": "synth-calibration/1", "kind": "msccl-program", "topology": topology.name,
           "source": str(log), "program": fit.program_section()}
    target = Path(out_path) if out_path else Path(log).with_name("calibration.json")
    ensure_writable_dir(target.parent if str(target.parent) else Path("."))
    atomic_write(target, dumps_json(cal, indent=2) + "\n")
    if as_json:
        click.echo(dumps_json({**cal, "file": str(target), "points": fit.points,
                               "skipped": fit.skipped}, indent=2))
        return
    launches = ", ".join(f"{k} {v:.2f} µs" for k, v in sorted(fit.launch_us.items()))
    out.print(f"calibrated the program model on [bold]{topology.name}[/bold] from {log}: "
              f"{len(fit.points)} sizes matched {len({p['file'] for p in fit.points})} files "
              f"({len(fit.skipped)} ran no loaded file)")
    out.print(f"launch {launches}; step {fit.step_us:.2f} µs per message")
    out.print(f"error in-sample: median {fit.in_sample['median_error']:.3f}x, worst "
              f"{fit.in_sample['worst_error']:.3f}x; leave-one-file-out: median "
              f"{fit.leave_one_file_out['median_error']:.3f}x, worst "
              f"{fit.leave_one_file_out['worst_error']:.3f}x")
    out.print(f"wrote {target}")


def _calibrate_nccl(log: str, topo_spec: str | None, nodes: int | None, rings: int | None,
                    out_path: str | None, as_json: bool) -> None:
    """`calibrate --format nccl-tests`: fit α/β per link class, write the calibration atomically."""
    if topo_spec is None:
        raise SynthError("--format nccl-tests needs --topo: the single-node topology the log was "
                         "measured on (e.g. dgx_a100); the node count comes from the log's hosts")
    target = Path(out_path) if out_path else Path(log).with_name("calibration.json")
    check_writable_dir(target.parent)
    fit = calibrate_file(log, topo_spec, nodes=nodes, rings=rings)
    ensure_writable_dir(target.parent)
    atomic_write(target, fit.dumps())
    if as_json:
        click.echo(dumps_json({**fit.to_json(), "file": str(target)}, indent=2))
        return
    base = load_topology(topo_spec, 1)
    out.print(f"calibrated [bold]{base.name}[/bold] link classes from {log} (nccl-tests): "
              f"{fit.points} points, median relative error {100 * fit.median_rel_error:.2f}%, "
              f"max {100 * fit.max_rel_error:.2f}% (datasheet figures: median "
              f"{100 * fit.default_median_rel_error:.1f}%)")
    figures: dict[str, tuple[float, float]] = {}
    for n in sorted({r["nodes"] for r in fit.runs}):
        figures.update({k: v for k, v in class_figures(load_topology(topo_spec, n)).items()
                        if k not in figures})
    table = Table(title="α/β per link class")
    for col in ("class", "α µs", "± α", "β µs/MB", "GB/s", "± β", "source", "file α µs", "file GB/s"):
        table.add_column(col, justify="left" if col in ("class", "source") else "right")
    for name in sorted(fit.classes):
        p = fit.classes[name]
        fa, fb = figures.get(name, (float("nan"), float("nan")))
        table.add_row(name, f"{p.alpha_us:.3f}", _pct(p.alpha_stderr_pct), f"{p.beta_us_per_mb:.3f}",
                      f"{bandwidth_from_beta(p.beta_us_per_mb):.2f}", _pct(p.beta_stderr_pct), p.source,
                      f"{fa:.3f}", f"{bandwidth_from_beta(fb):.2f}")
    out.print(table)
    out.print(f"per-call floor (launch, written as protocols.LL.launch_us): {fit.launch_us:.3f} µs "
              f"({fit.launch_source}"
              + (f", ± {fit.launch_stderr_pct:.2f}%" if fit.launch_stderr_pct is not None else "") + ")")
    if fit.nccl_model:
        nm = fit.nccl_model
        out.print(f"NCCL's tuning model (nccl_model): launch +{nm['launch_us']:.3f} µs, latency × "
                  f"{nm['latency_scale']:.3f}, bandwidth × {nm['bandwidth_scale']:.3f} (fitted: "
                  f"{', '.join(nm['fitted']) or 'nothing separable'}); median error ×"
                  f"{nm['uncalibrated_median_error_factor']} -> ×{nm['median_error_factor']}")
    runs = Table(title="fit per run (model: ring for allgather/reducescatter/allreduce, direct alltoall)")
    for col in ("line", "program", "ranks", "nodes", "rings", "points", "sizes", "median err",
                "max err", "file figures median err"):
        runs.add_column(col, justify="right")
    for r in fit.runs:
        runs.add_row(str(r["line"]), r["program"], str(r["ranks"]), str(r["nodes"]), str(r["rings"]),
                     str(r["points"]), f"{format_size(r['sizes'][0])}..{format_size(r['sizes'][1])}",
                     _pct(100 * r["median_rel_error"]), _pct(100 * r["max_rel_error"]),
                     _pct(100 * r["default_median_rel_error"]))
    out.print(runs)
    for note in fit.notes:
        out.print(f"[dim]note: {escape(note)}[/dim]")
    out.print(f"wrote {target}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}%"
