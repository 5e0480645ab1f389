"""The program model's veto in ``synth solve``: no file is written for a size where the program
model puts it behind NCCL, whichever model ranked the size (synth.select.program_veto)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

import synth.timing.program as program_mod
from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_verified_xml
from synth.select.program_veto import ProgramVeto
from synth.select.ranking import choose_ranges
from synth.select.scorers import lockstep_scorer
from synth.sizes import DEFAULT_SIZES
from synth.solve import solve
from synth.timing.program import cached_times, program_model, remembered_times
from synth.topology_io import load_topology

SIZES = tuple(DEFAULT_SIZES)  # 1 KB .. 1 GB, doubling
IN_PLACE = XmlOptions(inplace=True)
"""What ``synth solve`` ranks for allgather: in-place files, each with its out-of-place twin."""


@pytest.fixture(scope="module")
def h100_allgather():
    topo = load_topology("dgx_h100")
    return topo, solve(topo, make_collective("allgather", 8), sizes=SIZES)


def _behind_nccl(topo, res, ranges) -> list[tuple[str, int]]:
    """(candidate, size) wherever a range's file is not faster than NCCL under the program model."""
    nccl = {p.bytes: p.time_us for p in res.nccl}
    out = []
    for r in ranges:
        if r.candidate is None:
            continue
        for text in (r.text, *((r.oop.text,) if r.oop is not None else ())):
            times = cached_times(text, topo, list(r.sizes), model=program_model(topo, r.proto))
            out += [(r.candidate.name, s) for s, t in zip(r.sizes, times, strict=True)
                    if not t < nccl[s]]
    return out


def test_lockstep_winners_behind_nccl_are_vetoed(h100_allgather):
    """Ranked by lock-step alone, some written files are behind NCCL under the program model; with
    the veto none is, the sizes going to the next configuration or to NCCL, and a note names each
    configuration moved."""
    topo, res = h100_allgather
    plain, _ = choose_ranges(res, IN_PLACE, lockstep_scorer, split=True)
    assert _behind_nccl(topo, res, plain)       # the veto has something to do here
    vetted, notes = choose_ranges(res, IN_PLACE, lockstep_scorer, split=True,
                                  veto=ProgramVeto(topo))
    assert not _behind_nccl(topo, res, vetted)
    assert any(r.candidate is not None and r.oop is not None for r in vetted)  # not all to NCCL
    for r in vetted:    # an out-of-place file carries its program times, not lock-step's
        if r.oop is not None:
            assert list(r.oop.model_us) == cached_times(r.oop.text, topo, list(r.sizes),
                                                        model=program_model(topo, r.proto))
    assert any("not faster than NCCL under the program model" in n for n in notes)
    # every size is still served, by a file or by NCCL, and the ranges tile the byte range
    assert [s for r in vetted for s in r.sizes] == list(SIZES)
    assert all(a.hi + 1 == b.lo for a, b in itertools.pairwise(vetted))


def test_the_veto_is_deterministic(h100_allgather):
    topo, res = h100_allgather
    a, na = choose_ranges(res, IN_PLACE, lockstep_scorer, split=True, veto=ProgramVeto(topo))
    b, nb = choose_ranges(res, IN_PLACE, lockstep_scorer, split=True, veto=ProgramVeto(topo))
    assert [(r.lo, r.hi, r.text) for r in a] == [(r.lo, r.hi, r.text) for r in b] and na == nb


def test_a_lower_bound_at_nccl_vetoes_without_simulating(h100_allgather, monkeypatch):
    """Where the program model's lower bound is already not below NCCL's time the file is vetoed
    with that bound and nothing is simulated; below it the time is the simulated one."""
    topo, res = h100_allgather
    ranges, _ = choose_ranges(res, IN_PLACE, lockstep_scorer)
    r = next(r for r in ranges if r.candidate is not None)
    veto = ProgramVeto(topo)
    sizes = list(SIZES[:3])
    real, none = veto.times(r.text, r.proto, sizes, [math.inf] * 3)
    assert not none and real == cached_times(r.text, topo, sizes,
                                             model=program_model(topo, r.proto))

    def no_simulation(*a, **k):
        raise AssertionError("simulated although the bound vetoes")
    monkeypatch.setattr(program_mod, "program_times_us", no_simulation)
    monkeypatch.setattr(program_mod, "_TIMES", {})
    low, bounds = veto.times(r.text, r.proto, sizes, [0.0] * 3)
    assert bounds == {0, 1, 2} and all(0 < x <= t for x, t in zip(low, real, strict=True))


def test_sizes_the_program_model_ranked_are_not_timed_again(h100_allgather):
    """Where the deciding model ranked a size with the program model, the ranking already holds
    the file's program time, so the veto times only the other sizes (a scorer that claims the
    program model for every size from 4 MB up: no veto there, the lock-step choice stands)."""
    topo, res = h100_allgather
    cut = 4 << 20

    class Partial:
        """Lock-step times, said to be the program model's from ``cut`` up."""

        def __call__(self, candidate):
            return lockstep_scorer(candidate)

        def decided_by(self, nbytes: int) -> str:
            return "program" if nbytes >= cut else "lockstep"

    plain, _ = choose_ranges(res, IN_PLACE, Partial())
    vetted, notes = choose_ranges(res, IN_PLACE, Partial(), veto=ProgramVeto(topo))
    served = {s: (r.candidate.name if r.candidate else None) for r in plain for s in r.sizes}
    after = {s: (r.candidate.name if r.candidate else None) for r in vetted for s in r.sizes}
    assert [s for s in SIZES if after[s] != served[s]]          # some size below the cut moved
    assert all(after[s] == served[s] for s in SIZES if s >= cut)
    behind = _behind_nccl(topo, res, vetted)
    assert behind and all(s >= cut for _, s in behind)   # left as the "program model" ranked
    assert any("budget ran out" in n for n in notes)


