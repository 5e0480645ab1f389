"""The MSCCL++ plan interpreter against MSCCL++'s own DSL output, and against injected faults."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from synth.errors import SynthError, VerificationError
from synth.mscclpp import load_plan, verify_plan

CORPUS = Path(__file__).parent / "data" / "mscclpp-plans"
PLANS = sorted(p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*.json"))

REJECTED = {
    "multi_node/reducescatter_pkt.json": "limit",
    "unit_tests/switch_reduce_test.json": "unsupported",
    "unit_tests/signal_wait/signal_wait_fuse_test.json": "deadlock",
    "unit_tests/signal_wait/relaxed_signal_wait_fuse_test.json": "deadlock",
    "unit_tests/put/put_fuse_test.json": "race",
    "unit_tests/read_put_packet_test.json": "deadlock",
    "unit_tests/reduce_copy_packet_test.json": "deadlock",
    "unit_tests/reduce_copy_send_packet_test.json": "deadlock",
    "unit_tests/reduce_packet/reduce_packets_test.json": "format",
    "unit_tests/reduce_packet/reduce_packets_fuse_test.json": "format",
    "unit_tests/reduce_send_packet_test.json": "format",
    "unit_tests/switch_broadcast_test.json": "undefined_read",
}
"""Plans the executor at the corpus commit cannot run either (see the corpus README)."""


def _load(name: str) -> dict:
    return json.loads((CORPUS / name).read_text())


def _verify(obj: dict):
    return verify_plan(load_plan(json.dumps(obj), "test"))


def test_corpus_is_complete():
    assert len(PLANS) == 59
    assert set(REJECTED) <= set(PLANS)


@pytest.mark.parametrize("name", [p for p in PLANS if p not in REJECTED])
def test_corpus_plan_accepted(name):
    obj = _load(name)
    report = _verify(obj)
    assert report.ranks == len(obj["gpus"])
    assert report.postcondition == (obj["collective"] in
                                    ("allgather", "allreduce", "reducescatter", "alltoall"))


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_corpus_plan_rejected(name):
    with pytest.raises(VerificationError) as e:
        _verify(_load(name))
    assert e.value.reason == REJECTED[name]
    assert "rank" in str(e.value)


# ------------------------------------------------------------------------------ fault injection
def _ops(obj: dict):
    """(rank, tb, path, op list) for every op, pipelines' bodies included; ops[path[-1]] is the op."""
    for g in obj["gpus"]:
        for tb in g["threadblocks"]:
            stack = [((), tb["ops"])]
            while stack:
                prefix, ops = stack.pop()
                for i, op in enumerate(ops):
                    yield g["id"], tb["id"], (*prefix, i), ops
                    if op["name"] == "pipeline":
                        stack.append(((*prefix, i), op["ops"]))


