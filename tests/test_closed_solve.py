"""`synth solve --format neuron|jax`: the winner is proven on the stand-in before it is written."""

from __future__ import annotations

import json

import pytest

from synth.closed import resolve_topology
from synth.closed.emit import emit
from synth.closed.search import prove_module, rank_strategies
from synth.errors import VerificationError


@pytest.mark.parametrize("target", ["neuron", "jax"])
def test_solve_target_writes_proven_module(synth_cli, tmp_path, target):
    r = synth_cli("solve", "--topo", "trn1_32", "--coll", "allreduce", "--format", target,
                  "--tensors", "2", "--bytes", "64KB", "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["verified"] is True and data["ranks"] == 32
    module = tmp_path / f"trn1_32_allreduce_{target}.py"
    assert str(module) in data["files"] and module.exists()
    assert ("xm.all_reduce" in module.read_text()) == (target == "neuron")


def test_solve_target_bad_collective(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "trn1_32", "--coll", "broadcast", "--format", "neuron",
                  "--out", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_prove_module_rejects_a_wrong_program():
    topo = resolve_topology("trn1_32")
    best = rank_strategies(topo, "allgather", "neuron", 4096, 1, None).best
    text = emit(best.program, "neuron", "")
    prove_module(text, best.program, "neuron", topo)
    # swap two ranks in the replica group: the concatenation order breaks
    broken = text.replace("[0,1,2,3,", "[1,0,2,3,", 1)
    assert broken != text
    with pytest.raises(VerificationError):
        prove_module(broken, best.program, "neuron", topo)


def test_target_is_a_deprecated_alias_of_format(synth_cli, tmp_path):
    """`--target` still works for one release, says it is deprecated, and cannot contradict --format."""
    r = synth_cli("solve", "--topo", "trn1_32", "--coll", "allgather", "--target", "neuron",
                  "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "--target is deprecated; use --format" in r.stderr
    bad = synth_cli("solve", "--topo", "trn1_32", "--coll", "allgather", "--target", "jax",
                    "--format", "neuron", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "disagree" in bad.stderr
