"""synth catalog: tiling, interpreter-verified files, envelope vs baselines, cache, atomic writes,
executors, the protocol model and bad input. Small topologies and short size ranges keep it fast."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from synth.catalog.cache import SolveCache, solve_key, structure_hash
from synth.cli import main
from synth.collectives import make_collective
from synth.emit.interpreter import MODES, verify_program
from synth.emit.xml_parse import parse_program
from synth.encodings.baseline.algorithms import baseline
from synth.select.buckets import make_buckets
from synth.sizes import parse_sizes
from synth.timing.lockstep import schedule_times_us
from synth.timing.protocol import PROTOCOLS, ProtocolParams, StepProfile, default_model, predict_times_us
from synth.topology_io import load_topology

TOPO = "ring:4"
SIZES = "1KB:1MB"
REPO = Path(__file__).resolve().parents[1]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """The real entry point in this process: (exit code, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    got = capsys.readouterr()
    return code, got.out, got.err


def catalog_args(out: Path, cache: Path, *, colls: str = "allgather,allreduce",
                 workers: int = 1, rebuild: bool = False) -> list[str]:
    return ["catalog", "--topo", TOPO, "--collectives", colls, "--sizes", SIZES, "--out", str(out),
            "--cache-dir", str(cache), "--workers", str(workers), "--quiet",
            *(["--rebuild"] if rebuild else [])]


def digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One catalog on ring:4 (allgather, allreduce), with its cache: most tests read it."""
    root = tmp_path_factory.mktemp("catalog")
    out, cache = root / "cat", root / "cache"
    main(catalog_args(out, cache))  # returns normally on success
    return out, cache


# ------------------------------------------------------------------------------------ the folder
def test_files_tile_the_range_and_pass_the_interpreter(built):
    out, _ = built
    lo, hi = parse_sizes(SIZES)[0], parse_sizes(SIZES)[-1]
    data = json.loads((out / "catalog.json").read_text())
    xml_files = sorted((out / "msccl-algorithms").iterdir())
    assert xml_files and all(p.suffix == ".xml" for p in xml_files)
    for kind in ("allgather", "allreduce"):
        ranges = []
        for p in (f for f in xml_files if f.name.startswith(kind + "_")):
            text = p.read_text()
            program = parse_program(text, str(p), "exec")
            reports = verify_program(program, MODES, profile="exec")  # re-executed from disk
            assert reports
            ranges.append((program.min_bytes, program.max_bytes))
        ranges.sort()
        assert ranges[0][0] == lo and ranges[-1][1] == hi
        for (_, a_hi), (b_lo, _) in itertools.pairwise(ranges):
            assert b_lo == a_hi + 1  # inclusive ends: no gap, no overlap
        assert len(ranges) == len(data["collectives"][kind]["files"])
    for p in sorted((out / "legacy").iterdir()):
        verify_program(parse_program(p.read_text(), str(p), "legacy"), ("outofplace",),
                       profile="legacy")


def test_legacy_config_is_exclusive_and_absolute(built):
    out, _ = built
    text = (out / "msccl_config.xml").read_text()
    assert text.startswith("<msccl_algos>\n") and text.endswith("</msccl_algos>\n")
    loads = re.findall(r'<load path="([^"]+)" minbytes="(\d+)" maxbytes="(\d+)" proto="(\w+)"/>', text)
    assert loads
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for path, lo, hi, proto in loads:
        assert Path(path).is_absolute() and Path(path).is_file() and proto in PROTOCOLS
        by_kind.setdefault(Path(path).name.split("_")[0], []).append((int(lo), int(hi)))
    for ranges in by_kind.values():
        for (_, a_hi), (b_lo, _) in itertools.pairwise(ranges):
            assert a_hi == b_lo  # exclusive maxbytes in the legacy runtime


def test_envelope_never_worse_than_best_baseline(built):
    out, _ = built
    data = json.loads((out / "catalog.json").read_text())
    for kind, d in data["collectives"].items():
        cands = d["candidates"]
        for b in d["buckets"]:
            i = b["index"]
            best_base = min(x for c in cands if c["encoding"] == "baseline"
                            for per in c["predicted_us"].values() for ts in per.values()
                            for x in [ts[i]] if x is not None)
            w = b["winner"]
            cand = next(c for c in cands if c["algorithm"] == w["algorithm"] and c["chunks"] == w["chunks"])
            won = cand["predicted_us"][w["proto"]][str(w["instances"])][i]
            assert won == b["time_us"] and won <= best_base + 1e-9, (kind, b)
            assert b["gain_pct"] is not None and b["gain_pct"] >= 0
            # ring:4 has no NCCL (no GPU): no speed-up is claimed (tests/test_nccl_model.py
            # checks the NCCL column on dgx_a100)
            assert b["nccl"] is None and b["speedup_vs_nccl"] is None
            # ... and nothing is left to it: every size has a file (tests/test_catalog_nccl.py)
            assert b["served_by"] == "synth" and b["file"] is not None
            # the written file under the timed program model (launch floor included)
            assert b["program_us"] is not None and b["program_us"] > 1.0, (kind, b)
        assert all(c["verified"] and c["cache_key"] for c in cands)
        assert d["left_to_nccl"] == []
        for f in d["files"]:  # the runtime selects the file at its sizes (spec §3.1)
            for i in f["buckets"]:
                assert data["buckets"][i]["size"] % (4 * f["nchunksperloop"]) == 0
    md = (out / "catalog.md").read_text()
    assert "vs NCCL" in md and "best baseline" in md and "MSCCL_ALGO_DIR=" in md
    assert "better by" not in md
    assert "program_us" in md


def test_plots_exist(built):
    out, _ = built
    for kind in ("allgather", "allreduce"):
        png = (out / "plots" / f"{kind}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


def test_rerun_solves_nothing_and_is_byte_identical(built, capsys):
    out, cache = built
    before = digest(out)
    code, stdout, _ = run(catalog_args(out, cache, rebuild=True), capsys)
    assert code == 0
    m = re.search(r"(\d+) solved, (\d+) cached", stdout)
    assert m and m.group(1) == "0" and int(m.group(2)) > 0
    assert digest(out) == before


def test_rerun_simulates_nothing_and_reads_the_kept_times(built, capsys, monkeypatch):
    """The report's program-model times are kept beside the solve cache (by the file's content,
    the machine and the figures): a rerun in a new process simulates no file and writes the
    same bytes."""
    from synth.timing import program as pm

    out, cache = built
    assert list((cache / "timings").rglob("*.json"))
    before = digest(out)
    monkeypatch.setattr(pm, "_TIMES", {})               # nothing remembered in this process
    simulated = pm.CACHE_STATS.simulated
    code, _, _ = run(catalog_args(out, cache, rebuild=True), capsys)
    assert code == 0
    assert pm.CACHE_STATS.simulated == simulated and pm.CACHE_STATS.disk > 0
    assert digest(out) == before


def test_a_rerun_with_the_same_inputs_rewrites_the_stored_folder_without_building(
        built, tmp_path, capsys, monkeypatch):
    """The warm rerun of an unchanged catalog takes its whole folder from the cache: nothing is
    solved, tuned, compiled or timed (build_catalog is not called), the bytes are the same, and
    what it printed is printed again; any changed input (here the seed, and the output folder:
    MSCCL_CONFIG holds absolute paths) builds again."""
    import synth.catalog.build as cli_catalog

    out, cache = built
    before = digest(out)
    shutil.rmtree(out / "plots")  # a damaged folder is written whole again

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    with monkeypatch.context() as m:
        m.setattr(cli_catalog, "build_catalog", no_build)
        code, stdout, _ = run(catalog_args(out, cache), capsys)
    assert code == 0 and "inputs unchanged" in stdout and "MSCCL_ALGO_DIR=" in stdout
    assert "allgather: " in stdout and "allreduce: " in stdout
    assert digest(out) == before
    calls = {"n": 0}
    real = cli_catalog.build_catalog

    def counted(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cli_catalog, "build_catalog", counted)
    code, stdout, _ = run([*catalog_args(out, cache), "--seed", "1"], capsys)
    assert code == 0 and calls["n"] == 1 and "inputs unchanged" not in stdout
    code, stdout, _ = run(catalog_args(tmp_path / "elsewhere", cache), capsys)
    assert code == 0 and calls["n"] == 2
    # a corrupt stored run is a miss, never an error
    for entry in (cache / "catalogs").rglob("*.json"):
        entry.write_text("{not json")
    code, stdout, _ = run(catalog_args(out, cache), capsys)
    assert code == 0 and calls["n"] == 3 and "inputs unchanged" not in stdout
    assert digest(out) == before


def test_changing_one_link_class_resolves_only_what_depends_on_it(built, tmp_path):
    from synth.calibration import load_calibration
    from synth.catalog import build_catalog
    from synth.catalog.candidates import CHUNK_GRID

    _, cache = built
    topo = load_topology(TOPO)
    cal = load_calibration({"link_classes": {"link": {"alpha_us": 1.7, "bandwidth_GBps": 40}}})
    res = build_catalog(topo, topo_spec=TOPO, nodes=1, kinds=("allgather",),
                        sizes=parse_sizes(SIZES), cache_dir=cache, calibration=cal)
    # every baseline solve (own chunking + the chunk grid) is reused, everything else re-solved
    assert res.cached == 1 + len(CHUNK_GRID) and res.solved >= 1 + len(CHUNK_GRID)
    encodings = {c.encoding for c in res.results[0].candidates}
    assert {"baseline", "trees"} <= encodings
    # the calibrated figures are what the catalog predicted with
    assert res.topology.link_classes()["link"] == (1.7, 40.0)


def test_calibration_file_feeds_the_catalog(tmp_path, built, capsys):
    _, cache = built
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": "synth-calibration/1", "kind": "nccl-tests",
                               "link_classes": {"link": {"alpha_us": 2.0, "beta_us_per_mb": 25.0},
                                                "ib_hdr": {"alpha_us": 3.0}},
                               "protocols": {"LL": {"launch_us": 4.0, "source": "fit"}}}))
    target = tmp_path / "cat"
    code, _, _ = run([*catalog_args(target, cache, colls="allgather"), "--calibration", str(cal)],
                     capsys)
    assert code == 0
    data = json.loads((target / "catalog.json").read_text())
    assert data["calibration"] == str(cal)
    assert data["topology"]["link_classes"]["link"] == {"alpha_us": 2.0, "bandwidth_GBps": 40.0}
    assert data["protocol_model"]["protocols"]["LL"]["launch_us"] == 4.0
    assert any("'ib_hdr' is not in" in n for n in data["calibration_notes"])
    assert "Calibration:" in (target / "catalog.md").read_text()


def test_structure_key_ignores_alpha_beta_but_not_shape():
    a = load_topology("dgx_a100", 2)
    from synth.calibrated import apply_calibration
    b = apply_calibration(a, {"link_classes": {"ib_hdr": {"alpha_us": 9.0, "beta_us_per_mb": 80}}})
    assert a.content_hash != b.content_hash
    assert structure_hash(a) == structure_hash(b)
    assert structure_hash(a) != structure_hash(load_topology("dgx_a100", 3))
    coll = make_collective("allgather", 16).to_dict()
    assert solve_key(a, coll, "baseline", None, 60.0) == solve_key(b, coll, "baseline", None, 60.0)
    assert solve_key(a, coll, "trees", None, 60.0) != solve_key(b, coll, "trees", None, 60.0)


def test_corrupt_cache_entry_is_a_miss(tmp_path):
    cache = SolveCache(tmp_path)
    cache.put("ab" * 32, {"status": "ok", "schedules": {}})
    assert cache.get("ab" * 32)["status"] == "ok"
    cache.path("ab" * 32).write_text("{not json")
    assert cache.get("ab" * 32) is None


# ------------------------------------------------------------------------------------ fallback
@pytest.mark.parametrize("stage", ["compile", "interpreter"])
def test_winner_without_a_file_falls_back_to_the_next_best(tmp_path, built, monkeypatch, stage):
    """A configuration whose file breaks a limit while the ranges are chosen (``compile``), or
    whose chosen file the interpreter then fails (``interpreter``: files are proved only once
    chosen), is excluded and its buckets go to the next best."""
    import synth.catalog.emit as emit_mod
    from synth.catalog import build_catalog
    from synth.errors import SynthError

    name = "compile_schedule" if stage == "compile" else "verify_text"
    real = getattr(emit_mod, name)
    failed: list[int] = []

    def picky(schedule, *args, **kw):
        instances = args[-1].instances if args else kw["instances"]
        if instances > 1:
            failed.append(instances)
            raise SynthError("threadblocks per rank is 99; the exec runtime allows at most 1 (test)")
        return real(schedule, *args, **kw)

    monkeypatch.setattr(emit_mod, name, picky)
    _, cache = built
    res = build_catalog(load_topology(TOPO), topo_spec=TOPO, nodes=1, kinds=("allgather",),
                        sizes=parse_sizes("64KB:1MB"), cache_dir=cache, xml_cache=False)
    cr = res.results[0]
    assert failed
    assert cr.choice.excluded and all("(test)" in why for why in cr.choice.excluded.values())
    assert all(r.config.instances == 1 for r in cr.choice.ranges)
    for r in cr.choice.ranges:  # each bucket got the best configuration that could be emitted
        for b in r.buckets:
            ok = [c for c in cr.tunings[b].ranking if c.instances == 1]
            assert r.config == ok[0]


def test_a_range_file_is_one_compile_per_max_bytes_with_its_min_bytes_set():
    """The catalog compiles once per (configuration, ``maxBytes``) and sets each range's
    ``minBytes`` (synth.catalog.emit, drafts): byte for byte the file compiling with both bounds
    writes, and the interpreter proves it."""
    from synth.catalog.emit import Emitter
    from synth.emit import XmlOptions, emit_verified_xml
    from synth.select.ranges import Config, Range

    topo = load_topology("ring:4")
    sched = baseline(topo, make_collective("allgather", 4), "ring")
    cfg = Config("ring", 1, "LL", 2)
    cand = type("C", (), {"schedule": sched, "name": "ring"})()
    em = Emitter(topo, {cfg: cand})
    hi = 1 << 20
    for lo in (1024, 65536):
        r = Range(cfg, (0,), lo, hi)
        assert em.attempt(r) is None
        want, _ = emit_verified_xml(sched, XmlOptions(proto="LL", instances=2, min_bytes=lo,
                                                      max_bytes=hi))
        assert em.executor_file(r).exec_xml == want
        assert em.verify(r) is None and em.verify(r) is None    # interpreted once
    assert em.compiled == 1 and em.verified == 2
    assert em.result(Range(cfg, (0,), 1024, hi)).modes


# ------------------------------------------------------------------------------------ atomicity
def test_failed_write_leaves_previous_catalog(tmp_path, built, monkeypatch, capsys):
    import synth.catalog.output as output

    _, cache = built
    target = tmp_path / "cat"
    assert run(catalog_args(target, cache), capsys)[0] == 0
    before = digest(target)
    calls = {"n": 0}
    real = output._write

    def dies(path, content):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        real(path, content)

    monkeypatch.setattr(output, "_write", dies)
    code, _, stderr = run(catalog_args(target, cache, colls="allgather"), capsys)
    assert code == 2 and "No space left on device" in stderr
    assert digest(target) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cat.tmp-")]


def test_kill_mid_run_leaves_previous_catalog_intact(tmp_path, built):
    out, cache = built
    target = tmp_path / "cat"
    import shutil
    shutil.copytree(out, target)
    before = digest(target)
    cold = tmp_path / "cold-cache"  # the killed run has to solve, so it is still working
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "synth", *catalog_args(target, cold)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if sum(1 for _ in (cold / "solves").rglob("*.json")) >= 3 if (cold / "solves").exists() else False:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert digest(target) == before
    # second kill: as soon as the new folder is being written beside the old one
    args = catalog_args(target, cache, colls="allgather")  # warm cache: straight to writing
    proc = subprocess.Popen([sys.executable, "-m", "synth", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.name.startswith(".cat.tmp-") for p in tmp_path.iterdir()):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.001)
    proc.wait(timeout=30)
    state = digest(target)
    from synth.catalog.output import clean_stale
    clean_stale(target)  # what the next run does first: the killed run's leftovers go
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cat.")]
    main(args)  # the same run, to completion: the killed one left the old or exactly this one
    assert state in (before, digest(target))


def test_refuses_to_replace_a_folder_that_is_not_a_catalog(tmp_path, capsys, built):
    _, cache = built
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    code, _, stderr = run(catalog_args(target, cache), capsys)
    assert code == 2 and "not a synth catalog" in stderr
    assert (target / "notes.txt").read_text() == "keep me"


# ------------------------------------------------------------------------------------ executors
def test_workers_do_not_change_the_output(tmp_path, built, capsys):
    out, _ = built
    target = tmp_path / "cat"
    code, stdout, _ = run(catalog_args(target, tmp_path / "cache2", workers=2), capsys)
    assert code == 0 and "0 cached" in stdout
    mine, theirs = digest(target), digest(out)
    theirs.pop("msccl_config.xml")  # holds absolute paths
    mine.pop("msccl_config.xml")
    for name in ("catalog.md",):  # holds the folder's path
        mine.pop(name), theirs.pop(name)
    assert mine == theirs


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_ray_executor(tmp_path, built, capsys):
    pytest.importorskip("ray")
    out, _ = built
    target = tmp_path / "cat"
    code, stdout, stderr = run(["catalog", "--topo", TOPO, "--collectives", "allgather", "--sizes",
                                SIZES, "--out", str(target), "--cache-dir", str(tmp_path / "c"),
                                "--executor", "ray", "--workers", "2", "--quiet"], capsys)
    assert code == 0, stderr
    assert "0 cached" in stdout
    local = json.loads((out / "catalog.json").read_text())["collectives"]["allgather"]
    remote = json.loads((target / "catalog.json").read_text())["collectives"]["allgather"]
    assert remote["buckets"] == local["buckets"] and remote["files"] == local["files"]


# ------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("argv", "needle"), [
    (["--topo", "ring:4x"], "ring"),
    (["--collectives", "allgahter"], "unknown collective 'allgahter'; did you mean allgather"),
    (["--collectives", "gather"], "no buffer layout for gather"),
    (["--sizes", "4GB:1KB"], "is empty"),
    (["--sizes", "lots"], "cannot read size"),
    (["--tuner", "annealing"], "unknown tuner 'annealing'"),
    (["--executor", "slurm"], "unknown executor 'slurm'"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--time-limit", "0"], "--time-limit must be a positive"),
    (["--calibration", "/nonexistent/cal.json"], "does not exist"),
])
def test_bad_input(tmp_path, capsys, argv, needle):
    base = {"--topo": TOPO, "--collectives": "allgather", "--sizes": SIZES,
            "--out": str(tmp_path / "cat"), "--cache-dir": str(tmp_path / "cache")}
    base.update(dict(zip(argv[::2], argv[1::2], strict=True)))
    code, _, stderr = run(["catalog", *[x for kv in base.items() for x in kv], "--quiet"], capsys)
    assert code == 2, stderr
    assert needle in stderr and "Traceback" not in stderr
    assert not (tmp_path / "cat").exists()


def test_unwritable_out_dir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, stderr = run(["catalog", "--topo", TOPO, "--collectives", "allgather", "--out",
                           str(blocker / "cat"), "--cache-dir", str(tmp_path / "c"), "--quiet"], capsys)
    assert code == 2 and "cannot create" in stderr


def test_ray_missing_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code, _, stderr = run(["catalog", "--topo", TOPO, "--collectives", "allgather", "--out",
                           str(tmp_path / "cat"), "--cache-dir", str(tmp_path / "c"),
                           "--executor", "ray", "--quiet"], capsys)
    assert code == 2 and "pip install 'ray" in stderr and "synth[ray]" not in stderr


# ------------------------------------------------------------------------------------ buckets
def test_buckets_tile_1kb_to_4gb_exactly():
    sizes = parse_sizes("1KB:4GB")
    buckets = make_buckets(sizes)
    assert buckets[0].lo == 1024 and buckets[-1].hi == 4 * 2**30 and len(buckets) == len(sizes)
    for a, b in itertools.pairwise(buckets):
        assert b.lo == a.hi + 1 and a.lo <= a.size <= a.hi
        # the boundary sits at the geometric mean: each byte count goes to its nearest size (log scale)
        assert abs(math.log(a.hi / a.size) - math.log(b.size / b.lo)) < 1e-3
    assert make_buckets([4096]) == [make_buckets([4096])[0]] and make_buckets([4096])[0].lo == 4096


# ------------------------------------------------------------------------------------ protocols
def _ring_allgather():
    topo = load_topology("dgx_a100")
    return topo, baseline(topo, make_collective("allgather", 8), "ring")


def test_protocol_model_orders_latency_and_bandwidth():
    topo, sched = _ring_allgather()
    small, large = [4096], [2**30]
    t = {p: predict_times_us(sched, topo, small + large, p) for p in PROTOCOLS}
    assert t["LL"][0] < t["LL128"][0] and t["LL"][0] < t["Simple"][0]   # LL: lowest latency
    assert t["Simple"][1] < t["LL"][1] and t["LL128"][1] < t["LL"][1]   # LL: half the bandwidth
    # more instances: help large messages (per-channel cap), cost a little at small ones
    one = predict_times_us(sched, topo, small + large, "Simple", 1)
    four = predict_times_us(sched, topo, small + large, "Simple", 4)
    assert four[1] < one[1] and four[0] > one[0]


def test_protocol_model_reduces_to_the_alpha_beta_model():
    topo, sched = _ring_allgather()
    sizes = [2**k for k in range(10, 31, 4)]
    bare = ProtocolParams("Simple", 1.0, 0.0, 0.0, 0.0, 1e12, 2**40)
    got = StepProfile.of(sched, topo).times_us(sizes, bare, 1, 0.0)
    assert np.allclose(got, schedule_times_us(sched, topo, sizes), rtol=1e-9)


def test_protocol_size_limit_and_calibration():
    topo, sched = _ring_allgather()
    ll = default_model(topo).get("LL")
    limit = (65536 - 1) * ll.chunk_bytes * sched.collective.buffer_chunks
    t = predict_times_us(sched, topo, [limit, limit + 8], "LL")
    assert math.isfinite(t[0]) and t[1] == math.inf
    base = predict_times_us(sched, topo, [1024], "LL")[0]
    cal = {"link_classes": {"nvswitch_v2": {"alpha_us": 2.7}}, "protocols": {"LL": {"launch_us": 1.0}}}
    got = predict_times_us(sched, topo, [1024], "LL", calibration=cal)[0]
    steps = sched.num_steps
    assert got == pytest.approx(base - 6.6 + 1.0 + steps * (2.7 - 0.7), rel=1e-6)


def test_missing_ray_names_an_install_that_works(monkeypatch):
    """synth is not on a package index: the hint installs Ray itself (or the source folder's
    extra), never 'synth[ray]', which would fetch an unrelated package of that name."""
    import sys

    from synth.catalog.executor import check_executor
    from synth.errors import SynthError

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SynthError) as info:
        check_executor("ray", 2)
    assert "pip install 'ray>=2.9'" in info.value.message
    assert "synth[ray]" not in info.value.message
