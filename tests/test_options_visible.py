"""Options are visible: --proto/--instances change the predicted time, file names carry every option.

Issue 12: ``--proto LL --instances 2`` printed the same costs as the defaults, and the output file
names did not carry protocol or instances, so runs with different options overwrote each other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions
from synth.encodings.baseline import baseline
from synth.outputs import write_outputs
from synth.outputs.msccl import xml_file_name
from synth.outputs.schedule_json import schedule_file_name, schedule_stem
from synth.timing.protocol import predict_times_us, runtime_profile
from synth.topology_io import load_topology

SIZES = (1024, 2**20, 2**30)


@pytest.fixture(scope="module")
def ring_allreduce():
    topo = load_topology("dgx1")
    return topo, baseline(topo, make_collective("allreduce", 8), "ring")


def test_proto_and_instances_change_the_runtime_time(ring_allreduce) -> None:
    topo, sch = ring_allreduce
    simple = runtime_profile(sch, topo, SIZES, "Simple", 1)
    ll = runtime_profile(sch, topo, SIZES, "LL", 1)
    ll2 = runtime_profile(sch, topo, SIZES, "LL", 2)
    t = {name: [p.time_us for p in prof.points] for name, prof in
         (("simple", simple), ("ll", ll), ("ll2", ll2))}
    # LL: a cheaper launch and per-step sync for small messages, half the wire bandwidth for big ones
    assert t["ll"][0] < t["simple"][0]
    assert t["ll"][-1] > t["simple"][-1]
    # instances: more threadblocks per step (overhead), more channel bandwidth at large sizes
    assert t["ll2"][0] > t["ll"][0]
    assert t["ll2"][-1] < t["ll"][-1]
    # it is the catalog's protocol model, not a second one
    assert t["ll2"] == predict_times_us(sch, topo, SIZES, "LL", 2)
    assert ll2.to_dict()["proto"] == "LL" and ll2.to_dict()["instances"] == 2
    # the largest message a file runs grows with the protocol's chunk and with instances
    assert ll2.max_bytes == 2 * ll.max_bytes and simple.max_bytes > ll.max_bytes


def test_beyond_the_protocols_size_limit_is_null_in_json(ring_allreduce) -> None:
    topo, sch = ring_allreduce
    prof = runtime_profile(sch, topo, (1024, 2**50), "LL", 1)
    d = prof.to_dict()
    assert d["costs"][0]["time_us"] > 0
    assert d["costs"][1]["time_us"] is None and d["costs"][1]["algbw_GBps"] is None
    json.dumps(d, allow_nan=False)


def test_every_option_that_changes_a_file_is_in_its_name(ring_allreduce) -> None:
    _, sch = ring_allreduce
    variants = [XmlOptions(), XmlOptions(proto="LL"), XmlOptions(instances=2),
                XmlOptions(profile="rccl"), XmlOptions(profile="legacy"),
                XmlOptions(inplace=False), XmlOptions(min_bytes=1024, max_bytes=2**20),
                XmlOptions(min_bytes=1024, max_bytes=2**20 + 1), XmlOptions(max_bytes=2**20)]
    names = [xml_file_name(sch, x) for x in variants]
    assert len(set(names)) == len(names), names
    assert names[0] == "dgx1_allreduce_c1_ring_Simple_x1.exec.xml"
    assert names[6] == "dgx1_allreduce_c1_ring_Simple_x1_1KB-1MB.exec.xml"
    assert names[7] == "dgx1_allreduce_c1_ring_Simple_x1_1KB-1048577B.exec.xml"
    # schedule inputs: chunks, in-place collective, root, calibration tag
    topo = load_topology("dgx1")
    stems = {schedule_stem(sch), schedule_stem(sch, "cal-0123abcd"),
             schedule_stem(baseline(topo, make_collective("allreduce", 8, 2), "ring")),
             schedule_stem(baseline(topo, make_collective("allreduce", 8, 1, None, True), "ring")),
             schedule_stem(baseline(topo, make_collective("broadcast", 8, 1, 3), "tree"))}
    assert len(stems) == 5, stems
    assert schedule_file_name(sch) == "dgx1_allreduce_c1_ring.schedule.json"


def test_a_run_with_other_options_replaces_its_own_files(ring_allreduce, tmp_path) -> None:
    """Names carry the options, and a later run of the same schedule replaces the earlier one's
    files (the runtime folder holds no stale file), whatever its options."""
    _, sch = ring_allreduce
    a = write_outputs(sch, tmp_path, XmlOptions())
    a_text = a.files[1].read_text()
    b = write_outputs(sch, tmp_path, XmlOptions(proto="LL", instances=2))
    assert a.files[0] == b.files[0]            # the schedule itself is the same file
    assert a.files[1] != b.files[1] and not a.files[1].exists()
    assert a_text != b.files[1].read_text()
    assert 'proto="LL"' in b.files[1].read_text()
    assert [p.name for p in (tmp_path / "msccl").iterdir()] == [b.files[1].name]


def _solve(*args: str):
    """``synth solve`` in-process (the subprocess path is covered by tests/test_cli.py)."""
    from click.testing import CliRunner

    from synth.cli import cli

    return CliRunner().invoke(cli, ["solve", "--topo", "ring:4", "--coll", "allgather", "--algo",
                                    "ring", "--encoding", "baseline", *args])


def test_cli_prints_and_writes_the_options(tmp_path) -> None:
    runs = {}
    # --proto Simple and --instances 1 pinned: without them the program model picks each range's
    # protocol and count (tests/test_program_winners.py)
    for label, extra in (("default", ("--proto", "Simple", "--instances", "1")),
                         ("ll2", ("--proto", "LL", "--instances", "2"))):
        r = _solve("--sizes", "1KB,1GB", "--json", "--out", str(tmp_path), *extra)
        assert r.exit_code == 0, r.output
        runs[label] = json.loads(r.stdout)
    d, ll = runs["default"], runs["ll2"]
    def wire(run):  # the wire model: the same schedule (each file serving it is named too)
        return [{k: v for k, v in c.items() if k != "file"} for c in run["costs"]]

    assert wire(d) == wire(ll)
    assert (d["runtime"]["proto"], d["runtime"]["instances"]) == ("Simple", 1)
    assert (ll["runtime"]["proto"], ll["runtime"]["instances"]) == ("LL", 2)
    assert [c["time_us"] for c in d["runtime"]["costs"]] != \
        [c["time_us"] for c in ll["runtime"]["costs"]]
    xml = sorted(Path(f).name for run in (d, ll) for f in run["files"] if f.endswith(".xml"))
    # one file per kind of call (in-place, out-of-place), each named for its options
    assert xml == ["ring-4_allgather_c1_ring_LL_x2_ip.exec.xml",
                   "ring-4_allgather_c1_ring_LL_x2_oop.exec.xml",
                   "ring-4_allgather_c1_ring_Simple_x1_ip.exec.xml",
                   "ring-4_allgather_c1_ring_Simple_x1_oop.exec.xml"]
    # the second run replaced the first one's files: one run's files in the runtime folder
    assert [(tmp_path / "msccl" / name).is_file() for name in xml] == [True, True, False, False]
    table = _solve("--sizes", "1KB", "--no-xml", "--proto", "LL128", "--out", str(tmp_path / "t"))
    assert table.exit_code == 0, table.output
    assert "runtime µs" in table.stdout and "LL128 (protocol)" in table.stdout
