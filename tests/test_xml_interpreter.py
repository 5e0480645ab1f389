"""The MSCCL-IR XML reader, linter and interpreter (spec: docs/reference/msccl-xml-spec.md).

(a) every real production file of the corpus loads and passes in every mode it declares;
(b) mutations of corpus files (and of small hand-written programs) are rejected for the right reason;
(c) the runtimes' lexical rules and per-profile attribute requirements are enforced.
"""

from __future__ import annotations

import dataclasses as dc
import time
from functools import cache

import pytest

from synth.collectives import custom_collective, make_collective
from synth.emit.interpreter import (
    declared_modes,
    max_allowed_count,
    run_program,
    verify_file,
    verify_program,
)
from synth.emit.program import Gpu, Instr, Program, Threadblock
from synth.emit.xml_lint import lint_program
from synth.emit.xml_parse import XmlFormatError, parse_program
from synth.errors import SynthError, VerificationError
from tests.conftest import xml_corpus_file, xml_corpus_files

CORPUS_FILES = xml_corpus_files()


def corpus_text(name: str) -> str:
    return xml_corpus_file(name).read_text()


@cache
def corpus_program(name: str, profile: str = "exec") -> Program:
    return parse_program(corpus_text(name), name, profile)


# --------------------------------------------------------------------------------------------------
# helpers: build, mutate and write programs


def step(typ: str, sb: str = "i", so: int = -1, db: str = "o", do: int = -1, cnt: int = 1,
         depid: int = -1, deps: int = -1, hasdep: int = 0) -> Instr:
    return Instr(s=0, type=typ, srcbuf=sb, srcoff=so, dstbuf=db, dstoff=do, cnt=cnt, depid=depid,
                 deps=deps, hasdep=hasdep)


def nop(depid: int, deps: int) -> Instr:
    return step("nop", cnt=0, depid=depid, deps=deps)


def tb(tid: int, send: int, recv: int, *steps: Instr, chan: int = 0) -> Threadblock:
    return Threadblock(id=tid, send=send, recv=recv, chan=chan,
                       steps=tuple(dc.replace(s, s=i) for i, s in enumerate(steps)))


def program(coll: str, n: int, c: int, gpus: list[Gpu], *, proto: str = "LL", inplace: int = 1,
            outofplace: int = 1, max_bytes: int = 1 << 16, nchannels: int = 1) -> Program:
    return Program(name="test", coll=coll, proto=proto, nchannels=nchannels, nchunksperloop=c,
                   ngpus=n, inplace=inplace, outofplace=outofplace, min_bytes=0,
                   max_bytes=max_bytes, gpus=tuple(gpus))


def to_xml(p: Program) -> str:
    """The canonical form the runtimes accept (§12): one tag per line, 2-space indents."""
    out = [f'<algo name="{p.name}" proto="{p.proto}" nchannels="{p.nchannels}" '
           f'nchunksperloop="{p.nchunksperloop}" ngpus="{p.ngpus}" coll="{p.coll}" '
           f'inplace="{p.inplace}" outofplace="{p.outofplace}" minBytes="{p.min_bytes}" '
           f'maxBytes="{p.max_bytes}">']
    for g in p.gpus:
        out.append(f'  <gpu id="{g.id}" i_chunks="{g.i_chunks}" o_chunks="{g.o_chunks}" '
                   f's_chunks="{g.s_chunks}">')
        for t in g.tbs:
            out.append(f'    <tb id="{t.id}" send="{t.send}" recv="{t.recv}" chan="{t.chan}">')
            for s in t.steps:
                out.append(f'      <step s="{s.s}" type="{s.type}" srcbuf="{s.srcbuf}" '
                           f'srcoff="{s.srcoff}" dstbuf="{s.dstbuf}" dstoff="{s.dstoff}" '
                           f'cnt="{s.cnt}" depid="{s.depid}" deps="{s.deps}" hasdep="{s.hasdep}"/>')
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"


def map_tb(p: Program, rank: int, tid: int, fn) -> Program:
    gpus = tuple(dc.replace(g, tbs=tuple(fn(t) if t.id == tid else t for t in g.tbs))
                 if g.id == rank else g for g in p.gpus)
    return dc.replace(p, gpus=gpus)


def set_step(p: Program, rank: int, tid: int, pos: int, **kw) -> Program:
    return map_tb(p, rank, tid, lambda t: dc.replace(
        t, steps=tuple(dc.replace(s, **kw) if i == pos else s for i, s in enumerate(t.steps))))


def renumber(t: Threadblock, steps: list[Instr]) -> Threadblock:
    return dc.replace(t, steps=tuple(dc.replace(s, s=i) for i, s in enumerate(steps)))


def drop_step(p: Program, rank: int, tid: int, pos: int) -> Program:
    return map_tb(p, rank, tid, lambda t: renumber(t, [s for i, s in enumerate(t.steps) if i != pos]))


