"""Process groups: the machine a group induces, its own bound, and --group on the commands."""

from __future__ import annotations

import json
import re

import pytest

from synth.bounds import lower_bound
from synth.collectives import make_collective
from synth.errors import SynthError
from synth.groups import induced, parse_group, parse_partition
from synth.topology_io import load_topology


@pytest.fixture(scope="module")
def h100x8():
    return load_topology("dgx_h100", 8)


def test_group_specs(h100x8):
    assert parse_group("stride:8", h100x8).members == tuple(range(0, 64, 8))
    assert parse_group("node:2", h100x8).members == tuple(range(16, 24))
    assert parse_group("rail:3", h100x8).members == tuple(range(3, 64, 8))
    assert parse_group("5,1,9", h100x8).members == (5, 1, 9)


@pytest.mark.parametrize("spec, message", [
    ("0,8,8", "rank 8 is listed twice"), ("0,64", "rank 64 is out of range"),
    ("", "empty"), ("3", "at least 2"), ("node:8", "node 8 is out of range"),
    ("rail:8", "local rank 8 is out of range"), ("ring:2", "unknown kind"), ("0,x", "whole number"),
])
def test_bad_groups(h100x8, spec, message):
    with pytest.raises(SynthError, match=re.escape(message)):
        parse_group(spec, h100x8)


def test_induced_topology_keeps_member_ports_only(h100x8):
    sub = induced(h100x8, parse_group("stride:8", h100x8))
    assert sub.num_ranks == 8 and sub.num_nodes == 8
    (fabric,) = sub.switches  # the per-node NVSwitches have one member port each: dropped
    assert len(fabric.ports) == 8 and all(len(p.ranks) == 1 for p in fabric.ports)
    assert len(sub.nics) == 8
    # its own bound: one rank per node, so every byte crosses its 50 GB/s NIC
    slope = lower_bound(sub, make_collective("allgather", 8)).inv_bandwidth_us_per_byte
    assert slope == pytest.approx(7 / 8 / 50e9 * 1e6, rel=1e-9)  # µs per byte of output
    whole = lower_bound(h100x8, make_collective("allgather", 64)).inv_bandwidth_us_per_byte
    assert slope != whole
    assert load_topology(sub.name).content_hash == sub.content_hash  # verify finds it by name


def test_node_group_is_the_node(h100x8):
    sub = induced(h100x8, parse_group("node:1", h100x8))
    one = load_topology("dgx_h100")
    b = lower_bound(sub, make_collective("allgather", 8))
    assert b.inv_bandwidth_us_per_byte == pytest.approx(
        lower_bound(one, make_collective("allgather", 8)).inv_bandwidth_us_per_byte)


def test_group_must_not_relay_through_non_members():
    ring = load_topology("ring:8")
    with pytest.raises(SynthError, match="only through non-members"):
        induced(ring, parse_group("0,2", ring))
    assert induced(ring, parse_group("0,1", ring)).num_ranks == 2


def test_partitions(h100x8):
    assert [g.members for g in parse_partition("stride:8", h100x8)] == [
        tuple(range(o, 64, 8)) for o in range(8)]
    assert len(parse_partition("rail", h100x8)) == 8 and len(parse_partition("node", h100x8)) == 8
    assert [g.members for g in parse_partition("0,1|2,3", h100x8)] == [(0, 1), (2, 3)]
    with pytest.raises(SynthError, match="rank 1 is in two groups"):
        parse_partition("0,1|1,2", h100x8)


