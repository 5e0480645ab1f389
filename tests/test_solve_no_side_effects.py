"""Issue 12, "nothing half-written; no side effects on failure": ``synth solve`` runs every stage
that can fail (verification, interpreter, program-model timing, NCCL comparison) before it writes,
then writes all its files or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import synth.files
import synth.outputs.report
import synth.select.program_scorer
import synth.select.ranking
import synth.solve
from synth.cli import main
from synth.errors import INPUT_ERROR, VERIFY_FAILED, SynthError, VerificationError
from synth.files import write_all

SOLVE = ["solve", "--topo", "ring:4", "--coll", "allgather", "--algo", "ring", "--proto", "Simple"]


def _exit_code(argv: list[str]) -> int:
    """``synth ARGV`` in this process (so monkeypatches apply): its exit code."""
    try:
        main(argv)
    except SystemExit as done:
        return int(done.code or 0)
    return 0


@pytest.mark.parametrize("error,code", [
    (VerificationError("deadlock-free", "the timed run broke a rule"), VERIFY_FAILED),
    (SynthError("the program model refused the file"), INPUT_ERROR),
])
def test_a_failure_while_timing_leaves_no_files(monkeypatch, tmp_path, error, code):
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        raise error

    # every caller of the program model's timing: the winners' scorer and the written files' times
    monkeypatch.setattr(synth.select.program_scorer, "program_times_us", failing)
    monkeypatch.setattr(synth.select.ranking, "cached_times", failing)
    monkeypatch.setattr(synth.outputs.report, "cached_times", failing)
    out = tmp_path / "deep" / "o"
    assert _exit_code([*SOLVE, "--out", str(out)]) == code  # documented: 1 verify, 2 input
    assert calls, "the program model was never called"
    assert not (tmp_path / "deep").exists()


def test_the_same_run_without_the_failure_writes(tmp_path):
    out = tmp_path / "o"
    assert _exit_code([*SOLVE, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["msccl", "schedules", "synth-manifest.json"]
    # one file per kind of call (in-place, out-of-place)
    assert sorted(p.name[-len("_ip.exec.xml"):].lstrip("_") for p in (out / "msccl").iterdir()) \
        == ["ip.exec.xml", "oop.exec.xml"]
    assert [p.suffix for p in (out / "schedules").iterdir()] == [".json"]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()} if root.exists() else {}


def test_a_write_failure_at_any_point_leaves_the_disk_as_it_was(monkeypatch, tmp_path):
    """The k-th rename fails, for every k: the run exits 2 and the output folder is exactly as it
    was, whether this run created it, or it held a user's file, or an earlier run's files (which a
    successful run with other options would replace)."""
    real_replace = os.replace
    renames: list = []
    fail_at = [0]

    def replace(src, dst):
        renames.append(dst)
        if len(renames) == fail_at[0]:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(synth.files.os, "replace", replace)
    fresh = tmp_path / "fresh"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mine.txt").write_text("keep")
    earlier = tmp_path / "earlier"
    assert _exit_code([*SOLVE, "--out", str(earlier), "--proto", "LL"]) == 0
    total = None
    for k in range(1, 40):
        progressed = False
        for out in (fresh, mine, earlier):
            before = _tree(out)
            renames.clear()
            fail_at[0] = k
            code = _exit_code([*SOLVE, "--out", str(out)])
            if code == 0:       # fewer renames than k: this run did not fail; undo it
                total = len(renames)
                continue
            progressed = True
            assert code == INPUT_ERROR
            assert _tree(out) == before, (k, out.name)
            assert not fresh.exists()
            assert not [p for p in tmp_path.rglob(".*tmp-*")], (k, out.name)
        if not progressed:
            break
    assert total is not None and total >= 3     # every rename of a whole run was made to fail


def test_write_all_writes_all_or_none(monkeypatch, tmp_path):
    out = tmp_path / "a" / "b"
    files = [(out / "x.json", "{}\n"), (out / "y.xml", b"<algo/>\n")]
    assert write_all(out, files) == [out / "x.json", out / "y.xml"]
    assert (out / "y.xml").read_bytes() == b"<algo/>\n"
    assert (out / "x.json").stat().st_mode & 0o777 == 0o666 & ~_umask()

    real_mkstemp = synth.files.tempfile.mkstemp
    made = []

    def mkstemp(*args, **kwargs):
        made.append(1)
        if len(made) == 2:
            raise OSError(13, "Permission denied")
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(synth.files.tempfile, "mkstemp", mkstemp)
    fresh = tmp_path / "c" / "d"
    with pytest.raises(SynthError, match=r"cannot write '.*y\.xml': Permission denied"):
        write_all(fresh, [(fresh / "x.json", "{}"), (fresh / "y.xml", "<algo/>")])
    assert not (tmp_path / "c").exists()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_nothing_is_left_by_a_failed_run_in_the_current_folder(monkeypatch, tmp_path):
    """The default ``--out out`` is not created either."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(synth.outputs.report, "cached_times",
                        lambda *a, **k: (_ for _ in ()).throw(SynthError("no")))
    assert _exit_code(SOLVE) == INPUT_ERROR
    assert list(Path(tmp_path).iterdir()) == []
