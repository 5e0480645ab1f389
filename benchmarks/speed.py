"""Speed of synth's commands, phase by phase (the issue asking for interactive use).

Every case is one command a user types (the issue's table and the README's tour) or one library
call on a fixed file (the program model, the interpreter, the parser on their own). Each runs in a
subprocess of its own, in a fresh working folder and with a fresh solve cache, under a time limit,
and reports:

* wall-clock and CPU seconds of the whole command (CPU includes its worker processes);
* wall and CPU seconds per *phase*: encode, solve, verify, compile, parse, interpret,
  program-model, write, ... as :mod:`synth.progress` counts them (:func:`synth.progress.ledger`:
  the phases the command line shows, plus the spans library code marks, each counted
  exclusively, so the phases partition the time; ``other`` is what no phase covered, start-up
  included). Work done in a catalog's worker processes is not seen by the ledger (it is in the
  CPU total and, for its parent, in ``other``);
* with ``--profile``, the functions with the most cumulative time (cProfile; a separate run,
  because the profiler slows Python code and would distort the phase figures).

Trees side by side: ``--trees before=/path/to/checkout,after=.`` runs every case with each
checkout's ``synth`` in turn (case by case, so load on a shared machine falls on both alike)
and the tables print them next to each other with the ratio. A checkout is measured by putting
its folder first on ``sys.path`` in the subprocess (an editable install's import hook is set
aside), so an exported commit (``git archive``) works as well as a worktree.

    python benchmarks/speed.py --list
    python benchmarks/speed.py --only main,milp --limit 900
    python benchmarks/speed.py --only sim-ring64 --trees before=/tmp/before,after=.
    python benchmarks/speed.py --render              # rewrite speed.md from speed.json

Results merge into ``results/speed.json`` (by tree label and case) and ``results/speed.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import RESULTS, cpus, load_average, machine, python_version, write_results

GiB = 2**30
DEFAULT_LIMIT_S = 900.0
GRACE_S = 20.0
"""After the limit, how long a case may take to write what it measured before it is killed."""
TOP_FUNCTIONS = 25


@dataclass(frozen=True)
class Case:
    """One measured command: ``argv`` for ``synth`` (or ``call``, a function of this module run in
    the subprocess), ``setup`` commands run first in the same folder and not timed, and the
    issue's goal for it, if any."""

    name: str
    argv: tuple[str, ...] = ()
    setup: tuple[tuple[str, ...], ...] = ()
    call: str = ""
    goal_s: float | None = None
    note: str = ""
    keep_cache: str = ""
    """Name of a case whose folder and cache this one runs in after it (a warm rerun: the same
    command again where it ran, as a user regenerating a catalog does)."""
    tags: tuple[str, ...] = field(default_factory=tuple)


def _tour(name: str, *argv: str, setup: tuple[tuple[str, ...], ...] = ()) -> Case:
    return Case(f"tour-{name}", tuple(argv), setup, tags=("tour",))


_SOLVE_RING_LL = ("solve", "--topo", "dgx1", "--coll", "allreduce", "--algo", "ring", "--proto",
                  "LL", "--instances", "2")
