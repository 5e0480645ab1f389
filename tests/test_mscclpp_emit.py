"""MSCCL++ plans emitted from synthesized schedules: verified, deterministic, and really checked."""

from __future__ import annotations

import itertools
import json

import pytest

from synth.collectives import make_collective
from synth.errors import SynthError, VerificationError
from synth.mscclpp import load_plan, verify_plan
from synth.mscclpp.emit import PlanOptions, emit_verified_plan
from synth.mscclpp.plan import MAX_OPERATION
from synth.solve import solve
from synth.topology_io import load_topology


def _plan(topo: str, nodes: int, kind: str, algo: str, options: PlanOptions | None = None):
    topology = load_topology(topo, nodes)
    coll = make_collective(kind, topology.num_ranks, 1)
    schedule = solve(topology, coll, encoding="baseline", algorithm=algo).best.schedule
    return schedule, topology, emit_verified_plan(schedule, topology, options or PlanOptions())


@pytest.mark.parametrize("kind,algo", [("allreduce", "ring"), ("allgather", "ring"),
                                       ("reducescatter", "ring"), ("alltoall", "direct")])
def test_single_node_plans_verify(kind, algo):
    _, _, (text, report) = _plan("dgx_a100", 1, kind, algo)
    obj = json.loads(text)
    assert report.postcondition and obj["collective"] == kind and obj["protocol"] == "Simple"
    for g in obj["gpus"]:  # one NVSwitch box: memory channels only
        assert {c["channel_type"] for c in g["channels"]} == {"memory"}
        assert all(len(tb["ops"]) <= MAX_OPERATION for tb in g["threadblocks"])


def test_two_nodes_use_port_channels_across_nics():
    _, topology, (text, report) = _plan("dgx_a100", 2, "allgather", "ring")
    obj = json.loads(text)
    node = topology.node_of
    for g in obj["gpus"]:
        for c in g["channels"]:
            for peer in c["connected_to"]:
                same = node[peer] == node[g["id"]]
                assert c["channel_type"] == ("memory" if same else "port")
    assert any(c["channel_type"] == "port" for g in obj["gpus"] for c in g["channels"])
    assert report.postcondition


def test_size_tile_instances_and_determinism():
    opts = PlanOptions(instances=2, min_bytes=1024, max_bytes=1 << 20)
    schedule, topology, (text, _) = _plan("dgx_a100", 1, "allreduce", "ring", opts)
    obj = json.loads(text)
    assert obj["min_message_size"] == 1024 and obj["max_message_size"] == 1 << 20
    assert obj["gpus"][0]["input_chunks"] == 2 * 8  # chunks split per instance
    again, _ = emit_verified_plan(schedule, topology, opts)
    assert again == text


def test_emitted_plan_faults_are_caught():
    _, _, (text, _) = _plan("dgx_a100", 1, "allgather", "ring")
    obj = json.loads(text)
    tb = obj["gpus"][3]["threadblocks"][0]
    waits = [i for i, op in enumerate(tb["ops"]) if op["name"] == "wait"]
    assert waits
    tb["ops"].pop(waits[0])
    with pytest.raises(VerificationError) as e:
        verify_plan(load_plan(json.dumps(obj)))
    assert e.value.reason in ("race", "unmatched") and "rank" in str(e.value)


def test_unsupported_collective_is_refused():
    topology = load_topology("dgx_a100", 1)
    coll = make_collective("broadcast", topology.num_ranks, 1, root=0)
    schedule = solve(topology, coll, encoding="baseline").best.schedule
    with pytest.raises(SynthError, match="MSCCL\\+\\+ plan"):
        emit_verified_plan(schedule, topology)