def _mutants(obj: dict, names: tuple[str, ...], limit: int):
    sites = [(r, t, p) for r, t, p, ops in _ops(obj) if ops[p[-1]]["name"] in names]
    step = max(1, len(sites) // limit)
    yield from sites[::step][:limit]


def _mutate(obj: dict, site: tuple, fn) -> dict:
    new = copy.deepcopy(obj)
    for r, t, p, ops in _ops(new):
        if (r, t, p) == site:
            fn(ops, p[-1])
            return new
    raise AssertionError(site)


FAULT_PLANS = ["single_node/allgather.json", "single_node/allreduce.json",
               "single_node/alltoall/alltoall.json", "single_node/allreduce_pipeline.json",
               "multi_node/allgather.json", "multi_node/reducescatter.json",
               "single_node/allgather_tbg.json"]


@pytest.mark.parametrize("name", FAULT_PLANS)
def test_removed_wait_rejected(name):
    obj = _load(name)
    n = 0
    for site in _mutants(obj, ("wait",), 6):
        bad = _mutate(obj, site, lambda ops, i: ops.pop(i))
        with pytest.raises(VerificationError) as e:
            _verify(bad)
        assert e.value.reason in ("race", "unmatched", "postcondition"), str(e.value)
        n += 1
    assert n > 0


@pytest.mark.parametrize("name", FAULT_PLANS)
def test_dropped_signal_rejected(name):
    obj = _load(name)
    n = 0
    for site in _mutants(obj, ("signal", "pws", "pwsf"), 6):
        def drop(ops, i):
            if ops[i]["name"] == "signal":
                ops.pop(i)
            else:
                ops[i]["name"] = "put"  # the put stays, its signal goes
        with pytest.raises(VerificationError) as e:
            _verify(_mutate(obj, site, drop))
        assert e.value.reason in ("deadlock", "race"), str(e.value)
        assert "threadblock" in str(e.value)
        n += 1
    assert n > 0


@pytest.mark.parametrize("name", [*FAULT_PLANS, "single_node/allreduce_pkt.json",
                                  "multi_node/allgather_pkt.json"])
def test_wrong_offset_rejected(name):
    obj = _load(name)
    n = 0
    data_ops = ("put", "pws", "pwsf", "copy", "rres", "rre", "re", "ppkt", "upkt", "respkt",
                "cpkt", "rppkt", "glres")
    for site in _mutants(obj, data_ops, 6):
        def shift(ops, i):
            ref = ops[i]["dst_buff"][-1]
            ref["index"] += 1
        with pytest.raises(VerificationError) as e:
            _verify(_mutate(obj, site, shift))
        assert e.value.reason in ("range", "postcondition", "race", "undefined_read",
                                  "double_count", "deadlock", "format", "input_write"), str(e.value)
        n += 1
    assert n > 0


def test_messages_name_rank_threadblock_and_op():
    obj = _load("single_node/alltoall/alltoall.json")
    site = next(_mutants(obj, ("wait",), 1))
    with pytest.raises(VerificationError, match=r"rank \d+, threadblock \d+, op \d+ \(\w+\)"):
        _verify(_mutate(obj, site, lambda ops, i: ops.pop(i)))


def test_out_of_range_index():
    obj = _load("single_node/allgather.json")
    obj["gpus"][0]["threadblocks"][0]["ops"][5]["dst_buff"][0]["index"] = 7
    with pytest.raises(VerificationError) as e:
        _verify(obj)
    assert e.value.reason == "range" and "rank 0, threadblock 0, op 5 (put)" in str(e.value)


def test_malformed_plan_is_input_error():
    with pytest.raises(SynthError) as e:
        load_plan('{"gpus": [{"id": 0}], "protocol": "Simple"}', "x.json")
    assert e.value.exit_code == 2 and not isinstance(e.value, VerificationError)
    with pytest.raises(SynthError) as e:
        load_plan("{not json", "x.json")
    assert e.value.exit_code == 2


def test_cli_verify_plan(synth_cli, tmp_path):
    good = CORPUS / "single_node" / "allreduce_pkt.json"
    result = synth_cli("verify", str(good), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["format"] == "mscclpp" and data["postcondition"] is True and data["ranks"] == 8
    bad = tmp_path / "bad.json"
    bad.write_text((CORPUS / "unit_tests" / "put" / "put_fuse_test.json").read_text())
    result = synth_cli("verify", str(bad))
    assert result.returncode == 1
    assert "race: rank 0, threadblock 0, op 5 (put)" in result.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"gpus": [{}], "protocol": "Simple"}')
    result = synth_cli("verify", str(broken))
    assert result.returncode == 2 and "not an MSCCL++ execution plan" in result.stderr


def test_op_that_is_not_an_object_is_input_error():
    obj = _load("single_node/allgather.json")
    obj["gpus"][0]["threadblocks"][0]["ops"][0] = ["nop"]
    with pytest.raises(SynthError) as e:
        _verify(obj)
    assert e.value.exit_code == 2


def test_memory_put_from_mixed_buffers_rejected():
    obj = _load("multi_node/allgather.json")
    for _, _, path, ops in _ops(obj):
        op = ops[path[-1]]
        if op["name"] == "put" and len(op["src_buff"]) > 1:
            op["src_buff"][1]["type"] = "i"
            break
    with pytest.raises(VerificationError) as e:
        _verify(obj)
    assert e.value.reason == "unsupported" and "first one's buffer" in str(e.value)