CASES: tuple[Case, ...] = (
    # the table
    Case("main", ("solve", "--topo", "trn1_32", "--coll", "allgather"), goal_s=45,
         tags=("issue", "tour")),
    Case("milp", ("solve", "--topo", "trn1_32", "--coll", "allgather", "--encoding", "milp"),
         goal_s=60, tags=("issue",)),
    Case("a100x8", ("solve", "--topo", "dgx_a100", "--nodes", "8", "--coll", "allgather"),
         goal_s=90, tags=("issue",)),
    Case("h100x64", ("solve", "--topo", "dgx_h100", "--nodes", "64", "--coll", "allgather"),
         goal_s=300, tags=("issue",)),
    Case("catalog-cold", ("catalog", "--topo", "dgx_a100", "--nodes", "2", "--out", "catalog"),
         goal_s=120, tags=("issue", "tour")),
    Case("catalog-warm", ("catalog", "--topo", "dgx_a100", "--nodes", "2", "--out", "catalog"),
         goal_s=5, keep_cache="catalog-cold", tags=("issue",),
         note="the same command again in catalog-cold's folder, with the cache it left (run "
              "catalog-cold first, same invocation)"),
    Case("concurrent", ("solve", "--topo", "dgx1", "--nodes", "8", "--concurrent", "stride:8",
                        "--coll", "allreduce"), goal_s=60, tags=("issue", "tour")),
    Case("simulate64", ("simulate", "{ring64}", "--topo", "dgx_h100", "--nodes", "8", "--sizes",
                        "1GB"), tags=("issue",),
         note="synth's ring allreduce on 8 x dgx_h100 (64 ranks), Simple, one 1 GiB call"),
    # library calls on fixed files (the pieces the commands spend their time in)
    Case("sim-ring64", call="sim_ring64", tags=("parts",),
         note="program model: 64-rank ring allreduce XML at 1 GiB (program_time)"),
    Case("sim-sweep", call="sim_sweep", tags=("parts",),
         note="program model: dgx_h100 ring allgather/allreduce and the ndv5 ag-32m-1g file, "
              "1 KB..1 GB (program_times_us)"),
    Case("interpret-ring64", call="interpret_ring64", tags=("parts",),
         note="parse and interpreter (both modes) on the 64-rank ring allreduce XML"),
    # the README's tour (those not above)
    _tour("topo-list", "topo", "list"),
    _tour("topo-show", "topo", "show", "trn1_32"),
    _tour("topo-show-a100x4", "topo", "show", "dgx_a100", "--nodes", "4", "--json"),
    _tour("ring-ll", *_SOLVE_RING_LL),
    _tour("smt", "solve", "--topo", "dgx1", "--coll", "allgather", "--encoding", "smt",
          "--least-steps"),
    _tour("winners-lockstep", "solve", "--topo", "dgx1", "--coll", "allgather", "--winners-by",
          "lockstep"),
    _tour("pareto", "pareto", "--topo", "dgx1", "--coll", "allgather", "--plot", "frontier.png"),
    _tour("rounds", "analyze", "rounds", "--topo", "dgx1", "--coll", "alltoall"),
    _tour("h100x64-trees", "solve", "--topo", "dgx_h100", "--nodes", "64", "--coll", "allgather",
          "--encoding", "trees", "--no-xml"),
    _tour("flow", "solve", "--topo", "dgx_a100", "--nodes", "2", "--coll", "alltoall",
          "--encoding", "flow"),
    _tour("milp-ndv2", "solve", "--topo", "ndv2", "--nodes", "2", "--coll", "allgather",
          "--encoding", "milp", "--solver", "highs"),
    _tour("sketch-list", "sketch", "list"),
    _tour("sketch-check", "sketch", "check", "ndv2-relay", "--topo", "ndv2", "--nodes", "2"),
    _tour("calibrate", "calibrate", "{root}/tests/data/nccl-tests/h200-1node-allreduce-16g-nhc142.log",
          "--format", "nccl-tests", "--topo", "dgx_h100", "--out", "calibration.json"),
    _tour("verify-xml", "verify", "{out:*.exec.xml}", setup=(_SOLVE_RING_LL,)),
    _tour("mscclpp", "solve", "--topo", "dgx_a100", "--nodes", "2", "--coll", "allgather",
          "--format", "mscclpp"),
    _tour("verify-plan", "verify", "{root}/tests/data/mscclpp-plans/single_node/allgather.json"),
    _tour("simulate-schedule", "simulate", "{out:*ring*.schedule.json}", "--sizes", "1KB:4GB",
          setup=(("solve", "--topo", "dgx1", "--coll", "allreduce", "--algo", "ring"),)),
    _tour("simulate-trace", "simulate", "{out:*.exec.xml}", "--topo", "dgx1", "--sizes",
          "1KB:1GB", "--trace", "t.json", setup=(_SOLVE_RING_LL,)),
    _tour("strategies", "strategies", "--topo", "trn1_32", "--coll", "allreduce", "--tensors",
          "16"),
    _tour("neuron", "solve", "--topo", "trn1_32", "--coll", "allreduce", "--format", "neuron"),
    _tour("jax", "solve", "--topo", "trn1_32", "--coll", "allgather", "--format", "jax"),
    _tour("topo-import", "topo", "import", "{root}/tests/data/topo-dumps/ibm-gx3d-8xh100.xml",
          "--format", "nccl-xml", "--out", "cluster.yaml"),
    _tour("group", "solve", "--topo", "dgx_h100", "--nodes", "8", "--group", "stride:8",
          "--coll", "allreduce"),
)
BY_NAME = {c.name: c for c in CASES}