def swap_steps(p: Program, rank: int | None, tid: int, a: int, b: int) -> Program:
    def fn(t: Threadblock) -> Threadblock:
        st = list(t.steps)
        st[a], st[b] = st[b], st[a]
        return renumber(t, st)
    for r in ([rank] if rank is not None else range(p.ngpus)):
        p = map_tb(p, r, tid, fn)
    return p


def set_gpu(p: Program, rank: int, *extra_tbs: Threadblock, **kw) -> Program:
    """Change ``<gpu id=rank>``'s attributes and append threadblocks to it."""
    gpus = tuple(dc.replace(g, tbs=(*g.tbs, *extra_tbs), **kw) if g.id == rank else g
                 for g in p.gpus)
    return dc.replace(p, gpus=gpus)


def set_tb(p: Program, rank: int, tid: int, **kw) -> Program:
    return map_tb(p, rank, tid, lambda t: dc.replace(t, **kw))


def rejects(p: Program, reason: str, **kw) -> VerificationError:
    with pytest.raises(VerificationError) as ei:
        verify_program(p, **kw)
    assert ei.value.reason == reason, str(ei.value)
    assert ei.value.exit_code == 1
    return ei.value


# --------------------------------------------------------------------------------------------------
# (a) the corpus


def test_corpus_is_complete():
    assert len(CORPUS_FILES) == 32


@pytest.mark.parametrize("name", [p.name for p in CORPUS_FILES])
def test_corpus_file_passes_every_declared_mode(name):
    p = corpus_program(name)
    reports = verify_program(p, profile="exec")
    assert [r.mode for r in reports] == list(declared_modes(p)) != []
    for r in reports:
        assert r.operations > 0 and r.messages > 0 and r.max_fifo_depth <= r.fifo_capacity
    # RCCL uses the same parser with other limits (64 blocks, 128 channels): still loadable
    verify_program(corpus_program(name, "rccl"), profile="rccl")


def test_corpus_modes_and_collectives():
    seen = {}
    for path in CORPUS_FILES:
        p = corpus_program(path.name)
        seen.setdefault((p.coll, declared_modes(p)), []).append(path.name)
    assert set(seen) == {("allgather", ("outofplace",)), ("allgather", ("inplace",)),
                         ("allreduce", ("inplace",)), ("alltoall", ("outofplace",))}


def test_corpus_legacy_profile_and_verify_file():
    name = "ndv4__ap-1pass.xml"
    corpus_text(name)
    p = corpus_program(name, "legacy")
    assert p.outofplace == 0 and p.inplace == 1      # LEGACY derives outofplace from inplace
    verify_program(p, profile="legacy")
    reports = verify_file(xml_corpus_file("ncv4__ag_hier_4_LL.xml"))
    assert [r.mode for r in reports] == ["outofplace"]


def test_maxbytes_sets_message_granularity():
    ap = corpus_program("ndv4__ap4ll.xml")          # LL, maxBytes 266239, 256 chunks
    assert max_allowed_count(ap) == 31
    assert max_allowed_count(dc.replace(ap, max_bytes=0)) == 1          # unbounded
    ag = corpus_program("ndv4__ag-32m-1g.xml")     # Simple ring, 2 messages per FIFO
    verify_program(ag)
    rejects(ag, "deadlock", capacity=1)          # a capacity of 1 wrongly rejects a ring (§5.3)


# --------------------------------------------------------------------------------------------------
# (b) mutations of corpus files

AG = "ncv4__ag_hier_4_LL.xml"        # out-of-place allgather, no dependencies
AR = "ncv4__ar_hier_12_Simple.xml"   # in-place allreduce with cross-block dependencies
AP = "ndv4__ap-1pass.xml"            # all-pairs allreduce: nops, fused re chains, cnt=8 messages
RING = "ndv4__ag-32m-1g.xml"         # in-place ring allgather (rcs chains), Simple protocol

