"""Closed stacks on the command line: `synth strategies` and `synth calibrate`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from synth.calibrate.closed_fit import PUBLISHED_NCCOM
from synth.cli import cli
from synth.closed.mesh import resolve_topology
from synth.closed.search import rank_strategies
from synth.closed.winner import emit_closed_program
from tests.conftest import run_synth

TOPOS = [("trn1_32", 1), ("trn1_32", 2), ("trn2_64", 1), ("tpu_v5e_4x4", 1)]
COMMON = {"flat", "hierarchical", "torus-decomposition", "pipelined"}
EXPECTED = {
    "allgather": COMMON | {"ring-permute"},
    "reducescatter": COMMON | {"ring-permute", "ar-slice"},
    "allreduce": COMMON | {"ring-permute", "rs-ar-ag", "rs-ag", "ar-ar"},
    "alltoall": COMMON,
}


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name,nodes", TOPOS)
def test_strategies_cover_every_family_for_every_collective(name, nodes):
    for coll, fams in EXPECTED.items():
        data = json.loads(invoke("strategies", "--topo", name, "--nodes", str(nodes), "--coll", coll,
                                 "--bytes", "4MB", "--json"))
        seen = {f for s in data["strategies"] for f in s["families"]}
        assert fams <= seen, (coll, fams - seen)
        assert data["winner"] == data["strategies"][0]["name"] and data["reason"]
        times = [s["predicted_us"] for s in data["strategies"]]
        assert times == sorted(times) and times[0] > 0
        if nodes == 1 and name != "tpu_v5e_4x4" and coll != "alltoall":
            assert "lowered-schedule" in seen


@pytest.mark.parametrize("name,nodes", TOPOS)
def test_tensors_16_shows_bundling_and_its_gain(name, nodes):
    text = invoke("strategies", "--topo", name, "--nodes", str(nodes), "--coll", "allreduce",
                  "--bytes", "64KB", "--tensors", "16", "--limit", "5")
    assert "bundled(" in text and "per-tensor(" in text
    assert "bundling 16 tensors" in text and "modeled gain" in text
    data = json.loads(invoke("strategies", "--topo", name, "--nodes", str(nodes), "--coll",
                             "allgather", "--bytes", "64KB", "--tensors", "16", "--json"))
    gain = data["bundling"]
    assert gain["gain"] > 1.5 and gain["calls"][0] >= 16 * gain["calls"][1]
    assert data["winner"].startswith("bundled(")


def test_strategies_text_names_the_winner_and_why():
    text = invoke("strategies", "--topo", "trn1_32", "--coll", "allreduce", "--bytes", "256MB")
    # the fitted core-to-core bandwidth (56 GB/s) is below a chip's NeuronLink share: the chip
    # stage goes in the middle, on the 16x smaller shard
    assert "winner: rs[row,col] > ar[core] > ag[row,col]" in text
    # the reason names flat (the runner-up here, else an 'against flat' clause) and the bytes
    why = text.split("why:")[1]
    assert "ar[row,col,core]" in why and "bytes on links" in why
    small = invoke("strategies", "--topo", "trn1_32", "--coll", "allreduce", "--bytes", "1KB")
    assert "winner: ar[row,col,core]" in small and "launch tax" in small


def test_integer_reduce_scatter_on_neuron_falls_back_and_says_why():
    text = invoke("strategies", "--topo", "trn1_32", "--coll", "reducescatter", "--dtype", "int32")
    assert "winner: ar[*] > slice" in text
    assert "neuron-integer-reduce-scatter" in text
    jax = json.loads(invoke("strategies", "--topo", "trn1_32", "--coll", "reducescatter",
                            "--dtype", "int32", "--platform", "jax", "--json"))
    assert jax["winner"] == "rs[row,col,core]"


def test_calibrate_published_figures_and_use_the_file(tmp_path):
    log = tmp_path / "nccom.log"
    log.write_text(PUBLISHED_NCCOM)
    text = invoke("calibrate", str(log), "--platform", "neuron", "--out", str(tmp_path / "cal.json"))
    assert "all_gather" in text and "all_reduce" in text and "wrote" in text
    cal = json.loads((tmp_path / "cal.json").read_text())
    assert cal["format"] == "synth-calibration/1" and cal["topology"] == "trn1_32x2"
    data = json.loads(invoke("strategies", "--topo", "trn1_32", "--coll", "allgather", "--bytes",
                             "1KB", "--calibration", str(tmp_path / "cal.json"), "--json"))
    flat = next(s for s in data["strategies"] if s["name"] == "ag[row,col,core]")
    # the calibrated figures reproduce the published 6.2 µs (a fit of the model's figures, not a
    # per-key lookup: within 2%)
    assert flat["predicted_us"] == pytest.approx(6.2, rel=0.02)
    assert data["cost_model"].endswith("cal.json")


@pytest.mark.parametrize("args,message", [
    (["strategies", "--topo", "trn1_32", "--coll", "broadcast"], "unknown closed-stack collective"),
    (["strategies", "--topo", "trn1_32", "--coll", "allreduce", "--tensors", "0"], "--tensors"),
    (["strategies", "--topo", "trn1_32", "--coll", "allreduce", "--reduce", "mul"], "add, min, max"),
    (["strategies", "--topo", "nope", "--coll", "allreduce"], "unknown topology"),
    (["strategies", "--topo", "trn1_32", "--coll", "allreduce", "--calibration", "missing.json"],
     "does not exist"),
    (["calibrate", "missing.log", "--platform", "neuron"], "does not exist"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    proc = run_synth(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_bad_logs_are_reported(tmp_path):
    rows = tmp_path / "rows.log"
    rows.write_text("1024 256 fp32 6.2 0.1 0.1\n")
    proc = run_synth("calibrate", str(rows), "--platform", "neuron")
    assert proc.returncode == 2 and "before any nccom-test command" in proc.stderr
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"format": "synth-timings/1", "records": [{"primitive": "bogus"}]}))
    proc = run_synth("calibrate", str(js), "--platform", "jax")
    assert proc.returncode == 2 and "records.0" in proc.stderr
    cal = tmp_path / "cal.json"
    cal.write_text("{}")
    proc = run_synth("strategies", "--topo", "trn1_32", "--coll", "allgather", "--calibration", str(cal))
    assert proc.returncode == 2 and "not a synth calibration file" in proc.stderr


def test_emit_closed_program_writes_module_and_report(tmp_path):
    topo = resolve_topology("trn1_32")
    files = emit_closed_program(topo, "allreduce", "neuron", tmp_path, nbytes=256 << 20)
    text = files[0].read_text()
    assert "import torch_xla.core.xla_model as xm" in text
    assert "xm.reduce_scatter(xm.REDUCE_SUM" in text and "groups=GROUPS_0" in text
    assert "GROUPS_0 = [[0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30],[1,3,5" in text
    report = json.loads(files[1].read_text())
    assert report["winner"] in text and report["platform"] == "neuron"
    files = emit_closed_program(resolve_topology("tpu_v5e_4x4"), "allgather", "jax", tmp_path,
                                nbytes=1 << 20, tensors=4)
    text = files[0].read_text()
    assert "lax.all_gather(" in text and "shard_map" in text and "Mesh(" in text
    compile(text, "x", "exec")
    with pytest.raises(Exception, match="unknown target"):
        emit_closed_program(topo, "allreduce", "cuda", tmp_path)


def test_ranking_is_library_callable():
    r = rank_strategies(resolve_topology("trn1_32", 2), "allreduce", "neuron", 1 << 30)
    assert r.best.name.startswith(("rs[", "pipelined"))
    assert r.best.estimate.time_us < r.best_of("flat").estimate.time_us


def test_strategies_on_a_gpu_machine_needs_a_platform():
    """dgx1 has no closed stack: ranking Neuron programs there silently would answer another
    question; with --platform named, the user asked for it."""
    r = run_synth("strategies", "--topo", "dgx1", "--coll", "allreduce")
    assert r.returncode == 2 and "GPU machine" in r.stderr and "--platform" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = CliRunner().invoke(cli, ["strategies", "--topo", "dgx1", "--coll", "allreduce",
                                 "--platform", "neuron"])
    assert r.exit_code == 0, r.output