PHASES = ("startup", "encode", "solve", "guards", "verify", "select", "compile", "parse",
          "interpret", "program-model", "write", "other")
"""Phase kinds in table order (``startup``: importing synth; ``other``: no phase covered it)."""


def classify(label: str) -> str | None:
    """The kind of a phase the command line shows, from its label (:func:`synth.progress.ledger`);
    spans carry their kind themselves. None: transparent (its time stays with the phase around
    it)."""
    from synth.encodings import ENCODINGS

    if label.startswith(("encoding ", "trees: ", "pareto walk")) or label in ENCODINGS:
        return "encode"
    if label.startswith(("verify and cost ", "verify ")):
        return "verify"
    if label == "sizing candidates":
        return "guards"
    if label.startswith("program model: timing"):
        return "select"
    if label.startswith("compile "):
        return "compile"
    if label.startswith("interpreter: "):
        return "interpret"
    if label.startswith("simulate "):
        return "program-model"
    return None


# ------------------------------------------------------------------------------ in the subprocess
def _use_tree(root: Path) -> None:
    """Import ``synth`` from ``root``: first on sys.path, an editable install's hook set aside."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)
                        and "editable" not in getattr(f, "__module__", "")]
    sys.path.insert(0, str(root))
    for name in [m for m in sys.modules if m == "synth" or m.startswith("synth.")]:
        del sys.modules[name]


def _ring64_xml(folder: Path) -> Path:
    """synth's ring allreduce on 8 x dgx_h100 as verified MSCCL-IR (Simple), written to folder."""
    from synth.collectives import make_collective
    from synth.emit import XmlOptions, emit_verified_xml
    from synth.encodings.baseline import baseline, preferred_chunks
    from synth.topology_io import load_topology

    path = folder / "ring64_allreduce.xml"
    if not path.exists():
        topo = load_topology("dgx_h100", 8)
        coll = make_collective("allreduce", 64, preferred_chunks("ring", "allreduce", 64))
        text, _ = emit_verified_xml(baseline(topo, coll, "ring"), XmlOptions(proto="Simple"))
        path.write_text(text)
    return path


def sim_ring64(folder: Path, root: Path) -> dict[str, Any]:
    from synth.emit.xml_parse import read_program
    from synth.timing.program import program_time
    from synth.topology_io import load_topology

    program = read_program(_ring64_xml(folder))
    topo = load_topology("dgx_h100", 8)
    return {"time_us": program_time(program, topo, GiB).time_us}


def sim_sweep(folder: Path, root: Path) -> dict[str, Any]:
    from synth.collectives import make_collective
    from synth.emit import XmlOptions, emit_verified_xml
    from synth.emit.xml_parse import parse_program, read_program
    from synth.encodings.baseline import baseline, preferred_chunks
    from synth.sizes import DEFAULT_SIZES
    from synth.timing.program import program_times_us
    from synth.topology_io import load_topology

    topo = load_topology("dgx_h100")
    out = {}
    for kind in ("allgather", "allreduce"):
        coll = make_collective(kind, 8, preferred_chunks("ring", kind, 8))
        text, _ = emit_verified_xml(baseline(topo, coll, "ring"), XmlOptions(proto="Simple"))
        out[f"ring_{kind}"] = program_times_us(parse_program(text), topo, list(DEFAULT_SIZES))
    ndv5 = read_program(root / "tests" / "data" / "msccl_ndv5" / "ndv5__ag-32m-1g.xml")
    out["ndv5_ag-32m-1g"] = program_times_us(ndv5, topo, list(DEFAULT_SIZES))
    return {"times_us": out}


def interpret_ring64(folder: Path, root: Path) -> dict[str, Any]:
    from synth.emit.interpreter import verify_program
    from synth.emit.xml_parse import read_program

    reports = verify_program(read_program(_ring64_xml(folder)))
    return {"modes": [r.mode for r in reports], "messages": [r.messages for r in reports]}


