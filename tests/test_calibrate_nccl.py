"""Calibration from nccl-tests logs: parser, model, recovery of known α/β, CLI."""
# ruff: noqa: E501  (the nccl-tests log below keeps its real line width)

from __future__ import annotations

import json

import numpy as np
import pytest

from synth.calibrate.link_fit import (
    calibrate_file,
    calibrate_nccl,
    nccl_schedule,
    step_model,
    synthetic_nccl_log,
)
from synth.calibrate.nccl_tests import parse_nccl_tests
from synth.calibrated import apply_calibration
from synth.calibration import class_figures, load_calibration
from synth.cli import main
from synth.errors import SynthError
from synth.timing.lockstep import schedule_times_us
from synth.topology_io import load_topology
from tests.conftest import run_synth

# An older nccl-tests (no "Collective test starting", no root column, "error" = largest deviation),
# run as one process with -g 8, the command echoed by the job script; then a current version's
# all_reduce_perf over MPI on two hosts. Numbers are in the range a DGX A100 pair produces.
REAL_LOG = """\
$ ./build/all_gather_perf -b 1K -e 64M -f 4 -g 8
# nThread 1 nGpus 8 minBytes 1024 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  20551 on     dgx-01 device  0 [0x07] A100-SXM4-40GB
#   Rank  1 Pid  20551 on     dgx-01 device  1 [0x0f] A100-SXM4-40GB
#   Rank  2 Pid  20551 on     dgx-01 device  2 [0x47] A100-SXM4-40GB
#   Rank  3 Pid  20551 on     dgx-01 device  3 [0x4e] A100-SXM4-40GB
#   Rank  4 Pid  20551 on     dgx-01 device  4 [0x87] A100-SXM4-40GB
#   Rank  5 Pid  20551 on     dgx-01 device  5 [0x90] A100-SXM4-40GB
#   Rank  6 Pid  20551 on     dgx-01 device  6 [0xb7] A100-SXM4-40GB
#   Rank  7 Pid  20551 on     dgx-01 device  7 [0xbd] A100-SXM4-40GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float    none    11.45    0.09    0.08  0e+00    11.21    0.09    0.08  0e+00
        4096          1024   float    none    11.60    0.35    0.31  0e+00    11.38    0.36    0.32  0e+00
       16384          4096   float    none    11.98    1.37    1.20  0e+00    11.80    1.39    1.21  0e+00
       65536         16384   float    none    13.01    5.04    4.41  0e+00    12.77    5.13    4.49  0e+00
      262144         65536   float    none    16.93   15.48   13.55  0e+00    16.11   16.27   14.24  0e+00
     1048576        262144   float    none    27.38   38.30   33.51  0e+00    25.49   41.14   36.00  0e+00
     4194304       1048576   float    none    55.06   76.18   66.66  0e+00    52.10   80.51   70.44  0e+00
    16777216       4194304   float    none   149.90  111.92   97.93  0e+00   146.20  114.75  100.41  0e+00
    67108864      16777216   float    none   522.40  128.46  112.41  0e+00   518.00  129.55  113.36  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 37.4021
#
# nccl-tests version 2.13.11 nccl-headers=22304 nccl-library=22304
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 8(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  61001 on     dgx-01 device  0 [0000:07:00] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  61002 on     dgx-01 device  1 [0000:0f:00] NVIDIA A100-SXM4-40GB
#  Rank  2 Group  0 Pid  61003 on     dgx-01 device  2 [0000:47:00] NVIDIA A100-SXM4-40GB
#  Rank  3 Group  0 Pid  61004 on     dgx-01 device  3 [0000:4e:00] NVIDIA A100-SXM4-40GB
#  Rank  4 Group  0 Pid  61005 on     dgx-01 device  4 [0000:87:00] NVIDIA A100-SXM4-40GB
#  Rank  5 Group  0 Pid  61006 on     dgx-01 device  5 [0000:90:00] NVIDIA A100-SXM4-40GB
#  Rank  6 Group  0 Pid  61007 on     dgx-01 device  6 [0000:b7:00] NVIDIA A100-SXM4-40GB
#  Rank  7 Group  0 Pid  61008 on     dgx-01 device  7 [0000:bd:00] NVIDIA A100-SXM4-40GB
#  Rank  8 Group  0 Pid  33101 on     dgx-02 device  0 [0000:07:00] NVIDIA A100-SXM4-40GB
#  Rank  9 Group  0 Pid  33102 on     dgx-02 device  1 [0000:0f:00] NVIDIA A100-SXM4-40GB
#  Rank 10 Group  0 Pid  33103 on     dgx-02 device  2 [0000:47:00] NVIDIA A100-SXM4-40GB
#  Rank 11 Group  0 Pid  33104 on     dgx-02 device  3 [0000:4e:00] NVIDIA A100-SXM4-40GB
#  Rank 12 Group  0 Pid  33105 on     dgx-02 device  4 [0000:87:00] NVIDIA A100-SXM4-40GB
#  Rank 13 Group  0 Pid  33106 on     dgx-02 device  5 [0000:90:00] NVIDIA A100-SXM4-40GB
#  Rank 14 Group  0 Pid  33107 on     dgx-02 device  6 [0000:b7:00] NVIDIA A100-SXM4-40GB
#  Rank 15 Group  0 Pid  33108 on     dgx-02 device  7 [0000:bd:00] NVIDIA A100-SXM4-40GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    28.51    0.00    0.00      0    27.93    0.00    0.00      0
          64            16     float     sum      -1    28.87    0.00    0.00      0    28.40    0.00    0.00      0
         512           128     float     sum      -1    29.95    0.02    0.03      0    29.61    0.02    0.03      0
        4096          1024     float     sum      -1    33.10    0.12    0.23      0    32.84    0.12    0.23      0
       32768          8192     float     sum      -1    41.76    0.78    1.47      0    41.22    0.79    1.49      0
      262144         65536     float     sum      -1    72.03    3.64    6.82      0    71.11    3.69    6.91      0
     2097152        524288     float     sum      -1   160.22   13.09   24.54      0   158.90   13.20   24.75      0
    16777216       4194304     float     sum      -1   614.83   27.29   51.16      0   611.27   27.45   51.46      0
   134217728      33554432     float     sum      -1  3905.1   34.37   64.44      0  3899.7   34.42   64.53      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 16.7305
#
# Collective test concluded: all_reduce_perf
"""