@pytest.mark.slow  # three CLI processes
def test_solve_for_a_group_writes_ngpus_and_rank_map(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "dgx_h100", "--nodes", "4", "--group", "rail:2", "--coll",
                  "allgather", "--encoding", "baseline", "--algo", "ring", "--out", str(tmp_path),
                  "--no-program-model")
    assert r.returncode == 0, r.stderr
    xmls = sorted(tmp_path.glob("msccl/*.xml"))     # one per size range synth serves
    assert xmls and all('ngpus="4"' in xml.read_text() for xml in xmls)
    for xml in xmls:
        mapping = json.loads((tmp_path / "maps" / f"{xml.name}.ranks.json").read_text())
        assert mapping["global_ranks"] == [2, 10, 18, 26] and mapping["size"] == 4
    v = synth_cli("verify", str(next(tmp_path.glob("schedules/*.schedule.json"))))
    assert v.returncode == 0, v.stderr
    bad = synth_cli("solve", "--topo", "dgx_h100", "--nodes", "2", "--group", "0,0", "--coll",
                    "allgather", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "listed twice" in bad.stderr


@pytest.mark.slow
def test_data_parallel_group_allreduce(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "dgx_h100", "--nodes", "8", "--group", "stride:8", "--coll",
                  "allreduce", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "XML verified by the interpreter" in r.stdout
    files = sorted(tmp_path.glob("msccl/*.xml"))    # one per size range synth serves
    assert files and all('ngpus="8"' in f.read_text() for f in files)


def _slope(topo, n):
    return lower_bound(topo, make_collective("allreduce", n)).inv_bandwidth_us_per_byte


def test_rail_aligned_concurrent_groups_keep_their_isolated_bound(h100x8):
    from synth.groups import concurrent

    groups = parse_partition("rail", h100x8)
    together, shares = concurrent(h100x8, groups)
    assert shares == []
    for g, sub in zip(groups, together, strict=True):
        assert _slope(sub, 8) == pytest.approx(_slope(induced(h100x8, g), 8))


def test_groups_sharing_one_nic_see_its_load():
    from dataclasses import replace

    from synth.builders import multinode
    from synth.groups import concurrent
    from synth.topology import Nic

    base = load_topology("dgx_h100")
    nic = base.nics[0]
    one_nic = replace(base, name="one_nic", nics=(Nic("ib0", tuple(base.ranks), nic.alpha_us,
                                                      nic.beta_us_per_mb, nic.kind),))
    cluster = multinode(one_nic, 8)
    groups = parse_partition("stride:8", cluster)
    together, shares = concurrent(cluster, groups)
    assert len(shares) == 8 and all(len(s.groups) == 8 for s in shares)
    alone = _slope(induced(cluster, groups[0]), 8)
    assert _slope(together[0], 8) == pytest.approx(8 * alone)


def test_concurrent_group_topology_is_named_and_reloadable():
    from synth.topology_io import load_group

    t, _ = load_group("dgx1", 8, "stride:8+1", "stride:8")
    assert t.name == "dgx1x8.g-stride-8+1.c-stride-8"
    assert load_topology(t.name).content_hash == t.content_hash
    with pytest.raises(SynthError, match="not one of the groups"):
        load_group("dgx1", 8, "0,1", "stride:8")


@pytest.mark.slow  # a CLI process solving 8 groups
def test_solve_concurrent_partition_cli(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "dgx1", "--nodes", "2", "--concurrent", "stride:8", "--coll",
                  "allgather", "--encoding", "baseline", "--algo", "ring", "--out", str(tmp_path),
                  "--no-program-model")
    assert r.returncode == 0, r.stderr
    assert "2x" in r.stdout and {p.parent.parent.name for p in tmp_path.glob("stride-8+*/msccl/*.xml")} == {
        f"stride-8+{g}" for g in range(8)}
    bad = synth_cli("solve", "--topo", "dgx1", "--nodes", "2", "--concurrent", "0,1|1,2",
                    "--coll", "allgather", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "in two groups" in bad.stderr


def test_concurrent_without_a_group_is_refused_outside_solve():
    from synth.topology_io import load_group

    with pytest.raises(SynthError, match="--concurrent needs --group"):
        load_group("dgx1", 2, None, "stride:8")


def test_synthesis_for_the_shared_machine_moves_traffic_off_a_shared_nic():
    """Group {0,2,8,10} on 2 DGX-1 shares NIC ib0 (GPUs 0-1) with group {1,9}; its NIC ib1
    (GPUs 2-3) is its own. Trees packed for its share of the machine beat trees packed for the
    machine alone, both timed on the shared machine."""
    from synth.groups import concurrent
    from synth.solve import solve
    from synth.timing.lockstep import schedule_times_us

    topo = load_topology("dgx1", 2)
    groups = parse_partition("0,2,8,10|1,9", topo)
    shared = concurrent(topo, groups)[0][0]
    alone = induced(topo, groups[0])
    coll, size = make_collective("allgather", 4), 2**30
    naive = solve(alone, coll, encoding="trees", sizes=[size]).best.schedule
    aware = solve(shared, coll, encoding="trees", sizes=[size]).best.schedule
    (t_naive,) = schedule_times_us(naive, shared, [size])
    (t_aware,) = schedule_times_us(aware, shared, [size])
    bound = lower_bound(shared, coll).inv_bandwidth_us_per_byte * size
    assert t_aware < 0.8 * t_naive and t_aware <= 1.02 * bound + 10


def test_a_failing_group_takes_back_the_folders_of_the_groups_before_it(synth_cli, tmp_path):
    """--concurrent alone solves group after group; all are written or none."""
    out = tmp_path / "o"
    args = ("solve", "--topo", "switch:8", "--coll", "allgather", "--concurrent", "0,1|2,3,4",
            "--algo", "recursive_doubling")
    result = synth_cli(*args, "--out", str(out))
    assert result.returncode == 2 and "power-of-two" in result.stderr, result.stderr
    assert not out.exists()
    kept = tmp_path / "k"
    (kept / "mine").mkdir(parents=True)
    (kept / "mine" / "notes.txt").write_text("x")
    assert synth_cli(*args, "--out", str(kept)).returncode == 2
    assert sorted(p.name for p in kept.iterdir()) == ["mine"]
    # the first group alone is fine: the folder was written before the second group failed
    assert synth_cli(*args[:6], "0,1|2,3", *args[7:], "--out", str(out)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["0_1", "2_3"]


def test_simulate_group_retimes_a_group_file(synth_cli, tmp_path):
    """`simulate --group` times a group's XML on the group's own topology (as solve compiled it);
    without --group the rank count mismatch is one line, exit 2."""
    r = synth_cli("solve", "--topo", "dgx_h100", "--nodes", "2", "--group", "rail:2", "--coll",
                  "allgather", "--encoding", "baseline", "--algo", "ring", "--sizes", "1KB,1MB",
                  "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    row = next(row for row in data["range_table"] if row["file"])
    sim = synth_cli("simulate", row["file"], "--topo", "dgx_h100", "--nodes", "2", "--group",
                    "rail:2", "--sizes", str(row["at_bytes"]), "--json")
    assert sim.returncode == 0, sim.stderr
    (point,) = json.loads(sim.stdout)["costs"]
    assert point["time_us"] == pytest.approx(row["decided_us"], rel=1e-5)
    bare = synth_cli("simulate", row["file"], "--topo", "dgx_h100", "--nodes", "2")
    assert bare.returncode == 2 and "pass --group" in bare.stderr