def _expand(arg: str, root: Path, folder: Path) -> str:
    if arg == "{ring64}":
        return str(_ring64_xml(folder))
    if arg.startswith("{out:"):
        found = sorted((folder / "out").glob(arg[5:-1]))
        if not found:
            raise SystemExit(f"speed: no file {arg[5:-1]} under {folder / 'out'} after the setup")
        return str(found[0])
    return arg.replace("{root}", str(root))


class _TimeUp(BaseException):
    """The parent's limit passed (SIGTERM): stop and report what was measured."""


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (a catalog's workers)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _child(args: argparse.Namespace) -> None:
    root = Path(args.tree).resolve()
    _use_tree(root)
    case = BY_NAME[args.child]
    folder = Path(args.folder)
    os.chdir(folder)

    def stop(_sig: int, _frame: Any) -> None:
        raise _TimeUp

    signal.signal(signal.SIGTERM, stop)
    t0, c0 = time.perf_counter(), _cpu()
    from synth import progress
    from synth.cli import main as synth_main

    startup = (time.perf_counter() - t0, _cpu() - c0)
    record: dict[str, Any] = {"case": case.name, "tree": str(root)}
    for cmd in case.setup:
        _run_cli(synth_main, [_expand(a, root, folder) for a in cmd])
    argv = [_expand(a, root, folder) for a in case.argv]
    if case.call:     # build the case's input file before the clock starts
        _ring64_xml(folder)
    record["argv"] = argv or case.call
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    have_ledger = hasattr(progress, "ledger")
    t1, c1 = time.perf_counter(), _cpu()
    with (progress.ledger(classify) if have_ledger else _no_ledger()) as book:
        try:
            if profiler is not None:
                profiler.enable()
            if case.call:
                record["result"] = globals()[case.call](folder, root)
                record["exit_code"] = 0
            else:
                record["exit_code"] = _run_cli(synth_main, argv)
        except _TimeUp:
            record["timed_out"] = True
        finally:
            if profiler is not None:
                profiler.disable()
    record["wall_s"] = time.perf_counter() - t1 + startup[0]
    record["cpu_s"] = _cpu() - c1 + startup[1]
    phases = {"startup": {"wall_s": startup[0], "cpu_s": startup[1], "count": 1}}
    if book is not None:
        phases.update(book.as_dict())
    counted_w = sum(p["wall_s"] for p in phases.values())
    counted_c = sum(p["cpu_s"] for p in phases.values())
    phases["other"] = {"wall_s": max(0.0, record["wall_s"] - counted_w),
                       "cpu_s": max(0.0, record["cpu_s"] - counted_c), "count": 0}
    record["phases"] = phases if book is not None else {k: phases[k] for k in ("startup",)}
    record["ledger"] = book is not None
    if profiler is not None:
        record["top_functions"] = _top_functions(profiler, root)
    record["outputs"] = _outputs(folder)
    Path(args.json).write_text(json.dumps(record, default=str))


def _outputs(folder: Path) -> dict[str, str]:
    """SHA-256 of every file the command wrote in its folder (not the cache, not this script's
    own input file): two trees' runs of a case must write the same bytes."""
    import hashlib

    skip = {"cache", "record.json", "ring64_allreduce.xml"}
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] not in skip}


class _no_ledger:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _run_cli(synth_main: Any, argv: list[str]) -> int:
    try:
        synth_main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _top_functions(profiler: Any, root: Path) -> list[dict[str, Any]]:
    import pstats

    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = path
        for base in (str(root) + "/", str(Path(sys.prefix)) + "/"):
            if where.startswith(base):
                where = where[len(base):]
        rows.append({"function": f"{where}:{line}({name})", "calls": ncalls,
                     "tottime_s": round(tottime, 3), "cumtime_s": round(cumtime, 3)})
    rows.sort(key=lambda r: -r["cumtime_s"])
    return [r for r in rows if "speed.py" not in r["function"]
            and not r["function"].startswith(("<", "{", "~"))][:TOP_FUNCTIONS]


