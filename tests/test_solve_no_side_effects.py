"""Issue 12, "nothing half-written; no side effects on failure": ``synth solve`` runs every stage
that can fail (verification, interpreter, program-model timing, NCCL comparison) before it writes,
then writes all its files or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import synth.files
import synth.select.program_scorer
import synth.solve
from synth.cli import main
from synth.errors import INPUT_ERROR, VERIFY_FAILED, SynthError, VerificationError
from synth.files import write_all

SOLVE = ["solve", "--topo", "ring:4", "--coll", "allgather", "--algo", "ring"]


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
    monkeypatch.setattr(synth.solve, "program_times_us", failing)
    out = tmp_path / "deep" / "o"
    assert _exit_code([*SOLVE, "--out", str(out)]) == code  # documented: 1 verify, 2 input
    assert calls, "the program model was never called"
    assert not (tmp_path / "deep").exists()


def test_the_same_run_without_the_failure_writes(tmp_path):
    out = tmp_path / "o"
    assert _exit_code([*SOLVE, "--out", str(out)]) == 0
    assert sorted(p.suffix for p in out.iterdir()) == [".json", ".xml"]


def test_a_late_write_failure_removes_what_this_run_wrote(monkeypatch, tmp_path):
    """The second rename fails: the file renamed into place before it is removed again, and the
    folder this run created too; a file already in a folder that existed is left alone."""
    real_replace = os.replace
    renames = []

    def replace(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(synth.files.os, "replace", replace)
    out = tmp_path / "o"
    assert _exit_code([*SOLVE, "--out", str(out)]) == INPUT_ERROR
    assert len(renames) == 2 and not out.exists()

    renames.clear()
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert _exit_code([*SOLVE, "--out", str(out)]) == INPUT_ERROR
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


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
    monkeypatch.setattr(synth.solve, "program_times_us",
                        lambda *a, **k: (_ for _ in ()).throw(SynthError("no")))
    assert _exit_code(SOLVE) == INPUT_ERROR
    assert list(Path(tmp_path).iterdir()) == []
