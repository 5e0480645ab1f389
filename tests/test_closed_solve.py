"""`synth solve` where the ranks are not GPUs: one Neuron (JAX) module per solve, every range's
program proven on the stand-in before it is written, no MSCCL-IR unless asked for."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from synth.closed import resolve_topology
from synth.closed.columns import build_unit, interpret_columns
from synth.closed.constraints import violations
from synth.closed.emit import RangeProgram, emit, emit_ranges
from synth.closed.lower import baseline_plans
from synth.closed.mesh import mesh_for_topology
from synth.closed.nki import emit_nki
from synth.closed.reference import expected, random_inputs
from synth.closed.search import rank_strategies
from synth.closed.standin import run_neuron_standin, run_nki_standin
from synth.closed.winner import prove_module
from synth.collectives import make_collective
from synth.errors import SynthError, VerificationError
from synth.outputs import neuron as neuron_out
from synth.solve import solve
from synth.solve_closed import _prove_module, run_closed


def _solve(synth_cli, *args):
    r = synth_cli("solve", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_main_job_on_trainium_writes_a_neuron_module_and_no_xml(synth_cli, tmp_path):
    data = _solve(synth_cli, "--topo", "trn1_32", "--coll", "allgather", "--encoding", "baseline",
                  "--out", str(tmp_path))
    module = tmp_path / "neuron" / "trn1-32_allgather.py"
    assert data["format"] == "neuron" and str(module) in data["files"]
    assert not list(tmp_path.rglob("*.xml"))
    text = module.read_text()
    compile(text, str(module), "exec")
    assert "xm.all_gather" in text and "def run(tensors)" in text
    # the ranges tile the sweep; every size has a strategy, a time and its speed-up over the
    # runtime's own call, which serves where nothing beats it
    ranges = data["ranges"]
    assert ranges[0]["min_bytes"] == 1024 and ranges[-1]["max_bytes"] == 1 << 30
    assert all(a["max_bytes"] + 1 == b["min_bytes"] for a, b in itertools.pairwise(ranges))
    assert len(data["sizes"]) == 21 and all(s["speedup"] >= 1.0 - 1e-9 for s in data["sizes"])
    assert data["vendor_call"] == "ag[row,col,core]"
    assert any(line.startswith("torchrun --nproc_per_node=32 ") for line in data["run"])
    assert len(data["proven"]) == len(ranges)
    # the written file itself, read back: every rank gets the exact allgather at odd sizes
    for shape in [(3,), (7, 2)]:
        xs = random_inputs([shape], "float32", 32, seed=len(shape))
        got = neuron_out.run_module(module, xs, resolve_topology("trn1_32"))
        assert np.array_equal(got[0], expected("allgather", xs[0]))


def test_main_job_on_tpu_writes_a_jax_module(synth_cli, tmp_path):
    data = _solve(synth_cli, "--topo", "tpu_v5e_4x4", "--coll", "reducescatter", "--encoding",
                  "baseline", "--sizes", "1KB,1MB,64MB", "--out", str(tmp_path))
    module = tmp_path / "jax" / "tpu-v5e-4x4_reducescatter.py"
    assert data["format"] == "jax" and str(module) in data["files"]
    assert "lax.psum_scatter" in module.read_text()
    from synth.outputs import jax as jax_out

    xs = random_inputs([(37,)], "float32", 16, seed=2)
    assert np.array_equal(jax_out.run_module(module, xs)[0], expected("reducescatter", xs[0]))


def test_closed_formats_on_gpus_and_msccl_on_trainium(synth_cli, tmp_path):
    for fmt in ("neuron", "jax"):
        r = synth_cli("solve", "--topo", "dgx1", "--coll", "allgather", "--format", fmt,
                      "--out", str(tmp_path / fmt))
        assert r.returncode == 2 and "GPUs" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = synth_cli("solve", "--topo", "tpu_v5e_4x4", "--coll", "allgather", "--format", "neuron",
                  "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--format jax" in r.stderr
    r = synth_cli("solve", "--topo", "trn1_32", "--coll", "broadcast", "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "closed stacks run" in r.stderr and "Traceback" not in r.stderr
    data = _solve(synth_cli, "--topo", "trn1_32", "--coll", "allgather", "--algo", "ring",
                  "--format", "msccl", "--out", str(tmp_path / "m"))
    assert any(f.endswith(".xml") for f in data["files"])
    assert any("no trn1_32 runtime loads MSCCL-IR" in n for n in data["notes"])


def test_target_is_a_deprecated_alias_of_format(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "trn1_32", "--coll", "allgather", "--target", "neuron",
                  "--encoding", "baseline", "--sizes", "1KB,1MB", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "--target is deprecated; use --format" in r.stderr
    bad = synth_cli("solve", "--topo", "trn1_32", "--coll", "allgather", "--target", "jax",
                    "--format", "neuron", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "disagree" in bad.stderr


@pytest.mark.slow
def test_trees_schedules_lower_and_run_exactly_on_every_rank(tmp_path):
    """The schedules the trees encoding finds for trn1_32 (no step is a ring) become Neuron
    programs whose every range is exact on all 32 ranks of the stand-in; the driver writes the
    module with the ranges the model gives them."""
    topo = resolve_topology("trn1_32")
    result = solve(topo, make_collective("allgather", 32, 1), encoding="trees",
                   sizes=[1 << 10, 1 << 20, 1 << 30], nccl=False)
    mesh = mesh_for_topology(topo)
    for cand in result.candidates:
        from synth.closed.lower import LoweredPlan

        unit = build_unit(LoweredPlan("allgather", cand.schedule, cand.name), mesh, topo, "float32")
        assert not violations(unit.program, "neuron", topo), cand.name
        code = [RangeProgram(0, 0, unit.program, unit.elements)]
        assert _prove_module(emit_ranges("neuron", code, ["t"]), code, "neuron", topo)
    done = run_closed(result, "neuron", [1 << 10, 1 << 20, 1 << 30], tmp_path)
    assert done.ranges and len(done.proven) == len(done.ranges)


def test_nki_kernels_of_lowered_schedules_are_exact_on_the_stand_in():
    """Trn2: each lowered baseline as an NKI kernel (nki.collectives.collective_permute), exact on
    all 64 ranks; new buffers start as NaN there, so a kernel reading a row it never wrote fails."""
    topo = resolve_topology("trn2_64")
    mesh = mesh_for_topology(topo)
    units = [build_unit(p, mesh, topo, "float32") for p in baseline_plans("allreduce", topo, mesh)]
    code = [RangeProgram(i * 10, i * 10 + 9, u.program, u.elements) for i, u in enumerate(units)]
    text = emit_nki(code, topo)
    assert "ncc.collective_permute(srcs=[" in text and "@nki.jit" in text
    assert len(_prove_module(text, code, "nki", topo)) == len(code)
    # a kernel whose pairs are rotated the wrong way gives a wrong result
    broken = text.replace("PAIRS_0 = [[0,4]", "PAIRS_0 = [[4,0]", 1)
    if broken != text:
        with pytest.raises((VerificationError, SynthError)):
            _prove_module(broken, code, "nki", topo)


def test_unit_programs_serve_every_size_on_the_column_axis():
    """One unit program per strategy, any tensor size: the emitted module equals the NumPy
    reference of the column mapping and the collective itself."""
    topo = resolve_topology("tpu_v5e_4x4")
    mesh = mesh_for_topology(topo)
    for coll in ("allgather", "alltoall"):
        unit = build_unit(baseline_plans(coll, topo, mesh)[0], mesh, topo, "float32")
        text = emit_ranges("neuron", [RangeProgram(0, 0, unit.program, unit.elements)], ["t"])
        for shape in [(1,), (5, 3), (33,)]:
            xs = random_inputs([shape], "float32", 16, seed=shape[0])
            want = expected(coll, xs[0])
            assert np.array_equal(interpret_columns(unit.program, xs, unit.elements)[0], want)
            assert np.array_equal(run_neuron_standin(text, xs, topology=topo)[0], want)


def test_prove_module_rejects_a_wrong_program():
    topo = resolve_topology("trn1_32")
    best = rank_strategies(topo, "allgather", "neuron", 4096, 1, None).best
    text = emit(best.program, "neuron", "")
    prove_module(text, best.program, "neuron", topo)
    broken = text.replace("[0,1,2,3,", "[1,0,2,3,", 1)
    assert broken != text
    with pytest.raises(VerificationError):
        prove_module(broken, best.program, "neuron", topo)


def test_nki_stand_in_enforces_the_documented_rules():
    """One tensor per list, named HBM buffers the kernel allocated, unique pairs."""
    topo = resolve_topology("trn2_64")
    mesh = mesh_for_topology(topo)
    unit = build_unit(baseline_plans("allgather", topo, mesh)[0], mesh, topo, "float32")
    text = emit_nki([RangeProgram(0, 0, unit.program, unit.elements)], topo)
    xs = random_inputs([(3,)], "float32", 64, seed=1)
    assert np.array_equal(run_nki_standin(text, xs, topology=topo)[0], expected("allgather", xs[0]))
    with pytest.raises(SynthError, match="named HBM"):
        run_nki_standin(text.replace("buffer=nl.shared_hbm", "buffer=nl.sbuf"), xs, topology=topo)
