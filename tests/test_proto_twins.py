"""LL and LL128 twins (synth.emit.proto_twins): an unbounded file's twin made from the other's
text is byte for byte what compiling it gives."""

from __future__ import annotations

from contextlib import nullcontext as _nothing

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_xml_text
from synth.emit import proto_twins as twins
from synth.errors import SynthError
from synth.solve import solve
from synth.topology_io import load_topology

SIZES = (1024, 1 << 20, 1 << 30)


@pytest.fixture(scope="module")
def schedules():
    out = []
    for topo_name, nodes, kind in (("dgx1", 1, "allgather"), ("dgx_a100", 2, "allreduce"),
                                   ("dgx_h100", 1, "reducescatter")):
        topo = load_topology(topo_name, nodes)
        res = solve(topo, make_collective(kind, topo.num_ranks), encoding="baseline", sizes=SIZES,
                    nccl=False)
        out += [c.schedule for c in res.candidates]
    return out


def _fresh(schedule, options: XmlOptions) -> str:
    twins.forget()
    try:
        return emit_xml_text(schedule, options)
    finally:
        twins.forget()


def test_a_twin_is_its_own_compile(schedules):
    """Both protocols compiled afresh: each text is the other's with the protocol changed, and a
    compile after its twin's is served from the twin (no compile: the same bytes)."""
    checked = 0
    for schedule in schedules:
        for instances, inplace in ((1, None), (2, True), (1, False)):
            ll = XmlOptions(proto="LL", instances=instances, inplace=inplace)
            ll128 = XmlOptions(proto="LL128", instances=instances, inplace=inplace)
            try:
                a = _fresh(schedule, ll)
            except SynthError:
                continue            # a form the compiler refuses: no twin either
            b = _fresh(schedule, ll128)
            assert twins.with_proto(a, "LL", "LL128") == b
            assert twins.with_proto(b, "LL128", "LL") == a
            checked += 1
    assert checked >= 20
    schedule = schedules[0]
    twins.forget()
    try:
        made = emit_xml_text(schedule, XmlOptions(proto="LL128"))
        assert twins.twin_text(schedule, vars_of(XmlOptions(proto="LL"))) is not None
        assert emit_xml_text(schedule, XmlOptions(proto="LL")) == twins.with_proto(
            made, "LL128", "LL")
    finally:
        twins.forget()


def vars_of(options: XmlOptions) -> dict:
    """``options`` as :func:`synth.emit.compile.emit_xml`'s keywords."""
    return dict(profile=options.profile, proto=options.proto, instances=options.instances,
                min_bytes=options.min_bytes, max_bytes=options.max_bytes, inplace=options.inplace,
                max_threadblocks=options.max_threadblocks, gather=options.gather,
                channels=options.channels, aggregate=options.aggregate)


def test_no_twin_where_the_protocol_shapes_the_program(schedules):
    """A size bound sets the chunks a message holds per protocol: no twin; Simple's FIFO is 2
    slots: its file is the twins' only where no progress check found an op blocked."""
    s = schedules[0]
    twins.forget()
    try:
        emit_xml_text(s, XmlOptions(proto="LL", max_bytes=1 << 20))
        assert twins.twin_text(s, vars_of(XmlOptions(proto="LL128", max_bytes=1 << 20))) is None
        emit_xml_text(s, XmlOptions(proto="Simple", max_bytes=1 << 20))
        assert twins.twin_text(s, vars_of(XmlOptions(proto="LL", max_bytes=1 << 20))) is None
        assert not twins.serves_twins(s, vars_of(XmlOptions(proto="Simple", max_bytes=1 << 20)))
        emit_xml_text(s, XmlOptions(proto="Simple"))
        assert (twins.twin_text(s, vars_of(XmlOptions(proto="LL"))) is None) == (
            not twins.serves_twins(s, vars_of(XmlOptions(proto="Simple"))))
        other = schedules[1]        # another schedule's text is never its twin
        emit_xml_text(s, XmlOptions(proto="LL"))
        assert twins.twin_text(other, vars_of(XmlOptions(proto="LL128"))) is None
    finally:
        twins.forget()


def test_with_proto_changes_the_algo_tag_only():
    text = '<algo name="x" proto="LL" nchannels="1">\n  <gpu id="0" proto="LL"/>\n</algo>\n'
    assert twins.with_proto(text, "LL", "LL128") == text.replace('proto="LL" n', 'proto="LL128" n')
    assert twins.with_proto(text, "LL128", "LL") is None
    assert twins.with_proto('<algo proto="LL" proto="LL">', "LL", "LL128") is None


def test_a_twin_parses_to_its_twins_program_with_the_protocol_changed(schedules):
    """What lets the scorer keep the twin's parse (synth.select.program_scorer._twin_in)."""
    from dataclasses import replace

    from synth.emit.xml_parse import parse_program

    for schedule in schedules[:6]:
        text = _fresh(schedule, XmlOptions(proto="LL"))
        twin = twins.with_proto(text, "LL", "LL128")
        assert parse_program(twin, "t.xml") == replace(parse_program(text, "t.xml"), proto="LL128")


def test_a_simple_compile_no_fifo_check_blocked_is_its_ll_twins(schedules):
    """A Simple compile none of whose progress checks found an op blocked serves LL and LL128
    (its text with the protocol changed, or its refusal): each is byte for byte what compiling
    it afresh gives. Compiles some check blocked serve none."""
    shared = refusals = unshared = 0
    for schedule in schedules:
        for instances, inplace, blocks in ((1, None, 64), (2, True, 64), (4, None, 6)):
            simple = XmlOptions(instances=instances, inplace=inplace, max_threadblocks=blocks)
            twins.forget()
            try:
                text, refusal = emit_xml_text(schedule, simple), None
            except SynthError as exc:
                text, refusal = None, exc.message
            kw = vars_of(simple)
            if not twins.serves_twins(schedule, kw):
                unshared += 1
                assert twins.twin_text(schedule, {**kw, "proto": "LL"}) is None
                assert twins.twin_refusal(schedule, {**kw, "proto": "LL"}) is None
                continue
            for proto in ("LL", "LL128"):
                options = XmlOptions(proto=proto, instances=instances, inplace=inplace,
                                     max_threadblocks=blocks)
                twins.forget()
                with pytest.raises(SynthError) if refusal else _nothing():
                    emit_xml_text(schedule, simple)     # the Simple compile kept again
                if refusal is None:
                    assert twins.twin_text(schedule, vars_of(options)) is not None
                    assert emit_xml_text(schedule, options) == twins.with_proto(text, "Simple",
                                                                                proto)
                    assert _fresh(schedule, options) == twins.with_proto(text, "Simple", proto)
                else:
                    assert twins.twin_refusal(schedule, vars_of(options)) == refusal
                    for compile_ in (emit_xml_text, _fresh):
                        with pytest.raises(SynthError) as exc:
                            compile_(schedule, options)
                        assert exc.value.message == refusal
            shared += refusal is None
            refusals += refusal is not None
    twins.forget()
    assert shared >= 20 and refusals >= 3, (shared, refusals, unshared)