def test_cli_solve_format_mscclpp(synth_cli, tmp_path):
    result = synth_cli("solve", "--topo", "dgx_a100", "--coll", "reducescatter", "--encoding",
                       "baseline", "--algo", "ring", "--format", "mscclpp", "--json",
                       "--out", str(tmp_path / "new"), "--no-nccl")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["mscclpp_verified"] is True
    plans = [f for f in data["files"] if f.endswith(".mscclpp.json")]
    assert len(plans) == 1 and not any(f.endswith(".xml") for f in data["files"])
    check = synth_cli("verify", plans[0], "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["postcondition"] is True
    bad = synth_cli("solve", "--topo", "dgx_a100", "--coll", "allgather", "--encoding", "baseline",
                    "--algo", "ring", "--format", "mscclpp", "--proto", "LL128", "--out",
                    str(tmp_path))
    assert bad.returncode == 2 and "Simple or LL" in bad.stderr


@pytest.mark.parametrize("nodes,kind,algo", [(1, "allreduce", "ring"), (2, "allgather", "ring"),
                                             (1, "alltoall", "direct")])
def test_ll_plans_verify_without_semaphores(nodes, kind, algo):
    _, _, (text, report) = _plan("dgx_a100", nodes, kind, algo, PlanOptions(proto="LL"))
    obj = json.loads(text)
    assert obj["protocol"] == "LL" and obj["use_double_scratch_buffer"] is True
    assert report.postcondition and report.signals == 0
    names = {op["name"] for g in obj["gpus"] for tb in g["threadblocks"] for op in tb["ops"]}
    assert "ppkt" in names and not names & {"signal", "wait", "put"}


def test_ll_faults_are_caught():
    _, _, (text, _) = _plan("dgx_a100", 1, "allgather", "ring", PlanOptions(proto="LL"))
    obj = json.loads(text)
    ops = obj["gpus"][2]["threadblocks"][0]["ops"]
    i = next(i for i, op in enumerate(ops) if op["name"] == "ppkt")
    dropped = json.loads(json.dumps(obj))
    dropped["gpus"][2]["threadblocks"][0]["ops"].pop(i)
    with pytest.raises(VerificationError) as e:
        verify_plan(load_plan(json.dumps(dropped)))
    assert e.value.reason == "deadlock"
    ops[i]["dst_buff"][0]["index"] += 1  # packets land in the wrong staging chunk
    with pytest.raises(VerificationError):
        verify_plan(load_plan(json.dumps(obj)))


@pytest.mark.slow  # a real catalog run (solve, tune, XML and plan per range): ~20 s
def test_catalog_format_mscclpp_writes_verified_plans(synth_cli, tmp_path):
    out = tmp_path / "cat"
    result = synth_cli("catalog", "--topo", "ring:4", "--collectives", "allgather,allreduce",
                       "--sizes", "1KB:1MB", "--out", str(out), "--cache-dir",
                       str(tmp_path / "cache"), "--workers", "1", "--quiet", "--format", "mscclpp")
    assert result.returncode == 0, result.stderr
    xmls = sorted((out / "msccl-algorithms").glob("*.xml"))
    plans = sorted((out / "mscclpp-plans").glob("*.json"))
    assert xmls and len(plans) == len([x for x in xmls if "_LL128_" not in x.name])
    for kind in ("allgather", "allreduce"):
        ranges = []
        for p in plans:
            if p.name.startswith(kind + "_"):
                obj = json.loads(p.read_text())
                report = verify_plan(load_plan(p.read_text(), str(p)))
                assert report.postcondition and obj["collective"] == kind
                ranges.append((obj["min_message_size"], obj["max_message_size"]))
        ranges.sort()
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))


def test_plan_needing_more_blocks_than_sms_is_refused():
    topology = load_topology("dgx_a100", 1)
    coll = make_collective("alltoall", topology.num_ranks, 1)
    schedule = solve(topology, coll, encoding="baseline", algorithm="direct").best.schedule
    text, _ = emit_verified_plan(schedule, topology, PlanOptions(instances=1))
    most = max(len(g["threadblocks"]) for g in json.loads(text)["gpus"])
    with pytest.raises(SynthError, match="co-resident"):
        emit_verified_plan(schedule, topology, PlanOptions(max_threadblocks=most - 1))


def test_plan_file_names_carry_the_options(tmp_path):
    """--proto, --instances and the byte range change the plan, so they are in its name: an LL
    plan is written beside the Simple one, not over it (README: file names carry every option)."""
    from synth.outputs import write_outputs
    from synth.outputs.mscclpp import PlanTarget

    topology = load_topology("dgx_a100")
    schedule = solve(topology, make_collective("allgather", 8), encoding="baseline",
                     algorithm="ring").best.schedule
    names = set()
    for options in (PlanOptions(), PlanOptions(proto="LL"), PlanOptions(instances=2),
                    PlanOptions(min_bytes=1024, max_bytes=2**20)):
        written = write_outputs(schedule, tmp_path, plan=PlanTarget(topology, options))
        plan = [f.name for f in written.files if f.name.endswith(".mscclpp.json")]
        assert len(plan) == 1
        names.add(plan[0])
    assert len(names) == 4, names
    assert any("_LL_x1" in n for n in names) and any("_1KB-1MB" in n for n in names)
