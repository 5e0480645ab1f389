"""The compiler fits a schedule into the runtime's limits, or says which limit and by how much."""

from __future__ import annotations

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_verified_xml
from synth.emit.compile import DEFAULT_MAX_THREADBLOCKS, compile_schedule
from synth.emit.runtimes import MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL as MAX_TBS_PER_CHANNEL
from synth.encodings import Options, run_encoding
from synth.errors import SynthError
from synth.topology_io import load_topology


@pytest.fixture(scope="module")
def direct40():
    """All-pairs allgather on 40 ranks: 39 send and 39 receive peers per rank."""
    topo = load_topology("switch:40")
    found = run_encoding("baseline", topo, make_collective("allgather", 40),
                         Options(algorithm="direct"))
    return found["direct"]


def test_more_peers_than_a_channel_holds_spread_and_share_blocks(direct40):
    prog = compile_schedule(direct40)
    for g in prog.gpus:
        assert len(g.tbs) <= DEFAULT_MAX_THREADBLOCKS
        for chan in range(prog.nchannels):
            assert sum(1 for tb in g.tbs if tb.chan == chan and tb.send >= 0) <= MAX_TBS_PER_CHANNEL
            assert sum(1 for tb in g.tbs if tb.chan == chan and tb.recv >= 0) <= MAX_TBS_PER_CHANNEL
        # every peer still has exactly one send side and one receive side
        assert sorted(tb.send for tb in g.tbs if tb.send >= 0) == sorted(set(range(40)) - {g.id})
        assert sorted(tb.recv for tb in g.tbs if tb.recv >= 0) == sorted(set(range(40)) - {g.id})
    _, reports = emit_verified_xml(direct40, XmlOptions())
    assert {r.mode for r in reports} == {"inplace", "outofplace"}


def test_blocks_are_shared_only_past_the_budget(direct40):
    roomy = compile_schedule(direct40, max_threadblocks=200)
    assert max(len(g.tbs) for g in roomy.gpus) == 78     # one block per peer and side
    tight = compile_schedule(direct40, max_threadblocks=50)
    assert max(len(g.tbs) for g in tight.gpus) == 50


def test_over_the_budget_names_the_count_and_the_excess(direct40):
    with pytest.raises(SynthError) as exc:
        compile_schedule(direct40, max_threadblocks=20)
    assert "threadblocks per rank is 39" in exc.value.message and "is 20: 19 over" in exc.value.message


@pytest.fixture(scope="module")
def trees_trn1():
    """Tree packing on trn1_32 with 8 pieces per root: sides of very different lengths (the
    chip-local link carries about half of every rank's traffic)."""
    topo = load_topology("trn1_32")
    found = run_encoding("trees", topo, make_collective("allgather", 32),
                         Options(chunks=8, extra={"small_size": 0}))
    return found["trees"]


def test_an_over_budget_program_is_placed_per_connection(trees_trn1, monkeypatch):
    from synth.emit import compile as C

    prog = compile_schedule(trees_trn1, max_threadblocks=16)
    for g in prog.gpus:
        assert len(g.tbs) <= 16
        assert not any(s.type in ("rcs", "rrs", "rrcs") for tb in g.tbs for s in tb.steps)
    _, reports = emit_verified_xml(trees_trn1, XmlOptions(max_threadblocks=16))
    assert {r.mode for r in reports} == {"inplace", "outofplace"}
    # the default placement alone does not fit: the fallback is what makes the budget
    monkeypatch.setattr(C, "_place_connections", lambda *a, **k: None)
    with pytest.raises(SynthError, match="budget"):
        compile_schedule(trees_trn1, max_threadblocks=16)
    # within the budget the fused program is kept
    assert any(s.type == "rcs" for g in compile_schedule(trees_trn1).gpus for tb in g.tbs
               for s in tb.steps)


def _unfused_ir(schedule):
    from synth.emit import compile as C
    from synth.emit import passes as P

    dag = P.lower(schedule, C._mode(schedule, "exec", None))
    P.fuse(dag, False)
    return C._ordered(dag, P.aggregate(dag, True), 1, True)


def test_a_connection_on_several_blocks_deals_its_ops_in_turn(trees_trn1):
    """Every block of a connection has work all through the schedule (not one contiguous run
    each, which leaves one block copying at a time), and spare blocks of a budget go to the
    connections with the most ops per block."""
    from synth.emit import passes as P

    ir = _unfused_ir(trees_trn1)
    cap = 8
    fewest = P.allocate_connections(ir, cap, 64, MAX_TBS_PER_CHANNEL)
    minimal = max(len(row) for row in fewest)
    conns: dict[tuple[int, int], list[int]] = {}
    for op in ir.ordered:
        if op.sendp >= 0:
            conns.setdefault((op.rank, op.sendp), []).append(op.chan)
    for chans in conns.values():
        runs = len(set(chans))
        assert runs == -(-len(chans) // cap)
        assert chans == [chans[i % runs] for i in range(len(chans))]    # round robin
    wide = P.allocate_connections(ir, cap, 64, MAX_TBS_PER_CHANNEL, budget=minimal + 8)
    blocks = [len(row) for row in wide]
    assert minimal < max(blocks) <= minimal + 8
    spread: dict[tuple[int, int], int] = {}
    for op in ir.ordered:
        if op.sendp >= 0:
            spread.setdefault((op.rank, op.sendp), set()).add(op.chan)
    busiest = max(conns, key=lambda c: (len(conns[c]), c))
    assert len(spread[busiest]) > len(set(conns[busiest]))


def test_the_fallback_uses_the_budget_it_is_given(trees_trn1):
    prog = compile_schedule(trees_trn1, max_threadblocks=18)    # the fused program needs 20
    assert not any(s.type in ("rcs", "rrs", "rrcs") for g in prog.gpus for tb in g.tbs
                   for s in tb.steps)
    assert max(len(g.tbs) for g in prog.gpus) <= 18
    assert max(len(g.tbs) for g in prog.gpus) > max(
        len(g.tbs) for g in compile_schedule(trees_trn1, max_threadblocks=16).gpus)
    _, reports = emit_verified_xml(trees_trn1, XmlOptions(max_threadblocks=18))
    assert {r.mode for r in reports} == {"inplace", "outofplace"}


def test_the_any_order_progress_check_passes_shared_blocks_and_finds_a_cycle():
    """Two ranks exchange their chunks with a block each that sends and receives: the order
    send-then-receive runs, receive-then-send on both sides waits forever."""
    from synth.emit import passes as P

    topo = load_topology("switch:2")
    sched = run_encoding("baseline", topo, make_collective("allgather", 2),
                         Options(algorithm="direct"))["direct"]
    ir = _unfused_ir(sched)
    per_rank = P.allocate_connections(ir, 8, 4)
    assert P.pack(per_rank, 64, 1) == 2 and all(len(row) == 1 for row in per_rank)
    assert P.progress_any_order(ir, 1, 2) == []
    for row in per_rank:
        tb = row[0]
        assert [op.typ for op in tb.ops if op.typ != "cpy"] == ["s", "r"]
        i, j = (k for k, op in enumerate(tb.ops) if op.typ != "cpy")
        tb.ops[i], tb.ops[j] = tb.ops[j], tb.ops[i]
    stuck = P.progress_any_order(ir, 1, 2)
    assert sorted((op.rank, op.typ) for op in stuck) == [(0, "r"), (1, "r")]