def test_a_range_file_is_timed_as_its_unbounded_compile(h100_allgather, monkeypatch):
    """A range's file is its candidate's unbounded compile with byte bounds set; the timing key
    leaves the bounds out, so what the veto finds for the unbounded text (shared by every range
    cut from it) is known for the range's file, and is that file's own time."""
    topo, res = h100_allgather
    ranges, _ = choose_ranges(res, IN_PLACE, lockstep_scorer)
    r = next(r for r in ranges if r.candidate is not None and (r.lo, r.hi) != (0, 0))
    whole = emit_verified_xml(r.candidate.schedule, replace(IN_PLACE, proto=r.proto,
                                                            instances=r.instances))[0]
    assert whole != r.text
    sizes = list(r.sizes)
    monkeypatch.setattr(program_mod, "_TIMES", {})
    via, bounds = ProgramVeto(topo).times(whole, r.proto, sizes, [math.inf] * len(sizes))
    assert not bounds
    model = program_model(topo, r.proto)
    assert remembered_times(r.text, topo, sizes, model=model) == dict(zip(sizes, via,
                                                                          strict=True))
    monkeypatch.setattr(program_mod, "_TIMES", {})
    assert via == cached_times(r.text, topo, sizes, model=model)


def test_a_range_files_program_is_held_so_the_veto_does_not_parse_it(h100_allgather, monkeypatch):
    """A range's file parses to its compile's program with only the bounds changed, sharing its
    ranks (:func:`synth.emit.variants.program_for_sizes`); ``ranged_xml`` holds that program in
    the cache, so the veto's parse of the file finds it after the bound on kept text let it go
    (on dgx_h100 x 64 allgather: a 62 MB file parsed again, 10 s)."""
    from synth.emit import xml_parse
    from synth.select.program_scorer import COMPILED, PARSED
    from synth.select.ranges import Config
    from synth.select.ranking import ranged_xml

    topo, res = h100_allgather
    cand = next(c for c in res.candidates if c.name == "ring")
    cache: dict = {}
    cfg = Config(cand.name, cand.schedule.collective.chunks_per_rank, "Simple", 1)
    text, _ = ranged_xml(cache, cand, IN_PLACE, cfg, 4096, 65536)
    held = [v for k, v in cache.items() if k[-1] == PARSED]
    assert len(held) == 1 and held[0].max_bytes == 65536
    full = xml_parse.parse_program(cache[(cand.name, IN_PLACE, COMPILED)][0], "ring.xml")
    assert held[0].gpus is full.gpus and held[0] == replace(full, min_bytes=4096,
                                                                 max_bytes=65536)
    monkeypatch.setattr(xml_parse, "_PARSED", type(xml_parse._PARSED)())   # the kept text let go
    parsed = []
    check = xml_parse.check_lexical
    monkeypatch.setattr(xml_parse, "check_lexical", lambda *a: parsed.append(a) or check(*a))
    assert xml_parse.parse_program(text, "ring.xml") is held[0]
    ProgramVeto(topo).times(text, "Simple", [8192], [0.0])
    assert not parsed


def test_a_range_file_is_proven_and_its_compile_is_not(h100_allgather, monkeypatch):
    """The file a range writes (its compile with the range's byte bounds) is the one proven; the
    compile itself, written nowhere, is not: one interpreter run per range file, not two. The
    file is the one proving the compile first gave. A range that is the compile's own is the
    compile, proven."""
    from synth.emit import emit_verified_xml, interpreter, xml_parse
    from synth.emit.variants import program_for_sizes
    from synth.select.ranges import Config
    from synth.select.ranking import ranged_xml

    _, res = h100_allgather
    cand = next(c for c in res.candidates if c.name == "ring")
    cfg = Config(cand.name, cand.schedule.collective.chunks_per_rank, "Simple", 1)
    runs: list[int] = []
    real = interpreter.verify_program
    monkeypatch.setattr(interpreter, "verify_program",
                        lambda program, **kw: runs.append(program.max_bytes) or real(program, **kw))
    cache: dict = {}
    text, reports = ranged_xml(cache, cand, IN_PLACE, cfg, 4096, 65536)
    assert runs == [65536] and reports
    assert (cand.name, IN_PLACE) not in cache, "the compile was proven"
    whole, _ = emit_verified_xml(cand.schedule, IN_PLACE)
    expected, _ = program_for_sizes(xml_parse.parse_program(whole, "ring.xml"), cand.schedule,
                                    IN_PLACE, 4096, 65536)
    assert text == expected
    runs.clear()
    own, reports = ranged_xml(cache, cand, IN_PLACE, cfg, IN_PLACE.min_bytes, IN_PLACE.max_bytes)
    assert own == whole and reports and runs == [IN_PLACE.max_bytes]
