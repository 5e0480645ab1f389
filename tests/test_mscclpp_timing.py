"""The timed plan model: the flow arithmetic on a one-put plan, and sanity over real plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.mscclpp import load_plan, verify_plan
from synth.timing.plan import plan_time_us
from synth.timing.program import program_model
from synth.topology_io import load_topology

CORPUS = Path(__file__).parent / "data" / "mscclpp-plans"


def _one_put(ranks: int) -> str:
    gpus = []
    for r in range(ranks):
        tbs = []
        if r == 0:
            tbs = [{"id": 0, "ops": [{"name": "put", "src_buff": [{"type": "i", "index": 0, "size": 1}],
                                      "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}],
                                      "channel_type": "memory"}],
                    "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                    "remote_buffer_refs": [{"access_channel_type": "memory",
                                            "remote_buffer_ids": [0]}]}]
        gpus.append({"id": r, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0,
                     "threadblocks": tbs,
                     "channels": [{"channel_type": "memory", "connected_to": [1 - r]}]
                     if r < 2 else [],
                     "remote_buffers": [{"rank": 1, "type": "o", "access_channel_types": ["memory"]}]
                     if r == 0 else []})
    return json.dumps({"name": "one_put", "collective": "test", "protocol": "Simple",
                       "inplace": False, "gpus": gpus})


def test_one_put_is_launch_plus_alpha_plus_bytes_over_rate():
    topo = load_topology("dgx_a100", 1)
    plan = load_plan(_one_put(8))
    verify_plan(plan)
    model = program_model(topo, "Simple")
    ch = topo.channel(0, 1)
    port = min(lanes * 1000.0 / beta for _, beta, lanes in ch.resources) * model.nvlink_efficiency
    rate = min(port, model.proto.channel_GBps) * 1e3  # bytes per µs
    n = 1 << 26
    expected = model.launch_us + ch.alpha_us + n / rate
    assert plan_time_us(plan, topo, model, n) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name,topo,nodes", [
    ("single_node/allreduce.json", "dgx_a100", 1),
    ("single_node/allgather_pkt.json", "dgx_a100", 1),
    ("multi_node/allgather.json", "dgx_a100", 2),
    ("single_node/alltoall/alltoall_pipeline.json", "dgx_h100", 1),
])
def test_time_grows_with_size(name, topo, nodes):
    t = load_topology(topo, nodes)
    plan = load_plan((CORPUS / name).read_text())
    model = program_model(t, plan.protocol)
    times = [plan_time_us(plan, t, model, n) for n in (1 << 12, 1 << 20, 1 << 26)]
    assert model.launch_us < times[0] < times[1] < times[2]
