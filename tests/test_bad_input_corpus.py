"""A corpus of bad input files run through every command that reads a file (issue 12).

Whatever the bytes -- random, Latin-1, UTF-16, empty, a folder, a pipe, a device, a file over the
size limit, the wrong shape of data -- every command answers with one line on stderr and exit
code 2, never a traceback or a hang, and leaves no output folder behind. The CLI runs in-process
(``synth.cli.main`` under click's runner isolation): an unexpected exception escapes ``main`` and
fails the test with its traceback.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from synth.cli import main
from synth.errors import SynthError
from synth.files import MAX_INPUT_BYTES, read_data, read_input

DATA = Path(__file__).parent / "data" / "bad_inputs"


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def run_inprocess(*args: str) -> Outcome:
    """``synth ARGS`` in this process, through the real entry point (exit codes included)."""
    runner = CliRunner()
    with runner.isolation() as (stdout, stderr, _):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        return Outcome(code, stdout.getvalue().decode(), stderr.getvalue().decode())


def _random(seed: int, nul: bool) -> bytes:
    data = random.Random(seed).randbytes(4096)
    return data if nul else data.replace(b"\0", b"\x01")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _huge(path: Path) -> None:
    with open(path, "wb") as handle:  # sparse: costs no disk, only its size is over the limit
        handle.truncate(MAX_INPUT_BYTES + 1)


CONTENTS: dict[str, bytes | Callable[[Path], None]] = {
    "random": _random(1, nul=True),
    "random_no_nul": _random(2, nul=False),
    "latin1": "name: café\nranks: 2\nlink_classes: {nv: {alpha_us: 1, bandwidth_GBps: 25}}\n"
              .encode("latin-1"),
    "utf16": "name: tiny\nranks: 2\n".encode("utf-16"),
    "empty": b"",
    "blank": b" \n\t\n",
    "not_yaml_or_json": b"{[: : :\n\x07\n",
    "yaml_list": b"- 1\n- 2\n",
    "yaml_scalar": b"42\n",
    "json_list": b"[1, 2, 3]\n",
    "duplicate_key": b"name: a\nname: b\n",
    "deep": b"[" * 5000 + b"]" * 5000,
    "folder": lambda p: p.mkdir(),
    "fifo": _fifo,
    "huge": _huge,
    "missing": lambda p: None,
}

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (argument template, suffix the file gets; '{f}' is the bad file, '{o}' a fresh folder,
    # '{t}' an existing one)
    "verify_json": ("verify {f}", ".json"),
    "verify_xml": ("verify {f}", ".xml"),
    "simulate": ("simulate {f}", ".json"),
    "simulate_xml": ("simulate {f} --topo dgx1", ".xml"),
    "solve_topo": ("solve --topo {f} --coll allgather --out {o}", ".yaml"),
    "solve_topo_json": ("solve --topo {f} --coll allgather --out {o}", ".json"),
    "solve_coll": ("solve --topo ring:4 --coll {f} --out {o}", ".yaml"),
    "solve_calibration": ("solve --topo ring:4 --coll allgather --calibration {f} --out {o}", ".json"),
    "solve_sketch": ("solve --topo dgx1 --coll allgather --encoding milp --sketch {f} --out {o}",
                     ".yaml"),
    "solve_neuron_calibration": ("solve --topo trn1_32 --coll allreduce --format neuron "
                                 "--encoding baseline --calibration {f} --out {o}", ".json"),
    "topo_show": ("topo show {f}", ".yaml"),
    "sketch_show": ("sketch show {f}", ".yaml"),
    "sketch_check": ("sketch check {f}", ".yaml"),
    "analyze_coll": ("analyze steps --topo ring:4 --coll {f}", ".yaml"),
    "pareto_topo": ("pareto --topo {f} --coll allgather --out {o}", ".yaml"),
    "strategies_calibration": ("strategies --topo trn1_32 --coll allreduce --calibration {f}",
                               ".json"),
    "catalog_calibration": ("catalog --topo ring:4 --calibration {f} --out {o}", ".json"),
    "topo_import": ("topo import {f} --format nccl-xml --out {t}/imported.yaml", ".xml"),
    "calibrate_msccl": ("calibrate {f} --format msccl --topo ndv5 --out {o}/c.json", ".json"),
    "catalog_topo": ("catalog --topo {f} --out {o} --quiet", ".yaml"),
    "strategies_topo": ("strategies --topo {f} --coll allreduce", ".yaml"),
    "solve_neuron_topo": ("solve --topo {f} --coll allreduce --format neuron --out {o}", ".yaml"),
    "calibrate_nccl": ("calibrate {f} --format nccl-tests --topo dgx1 --out {o}/c.json", ".log"),
    "calibrate_nccom": ("calibrate {f} --format nccom-test --platform neuron --out {o}/c.json",
                        ".log"),
}

# Data of the wrong shape is only bad where the command expects that format.
SHAPE_ONLY = {"yaml_list", "yaml_scalar", "json_list", "duplicate_key", "not_yaml_or_json", "deep"}
TEXT_LOGS = {"calibrate_nccl", "calibrate_nccom"}


def make(tmp_path: Path, content: str, suffix: str) -> Path:
    path = tmp_path / f"bad_{content}{suffix}"
    spec = CONTENTS[content]
    if callable(spec):
        spec(path)
    else:
        path.write_bytes(spec)
    return path


def assert_one_line_error(result: Outcome, out: Path | None = None) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr, result.stdout)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("synth: error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    if out is not None:
        assert not out.exists(), f"{out} was created by a failed command"


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("content", sorted(CONTENTS))
def test_corpus_through_every_command(tmp_path, command, content):
    template, suffix = COMMANDS[command]
    if content in SHAPE_ONLY and command in TEXT_LOGS:
        pytest.skip("a log is free text: its lines are parsed, not its structure")
    bad = make(tmp_path, content, suffix)
    out = tmp_path / "out"
    args = template.format(f=bad, o=out, t=tmp_path).split()
    assert_one_line_error(run_inprocess(*args), out)
    assert not (tmp_path / "imported.yaml").exists()


DEVICE_COMMANDS = ["verify {f}", "simulate {f}", "solve --topo {f} --coll allgather --out {o}",
                   "sketch show {f}", "topo show {f}",
                   "solve --topo ring:4 --coll allgather --calibration {f} --out {o}",
                   "calibrate {f} --format nccl-tests --topo dgx1 --out {o}/c.json"]


@pytest.mark.parametrize("template", DEVICE_COMMANDS)
def test_character_device_is_refused_without_reading(tmp_path, template):
    """/dev/zero never ends: it must be refused by its type, not read until memory runs out."""
    out = tmp_path / "out"
    result = run_inprocess(*template.format(f="/dev/zero", o=out).split())
    assert_one_line_error(result, out)
    assert "not a regular file" in result.stderr


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir()
                                        if p.is_file() and p.suffix != ".md"))
@pytest.mark.parametrize("template", ["verify {f}", "simulate {f}", "topo show {f}",
                                      "sketch check {f}", "solve --topo {f} --coll allgather "
                                      "--out {o}", "solve --topo ring:2 --coll {f} --out {o}"])
def test_committed_bad_inputs(tmp_path, name, template):
    out = tmp_path / "out"
    assert_one_line_error(run_inprocess(*template.format(f=DATA / name, o=out).split()), out)


# ------------------------------------------------------------------------------------ the reader
@pytest.mark.parametrize(("content", "needle"), [
    ("random", "binary file"), ("random_no_nul", "not UTF-8"), ("latin1", "byte 0xe9"),
    ("utf16", "binary file"), ("empty", "is empty"), ("blank", "is empty"),
    ("folder", "is a folder"), ("fifo", "not a regular file"), ("huge", "larger than 256 MiB"),
    ("missing", "does not exist"),
])
def test_read_input_names_the_problem(tmp_path, content, needle):
    with pytest.raises(SynthError) as info:
        read_input(make(tmp_path, content, ".yaml"), "topology file")
    assert needle in info.value.message and "topology file" in info.value.message
    assert "\n" not in info.value.message


def test_read_input_accepts_bom_and_crlf(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: a\r\nranks: 2\r\n")
    assert read_input(path) == "name: a\nranks: 2\n"
    assert read_data(path) == {"name": "a", "ranks": 2}


def test_duplicate_yaml_key_names_key_and_lines(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: a\nranks: 2\nlink_classes:\n  nv: {alpha_us: 1}\n  nv: {alpha_us: 2}\n")
    with pytest.raises(SynthError) as info:
        read_data(path)
    assert "duplicate key 'nv' on line 5 (first on line 4)" in info.value.message


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("base: &b {alpha_us: 1, bandwidth_GBps: 2}\nnv:\n  <<: *b\n  alpha_us: 3\n")
    assert read_data(path)["nv"] == {"alpha_us": 3, "bandwidth_GBps": 2}


def test_duplicate_json_key(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"ranks": 2, "ranks": 3}')
    with pytest.raises(SynthError, match="duplicate key 'ranks'"):
        read_data(path)


@pytest.mark.parametrize(("text", "suffix", "field"), [
    ("a: {b: [1, .inf]}\n", ".yaml", "a.b.1"),
    ("a: .nan\n", ".yaml", "a"),
    ('{"a": Infinity}', ".json", "a"),
    ('{"a": [NaN]}', ".json", "a.0"),
    ('{"a": 1e999}', ".json", "a"),
])
def test_non_finite_numbers_are_input_errors(tmp_path, text, suffix, field):
    path = tmp_path / f"t{suffix}"
    path.write_text(text)
    with pytest.raises(SynthError) as info:
        read_data(path)
    assert f"field '{field}'" in info.value.message and "not a finite number" in info.value.message


# ------------------------------------------------------------------------------------ outputs
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077, 0o027])
def test_written_files_respect_the_umask(tmp_path, umask):
    from synth.files import atomic_write

    old = os.umask(umask)
    try:
        path = atomic_write(tmp_path / "x.json", "{}\n")
        png = atomic_write(tmp_path / "x.png", b"\x89PNG")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert png.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.png"]  # no temporary left


def test_solve_output_respects_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        result = run_inprocess("solve", "--topo", "ring:4", "--coll", "allgather", "--encoding",
                               "baseline", "--algo", "ring", "--out", str(tmp_path / "o"))
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    entries = sorted((tmp_path / "o").rglob("*"))
    files = [f for f in entries if f.is_file()]
    assert files and all(f.stat().st_mode & 0o777 == 0o664 for f in files)
    assert all(d.stat().st_mode & 0o777 == 0o775 for d in entries if d.is_dir())


@pytest.mark.parametrize("extra", [
    ["--encoding", "nope"],
    ["--encoding", "baseline", "--algo", "nope"],
    ["--time-limit", "-1"],
    ["--time-limit", "nan"],
    ["--time-limit", "inf"],
    ["--chunks", "0"],
])
def test_failed_solve_creates_no_folder(tmp_path, extra):
    out = tmp_path / "a" / "b"
    result = run_inprocess("solve", "--topo", "ring:4", "--coll", "allgather", "--out", str(out),
                           *extra)
    assert_one_line_error(result)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("out", ["/proc", "/proc/synth_out", "/sys/kernel"])
def test_out_on_a_pseudo_filesystem_is_one_line(out):
    result = run_inprocess("solve", "--topo", "ring:4", "--coll", "allgather", "--encoding",
                           "baseline", "--algo", "ring", "--out", out)
    assert_one_line_error(result)
    assert "pseudo-filesystem" in result.stderr


def test_pareto_plot_into_a_missing_folder_is_refused_before_the_walk(tmp_path):
    plot = tmp_path / "nonexistent" / "x.png"
    result = run_inprocess("pareto", "--topo", "ring:3", "--coll", "allgather", "--out",
                           str(tmp_path / "o"), "--plot", str(plot))
    assert_one_line_error(result, tmp_path / "o")
    assert "does not exist" in result.stderr and not plot.parent.exists()


def test_calibrate_failure_creates_no_folder(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("no nccl-tests rows here\n")
    out = tmp_path / "new" / "c.json"
    result = run_inprocess("calibrate", str(log), "--format", "nccl-tests", "--topo", "dgx1",
                           "--out", str(out))
    assert_one_line_error(result, out.parent)


# ------------------------------------------------------------------------------------ fuzz finds
TOPO = """\
name: t
ranks: {ranks}
link_classes:
  nv: {{alpha_us: {alpha}, bandwidth_GBps: {bw}}}
