"""The flow encoding: time-expanded multi-commodity LP, rounding, symmetry, verified schedules."""

from __future__ import annotations

import pytest

from synth.bounds import lower_bound
from synth.collectives import custom_collective, make_collective
from synth.encodings import Options, run_encoding
from synth.encodings.flow.encoding import flow_encoding
from synth.errors import NotApplicable
from synth.timing.lockstep import schedule_times_us
from synth.topology_io import load_topology
from synth.verify import verify

GIB = 2**30


def _pct(schedule, topo) -> float:
    bound = lower_bound(topo, schedule.collective)
    return 100 * bound.time_us(GIB) / float(schedule_times_us(schedule, topo, [GIB])[0])


def test_alltoall_switch_4x2_verifies_with_lp_gap():
    topo = load_topology("switch:4", nodes=2)
    s = flow_encoding(topo, make_collective("alltoall", 8), Options())["flow"]
    verify(s, topo)
    meta = s.meta
    assert meta["lp_gap"] >= -1e-9 and meta["lp_gap"] < 0.01
    assert meta["lp_optimum_us"] > 0
    assert meta["predicted_us"] == pytest.approx(float(schedule_times_us(s, topo, [GIB])[0]))
    # the gap is measured against the LP, which is itself above the cut bound
    assert meta["lp_optimum_us"] >= lower_bound(topo, s.collective).time_us(GIB) * (1 - 1e-6)
    assert "why" in meta and "LP" in meta["why"]
    assert _pct(s, topo) >= 90.0


def test_chunkings_stay_within_the_global_chunk_cap(monkeypatch):
    """The chunkings tried never name more chunks than a collective may (MAX_GLOBAL_CHUNKS):
    dgx_h100 x 64's default alltoall solve failed on an 8-chunk try (2,097,152 chunks) that the
    transfer cap allowed. Here the cap is lowered to 2 chunks per rank on 8 ranks."""
    import synth.collectives as collectives

    monkeypatch.setattr(collectives, "MAX_GLOBAL_CHUNKS", 8 * 8 * 2)
    assert collectives.max_chunks_per_rank("alltoall", 8) == 2
    assert collectives.max_chunks_per_rank("allgather", 8) == 16
    topo = load_topology("switch:4", nodes=2)
    s = flow_encoding(topo, make_collective("alltoall", 8), Options())["flow"]
    assert s.collective.chunks_per_rank <= 2
    verify(s, topo)


@pytest.mark.parametrize("spec,nodes", [("torus:4x4", 1), ("ring:6", 1), ("dgx1", 1), ("line:4", 1),
                                        ("trn1_32", 1)])
def test_alltoall_multi_hop_verifies(spec, nodes):
    topo = load_topology(spec, nodes=nodes)
    s = flow_encoding(topo, make_collective("alltoall", topo.num_ranks), Options())["flow"]
    verify(s, topo)
    assert s.meta["lp_gap"] < 0.25
    assert _pct(s, topo) > 60.0


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_rooted_point_to_point(kind):
    topo = load_topology("switch:4", nodes=2)
    s = flow_encoding(topo, make_collective(kind, 8, root=2), Options())["flow"]
    verify(s, topo)
    assert s.collective.root == 2


def test_custom_single_destination_collective():
    topo = load_topology("ring:5")
    data = {"name": "shift2", "ranks": 5, "chunks": 10,
            "pre": {str(c): [c % 5] for c in range(10)},
            "post": {str(c): [(c + 2) % 5] for c in range(10)}}
    coll = custom_collective(data, "test")
    s = run_encoding("flow", topo, coll, Options())["flow"]
    verify(s, topo)
    assert s.collective is coll


def test_not_applicable():
    topo = load_topology("ring:4")
    with pytest.raises(NotApplicable, match="trees"):
        flow_encoding(topo, make_collective("allgather", 4), Options())
    with pytest.raises(NotApplicable, match="trees"):
        flow_encoding(topo, make_collective("allreduce", 4), Options())


def test_deterministic():
    topo = load_topology("torus:3x3")
    coll = make_collective("alltoall", 9)
    a = flow_encoding(topo, coll, Options())["flow"].to_json()
    b = flow_encoding(topo, coll, Options())["flow"].to_json()
    assert a == b
