"""The CLI as a user drives it: the README's main job, topology inspection, verify and simulate."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from synth.topology_io import shipped_names

SHIPPED = {"trn1_32", "trn2_64", "dgx1", "ndv2", "dgx2", "dgx_a100", "dgx_h100", "mi300x"}


@pytest.mark.slow  # the README main job: .ci/run runs it in its second pass
def test_main_job_json(synth_cli, tmp_path):
    # the README's main job: trn1_32's ranks are NeuronCores, so it writes the torch-neuronx
    # program (the fastest per size range, every range proven on the stand-in) and no MSCCL-IR
    result = synth_cli("solve", "--topo", "trn1_32", "--coll", "allgather", "--json",
                       "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["topology"] == "trn1_32" and data["collective"] == "allgather"
    assert data["ranks"] == 32 and data["verified"] is True and data["format"] == "neuron"
    assert data["solve_seconds"] >= 0 and data["schedules"]
    sizes = [c["bytes"] for c in data["sizes"]]
    assert sizes[0] == 1024 and sizes[-1] == 2**30
    for c in data["sizes"]:
        assert 0 < c["time_us"] <= c["vendor_us"] + 1e-9
    assert len(data["proven"]) >= len(data["ranges"]) >= 1
    assert all(Path(f).exists() for f in data["files"])
    assert not list(tmp_path.rglob("*.xml"))
    module = tmp_path / "neuron" / "trn1-32_allgather.py"
    compile(module.read_text(), str(module), "exec")
    assert any("torchrun --nproc_per_node=32" in line for line in data["run"])


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_solve_is_deterministic(synth_cli, tmp_path):
    # --encoding auto (smt, milp, trees, ...): the solvers' limits are deterministic work budgets,
    # so the two runs go side by side: sharing the cores must not change a byte (and CI waits for
    # one solve, not two)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda sub: synth_cli(
            "solve", "--topo", "dgx1", "--coll", "allreduce", "--json", "--out",
            str(tmp_path / sub)), ("a", "b")))
    outs = []
    for r in runs:
        assert r.returncode == 0, r.stderr
        outs.append([Path(f) for f in json.loads(r.stdout)["files"]])
    assert [f.name for f in outs[0]] == [f.name for f in outs[1]] and len(outs[0]) >= 2
    for a, b in zip(*outs, strict=True):
        assert a.read_text().replace(str(tmp_path / "a"), "") == \
            b.read_text().replace(str(tmp_path / "b"), "")


def test_solve_is_deterministic_fast(synth_cli, tmp_path):
    """Byte-identical files across runs, on a problem small enough for the fast suite."""
    outs = []
    for sub in ("a", "b"):
        r = synth_cli("solve", "--topo", "ring:4", "--coll", "allreduce", "--json", "--out",
                      str(tmp_path / sub))
        assert r.returncode == 0, r.stderr
        # the MSCCL_CONFIG index names its files by absolute path: the folder is the one difference
        outs.append([Path(f).read_bytes().replace(str(tmp_path / sub).encode(), b"")
                     for f in json.loads(r.stdout)["files"]])
    assert outs[0] == outs[1] and outs[0]


def test_solve_table_and_algo(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "ring:8", "--coll", "broadcast", "--root", "3", "--algo",
                  "ring", "--chunks", "4", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "verified" in r.stdout and "% of bound" in r.stdout
    # --algo runs the baseline encoding alone: no claim that auto ran every encoding
    assert "auto:" not in r.stdout and "every encoding" not in r.stdout


def test_topo_list_shows_shipped(synth_cli):
    r = synth_cli("topo", "list", "--json")
    assert r.returncode == 0, r.stderr
    names = {row["name"] for row in json.loads(r.stdout)}
    assert names == SHIPPED == set(shipped_names())
    assert "trn1_32" in synth_cli("topo", "list").stdout


def test_topo_show_trn1(synth_cli):
    r = synth_cli("topo", "show", "trn1_32", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["ranks"] == 32
    kinds = {link["kind"] for link in data["links"]}
    assert len(kinds) >= 2  # chip-to-chip torus links and intra-chip links
    assert data["meta"]["torus"] == [4, 4]
    assert data["summary"]["bounds"]["allgather"]["algbw_limit_GBps"] > 0


def test_topo_show_multinode(synth_cli):
    r = synth_cli("topo", "show", "dgx_a100", "--nodes", "4", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ranks"] == 32
    assert "ranks 32" in synth_cli("topo", "show", "dgx_a100", "--nodes", "4").stdout


def test_simulate(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "switch:4", "--coll", "alltoall", "--json", "--out", str(tmp_path))
    path = json.loads(r.stdout)["files"][0]
    s = synth_cli("simulate", path, "--sizes", "1KB:4GB", "--json")
    assert s.returncode == 0, s.stderr
    costs = json.loads(s.stdout)["costs"]
    assert costs[-1]["bytes"] == 4 * 2**30 and len(costs) == 23


def test_verify_rejects_corrupt_file(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "ring:4", "--coll", "allgather", "--algo", "ring", "--json",
                  "--out", str(tmp_path))
    path = json.loads(r.stdout)["files"][0]
    text = Path(path).read_text()
    data = json.loads(text)
    # drop the last step: some rank never receives its last chunk
    lines = text.splitlines()
    steps_at = [i for i, line in enumerate(lines) if line.startswith('  {"rounds"')]
    assert len(steps_at) == 3 and data["algorithm"] == "ring"
    del lines[steps_at[-1]]
    lines[steps_at[-2]] = lines[steps_at[-2]].rstrip(",")
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join(lines) + "\n")
    v = synth_cli("verify", str(bad))
    assert v.returncode == 1 and "missing" in v.stderr and "Traceback" not in v.stderr


def test_solve_writes_verified_xml(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "dgx1", "--coll", "allreduce", "--encoding", "baseline",
                  "--algo", "ring", "--json", "--out", str(tmp_path), "--no-nccl")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    xml = [f for f in data["files"] if f.endswith(".xml")]  # one per size range (its protocol)
    assert xml and set(data["xml_verified_modes"]) == {"inplace", "outofplace"}
    for f in xml:   # one file per kind of call, each proved in the mode its name says
        text = Path(f).read_text()
        assert not text.startswith("<?xml") and "\t" not in text
        v = synth_cli("verify", f, "--json")
        assert v.returncode == 0, v.stderr
        mode = "outofplace" if "_oop" in Path(f).name else "inplace"
        assert "_ip" in Path(f).name or mode == "outofplace"
        assert json.loads(v.stdout)["modes"] == [mode]


def test_gather_has_no_xml_but_says_why(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "ring:4", "--coll", "gather", "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert all(f.endswith(".json") for f in data["files"])
    assert any("no XML" in n for n in data["notes"])


def test_verify_corpus_xml_and_reject_broken(synth_cli, tmp_path):
    from tests.conftest import xml_corpus_file

    corpus = xml_corpus_file("ndv4__ag-1m.xml")
    ok = synth_cli("verify", str(corpus))
    assert ok.returncode == 0 and "verified" in ok.stdout
    broken = tmp_path / "broken.xml"
    broken.write_text('<?xml version="1.0"?>\n' + corpus.read_text())
    bad = synth_cli("verify", str(broken))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_two_rank_solve_runs_trees_and_writes_xml(synth_cli, tmp_path):
    """Issue 12: `synth solve --topo ring:2 --coll allgather` crashed in the trees encoding."""
    r = synth_cli("solve", "--topo", "ring:2", "--coll", "allgather", "--encoding", "trees",
                  "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["encoding"] == "trees" and any(f.endswith(".xml") for f in data["files"])
