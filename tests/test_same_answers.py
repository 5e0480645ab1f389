"""Same answers: speed work must not change what ``synth solve`` writes.

The issue that made synth faster (caches, layouts kept, the program model timing unproven compiles,
stage 3 of the MILP on worker processes, relabelled concurrent groups) promised byte-identical
outputs. ``tests/data/same-answers/e8beec7.json`` holds the SHA-256 of every file two tour-sized
solves wrote at commit e8beec7, before that work: one through the GPU path (baselines ranked by the
timed program model over protocols and instance counts, in-place and out-of-place files, the range
report) and one through the closed-stack path (trn1_32: lowered schedules and the runtime's own
calls priced, chosen and proven on the stand-in). Both use no solver, so a solver release cannot
move them. A change that alters these files on purpose updates the digests in the same commit and
says why."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from synth.cli import main

GOLDEN = Path(__file__).parent / "data" / "same-answers" / "e8beec7.json"
CASES = {
    "dgx1-allgather-baseline": ["--topo", "dgx1", "--coll", "allgather", "--encoding", "baseline"],
    "trn1_32-allgather-baseline": ["--topo", "trn1_32", "--coll", "allgather", "--encoding",
                                   "baseline"],
}


def digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_solve_writes_the_same_bytes_as_before_the_speed_work(case: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    try:
        main(["solve", *CASES[case], "--out", str(out)])
    except SystemExit as exc:
        assert not exc.code, exc.code
    want = json.loads(GOLDEN.read_text())[case]
    got = digests(out)
    assert sorted(got) == sorted(want)
    changed = [name for name in sorted(want) if got[name] != want[name]]
    assert not changed, f"{case}: these files changed: {changed}"


def test_compiling_ahead_on_a_spare_core_writes_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    """The compiles and timings made by the compile-ahead worker (forced on: the program model's,
    then the ranges' in-place and out-of-place files, proven and timed) give the files the inline
    ones gave, and the worker did make some of each."""
    from synth.select import compile_ahead

    monkeypatch.setenv(compile_ahead.ENV, "1")
    taken: list[tuple[bool, bool | None]] = []
    real = compile_ahead.CompileAhead.take

    def take(self, name, options):
        got = real(self, name, options)
        taken.append((got is not None, options.inplace))
        return got

    monkeypatch.setattr(compile_ahead.CompileAhead, "take", take)
    timed: list[bool] = []
    real_time = compile_ahead.CompileAhead.take_time

    def take_time(self, name, options, size, *inline):
        got = real_time(self, name, options, size, *inline)
        timed.append(got is not None)
        return got

    monkeypatch.setattr(compile_ahead.CompileAhead, "take_time", take_time)
    files: list[tuple[bool, bool | None]] = []
    real_file = compile_ahead.CompileAhead.take_file

    def take_file(self, name, options, lo, hi):
        got = real_file(self, name, options, lo, hi)
        files.append((got is not None, options.inplace))
        return got

    monkeypatch.setattr(compile_ahead.CompileAhead, "take_file", take_file)
    case = "dgx1-allgather-baseline"
    out = tmp_path / "out"
    try:
        main(["solve", *CASES[case], "--out", str(out)])
    except SystemExit as exc:
        assert not exc.code, exc.code
    assert digests(out) == json.loads(GOLDEN.read_text())[case]
    assert any(made and inplace is not False for made, inplace in taken), \
        "the worker made none of the program model's compiles"
    assert any(made and inplace is False for made, inplace in files), \
        "the worker made none of the out-of-place files"
    assert any(timed), "the worker made none of the program model's timings"