TRUTH = {
    "dgx_a100": {"nvswitch_v2": (0.55, 46.0), "ib_hdr": (3.1, 44.0), "launch_us": 4.0},
    "ndv2": {"nvlink2_measured": (0.42, 55.0), "ib_edr_measured": (3.4, 118.0), "launch_us": 5.0},
}
FULL = ("allgather", "reducescatter", "allreduce", "alltoall")


def _log(name: str, seed: int, single=FULL, multi=("allgather", "allreduce"), noise=0.03) -> str:
    truth = TRUTH[name]
    text = synthetic_nccl_log(load_topology(name, 1), truth, single, noise=noise, seed=seed)
    if multi:
        text += synthetic_nccl_log(load_topology(name, 2), truth, multi, noise=noise, seed=seed + 1000)
    return text


# ------------------------------------------------------------------------------------------ parser
def test_parser_reads_both_versions_in_place_columns_and_concatenated_runs():
    runs = parse_nccl_tests(REAL_LOG, "real.log")
    assert [(r.collective, r.ranks, r.nodes) for r in runs] == [("allgather", 8, 1), ("allreduce", 16, 2)]
    ag, ar = runs
    assert ag.program == "all_gather_perf" and ar.program == "all_reduce_perf"
    assert len(ag.rows) == 18 and len(ar.rows) == 18
    first_out, first_in = ag.rows[0], ag.rows[1]
    assert (first_out.placement, first_out.size, first_out.time_us) == ("out-of-place", 1024, 11.45)
    assert (first_in.placement, first_in.time_us, first_in.busbw) == ("in-place", 11.21, 0.08)
    assert ar.rows[-1].time_us == 3899.7 and ar.rows[-1].dtype == "float"


def test_parser_infers_ranks_from_busbw_without_rank_lines():
    text = "\n".join(line for line in REAL_LOG.splitlines() if "Rank " not in line)
    ag, ar = parse_nccl_tests(text, "x")
    assert ag.ranks == 8 and ar.ranks == 16 and not ag.hosts


