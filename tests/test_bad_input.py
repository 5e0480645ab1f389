"""Every input error a user can make: exit code 2, one line, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from synth.errors import SynthError
from synth.topology_io import load_topology

GOOD = """\
name: tiny
ranks: 3
link_classes:
  nv: {alpha_us: 1.0, bandwidth_GBps: 25}
links:
  - {between: [0, 1], class: nv}
  - {between: [1, 2], class: nv}
"""


def write(tmp_path: Path, text: str, name: str = "topo.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_good_file_loads(tmp_path):
    topo = load_topology(write(tmp_path, GOOD))
    assert topo.num_ranks == 3 and len(topo.links) == 4


@pytest.mark.parametrize(("text", "needle"), [
    ("name: [unclosed\n", "not valid YAML"),
    (GOOD.replace("ranks: 3", "ranks: three"), "field 'ranks'"),
    (GOOD.replace("bandwidth_GBps: 25", "bandwidth_GBps: 0"), "must be greater than 0"),
    (GOOD.replace("bandwidth_GBps: 25", "bandwidth_GBps: -5"), "must be greater than 0"),
    (GOOD.replace("[1, 2]", "[1, 7]"), "rank 7 is out of range"),
    (GOOD.replace("class: nv}\n  - {between: [1, 2]", "class: xx}\n  - {between: [1, 2]"),
     "link class 'xx' is not defined"),
    (GOOD.replace("  - {between: [1, 2], class: nv}\n", ""), "disconnected"),
    (GOOD + "bogus: 1\n", "unknown field"),
])
def test_bad_topology_file(tmp_path, text, needle):
    with pytest.raises(SynthError) as info:
        load_topology(write(tmp_path, text))
    assert needle in info.value.message
    assert "topo.yaml" in info.value.message or "not valid" in info.value.message


def test_unknown_topology_suggests_close_names():
    with pytest.raises(SynthError) as info:
        load_topology("trn1_23")
    assert "did you mean" in info.value.message and "trn1_32" in info.value.message


CASES = [
    (["solve", "--topo", "trn1_23", "--coll", "allgather"], "unknown topology"),
    (["solve", "--topo", "dgx1", "--coll", "allgahter"], "unknown collective"),
    (["solve", "--topo", "dgx1", "--coll", "broadcast", "--root", "8"], "out of range"),
    (["solve", "--topo", "dgx1", "--coll", "allgather", "--chunks", "0"], "at least 1"),
    (["solve", "--topo", "dgx1", "--coll", "allgather", "--nodes", "0"], "at least 1"),
    (["solve", "--topo", "ring:x", "--coll", "allgather"], "whole number"),
    (["topo", "show", "nope"], "unknown topology"),
    (["verify", "missing.json"], "does not exist"),
    (["solve", "--topo", "dgx1", "--coll", "allgather", "--bogus"], "No such option '--bogus'"),
    (["solve", "--coll", "allgather"], "Missing option '--topo'"),
    (["solve", "--topo", "dgx1", "--coll", "allgather", "--proto", "XX"], "Invalid value for '--proto'"),
    (["nope"], "No such command 'nope'"),
]


@pytest.mark.parametrize(("args", "needle"), CASES)
def test_cli_bad_input_exit_2(synth_cli, tmp_path, args, needle):
    result = synth_cli(*args, "--out", str(tmp_path / "o")) if args[0] == "solve" else synth_cli(*args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_cli_bad_topology_file(synth_cli, tmp_path):
    bad = write(tmp_path, GOOD.replace("bandwidth_GBps: 25", "bandwidth_GBps: 0"))
    result = synth_cli("solve", "--topo", bad, "--coll", "allgather", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "must be greater than 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_unwritable_out(synth_cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = synth_cli("solve", "--topo", "ring:4", "--coll", "allgather", "--out",
                       str(blocker / "sub"))
    assert result.returncode == 2 and "output folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_bad_schedule_file(synth_cli, tmp_path):
    path = write(tmp_path, "{not json", "s.json")
    result = synth_cli("verify", path)
    assert result.returncode == 2 and "not valid JSON" in result.stderr


@pytest.mark.parametrize("text", ["99999999999999999999999GB", "2048GB", "1099511627777"])
def test_size_past_the_limit_is_refused(text):
    """Past 1 TiB a size is a typo: before this limit 10^23 GB reached numpy's int64 (OverflowError)
    and 2^62 bytes the program model (MemoryError), both as tracebacks."""
    from synth.sizes import MAX_SIZE_BYTES, parse_size, parse_sizes

    assert parse_size(f"{MAX_SIZE_BYTES}") == MAX_SIZE_BYTES
    with pytest.raises(SynthError) as info:
        parse_sizes(f"1KB:{text}")
    assert "MAX_SIZE_BYTES" in info.value.message


def test_size_is_read_exactly():
    from synth.sizes import parse_size

    assert parse_size("1099511627775") == 2**40 - 1  # exact, not through a float
    assert parse_size("1.5KB") == 1536


def test_huge_size_on_the_command_line_is_one_line(synth_cli, tmp_path):
    result = synth_cli("solve", "--topo", "ring:4", "--coll", "allgather", "--algo", "ring",
                       "--sizes", "99999999999999999999999GB", "--json", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "MAX_SIZE_BYTES" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "o").exists()


def test_byte_range_outside_the_sweep_is_refused_before_solving(monkeypatch, tmp_path):
    """--min-bytes past every swept size: refused before the solver runs (it used to solve for
    minutes first, then refuse)."""
    from click.testing import CliRunner

    import synth.solve
    from synth.cli import cli

    def no_solve(*args, **kwargs):
        raise AssertionError("solved before refusing the byte range")

    monkeypatch.setattr(synth.solve, "solve", no_solve)
    result = CliRunner().invoke(cli, ["solve", "--topo", "ring:4", "--coll", "allgather",
                                       "--algo", "ring", "--min-bytes", "2GB", "--out",
                                       str(tmp_path / "o")])
    assert isinstance(result.exception, SynthError), result.output  # main() turns it into exit 2
    assert "no size of the sweep" in result.exception.message and not (tmp_path / "o").exists()


PLAN = Path(__file__).parent / "data" / "mscclpp-plans" / "single_node" / "allgather.json"


@pytest.mark.parametrize(("extra", "needle"), [
    (("--topo", "ring:4"), "--topo does not apply to an MSCCL-IR XML"),
    (("--calibration", "cal.json"), "--calibration does not apply to an MSCCL-IR XML"),
])
def test_verify_refuses_options_an_xml_ignores(synth_cli, extra, needle):
    """An 8-rank XML "verified" with --topo ring:4 reads as a check on ring:4 that never ran."""
    from tests.conftest import xml_corpus_file

    result = synth_cli("verify", str(xml_corpus_file("ndv4__ag-1m.xml")), *extra)
    assert result.returncode == 2 and needle in result.stderr, result.stderr
    assert "verified" not in result.stdout


def test_verify_refuses_options_a_plan_ignores(synth_cli):
    result = synth_cli("verify", str(PLAN), "--topo", "dgx_h100")
    assert result.returncode == 2 and "--topo does not apply to an MSCCL++ plan" in result.stderr
    result = synth_cli("verify", str(PLAN), "--root", "0")
    assert result.returncode == 2 and "--root applies to an MSCCL-IR XML" in result.stderr
