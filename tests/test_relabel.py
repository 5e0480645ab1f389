"""--concurrent groups on one machine up to the name: one solve, the others' files relabelled.

The relabelled out dir must equal, file for file and byte for byte, the one every group's own
solve writes (``synth.relabel.REUSE`` off); groups on different machines are still solved each
on its own, and a later group's failure still takes back every folder the call made.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from synth import relabel
from synth.cli import cli
from synth.groups import concurrent_group, parse_partition
from synth.topology_io import load_topology

SAME = "is the same machine as group"


def _solve(monkeypatch, reuse: bool, *args: str):
    monkeypatch.setattr(relabel, "REUSE", reuse)
    return CliRunner().invoke(cli, ["solve", *args], catch_exceptions=False)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_relabelled_groups_equal_solved_groups_byte_for_byte(monkeypatch, tmp_path):
    args = ("--topo", "dgx1", "--nodes", "2", "--concurrent", "stride:8", "--coll", "allreduce",
            "--sizes", "1KB,64KB,1MB,64MB")
    solved = _solve(monkeypatch, False, *args, "--out", str(tmp_path / "solved"))
    assert solved.exit_code == 0, solved.output
    assert SAME not in solved.output
    reused = _solve(monkeypatch, True, *args, "--out", str(tmp_path / "reused"))
    assert reused.exit_code == 0, reused.output
    assert reused.output.count(SAME + " stride:8+0") == 7
    a, b = _tree(tmp_path / "solved"), _tree(tmp_path / "reused")
    assert len(a) > 8 * 4 and any("/msccl/" in f for f in a)   # XML, schedules, maps per group
    assert sorted(a) == sorted(b)
    assert [f for f in a if a[f] != b[f]] == []
    # the member's own rank map, not the representative's
    (m,) = [f for f in b if f.startswith("stride-8+5/maps/") and "schedule.json" in f][:1]
    assert b'"global_ranks": [\n    5,\n    13\n  ]' in b[m]


def test_groups_on_different_machines_are_each_solved(monkeypatch, tmp_path):
    """{0,1} and {2,3,4} of switch:8 differ in size; {0,1} and {5,6} of the same call are one
    machine up to the name (whose file-name form, g-5-6, differs from the name, g-5_6)."""
    args = ("--topo", "switch:8", "--coll", "allgather", "--concurrent", "0,1|2,3,4|5,6",
            "--algo", "ring", "--sizes", "1KB,1MB")
    r = _solve(monkeypatch, True, *args, "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    solved = _solve(monkeypatch, False, *args, "--out", str(tmp_path / "solved"))
    assert solved.exit_code == 0, solved.output
    assert _tree(tmp_path / "solved") == {f: b for f, b in _tree(tmp_path).items()
                                          if not f.startswith("solved/")}
    assert f"group 2,3,4 {SAME}" not in r.output
    assert f"group 5,6 {SAME} 0,1" in r.output
    assert r.output.count(SAME) == 1
    assert {p.name for p in tmp_path.iterdir() if p.is_dir()} == {"0_1", "2_3_4", "5_6", "solved"}
    assert list((tmp_path / "5_6" / "schedules").glob("*.g-5-6.*.schedule.json"))


def test_a_group_failing_after_a_relabelled_one_leaves_nothing(synth_cli, tmp_path):
    """All groups or none: 2,3 is relabelled from 0,1 and written, then 4,5,6 fails (recursive
    doubling needs a power of two); every folder the call made is taken back."""
    out = tmp_path / "o"
    r = synth_cli("solve", "--topo", "switch:8", "--coll", "allgather", "--concurrent",
                  "0,1|2,3|4,5,6", "--algo", "recursive_doubling", "--sizes", "1KB", "--out",
                  str(out))
    assert r.returncode == 2 and "power-of-two" in r.stderr, r.stderr
    assert f"group 2,3 {SAME} 0,1" in r.stdout
    assert not out.exists()


def test_machine_key_ignores_the_name_and_which_nic_a_group_sits_behind():
    whole = load_topology("dgx1", 2)
    tops = [concurrent_group(whole, g, "stride:8") for g in parse_partition("stride:8", whole)]
    assert len({t.name for t in tops}) == 8
    assert len({relabel.machine_key(t) for t in tops}) == 1
    assert all(relabel.same_machine(tops[0], t) for t in tops)
    # a group that shares its NIC with another is not the machine of one that has it alone
    mixed = [concurrent_group(whole, g, "0,2,8,10|1,9") for g in
             parse_partition("0,2,8,10|1,9", whole)]
    assert not relabel.same_machine(mixed[0], mixed[1])
    assert not relabel.same_machine(whole, whole)   # not a group's machine: never relabelled


def test_a_name_inside_a_longer_word_is_refused():
    names = relabel._Names("m.g-stride-8+1.c-stride-8", "m.g-stride-8+2.c-stride-8")
    assert names("on m.g-stride-8+1.c-stride-8_allreduce") == "on m.g-stride-8+2.c-stride-8_allreduce"
    with pytest.raises(relabel.NotRelabelled, match="inside a longer word"):
        names("m.g-stride-8+1.c-stride-80")
    with pytest.raises(relabel.NotRelabelled, match="already occurs"):
        names("m.g-stride-8+2.c-stride-8")
    text = "<algo name='allreduce' nchunksperloop='8'/>"    # no name at all: the text itself
    assert names(text) is text


def test_files_that_cannot_be_relabelled_are_solved(monkeypatch, tmp_path):
    """Where relabelling refuses (here: forced), the group is solved as usual, with a note."""
    def refuse(*_args, **_kwargs):
        raise relabel.NotRelabelled("forced by the test")

    monkeypatch.setattr(relabel, "relabel", refuse)
    r = _solve(monkeypatch, True, "--topo", "switch:8", "--coll", "allgather", "--concurrent",
               "0,1|2,3", "--algo", "ring", "--sizes", "1KB", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "not relabelled (forced by the test): solving it" in r.output and SAME not in r.output
    assert list((tmp_path / "2_3" / "schedules").glob("*.g-2-3.*.schedule.json"))


def test_an_identical_text_shares_the_proof_and_another_is_proven(monkeypatch):
    """A member's XML that is byte-for-byte the representative's keeps its proof; any other text
    goes through the interpreter, which rejects a wrong one."""
    from synth.collectives import make_collective
    from synth.emit import XmlOptions, emit_verified_xml
    from synth.errors import VerificationError
    from synth.schedule import Schedule, Step, Transfer

    coll = make_collective("allgather", 2, 1)
    schedule = Schedule(coll, "m", "h", (Step((Transfer(0, 1, 0), Transfer(1, 0, 1))),),
                        "pair", "test", {})
    options = XmlOptions()
    text, reports = emit_verified_xml(schedule, options)
    calls = []
    real = relabel.verify_text
    monkeypatch.setattr(relabel, "verify_text", lambda *a: calls.append(a) or real(*a))
    assert relabel._proof(text, text, tuple(reports), schedule, options) == tuple(reports)
    assert calls == []
    assert [r.mode for r in relabel._proof(text + "\n", text, tuple(reports), schedule,
                                           options)] == [r.mode for r in reports]
    assert len(calls) == 1
    receive = 'type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff='
    wrong = text.replace(receive + '"1"', receive + '"0"', 1)     # rank 0 overwrites its own chunk
    assert wrong != text
    with pytest.raises(VerificationError):
        relabel._proof(wrong, text, tuple(reports), schedule, options)