MUTATIONS = [
    # (id, file, mutation, expected reason)
    ("dropped cpy step", AG, lambda p: drop_step(p, 0, 8, 1), "postcondition"),
    ("dropped send step", AG, lambda p: drop_step(p, 0, 8, 0), "unmatched"),
    ("wrong send peer", AG, lambda p: set_tb(p, 0, 8, send=3), "connection"),
    ("wrong count", AG, lambda p: set_step(p, 0, 8, 0, cnt=2), "unmatched"),
    ("write to the send buffer", AG, lambda p: set_step(p, 0, 8, 1, dstbuf="i", dstoff=1),
     "input_write"),
    ("wrong receive offset", AG, lambda p: set_step(p, 1, 0, 0, dstoff=2), "race"),
    ("chan >= nchannels", AG, lambda p: set_tb(p, 0, 3, chan=4), "channel"),
    ("cnt 0", AG, lambda p: set_step(p, 0, 8, 1, cnt=0), "count"),
    ("cnt 72", AG, lambda p: set_step(p, 0, 8, 1, cnt=72), "count"),
    ("duplicate tb id", AG, lambda p: set_tb(p, 2, 5, id=4), "tb_ids"),
    ("s is not the position", AG, lambda p: set_step(p, 0, 8, 1, s=5), "step_position"),
    ("offset past the buffer", AG, lambda p: set_step(p, 0, 8, 1, srcoff=4), "offset"),
    ("missing gpu", AG, lambda p: dc.replace(p, gpus=p.gpus[:3]), "gpu_ids"),
    ("wrong i_chunks", AG, lambda p: set_gpu(p, 0, i_chunks=5), "chunks"),
    ("send from a block without send peer", AG, lambda p: set_tb(p, 1, 8, send=-1), "peer"),
    ("swapped dependency", AR,
     lambda p: set_step(set_step(p, 0, 1, 1, depid=24, deps=2), 0, 1, 0, depid=0, deps=0), "race"),
    ("removed hasdep", AR, lambda p: set_step(p, 0, 0, 0, hasdep=0), "dependency"),
    ("dependency on own block", AR, lambda p: set_step(p, 0, 1, 1, depid=1, deps=0), "dependency"),
    ("depid out of range", AR, lambda p: set_step(p, 0, 1, 1, depid=99, deps=0), "dependency"),
    ("nop without dependency", AP, lambda p: set_step(p, 0, 0, 3, depid=-1, deps=-1), "dependency"),
    ("wrong reduce offset (duplicate)", AP, lambda p: set_step(p, 0, 0, 13, srcoff=0),
     "double_count"),
    ("wrong reduce offset (other chunk)", AP, lambda p: set_step(p, 0, 0, 13, srcoff=1),
     "postcondition"),
    ("re chain with unequal cnt", AP, lambda p: set_step(p, 0, 0, 13, cnt=2), "fusion"),
    ("FIFO capacity (Simple)", AP, lambda p: dc.replace(p, proto="Simple", max_bytes=1 << 30),
     "deadlock"),
    ("reordered sends on one rank", RING, lambda p: swap_steps(p, 0, 0, 0, 1), "postcondition"),
    ("receive before send everywhere", RING, lambda p: swap_steps(p, None, 0, 0, 1), "deadlock"),
    ("read before the chunk arrives", RING, lambda p: set_step(p, 0, 0, 0, srcoff=32),
     "undefined_read"),
]