def test_parser_skips_failed_and_empty_rows_and_unsupported_programs():
    text = synthetic_nccl_log(load_topology("dgx_a100"), TRUTH["dgx_a100"], ("allgather",),
                              sizes=(8, 1024, 1 << 20), seed=0)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith("1048576"))
    parts = lines[row].split()
    parts[8] = "3"  # out-of-place #wrong
    lines[row] = "  ".join(parts)
    text = "\n".join(lines) + "\n# Collective test starting: broadcast_perf\n" \
        "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n" \
        "  1024  256  float  none  0  9.1  0.1  0.1  0  9.0  0.1  0.1  0\n"
    (run,) = parse_nccl_tests(text, "x")
    assert len(run.rows) == 3  # 8 B rounds to 0 (skipped), 1 KB x2, 1 MB in-place only
    assert set(run.skipped) == {"size 0 (the per-rank count rounds down to nothing)",
                                "#wrong > 0 (nccl-tests found wrong results)"}


@pytest.mark.parametrize("text,message", [
    ("hello\n", "no nccl-tests results"),
    ("#  size count type redop root time algbw busbw #wrong\n 1024 256 float none -1 9.0 0.1 0.1 0\n",
     "without a collective name"),
    ("# Collective test starting: sendrecv_perf\n"
     "#  size count type redop root time algbw busbw #wrong\n 1024 256 float none -1 9.0 0.1 0.1 0\n",
     "found only: sendrecv_perf"),
    ("# Collective test starting: all_gather_perf\n"
     "#  size count type redop root time algbw busbw #wrong\n 1024 256 float none -1 abc 0.1 0.1 0\n",
     "cannot read time"),
])
def test_bad_logs_raise_clear_errors(text, message):
    with pytest.raises(SynthError, match=message):
        parse_nccl_tests(text, "bad.log")


# ------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("name,nodes", [("dgx_a100", 2), ("ndv2", 2), ("dgx1", 1), ("trn1_32", 1)])
def test_step_model_is_synths_cost_model(name, nodes):
    """With one ring, the fit's model equals schedule_times_us on the calibrated topology."""
    topo = load_topology(name, nodes)
    figures = class_figures(topo)
    classes = tuple(sorted(figures))
    rng = np.random.default_rng(7)
    theta = {c: (figures[c][0] * rng.uniform(0.5, 2), figures[c][1] * rng.uniform(0.5, 2)) for c in classes}
    cal = {"link_classes": {c: {"alpha_us": a, "beta_us_per_mb": b} for c, (a, b) in theta.items()}}
    sizes = np.array([2.0**e for e in range(4, 31, 3)])
    for coll in FULL:
        sched = nccl_schedule(topo, coll)
        model = step_model(sched, topo, classes, rings=1)
        got, _, _ = model.times(np.array([theta[c][0] for c in classes]),
                                np.array([theta[c][1] for c in classes]), sizes)
        want = schedule_times_us(sched, apply_calibration(topo, cal), sizes)
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=coll)


# ---------------------------------------------------------------------------------------- recovery
@pytest.mark.parametrize("name", sorted(TRUTH))
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_noisy_synthetic_log_recovers_every_class_within_5pct(name, seed):
    fit = calibrate_nccl(parse_nccl_tests(_log(name, seed), "syn.log"), name, source="syn.log")
    truth = TRUTH[name]
    for cls, (alpha, beta) in ((k, v) for k, v in truth.items() if k != "launch_us"):
        got = fit.classes[cls]
        assert got.source == "fit"
        assert abs(got.alpha_us - alpha) / alpha <= 0.05, (cls, got)
        assert abs(got.beta_us_per_mb - beta) / beta <= 0.05, (cls, got)
        assert got.alpha_stderr_pct is not None and got.beta_stderr_pct is not None
    assert fit.launch_source == "fit" and abs(fit.launch_us - truth["launch_us"]) / truth["launch_us"] < 0.05
    assert fit.median_rel_error < 0.04 and fit.max_rel_error < 0.15
    assert fit.default_median_rel_error > fit.median_rel_error
    # multi-node ring runs use one ring per NIC (8 on DGX A100, 1 on NDv2)
    rings = {r["rings"] for r in fit.runs if r["nodes"] == 2 and r["collective"] != "alltoall"}
    assert rings == {8 if name == "dgx_a100" else 1}