# ------------------------------------------------------------------------------ in the parent
def run_case(case: Case, tree: Path, limit_s: float, profile: bool, work: Path,
             caches: dict[tuple[str, str], Path], label: str) -> dict[str, Any]:
    if case.keep_cache:
        # a rerun: the same command in the same folder (its output there), with the cache left
        prev = caches.get((case.keep_cache, label))
        if prev is None:
            return {"case": case.name, "skipped": f"needs {case.keep_cache} first in the same run"}
        folder = prev
    else:
        folder = Path(tempfile.mkdtemp(prefix=f"{case.name}-{label}-", dir=work))
    cache = folder / "cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "SYNTH_PROGRESS": "off",
           "PYTHONDONTWRITEBYTECODE": "1"}
    out = folder / "record.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--tree",
           str(tree), "--folder", str(folder), "--json", str(out)] + (["--profile"] if profile else [])
    load0 = load_average(2)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    timed_out = False
    try:
        log, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGTERM)
        try:
            log, _ = proc.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
    wall = time.perf_counter() - start
    record: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"case": case.name}
    record["process_wall_s"] = wall
    """The subprocess from start to end, setup commands and interpreter start-up included."""
    if "wall_s" not in record:        # killed before it could report: the limit is all we know
        record["wall_s"] = wall
    record["load_before"] = load0
    record["load_after"] = load_average(2)
    record["limit_s"] = limit_s
    if timed_out:
        record["timed_out"] = True
    if proc.returncode not in (0, None) and not timed_out and "exit_code" not in record:
        record["crashed"] = log[-2000:]
    if record.get("exit_code"):
        record["log_tail"] = log[-1500:]
    if cache.exists():
        caches[(case.name, label)] = folder
    return record


def _tree_commit(tree: Path) -> str:
    marker = tree / "COMMIT"
    if marker.exists():
        return marker.read_text().strip()
    try:
        return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


OUT: Path = RESULTS
"""Where speed.json/.md are read and written (``--out``)."""


def _load() -> dict[str, Any]:
    path = OUT / "speed.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"trees": {}, "runs": {}}


def measure(cases: list[Case], trees: list[tuple[str, Path]], limit_s: float | None,
            profile: bool) -> dict[str, Any]:
    data = _load()
    caches: dict[tuple[str, str], Path] = {}
    with tempfile.TemporaryDirectory(prefix="synth-speed-") as tmp:
        work = Path(tmp)
        for case in cases:
            for label, tree in trees:
                limit = limit_s if limit_s is not None else max(DEFAULT_LIMIT_S,
                                                                 8 * (case.goal_s or 0))
                print(f"speed: {case.name} [{label}] ...", file=sys.stderr, flush=True)
                rec = run_case(case, tree, limit, profile, work, caches, label)
                rec.update({"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "machine": machine("arch"), "cpus": cpus(),
                            "python": python_version(), "profiled": profile})
                data["trees"][label] = {"path": str(tree), "commit": _tree_commit(tree)}
                data["runs"].setdefault(label, {})[case.name + (":profile" if profile else "")] = rec
                status = ("timed out" if rec.get("timed_out") else
                          f"exit {rec.get('exit_code')}" if "exit_code" in rec else "crashed")
                print(f"speed: {case.name} [{label}] {rec['wall_s']:.1f} s wall, "
                      f"{rec.get('cpu_s', math.nan):.1f} s CPU ({status})", file=sys.stderr,
                      flush=True)
                write_results("speed", data, to_markdown(data), out_dir=OUT)
    return data


