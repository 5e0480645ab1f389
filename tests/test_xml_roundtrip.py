"""The compiler's program is what parsing its text gives (:func:`synth.emit.compile.emit_xml_program`):
the program model times that program instead of parsing the text of every form it times
(:func:`synth.select.program_scorer.compiled_program`), so the two must be one value, field for
field and type for type."""

from __future__ import annotations

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions, compile_keywords, compiled_text
from synth.emit import proto_twins as twins
from synth.emit.compile import emit_xml, emit_xml_program
from synth.emit.xml_parse import parse_program
from synth.encodings.baseline.algorithms import ALGORITHMS, baseline, preferred_chunks
from synth.errors import NotApplicable, SynthError
from synth.topology_io import load_topology

FORMS = [dict(proto="Simple", instances=1), dict(proto="LL", instances=2),
         dict(proto="LL128", instances=1, min_bytes=1024, max_bytes=1 << 20),
         dict(proto="Simple", instances=4, inplace=False),
         dict(proto="Simple", instances=1, inplace=True, profile="rccl"),
         dict(proto="LL", instances=2, inplace=False, profile="rccl", max_bytes=65536),
         dict(proto="Simple", instances=2, profile="legacy", inplace=False)]


def _schedules():
    for spec, nodes, kind in (("dgx1", 1, "allgather"), ("dgx_a100", 2, "allreduce"),
                              ("dgx_h100", 1, "reducescatter"), ("dgx1", 1, "alltoall")):
        topo = load_topology(spec, nodes)
        n = topo.num_ranks
        for name in ALGORITHMS:
            try:
                yield baseline(topo, make_collective(kind, n, preferred_chunks(name, kind, n)), name)
            except NotApplicable:
                continue


def test_the_compiled_program_is_the_parse_of_its_text():
    compared = 0
    for schedule in _schedules():
        for form in FORMS:
            options = XmlOptions(**form)
            twins.forget()
            try:
                text, program = emit_xml_program(schedule, **compile_keywords(options))
            except SynthError:
                continue
            if options.profile == "legacy":     # its writer spells the bounds its own way
                assert program is None
                continue
            assert program is not None
            parsed = parse_program(text, "roundtrip.xml", options.profile)
            assert parsed is not program
            # repr: every field, and its type (True is not 1, a list is not a tuple)
            assert repr(parsed) == repr(program), (schedule.algorithm, form)
            assert text == emit_xml(schedule, **compile_keywords(options))
            compared += 1
    twins.forget()
    assert compared >= 40, compared


def test_a_twins_text_comes_without_a_program():
    schedule = next(_schedules())
    ll, ll128 = XmlOptions(proto="LL"), XmlOptions(proto="LL128")
    twins.forget()
    try:
        text, program = compiled_text(schedule, ll)
        assert program is not None
        twin, none = compiled_text(schedule, ll128)   # the LL text with its protocol changed
        assert none is None
        assert twin == text.replace(' proto="LL"', ' proto="LL128"', 1)
    finally:
        twins.forget()


@pytest.mark.parametrize("form", [dict(proto="Simple"), dict(proto="LL", instances=2)])
def test_the_scorer_times_the_compiled_program_as_it_would_the_parsed_one(form):
    from synth.select.program_scorer import COMPILED, ProgramScorer
    from synth.solve import solve
    from synth.timing.program import program_model, program_times_us

    topo = load_topology("dgx1", 1)
    result = solve(topo, make_collective("allgather", topo.num_ranks), encoding="baseline",
                   sizes=(1024, 1 << 20, 1 << 26), nccl=False)
    options = XmlOptions(**form)
    scorer = ProgramScorer(result, topo, options)
    for c in result.candidates:
        program = scorer._program(c, options.proto, options.instances)
        if program is None:
            continue
        text = scorer.compiled[(c.name, options, COMPILED)][0]
        parsed = parse_program(text, f"{c.name}.xml", options.profile)
        assert parsed is not program and repr(parsed) == repr(program)
        model = program_model(topo, options.proto)
        sizes = [1024, 1 << 20, 1 << 26]
        assert program_times_us(program, topo, sizes, model=model) == \
            program_times_us(parsed, topo, sizes, model=model)


def test_a_proof_keeps_the_program_the_scorer_timed():
    """Proving a text the scorer compiled parses it, and where the parse equals the program the
    scorer timed, the parse memo holds that one object (not a copy of a program of tens of MB)."""
    from synth.select.program_scorer import ProgramScorer, compiled_xml
    from synth.solve import solve

    topo = load_topology("dgx1", 1)
    result = solve(topo, make_collective("allgather", topo.num_ranks), encoding="baseline",
                   sizes=(1024, 1 << 20), nccl=False)
    options = XmlOptions()
    scorer = ProgramScorer(result, topo, options)
    c = result.candidates[0]
    timed = scorer._program(c, options.proto, options.instances)
    got = compiled_xml(scorer.compiled, c, options)
    assert isinstance(got, tuple)
    assert parse_program(got[0], f"{c.name}.xml", options.profile) is timed