switches:
  - {{name: s, class: nv, ports: per_rank}}
"""


@pytest.mark.parametrize(("ranks", "alpha", "bw", "needle"), [
    (4, ".inf", 25, "not a finite number"),
    (4, "-.inf", 25, "not a finite number"),
    (4, "1e308", 25, "MAX_ALPHA_US"),
    (4, "1.0e+308", 25, "MAX_ALPHA_US"),
    (4, 1, ".nan", "not a finite number"),
    (4, 1, "1e-300", "BETA_RANGE_US_PER_MB"),
    (4, 1, "1e300", "BETA_RANGE_US_PER_MB"),
    (10**30, 1, 25, "too large a number"),
    (10**6, 1, 25, "must be at most 16384"),
])
def test_absurd_topology_figures_are_input_errors(tmp_path, ranks, alpha, bw, needle):
    path = tmp_path / "t.yaml"
    path.write_text(TOPO.format(ranks=ranks, alpha=alpha, bw=bw))
    result = run_inprocess("solve", "--topo", str(path), "--coll", "allgather", "--json",
                           "--out", str(tmp_path / "o"))
    assert_one_line_error(result, tmp_path / "o")
    assert needle in result.stderr


def test_json_infinity_is_an_input_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"name": "t", "ranks": 2, "link_classes": {"nv": {"alpha_us": Infinity, '
                    '"bandwidth_GBps": 25}}, "links": [{"between": [0, 1], "class": "nv"}]}')
    result = run_inprocess("topo", "show", str(path))
    assert_one_line_error(result)
    assert "link_classes.nv.alpha_us" in result.stderr


def test_yaml_exponent_without_a_dot_is_a_number(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TOPO.format(ranks=4, alpha="2e0", bw="2.5e1"))
    result = run_inprocess("topo", "show", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert '"alpha_us": 2.0' in result.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (["--topo", "dgx1", "--nodes", "1000000"], "MAX_RANKS"),
    (["--topo", "fully_connected:100000"], "MAX_RANKS"),
    (["--topo", "fully_connected:2000"], "MAX_LINKS"),
    (["--topo", "switch:1000000"], "MAX_RANKS"),
    # the memory guard (synth.guards) answers before the parse-time cap; either names the fix
    (["--topo", "ring:4", "--chunks", "1000000000"], ("MAX_GLOBAL_CHUNKS", "use fewer --chunks")),
    (["--topo", "ring:" + "9" * 5000], "too large"),
    (["--topo", "ring:4", "--time-limit", "nan"], "positive number of seconds"),
    (["--topo", "ring:4", "--encoding", "smt", "--steps", "1000000000"], "MAX_STEPS"),
    (["--topo", "trn1_32", "--format", "neuron", "--chunks", "1000000000"],
     ("MAX_GLOBAL_CHUNKS", "use fewer --chunks")),
])
def test_absurd_sizes_are_refused_at_once(tmp_path, args, needle):
    import time

    start = time.perf_counter()
    result = run_inprocess("solve", *args, "--coll", "allgather", "--out", str(tmp_path / "o"))
    assert_one_line_error(result, tmp_path / "o")
    needles = needle if isinstance(needle, tuple) else (needle,)
    assert any(n in result.stderr for n in needles), result.stderr
    assert time.perf_counter() - start < 5


def test_alltoall_counts_its_chunks(tmp_path):
    result = run_inprocess("solve", "--topo", "switch:1024", "--coll", "alltoall", "--chunks", "2",
                           "--out", str(tmp_path / "o"))
    assert_one_line_error(result, tmp_path / "o")
    assert "2097152 chunks" in result.stderr


def test_huge_ranks_in_a_custom_collective(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"ranks: 4\nchunks: {10**30}\npre: {{0: [0]}}\npost: {{0: [1]}}\n")
    result = run_inprocess("solve", "--topo", "ring:4", "--coll", str(path), "--out",
                           str(tmp_path / "o"))
    assert_one_line_error(result, tmp_path / "o")
    assert "field 'chunks'" in result.stderr


@pytest.mark.parametrize(("pre", "post", "needle"), [
    ("{0: [0], 1: [1]}", "{}", "postcondition is empty"),
    ("[]", "[]", "postcondition is empty"),
    ("{0: [0], 1: [1]}", "{0: [0], 1: [1]}", "already is where"),
    ("{a: [0]}", "{0: [1]}", "chunk 'a' is not a whole number"),
])
def test_custom_collective_that_moves_nothing_is_an_input_error(tmp_path, pre, post, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"ranks: 4\nchunks: 2\npre: {pre}\npost: {post}\n")
    result = run_inprocess("solve", "--topo", "ring:4", "--coll", str(path), "--json", "--out",
                           str(tmp_path / "o"))
    assert_one_line_error(result, tmp_path / "o")
    assert needle in result.stderr


def test_duplicate_key_in_a_topology_file_names_key_and_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TOPO.format(ranks=4, alpha=1, bw=25) + "ranks: 8\n")
    result = run_inprocess("topo", "show", str(path))
    assert_one_line_error(result)
    assert "duplicate key 'ranks' on line 7 (first on line 2)" in result.stderr


def test_json_output_is_always_valid_json():
    import json

    from synth.files import dumps_json

    text = dumps_json({"bound_us": float("inf"), "pct": [float("nan"), 1.5], "n": (1, -float("inf"))})
    assert json.loads(text) == {"bound_us": None, "pct": [None, 1.5], "n": [1, None]}


def test_solve_json_parses_strictly(tmp_path):
    import json

    result = run_inprocess("solve", "--topo", "ring:4", "--coll", "allgather", "--encoding",
                           "baseline", "--algo", "ring", "--json", "--out", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr

    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(result.stdout, parse_constant=refuse)
    assert data["verified"] is True


def test_simulate_trace_into_a_missing_folder_is_refused_before_the_model(tmp_path):
    xml = Path(__file__).parent / "data" / "msccl_ndv5" / "ndv5__ag-1m.xml"
    trace = tmp_path / "missing" / "t.json"
    result = run_inprocess("simulate", str(xml), "--topo", "ndv5", "--trace", str(trace))
    assert_one_line_error(result)
    assert "--trace" in result.stderr and not trace.parent.exists()


@pytest.mark.parametrize(("field", "value"), [
    ("topology", {"name": "ring:4", "hash": {"": None}}),
    ("algorithm", 3),
    ("steps", {"rounds": 1}),
    ("meta", []),
])
def test_schedule_header_of_the_wrong_type(tmp_path, field, value):
    import json

    solved = run_inprocess("solve", "--topo", "ring:4", "--coll", "allgather", "--encoding",
                           "baseline", "--algo", "ring", "--out", str(tmp_path / "o"))
    assert solved.returncode == 0, solved.stderr
    (good,) = (tmp_path / "o" / "schedules").glob("*.schedule.json")
    data = json.loads(good.read_text())
    data[field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = run_inprocess("verify", str(bad))
    assert_one_line_error(result)
    assert f"field '{field}'" in result.stderr


@pytest.mark.parametrize("fmt", ["msccl", "mscclpp"])
def test_solve_creates_a_new_out_folder_when_it_writes(tmp_path, fmt):
    out = tmp_path / "new" / "deeper"
    result = run_inprocess("solve", "--topo", "ring:4", "--coll", "allgather", "--encoding",
                           "baseline", "--algo", "ring", "--format", fmt, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert any(out.glob("schedules/*.schedule.json"))


@pytest.mark.parametrize("extra", [["--tuner", "nope"], ["--time-limit", "nan"],
                                   ["--collectives", "nope"]])
def test_failed_catalog_creates_no_folder(tmp_path, extra):
    out = tmp_path / "a" / "cat"
    result = run_inprocess("catalog", "--topo", "ring:4", "--out", str(out), "--cache-dir",
                           str(tmp_path / "cache"), "--quiet", *extra)
    assert_one_line_error(result)
    assert not (tmp_path / "a").exists()


def test_catalog_into_proc_is_refused_before_solving():
    result = run_inprocess("catalog", "--topo", "ring:4", "--out", "/proc/synth_catalog", "--quiet")
    assert_one_line_error(result)
    assert "pseudo-filesystem" in result.stderr


def test_a_real_process_gets_one_line_and_exit_2(synth_cli, tmp_path):
    """The in-process runs above share the entry point; one real process checks it end to end."""
    bad = make(tmp_path, "random", ".xml")
    result = synth_cli("verify", str(bad))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"synth: error: XML file '{bad}' is a binary file, not text (it contains NUL bytes)"]
