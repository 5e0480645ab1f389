"""solve writes the winner of every size range: files that tile the range, each verified."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions
from synth.emit.interpreter import verify_program
from synth.emit.xml_parse import parse_program
from synth.outputs import write_winners
from synth.select.candidates import Candidate
from synth.select.ranking import choose_ranges
from synth.select.scorers import lockstep_scorer
from synth.solve import solve
from synth.topology_io import load_topology

SIZES = tuple(2 ** k for k in range(10, 31, 2))


@pytest.fixture(scope="module")
def dgx1_allreduce():
    """Baselines on dgx1: recursive doubling / direct win small sizes, rings large ones (NCCL not
    competing: these are synth's own range mechanics; tests/test_nccl_model.py covers NCCL)."""
    topo = load_topology("dgx1")
    return solve(topo, make_collective("allreduce", 8), encoding="baseline", sizes=SIZES,
                 nccl=False)


def _range_attrs(text: str) -> tuple[int, int]:
    m = re.search(r'minBytes="(\d+)" maxBytes="(\d+)"', text)
    assert m
    return int(m.group(1)), int(m.group(2))


def test_ranges_tile_and_every_file_is_the_winner_and_verified(dgx1_allreduce, tmp_path):
    res = dgx1_allreduce
    w = write_winners(res, tmp_path)
    assert len(w.ranges) >= 2
    assert w.ranges[0].lo == 0 and w.ranges[-1].hi == 0
    for a, b in itertools.pairwise(w.ranges):
        assert b.lo == a.hi + 1 and a.candidate.name != b.candidate.name
    for r, f in zip(w.ranges, w.range_files, strict=True):
        text = Path(f).read_text()
        assert _range_attrs(text) == (r.lo, r.hi)
        reports = verify_program(parse_program(text, f, "exec"),
                                 collective=r.candidate.schedule.collective)
        assert {rep.mode for rep in reports} == {"inplace", "outofplace"}
        # the winner is the fastest candidate at every swept size of its range
        for size in r.sizes:
            best = min(res.candidates, key=lambda c: {p.bytes: p.time_us for p in c.costs}[size])
            at = {p.bytes: p.time_us for p in r.candidate.costs}
            assert at[size] == pytest.approx({p.bytes: p.time_us for p in best.costs}[size])
    assert sorted(s for r in w.ranges for s in r.sizes) == list(SIZES)
    # the runtime's folder holds the range files and nothing else; no MSCCL_CONFIG for exec files
    assert sorted(p.name for p in (tmp_path / "msccl").iterdir()) == \
        sorted(Path(f).name for f in w.range_files)
    assert not (tmp_path / "msccl_config.xml").exists()
    table = next(p for p in w.files if p.name.endswith(".ranges.md")).read_text()
    assert all(r.candidate.name in table for r in w.ranges)


def test_legacy_files_are_exclusive_and_indexed_beside_their_folder(dgx1_allreduce, tmp_path):
    """microsoft/msccl reads maxBytes as exclusive and finds its files through MSCCL_CONFIG, which
    sits beside their folder, lists absolute paths, and keeps at most MSCCL_MAX_NUM_ALGOS (4) per
    communicator, saying what it drops."""
    w = write_winners(dgx1_allreduce, tmp_path, XmlOptions(profile="legacy"))
    first = Path(w.range_files[0]).read_text()
    assert _range_attrs(first) == (0, w.ranges[0].hi + 1)
    assert Path(w.range_files[0]).parent == tmp_path / "msccl-legacy"
    index = (tmp_path / "msccl_config.xml").read_text()
    loads = re.findall(r'<load path="([^"]+)" minbytes="(\d+)" maxbytes="(-?\d+)"', index)
    assert 1 <= len(loads) <= 4 and all(Path(p).is_absolute() and Path(p).is_file()
                                        for p, _, _ in loads)
    ranges = {Path(f).name: r for r, f in zip(w.ranges, w.range_files, strict=True)}
    for p, lo, hi in loads:
        r = ranges[Path(p).name]
        assert int(lo) == r.lo and int(hi) == (r.hi + 1 if r.hi else -1)
    assert any(hi == "-1" for _, _, hi in loads)      # the largest sizes are kept first
    assert (len(w.ranges) > 4) == any("MSCCL_MAX_NUM_ALGOS" in n for n in w.notes)


def test_one_size_writes_one_file(tmp_path):
    topo = load_topology("dgx1")
    res = solve(topo, make_collective("allreduce", 8), encoding="baseline", sizes=(2 ** 30,),
                nccl=False)
    w = write_winners(res, tmp_path)
    xml = [p for p in w.files if p.suffix == ".xml"]
    assert len(w.ranges) == 1 and len(xml) == 1 and _range_attrs(xml[0].read_text()) == (0, 0)
    assert not any(p.name.endswith((".msccl_config", ".ranges.md")) for p in w.files)


def test_the_model_is_the_seam(dgx1_allreduce):
    """Another time model (the program model, later) decides the winners through one argument."""
    res = dgx1_allreduce
    ring = next(c for c in res.candidates if c.name == "ring")

    def ring_always(c: Candidate) -> list[float]:
        return [t * (0.001 if c is ring else 1.0) for t in lockstep_scorer(c)]

    ranges, _ = choose_ranges(res, None, ring_always)
    assert [r.candidate.name for r in ranges] == ["ring"]


def test_a_file_the_runtime_never_selects_does_not_win(tmp_path):
    """A candidate whose nchunksperloop does not divide the element count ranks after every one
    that runs there (spec §3.1), and the notes say so."""
    topo = load_topology("dgx1")
    res = solve(topo, make_collective("allgather", 8, 3), encoding="baseline", algorithm="ring",
                chunks=3, sizes=(2 ** 20,), nccl=False)
    res2 = solve(topo, make_collective("allgather", 8), encoding="baseline", algorithm="direct",
                 sizes=(2 ** 20,), nccl=False)
    ring3 = res.candidates[0]
    slow = res2.candidates[0]
    fake = Candidate(ring3.name, ring3.schedule, ring3.report,
                     [type(p)(p.bytes, p.time_us * 1e-3, p.algbw_GBps, p.bound_us, 100.0)
                      for p in ring3.costs])
    res2.candidates = [fake, slow]
    ranges, notes = choose_ranges(res2, XmlOptions())
    assert [r.candidate.name for r in ranges] == [slow.name]
    assert any("nchunksperloop (24)" in n for n in notes)