def test_far_from_the_datasheet_and_an_outlier():
    """Recovery does not depend on starting near the truth, and one bad row does not move the fit."""
    topo = load_topology("dgx_h100", 1)
    truth = {"nvswitch_v3": (0.25, 3 * 1000 / 50), "launch_us": 6.0}  # a third of the datasheet bandwidth
    text = synthetic_nccl_log(topo, truth, ("allgather", "allreduce"), noise=0.02, seed=5)
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("1048576 "))
    parts = lines[i].split()
    parts[5] = f"{float(parts[5]) * 3:.2f}"  # a 3x slow row (a straggler)
    lines[i] = "  ".join(parts)
    fit = calibrate_nccl(parse_nccl_tests("\n".join(lines), "x"), "dgx_h100")
    got = fit.classes["nvswitch_v3"]
    assert abs(got.alpha_us - 0.25) / 0.25 < 0.05 and abs(got.beta_us_per_mb - 60) / 60 < 0.05
    assert fit.max_rel_error > 0.6  # the straggler (2/3 below the model) is reported, not fitted


def test_one_step_count_per_class_fixes_launch_and_keeps_unused_classes():
    topo = load_topology("dgx_a100", 1)
    text = synthetic_nccl_log(topo, TRUTH["dgx_a100"], ("allgather",), noise=0.02, seed=3)
    fit = calibrate_nccl(parse_nccl_tests(text, "x"), "dgx_a100")
    assert fit.launch_source == "fixed" and fit.launch_us == 0.0
    assert any("launch floor not separable" in n for n in fit.notes)
    nv = fit.classes["nvswitch_v2"]
    assert nv.alpha_us == pytest.approx(0.55 + 4.0 / 7, rel=0.05)  # α absorbs launch / steps
    assert nv.beta_us_per_mb == pytest.approx(46.0, rel=0.05)
    ib = fit.classes["ib_hdr"]
    assert ib.source == "default" and (ib.alpha_us, ib.beta_us_per_mb) == class_figures(topo)["ib_hdr"]
    assert fit.median_rel_error < 0.03
    assert "protocols" not in fit.to_json()


def test_rank_count_must_match_the_topology():
    text = synthetic_nccl_log(load_topology("dgx_a100", 2), TRUTH["dgx_a100"], ("allgather",), seed=0)
    text = text.replace("node-1", "node-0")  # 16 ranks on one host
    with pytest.raises(SynthError, match="16 ranks over 1 node"):
        calibrate_nccl(parse_nccl_tests(text, "x"), "dgx_a100")


# --------------------------------------------------------------------------------------------- CLI
def test_cli_writes_a_calibration_that_solve_and_the_topology_use(tmp_path, capsys):
    log = tmp_path / "nccl.log"
    log.write_text(_log("dgx_a100", 11))
    out = tmp_path / "cal" / "dgx.json"
    main(["calibrate", str(log), "--format", "nccl-tests", "--topo", "dgx_a100", "--out", str(out)])
    text = capsys.readouterr().out
    assert "nvswitch_v2" in text and "ib_hdr" in text and "median" in text and str(out) in text
    data = json.loads(out.read_text())
    assert data["kind"] == "nccl-tests" and data["link_classes"]["ib_hdr"]["source"] == "fit"
    assert data["protocols"]["LL"]["launch_us"] == pytest.approx(4.0, rel=0.05)
    assert {r["program"] for r in data["fit"]["runs"]} == {"all_gather_perf", "reduce_scatter_perf",
                                                           "all_reduce_perf", "alltoall_perf"}
    # byte-stable: the same log gives the same file
    again = calibrate_file(log, "dgx_a100")
    assert again.dumps() == out.read_text()
    cal = load_calibration(out)
    topo = apply_calibration(load_topology("dgx_a100", 4), cal)
    assert topo.link_classes()["ib_hdr"][1] == pytest.approx(1000 / 44.0, rel=0.05)
    assert topo.link_classes()["nvswitch_v2"][0] == pytest.approx(0.55, rel=0.05)