@pytest.mark.parametrize("label,name,mutate,reason", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_corpus_mutation_is_rejected(label, name, mutate, reason):
    p = corpus_program(name)
    verify_program(p)
    mutated = mutate(p)
    err = rejects(mutated, reason)
    assert err.rank is not None, str(err)
    # the same verdict after writing the program as XML and reading it back
    with pytest.raises(VerificationError) as ei:
        verify_program(parse_program(to_xml(mutated), label))
    assert ei.value.reason == reason


def test_redundant_dependency_is_not_a_race():
    # tb 1 step 1 overwrites i[1] that tb 0 step 0 sent; without its depid it is still ordered after
    # that send through tb 1 step 0's wait on tb 24, which waited on tb 0 step 1.
    p = set_step(corpus_program(AR), 0, 1, 1, depid=-1, deps=-1)
    (report,) = verify_program(p)
    assert report.race_checked_cells > 0 and report.race_dynamic_cells == 0


def test_message_happens_before():
    """Ordering that exists only through messages via another rank counts (§5.5 rule 3)."""
    def allreduce2(rank1_forwards: bool) -> Program:
        if rank1_forwards:      # rank 1 replies with what it received, reduced: caused by rank 0's send
            r1 = (step("rrcs", "i", 0, "i", 0),)
            r0_recv = step("r", "i", 0, "i", 0)
        else:                   # rank 1 sends its own input: independent of rank 0's send
            r1 = (step("s", "i", 0, "i", 0), step("rrc", "i", 0, "i", 0))
            r0_recv = step("rrc", "i", 0, "i", 0)
        return program("allreduce", 2, 1, [
            Gpu(0, 1, 0, 0, (tb(0, 1, -1, step("s", "i", 0, "i", 0)), tb(1, -1, 1, r0_recv))),
            Gpu(1, 1, 0, 0, (tb(0, 0, 0, *r1),))], inplace=1, outofplace=0)
    (report,) = verify_program(allreduce2(True))
    assert report.race_dynamic_cells == 1
    err = rejects(allreduce2(False), "race")
    assert err.rank == 0 and "tb 0 step 0" in str(err)


CORPUS_TEXT_MUTATIONS = [
    # (id, transformation of the file text, rule)
    ("tab before <", lambda t: t.replace("\n    <tb", "\n\t<tb", 1), "A1"),
    ("xml declaration", lambda t: '<?xml version="1.0"?>\n' + t, "A1"),
    ("doctype", lambda t: "<!DOCTYPE algo>\n" + t, "A1"),
    ("first element not algo", lambda t: "<meta/>\n" + t, "A1"),
    ("text content", lambda t: t.replace("</tb>", "x</tb>", 1), "A1"),
    ("attribute on the next line", lambda t: t.replace(' send="', '\n send="', 1), "A2"),
    ("two spaces before an attribute", lambda t: t.replace(' send="', '  send="', 1), "A2"),
    ("tab between attributes", lambda t: t.replace(' send="', '\tsend="', 1), "A1"),
    ("single quotes", lambda t: t.replace('send="-1"', "send='-1'", 1), "A2"),
    ("space around =", lambda t: t.replace('send="', 'send = "', 1), "A2"),
    ("space in end tag", lambda t: t.replace("</tb>", "</tb >", 1), "A2"),
    ("entity in a value", lambda t: t.replace('name="', 'name="a&amp;b', 1), "A2"),
    ("hex integer", lambda t: t.replace('cnt="1"', 'cnt="0x1"', 1), "A4"),
    ("leading zero", lambda t: t.replace('cnt="1"', 'cnt="01"', 1), "A4"),
    ("17 attribute slots", lambda t: t.replace('hasdep="0"/>', 'hasdep="0" a="1" b="2" c="3" '
                                               'd="4" e="5" f="6" g="7"/>', 1), "A3"),
    ("value longer than 255", lambda t: t.replace('name="', 'name="' + "x" * 256, 1), "A3"),
    ("missing maxBytes (exec)", lambda t: t.replace(' maxBytes="792576"', "", 1), "A5"),
    ("missing step attribute", lambda t: t.replace(' deps="-1"', "", 1), "A5"),
    ("unknown proto", lambda t: t.replace('proto="LL"', 'proto="ll"', 1), "B1"),
    ("legacy spelling of a collective", lambda t: t.replace('coll="allgather"',
                                                            'coll="reduce_scatter"', 1), "B1"),
    ("step type ra", lambda t: t.replace('type="cpy"', 'type="ra"', 1), "D2"),
    ("buffer name", lambda t: t.replace('srcbuf="i"', 'srcbuf="x"', 1), "D3"),
    ("hasdep 2", lambda t: t.replace('hasdep="0"', 'hasdep="2"', 1), "D7"),
    ("unclosed element", lambda t: t.replace("</algo>", ""), "A2"),
    ("mismatched end tag", lambda t: t.replace("</tb>", "</gpu>", 1), "A2"),
    ("new <op> format", lambda t: t.replace("<step ", '<op step="0" type="s" buf="i" off="0"/><step ',
                                            1), "A5"),
    ("integer beyond 64 bits", lambda t: t.replace('maxBytes="792576"', f'maxBytes="{1 << 64}"'),
     "A4"),
]


@pytest.mark.parametrize("label,edit,rule", CORPUS_TEXT_MUTATIONS,
                         ids=[m[0] for m in CORPUS_TEXT_MUTATIONS])
def test_corpus_text_mutation_is_rejected(label, edit, rule):
    text = corpus_text(AG)
    parse_program(text, AG)
    bad = edit(text)
    assert bad != text
    with pytest.raises(XmlFormatError) as ei:
        parse_program(bad, AG)
    assert ei.value.rule == rule, str(ei.value)
    assert ei.value.exit_code == 2 and AG in str(ei.value)


def test_error_names_the_line():
    text = corpus_text(AG)
    lines = text.split("\n")
    lines[6] = "\t" + lines[6].lstrip()
    with pytest.raises(XmlFormatError) as ei:
        parse_program("\n".join(lines), "f.xml")
    assert ei.value.line == 7 and str(ei.value).startswith("f.xml:7: [A1]")


# --------------------------------------------------------------------------------------------------
# (c) lexical rules and profiles on small files

TINY = ('<algo name="t" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" '
        'inplace="1" outofplace="0" minBytes="0" maxBytes="65536">\n'
        '  <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">\n'
        '    <tb id="0" send="1" recv="1" chan="0">\n'
        '      <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" '
        'deps="-1" hasdep="0"/>\n'
        '      <step s="1" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" '
        'deps="-1" hasdep="0"/>\n'
        '    </tb>\n'
        '  </gpu>\n'
        '  <gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0">\n'
        '    <tb id="0" send="0" recv="0" chan="0">\n'
        '      <step s="0" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" '
        'deps="-1" hasdep="0"/>\n'
        '      <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" '
        'deps="-1" hasdep="0"/>\n'
        '    </tb>\n'
        '  </gpu>\n'
        '</algo>\n')


def test_tiny_file_verifies_and_tolerated_forms():
    verify_program(parse_program(TINY, "tiny"))
    ok = [
        "<!-- Copyright -->\n<!-- License -->\n" + TINY,       # comments before <algo>
        TINY.replace("\n", "\r\n"),                             # CRLF
        TINY.replace('hasdep="0"/>', 'hasdep="0" />'),          # ElementTree's ' />' (1 phantom slot)
        TINY.replace("</gpu>", "</gpu>\n  <!-- c -->", 1),       # comment between elements
        TINY.replace('  <gpu id="1"', '  <copy a="1"><x/></copy>\n  <gpu id="1"', 1),  # unknown element
    ]
    for text in ok:
        p = parse_program(text, "tiny")
        verify_program(p)
    assert parse_program(ok[4], "t").gpus[1].id == 1


@pytest.mark.parametrize("text,rule", [
    (TINY.replace('hasdep="0"/>', 'hasdep="0" a="1" b="2" c="3" d="4" e="5" f="6"/>', 1), None),
    (TINY.replace('hasdep="0"/>', 'hasdep="0" a="1" b="2" c="3" d="4" e="5" f="6" g="7"/>', 1),
     "A3"),
    (TINY.replace('hasdep="0"/>', 'hasdep="0" a="1" b="2" c="3" d="4" e="5" />', 1), None),
    (TINY.replace('hasdep="0"/>', 'hasdep="0" a="1" b="2" c="3" d="4" e="5" f="6" />', 1), "A3"),
    ("\ufeff" + TINY, "A1"),
    (TINY + "trailing", "A1"),
    (TINY + TINY, "A2"),
    ("<!-- never closed\n" + TINY, "A2"),
    (TINY.replace('<tb id="0" send="1"', '<tb  id="0" send="1"', 1), "A2"),
    (TINY.replace('name="t"', 'name=t', 1), "A2"),
    (TINY.replace('name="t"', 'name="a<b"', 1), "A2"),
    (TINY.replace('cnt="1"', 'cnt="1.0"', 1), "A4"),
    (TINY.replace('cnt="1"', 'cnt=""', 1), "A4"),
    (TINY.replace('cnt="1"', 'cnt="-0"', 1), "A4"),
    (TINY.replace('inplace="1"', 'inplace="2"', 1), "B4"),
    (TINY.replace('coll="allgather"', 'coll="custom"', 1), "B1"),
    (TINY.replace(' outofplace="0"', "", 1), "A5"),
    (TINY.replace(' id="1"', "", 1), "A5"),
])
def test_lexical_rules(text, rule):
    if rule is None:
        parse_program(text, "t")
        return
    with pytest.raises(XmlFormatError) as ei:
        parse_program(text, "t")
    assert ei.value.rule == rule, str(ei.value)


def test_node_budget_and_children_limits():
    many = "".join(f'<step s="{i}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" '
                   f'depid="0" deps="0" hasdep="0"/>\n' for i in range(1000))
    tbs = "".join(f'<tb id="{t}" send="-1" recv="-1" chan="0">\n{many}</tb>\n' for t in range(5))
    text = TINY.replace('  <gpu id="1"', f'  <gpu id="9" i_chunks="0" o_chunks="2" s_chunks="0">\n'
                        f'{tbs}</gpu>\n  <gpu id="1"', 1)
    with pytest.raises(XmlFormatError) as ei:
        parse_program(text, "t")
    assert ei.value.rule == "A3" and "MAX_NODES" in str(ei.value)
    big_tb = f'<tb id="0" send="-1" recv="-1" chan="0">\n{many}' + "".join(
        f'<step s="{i}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" '
        f'depid="0" deps="0" hasdep="0"/>\n' for i in range(1000, 1025)) + "</tb>\n"
    text = TINY.replace('  <gpu id="1"', f'  <gpu id="9" i_chunks="0" o_chunks="2" s_chunks="0">\n'
                        f'{big_tb}</gpu>\n  <gpu id="1"', 1)
    with pytest.raises(XmlFormatError) as ei:
        parse_program(text, "t")
    assert ei.value.rule == "A3" and "MAX_SUBS" in str(ei.value)


def test_profiles():
    rs = TINY.replace('coll="allgather"', 'coll="reducescatter"')
    parse_program(rs, "t", "exec")
    parse_program(rs, "t", "rccl")
    with pytest.raises(XmlFormatError, match="reduce_scatter"):
        parse_program(rs, "t", "legacy")
    legacy = TINY.replace(' outofplace="0" minBytes="0" maxBytes="65536"', "")
    with pytest.raises(XmlFormatError, match="outofplace"):
        parse_program(legacy, "t", "exec")
    p = parse_program(legacy, "t", "legacy")
    assert (p.outofplace, p.min_bytes, p.max_bytes) == (0, 0, 1 << 27)
    verify_program(p, profile="legacy")
    with pytest.raises(XmlFormatError) as ei:
        parse_program(legacy.replace('name="t" ', ""), "t", "legacy")
    assert ei.value.rule == "A5"
    assert parse_program(TINY.replace('name="t" ', ""), "t", "exec").name == ""
    with pytest.raises(XmlFormatError) as ei:
        parse_program(legacy.replace('coll="allgather"', 'coll="allgather" nthreads="100"'), "t",
                      "legacy")
    assert ei.value.rule == "B6"
    extra = parse_program(TINY.replace('maxBytes="65536"', 'maxBytes="65536" redop="sum"'), "t")
    assert extra.extra == (("redop", "sum"),)
    with pytest.raises(SynthError, match="unknown MSCCL runtime profile"):
        parse_program(TINY, "t", "nccl")


def test_profile_limits():
    p = parse_program(TINY, "t")
    # 65 steps in one block: too many for EXEC/RCCL (64), fine for LEGACY (256)
    q = set_gpu(p, 0, tb(1, -1, -1, *[step("cpy", "o", 0, "s", 0)] * 65), s_chunks=1)
    with pytest.raises(VerificationError, match="MSCCL_MAX_NUM_STEPS=64") as ei:
        lint_program(q, "exec")
    assert ei.value.reason == "limit"
    lint_program(q, "legacy")
    # 65 blocks on a rank: too many for RCCL (64), fine for EXEC (1024)
    q = set_gpu(p, 0, *(tb(t, -1, -1, step("cpy", "o", 0, "s", 0)) for t in range(1, 65)),
                s_chunks=1)
    lint_program(q, "exec")
    with pytest.raises(VerificationError, match="MSCCL_MAX_NUM_THREAD_BLOCKS=64"):
        lint_program(q, "rccl")
    # 33 channels: over MAXCHANNELS on NVIDIA (32), fine on RCCL (128)
    q = dc.replace(p, nchannels=33)
    with pytest.raises(VerificationError, match="MAXCHANNELS=32"):
        lint_program(q, "exec")
    lint_program(q, "rccl")
    # depid is an int8
    big = tuple(tb(t, -1, -1, step("cpy", "o", 0, "s", 0, hasdep=1)) for t in range(1, 130))
    waiter = tb(130, -1, -1, step("cpy", "o", 1, "s", 1, depid=128, deps=0))
    q = set_gpu(p, 0, *big, waiter, s_chunks=2)
    with pytest.raises(VerificationError, match="int8"):
        lint_program(q, "exec")
    lint_program(q, None)


# --------------------------------------------------------------------------------------------------
# semantics of the other collectives, on small hand-written programs


def pairwise_allreduce(*, wait_send: bool = True, wait_recv: bool = True) -> Program:
    """2 ranks; per rank: tb0 sends i[0], tb1 receives into s[0], tb2 adds s[0] into i[0]."""
    gpus = []
    for r in range(2):
        waits = [(0, 0)] * wait_send + [(1, 0)] * wait_recv
        re_steps = [nop(*w) for w in waits[:-1]]
        d = waits[-1] if waits else (-1, -1)
        re_steps.append(step("re", "s", 0, "i", 0, depid=d[0], deps=d[1]))
        gpus.append(Gpu(id=r, i_chunks=1, o_chunks=0, s_chunks=1, tbs=(
            tb(0, 1 - r, -1, step("s", "i", 0, "s", 0, hasdep=1)),
            tb(1, -1, 1 - r, step("r", "i", 0, "s", 0, hasdep=1)),
            tb(2, -1, -1, *re_steps))))
    return program("allreduce", 2, 1, gpus, inplace=1, outofplace=0)


def test_dependencies_and_races():
    verify_program(pairwise_allreduce())
    rejects(pairwise_allreduce(wait_send=False), "race")     # re overwrites i[0] while tb0 sends it
    rejects(pairwise_allreduce(wait_recv=False), "undefined_read")
    p = pairwise_allreduce()
    # waiting for a step that never publishes (hasdep=0) hangs: rejected statically
    rejects(set_step(p, 0, 1, 0, hasdep=0), "dependency")
    # the same program read back from XML
    verify_program(parse_program(to_xml(p), "pairs"))


def test_broadcast_reduce_reducescatter_alltoall():
    # broadcast from root 1 on 3 ranks: 1 -> 0 -> 2 (root inferred: the rank that never receives)
    bc = program("broadcast", 3, 2, [
        Gpu(0, 0, 2, 0, (tb(0, 2, 1, step("rcs", "o", 0, "o", 0, cnt=2)),)),
        Gpu(1, 2, 2, 0, (tb(0, 0, -1, step("s", "i", 0, "o", 0, cnt=2),
                            step("cpy", "i", 0, "o", 0, cnt=2)),)),
        Gpu(2, 0, 2, 0, (tb(0, -1, 0, step("r", "o", 0, "o", 0, cnt=2)),)),
    ])
    reports = verify_program(bc)
    assert [r.collective for r in reports] == ["broadcast(root=1)"] * 2
    verify_program(bc, collective=make_collective("broadcast", 3, 2, root=1))
    with pytest.raises(VerificationError) as ei:
        verify_program(bc, collective=make_collective("broadcast", 3, 2, root=0))
    assert ei.value.reason == "undefined_read"      # rank 0 has no input in a broadcast from 1

    # reduce to root 0 on 3 ranks: 2 -> 1 (rrs, nothing stored) -> 0 (rrc into o)
    red = program("reduce", 3, 1, [
        Gpu(0, 1, 1, 0, (tb(0, -1, 1, step("rrc", "i", 0, "o", 0)),)),
        Gpu(1, 1, 1, 0, (tb(0, 0, 2, step("rrs", "i", 0, "o", 0)),)),
        Gpu(2, 1, 1, 0, (tb(0, 1, -1, step("s", "i", 0, "i", 0)),)),
    ])
    assert [r.collective for r in verify_program(red)] == ["reduce(root=0)"] * 2
    bad = set_step(red, 1, 0, 0, type="rrcs")       # a non-root rank writes its output
    rejects(bad, "output_write", modes=("outofplace",))
    verify_program(bad, modes=("inplace",))
    rejects(set_step(red, 2, 0, 0, type="s", srcbuf="o"), "undefined_read", modes=("outofplace",))

    # reduce-scatter on 2 ranks, valid in place (o[0] is i[r]) and out of place
    def rs(dst_of: dict[int, tuple[str, int]]) -> Program:
        return program("reducescatter", 2, 2, [
            Gpu(r, 2, 1, 0, (tb(0, 1 - r, 1 - r, step("s", "i", 1 - r, "o", 0),
                                step("rrc", "i", r, *dst_of[r])),)) for r in range(2)])
    verify_program(rs({0: ("o", 0), 1: ("o", 0)}))
    verify_program(rs({0: ("i", 0), 1: ("i", 1)}), modes=("inplace",))   # TOOLS' in-place form
    rejects(rs({0: ("i", 0), 1: ("i", 1)}), "input_write", modes=("outofplace",))
    rejects(rs({0: ("i", 1), 1: ("i", 0)}), "input_write", modes=("inplace",))

    # alltoall on 2 ranks: correct in both modes (the own block is copied; identical in place)
    a2a = program("alltoall", 2, 2, [
        Gpu(r, 2, 2, 0, (tb(0, 1 - r, 1 - r, step("s", "i", 1 - r, "o", r),
                            step("r", "i", 1 - r, "o", 1 - r), step("cpy", "i", r, "o", r)),))
        for r in range(2)])
    assert [r.mode for r in verify_program(a2a)] == ["inplace", "outofplace"]
    rejects(set_step(a2a, 0, 0, 2, srcoff=1), "postcondition", modes=("outofplace",))
    # receiving before sending in place overwrites the chunk still to be sent
    swapped = swap_steps(a2a, 0, 0, 0, 1)
    rejects(swapped, "postcondition", modes=("inplace",))
    verify_program(swapped, modes=("outofplace",))
    rejects(swap_steps(a2a, None, 0, 0, 1), "deadlock")    # both ranks receive first


def test_fifo_capacity_depends_on_max_bytes():
    def exchange(max_bytes: int) -> Program:
        return program("alltoall", 2, 8, [
            Gpu(r, 8, 8, 0, (tb(0, 1 - r, 1 - r, step("s", "i", 4 * (1 - r), "o", 4 * r, cnt=4),
                                step("r", "i", 4 * (1 - r), "o", 4 * (1 - r), cnt=4),
                                step("cpy", "i", 4 * r, "o", 4 * r, cnt=4)),))
            for r in range(2)], proto="Simple", inplace=0, max_bytes=max_bytes)
    small = exchange(1 << 20)          # M = 16: one message per step
    assert max_allowed_count(small) == 16
    verify_program(small)
    err = rejects(exchange(0), "deadlock")   # unbounded: M = 1, 4 messages > 2 slots each way
    assert "waits for space in the FIFO" in str(err)


def test_overlap_and_fusion_rules():
    p = pairwise_allreduce()
    rejects(set_step(p, 0, 2, 1, srcbuf="i", srcoff=0, dstoff=0, type="re"), "double_count")
    base = dc.replace(p, gpus=tuple(dc.replace(g, s_chunks=3) for g in p.gpus))
    local = tb(3, -1, -1, step("cpy", "s", 1, "s", 2, cnt=2))   # partial overlap s[1..3) -> s[2..4)
    bad = set_gpu(base, 0, local, s_chunks=4)
    rejects(bad, "overlap")
    chain = [step("re", "s", 0, "i", 0)] * 17
    long_chain = map_tb(base, 0, 2, lambda t: renumber(t, list(t.steps) + chain))
    rejects(long_chain, "fusion")


def test_custom_collective_and_errors():
    p = pairwise_allreduce()
    spec = {"name": "sum2", "ranks": 2, "chunks": 1, "combining": True, "pre": {0: [0, 1]},
            "post": {0: [0, 1]}}
    (report,) = verify_program(dc.replace(p, coll="custom"), collective=custom_collective(spec, "t"),
                               profile="legacy")
    assert report.collective == "sum2"
    with pytest.raises(SynthError, match="nchunksperloop"):
        run_program(p, collective=make_collective("allreduce", 2, 1))
    with pytest.raises(SynthError, match="ranks"):
        run_program(p, collective=make_collective("allreduce", 3, 1))
    with pytest.raises(SynthError, match="unknown mode"):
        run_program(p, mode="sideways")
    with pytest.raises(VerificationError) as ei:
        verify_program(p, modes=("outofplace",))
    assert ei.value.reason == "header"
    with pytest.raises(SynthError, match="postcondition"):
        run_program(dc.replace(p, coll="custom"))


def ring_allgather(n: int, k: int = 2) -> Program:
    """In-place ring allgather: one block per rank, n*k chunks, n*k steps per block."""
    gpus = []
    for r in range(n):
        steps = [step("s", "o", r * k + j, "o", r * k + j) for j in range(k)]
        for h in range(1, n):
            q = (r - h) % n
            typ = "rcs" if h < n - 1 else "r"
            steps.extend(step(typ, "o", q * k + j, "o", q * k + j) for j in range(k))
        gpus.append(Gpu(r, 0, n * k, 0, (tb(0, (r + 1) % n, (r - 1) % n, *steps),)))
    return program("allgather", n, n * k, gpus, inplace=1, outofplace=0, max_bytes=1 << 20)


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_large_ring_is_fast():
    p = ring_allgather(512, 2)          # 512 ranks x 1024 steps
    t0 = time.perf_counter()
    report = run_program(p, mode="inplace")
    assert report.operations == 512 * 1024 and report.max_fifo_depth <= 8
    assert time.perf_counter() - t0 < 60
    small = ring_allgather(16, 2)
    verify_program(parse_program(to_xml(small), "ring16"))
    rejects(dc.replace(small, proto="Simple"), "deadlock")   # 2 sends up front fill 2 slots


def test_declared_chunk_counts_beyond_int16_offsets_are_refused():
    """A huge s_chunks (or i/o) would make the interpreter hold a cell per chunk (99,999,999:
    1.8 GB; a fuzz example once took 22 GB): no step can address past offset 32767 anyway."""
    from pathlib import Path

    from synth.emit.xml_parse import parse_program
    from synth.errors import SynthError

    text = (Path(__file__).parent / "data" / "msccl_ndv5" / "ndv5__ag-1m.xml").read_text()
    bad = text.replace('s_chunks="0"', 's_chunks="99999999"', 1)
    assert bad != text
    with pytest.raises(SynthError, match="s_chunks=99999999 is above 32768"):
        parse_program(bad, "x.xml", "exec")
    parse_program(text.replace('s_chunks="0"', 's_chunks="32768"', 1), "x.xml", "exec")


def test_a_huge_threadblock_id_is_refused_without_building_its_range():
    """A fuzzed tb id of 10**9 once made the id check build a billion-element set (OOM)."""
    import re
    from pathlib import Path

    from synth.emit.xml_parse import parse_program
    from synth.errors import SynthError

    text = (Path(__file__).parent / "data" / "msccl_ndv5" / "ndv5__ag-1m.xml").read_text()
    bad = re.sub(r'<tb id="\d+"', '<tb id="1000000000"', text, count=1)
    with pytest.raises(SynthError, match="out of range \\[1000000000\\]"):
        from synth.emit.interpreter import verify_program
        verify_program(parse_program(bad, "x.xml", "exec"), profile="exec")


def test_a_cell_with_many_readers_is_still_checked_statically():
    """An in-place allgather's own chunk is read by a send block per peer (70 on dgx_h100 x 64):
    only the (write, access) pairs are checked, so such a cell needs no vector clocks, whose
    memory grows with blocks x blocks (14 GB there); an unordered reader still fails the check."""
    import numpy as np

    from synth.emit.interpreter import _Machine

    readers = 70
    order = [np.full((1, readers + 1), -1, dtype=np.int32) for _ in range(readers + 1)]
    for b in range(1, readers + 1):
        order[b][0][0] = 0          # the write (block 0, op 0) precedes every read
    acc = {(0, 0): True, **{(b, 0): False for b in range(1, readers + 1)}}
    assert _Machine._statically_ordered(acc, order, 0)
    order[37][0][0] = -1
    assert not _Machine._statically_ordered(acc, order, 0)
    assert not _Machine._statically_ordered({**acc, **{(b, 0): True for b in range(1, 70)}},
                                            order, 0)     # too many pairs: left to the run