# ------------------------------------------------------------------------------ the tables
def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _status(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "not run"
    if rec.get("skipped"):
        return "skipped"
    if rec.get("timed_out"):
        return f"over {rec['limit_s']:.0f} s"
    if "crashed" in rec:
        return "crashed"
    return "ok" if rec.get("exit_code") == 0 else f"exit {rec.get('exit_code')}"


def _newest(runs: dict[str, Any], labels: list[str], name: str) -> int:
    """How many of ``labels`` count for a case's ratios: up to the newest tree that ran it (a
    later tree measured only other cases leaves this one's ratio to the trees that ran it)."""
    ran = [i for i, lb in enumerate(labels) if name in runs.get(lb, {})]
    return ran[-1] + 1 if ran else len(labels)


def _ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and _status(rec) == "ok"


def _ratio(before: float | None, after: float | None, floor: float = 0.0) -> str:
    ok = before is not None and after is not None and after > floor
    return f"{before / after:.2f}x" if ok else "—"  # type: ignore[operator]


def _pair_of(runs: dict[str, Any], labels: list[str], name: str
             ) -> tuple[str | None, str | None]:
    """The case's *after* (the newest tree that ran it) and *before* (the newest earlier tree
    with a figure for it), as labels."""
    ran = [lb for lb in labels[:_newest(runs, labels, name)] if name in runs.get(lb, {})]
    after = ran[-1] if ran else None
    before = next((lb for lb in reversed(ran[:-1]) if _ok(runs[lb][name])), None)
    return before, after


def _same_bytes(runs: dict[str, Any], before: str | None, after: str | None, name: str) -> str:
    outs = [(runs.get(lb, {}).get(name) or {}).get("outputs") if lb else None
            for lb in (before, after)]
    if not outs[0] or outs[1] is None:
        return "—"
    return "yes" if outs[0] == outs[1] else "**no**"


def to_markdown(data: dict[str, Any]) -> str:
    """Three views of ``speed.json``: where each case stands (its first figure, the pair of trees
    last measured side by side, and the goal), every run, and each case's phases in those three
    trees. Why not every tree side by side: after two dozen trees such a table is a hundred
    columns wide, which no reader scans; the JSON keeps them all."""
    labels = list(data["trees"])
    lines = [
        "# Speed of synth's commands, phase by phase",
        "",
        "Written by `python benchmarks/speed.py` (see its docstring). Every case ran in its own "
        "process with a fresh cache (catalog-warm: catalog-cold's command again in its folder, "
        "with the cache it left), on a shared "
        "2-core machine: wall-clock figures move with the load (the load average before each run "
        "is listed), so compare trees measured in the same invocation, which alternate case by "
        "case. Phases come from `synth.progress.ledger` (exclusive: a phase nested in another "
        "counts only under its own kind); `other` is what no phase covered (a worker process's "
        "CPU counts there). Seconds. *after*: the newest tree that ran the case; *before*: the "
        "newest earlier tree with a figure for it; *first*: the oldest; ratios are *before* over "
        "*after*; *same bytes*: *after* wrote the files *before* wrote. Every run of every tree "
        "is in `speed.json`.",
        "",
        "Trees: " + "; ".join(f"**{k}** = {v['commit'] or v['path']}" for k, v in
                             data["trees"].items()),
        "",
    ]
    names = [c.name for c in CASES]
    runs = data["runs"]
    measured = [n for n in names if any(n in runs.get(lb, {}) for lb in labels)]

    def fig(lb: str | None, n: str, key: str) -> float | None:
        rec = runs.get(lb, {}).get(n) if lb else None
        return rec.get(key) if _ok(rec) else None  # type: ignore[union-attr]

    lines += ["## Where each case stands", "",
              "| case | goal | first | first wall | before | before wall | after | after wall "
              "| after CPU | after / goal | wall ratio | CPU ratio | same bytes |",
              "|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for n in measured:
        case = BY_NAME[n]
        before, after = _pair_of(runs, labels, n)
        first = next((lb for lb in labels if _ok(runs.get(lb, {}).get(n))), None)
        goal = case.goal_s
        wall = fig(after, n, "wall_s")
        lines.append("| " + " | ".join([
            n, _fmt(goal) if goal else "", first or "—", _fmt(fig(first, n, "wall_s")),
            before or "—", _fmt(fig(before, n, "wall_s")),
            f"{after} ({_status(runs[after][n])})" if after and not _ok(runs[after][n])
            else after or "—",
            _fmt(wall), _fmt(fig(after, n, "cpu_s")),
            f"{wall / goal:.2f}x" if goal and wall is not None else "—",
            _ratio(fig(before, n, "wall_s"), wall), _ratio(fig(before, n, "cpu_s"),
                                                           fig(after, n, "cpu_s")),
            _same_bytes(runs, before, after, n)]) + " |")
    lines.append("")

    lines += ["## Every run", "",
              "| case | tree | wall | CPU | status | load before | same bytes as the run before |",
              "|---|---|---:|---:|---|---:|---|"]
    for n in measured:
        prev: str | None = None
        for lb in labels:
            rec = runs.get(lb, {}).get(n)
            if rec is None:
                continue
            load = _fmt(rec["load_before"][0]) if "load_before" in rec else "—"
            lines.append(f"| {n} | {lb} | {_fmt(rec.get('wall_s'))} | {_fmt(rec.get('cpu_s'))} "
                         f"| {_status(rec)} | {load} | {_same_bytes(runs, prev, lb, n)} |")
            if _ok(rec):
                prev = lb
    lines.append("")

    lines += ["## Phases", ""]
    for n in measured:
        before, after = _pair_of(runs, labels, n)
        first = next((lb for lb in labels if (runs.get(lb, {}).get(n) or {}).get("phases")),
                     None)
        shown = list(dict.fromkeys(lb for lb in (first, before, after) if lb is not None))
        recs = {lb: runs[lb][n] for lb in shown}
        if not any(r.get("phases") for r in recs.values()):
            continue
        case = BY_NAME[n]
        what = " ".join(case.argv) if case.argv else case.note
        lines += [f"### {n}", "", f"`{what}`" if case.argv else what, ""]
        if case.note and case.argv:
            lines += [case.note, ""]
        lines += ["| phase | " + " | ".join(f"{lb} wall | {lb} CPU" for lb in shown)
                  + " | before / after wall |",
                  "|---|" + "---:|---:|" * len(shown) + "---:|"]
        for ph in PHASES:
            cells = []
            for lb in shown:
                p = recs[lb].get("phases", {}).get(ph)
                cells += [_fmt(p["wall_s"]) if p else "—", _fmt(p["cpu_s"]) if p else "—"]
            if all(c == "—" for c in cells):
                continue
            walls = {lb: (recs[lb].get("phases", {}).get(ph) or {}).get("wall_s")
                     for lb in shown}
            cells.append(_ratio(walls.get(before) if before else None, walls.get(after),
                                0.005))
            lines.append(f"| {ph} | " + " | ".join(cells) + " |")
        lines.append("")
    # profiles
    prof = [(lb, n) for lb in labels for n in measured if f"{n}:profile" in runs.get(lb, {})]
    if prof:
        lines += ["## Top functions by cumulative time (cProfile, a separate run)", ""]
        for lb, n in prof:
            rec = runs[lb][f"{n}:profile"]
            lines += [f"### {n} [{lb}] ({_fmt(rec.get('wall_s'))} s under the profiler)",
                      "", "| function | calls | own s | cumulative s |", "|---|---:|---:|---:|"]
            for r in rec.get("top_functions", []):
                lines.append(f"| `{r['function']}` | {r['calls']} | {_fmt(r['tottime_s'])} | "
                             f"{_fmt(r['cumtime_s'])} |")
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--tag", default=None, help="run the cases with this tag (issue, tour, parts)")
    ap.add_argument("--limit", type=float, default=None,
                    help=f"seconds per case (default: {DEFAULT_LIMIT_S:.0f} or 8x its goal)")
    ap.add_argument("--trees", default="after=" + str(Path(__file__).resolve().parents[1]),
                    help="label=path,... checkouts to measure side by side (default: after=.)")
    ap.add_argument("--profile", action="store_true", help="cProfile run: the top functions")
    ap.add_argument("--out", default=None, help="folder of speed.json/.md (default: results/)")
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--render", action="store_true", help="rewrite speed.md from speed.json")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    global OUT
    if args.out:
        OUT = Path(args.out)
    if args.list:
        for c in CASES:
            what = " ".join(c.argv) if c.argv else c.note
            print(f"{c.name:22s} {','.join(c.tags):12s} {what}")
        return
    if args.render:
        data = _load()
        write_results("speed", data, to_markdown(data), out_dir=OUT)
        return
    names = args.only.split(",") if args.only else [c.name for c in CASES]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)} (--list shows them)")
    cases = [BY_NAME[n] for n in names if args.tag is None or args.tag in BY_NAME[n].tags]
    trees = []
    for spec in args.trees.split(","):
        label, _, path = spec.partition("=")
        trees.append((label, Path(path or ".").resolve()))
    measure(cases, trees, args.limit, args.profile)


if __name__ == "__main__":
    main()