@pytest.mark.parametrize("args,message", [
    (["--format", "nccl-tests"], "needs --topo"),
    (["--format", "nccl-tests", "--topo", "dgx_a100", "--platform", "neuron"], "--platform applies"),
    (["--format", "nccl-tests", "--topo", "dgx_a100x2"], "already spans 2 nodes"),
    (["--format", "nccl-tests", "--topo", "dgx_a100", "--rings", "0"], "--rings"),
    (["--topo", "dgx_a100"], "needs --platform"),
])
def test_cli_option_errors(tmp_path, capsys, args, message):
    log = tmp_path / "l.log"
    log.write_text(REAL_LOG)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", str(log), *args, "--out", str(tmp_path / "c.json")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_bad_log_exits_2_with_one_line(tmp_path):
    log = tmp_path / "bad.log"
    log.write_text("# nThread 1 nGpus 8\n#  not a table\n")
    proc = run_synth("calibrate", str(log), "--format", "nccl-tests", "--topo", "dgx_a100")
    assert proc.returncode == 2
    assert "no nccl-tests results" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "calibration.json").exists()


def _calibration_file(tmp_path) -> str:
    log = tmp_path / "nccl.log"
    log.write_text(_log("dgx_a100", 4))
    path = tmp_path / "cal.json"
    main(["calibrate", str(log), "--format", "nccl-tests", "--topo", "dgx_a100", "--out", str(path),
          "--json"])
    return str(path)


def test_solve_verify_simulate_and_pareto_take_the_calibration(tmp_path, capsys):
    cal = _calibration_file(tmp_path)
    fitted = load_calibration(cal).classes
    capsys.readouterr()
    common = ["--topo", "dgx_a100", "--nodes", "2", "--coll", "allgather", "--encoding", "baseline",
              "--algo", "ring", "--no-xml", "--sizes", "1KB,1GB", "--json", "--no-nccl"]
    main(["solve", *common, "--out", str(tmp_path / "cal"), "--calibration", cal])
    solved = json.loads(capsys.readouterr().out)
    main(["solve", *common, "--out", str(tmp_path / "base")])
    plain = json.loads(capsys.readouterr().out)
    # ring on two nodes: 15 steps, each paying the (calibrated) InfiniBand α at 1 KB
    t_cal, t_plain = solved["costs"][0]["time_us"], plain["costs"][0]["time_us"]
    assert t_cal == pytest.approx(15 * fitted["ib_hdr"].alpha_us, rel=0.02)
    assert t_plain == pytest.approx(15 * 2.6, rel=0.02)
    (cal_file,) = (tmp_path / "cal" / "schedules").glob("*.schedule.json")
    (base_file,) = (tmp_path / "base" / "schedules").glob("*.schedule.json")
    # the calibration is in the name: both solves could share one folder (issue 12)
    assert "_cal-" in cal_file.name and cal_file.name != base_file.name
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(cal_file)])
    assert exc.value.code == 2 and "pass the same --calibration" in capsys.readouterr().err
    main(["verify", str(cal_file), "--calibration", cal])
    assert "verified" in capsys.readouterr().out
    # a schedule solved on the datasheet figures, simulated with the measured ones
    main(["simulate", str(base_file), "--sizes", "1KB,1GB", "--calibration", cal, "--json"])
    sim = json.loads(capsys.readouterr().out)
    assert [p["time_us"] for p in sim["costs"]] == pytest.approx([p["time_us"] for p in solved["costs"]])
    # pareto: the frontier does not change, its times do
    with pytest.raises(SystemExit):  # exit 3: the chunk limit stops the walk
        main(["pareto", "--topo", "dgx_a100", "--coll", "allgather", "--max-chunks", "1", "--out",
              str(tmp_path / "p"), "--calibration", cal, "--json"])
    (point,) = json.loads(capsys.readouterr().out)
    assert point["costs"][0]["time_us"] == pytest.approx(
        fitted["nvswitch_v2"].alpha_us + 1024 / 8 * 7 / 12 / 1e6 * fitted["nvswitch_v2"].beta_us_per_mb,
        rel=1e-3)
