"""The compiler's ``gather``, ``channels`` and ``aggregate`` options, and the one_pass baseline.

Every program here goes through the interpreter (``emit_verified_program``: every declared mode,
message agreement); the structure checks then pin what each option is for: gathered reductions
are one multi-source ``re`` per chunk that the runtime folds (no dependency inside a run, at most
16 sources), anchored to different blocks; a channel spread gives each channel's blocks a share of
the chunks; a bounded file is weighed by its messages.
"""

from __future__ import annotations

import pytest

from synth.builders import fully_connected, ring, switch
from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_verified_program
from synth.emit.compile import compile_schedule
from synth.emit.interpreter import fold_block
from synth.emit.passes import MAX_REDUCE_FUSION
from synth.encodings.baseline import baseline
from synth.errors import NotApplicable, SynthError
from synth.timing.program import program_time
from synth.topology_io import load_topology
from synth.verify import verify

RE = 7      # the interpreter's code for a (folded) local reduce


def _folded_reduces(program) -> list[tuple]:
    """Every folded ``re`` operation of the program (the runtime's view)."""
    out = []
    for g in program.gpus:
        for tb in g.tbs:
            out += [op for op in fold_block(tb, {"i": 0, "o": 0, "s": 0}, 1) if op[0] == RE]
    return out


# ------------------------------------------------------------------------------------ one_pass
@pytest.mark.parametrize("topo", [switch(2), switch(5), fully_connected(4), switch(8),
                                  load_topology("dgx_h100"), load_topology("mi300x")],
                         ids=lambda t: t.name)
@pytest.mark.parametrize("k", [1, 2])
def test_one_pass_verifies(topo, k):
    n = topo.num_ranks
    s = baseline(topo, make_collective("allreduce", n, k), "one_pass")
    verify(s, topo)
    assert s.num_steps == 1 and s.num_transfers == n * (n - 1) * n * k


def test_one_pass_needs_every_pair_adjacent():
    with pytest.raises(NotApplicable, match=r"^one_pass reduces from rank 0 to rank 2"):
        baseline(ring(5), make_collective("allreduce", 5), "one_pass")
    with pytest.raises(NotApplicable, match=r"one_pass .*over its cap"):
        baseline(switch(104), make_collective("allreduce", 104), "one_pass")
    with pytest.raises(NotApplicable, match="does not implement allgather"):
        baseline(switch(4), make_collective("allgather", 4), "one_pass")


# ------------------------------------------------------------------------------------- gather
@pytest.mark.parametrize(("topo", "algo", "k"), [
    (switch(3), "one_pass", 1), (switch(5), "one_pass", 2), (load_topology("dgx_h100"), "one_pass", 1),
    (switch(4), "direct", 3), (load_topology("dgx_h100"), "direct", 8), (fully_connected(6), "direct", 1),
], ids=lambda x: getattr(x, "name", str(x)))
@pytest.mark.parametrize("inplace", [None, True, False])
@pytest.mark.parametrize("instances", [1, 3])
def test_gathered_reductions_verify_and_fold(topo, algo, k, inplace, instances):
    n = topo.num_ranks
    s = baseline(topo, make_collective("allreduce", n, k), algo)
    _, program, reports = emit_verified_program(s, XmlOptions(proto="LL", instances=instances,
                                                              inplace=inplace, gather=True))
    assert reports
    folded = _folded_reduces(program)
    # every reduced chunk of every rank: one fold of the n - 2 writers beyond the first
    assert folded and all(len(op[3]) == n - 2 for op in folded if n > 2)
    assert all(len(op[3]) <= MAX_REDUCE_FUSION for op in folded)
    for g in program.gpus:            # a run's continuation steps carry no dependency (spec §5.4)
        for tb in g.tbs:
            for prev, st in zip(tb.steps, tb.steps[1:], strict=False):
                if st.type == "re" and prev.type == "re" and prev.dstoff == st.dstoff:
                    assert st.depid == -1 and prev.hasdep == 0
    if n > 3 and algo == "one_pass":  # the reductions of a rank's chunks run in several blocks
        blocks = {tb.id for tb in program.gpus[0].tbs for st in tb.steps if st.type == "re"}
        assert len(blocks) > 1


def test_gather_is_faster_where_receives_were_serialized():
    """ap4ll's shape: direct allreduce, 8 chunks a shard, LL x4 on 8 x H100 at 256 KB."""
    topo = load_topology("dgx_h100")
    s = baseline(topo, make_collective("allreduce", 8, 8), "direct")
    times = {}
    for gather in (False, True):
        _, p, _ = emit_verified_program(s, XmlOptions(proto="LL", instances=4, inplace=True,
                                                      gather=gather))
        times[gather] = program_time(p, topo, 256 * 1024).time_us
    assert times[True] < 0.95 * times[False]


def test_too_many_writers_keep_the_receive_reduce_chain():
    topo = switch(19)   # 18 writers a chunk: more sources than one re run may fold
    s = baseline(topo, make_collective("allreduce", 19), "one_pass")
    program = compile_schedule(s, proto="LL", inplace=True, gather=True)
    assert not any(st.type == "re" for g in program.gpus for tb in g.tbs for st in tb.steps)


def test_gather_changes_nothing_without_several_writers():
    topo = load_topology("dgx_h100")
    s = baseline(topo, make_collective("allreduce", 8), "ring")
    assert compile_schedule(s, gather=True) == compile_schedule(s)


# ----------------------------------------------------------------------------------- channels
def test_channel_spread_gives_each_chunk_of_a_ring_its_own_channel():
    topo = load_topology("dgx_h100")
    s = baseline(topo, make_collective("allreduce", 8), "ring")
    _, p, _ = emit_verified_program(s, XmlOptions(proto="LL128", instances=4, channels=8,
                                                  inplace=True))
    assert p.nchannels == 32
    assert max(len(tb.steps) for g in p.gpus for tb in g.tbs) == 2      # 15 on one channel
    _, one, _ = emit_verified_program(s, XmlOptions(proto="LL128", instances=4, inplace=True))
    assert max(len(tb.steps) for g in one.gpus for tb in g.tbs) == 15
    t_spread = program_time(p, topo, 16 << 20).time_us
    assert t_spread < 0.95 * program_time(one, topo, 16 << 20).time_us


def test_channels_beyond_the_runtime_are_refused():
    topo = load_topology("dgx_h100")
    s = baseline(topo, make_collective("allreduce", 8), "ring")
    with pytest.raises(SynthError, match="channels=8 x instances=8 needs 64 channels"):
        compile_schedule(s, instances=8, channels=8)
    with pytest.raises(SynthError, match="channels must be a non-negative integer"):
        compile_schedule(s, channels=-1)


# ---------------------------------------------------------------------------------- aggregate
def test_both_forms_verify_and_a_bounded_file_is_weighed_by_its_messages():
    topo = load_topology("dgx_h100")
    s = baseline(topo, make_collective("allreduce", 8, 8), "direct")
    forms = {}
    for agg in (True, False):
        _, p, _ = emit_verified_program(s, XmlOptions(proto="Simple", aggregate=agg,
                                                      inplace=True, max_bytes=4096))
        forms[agg] = p
    assert forms[True] != forms[False]
    bundled = max(st.cnt for g in forms[True].gpus for tb in g.tbs for st in tb.steps)
    assert bundled > 1 and max(st.cnt for g in forms[False].gpus for tb in g.tbs
                               for st in tb.steps) == 1
    # the compiler's own choice for a file of at most 4 KB is the one with fewer messages
    chosen = compile_schedule(s, proto="Simple", inplace=True, max_bytes=4096)
    assert chosen == forms[True]
    assert program_time(forms[True], topo, 4096).time_us < \
        program_time(forms[False], topo, 4096).time_us


@pytest.mark.parametrize(("kind", "root"), [("reducescatter", None), ("reduce", 2)])
@pytest.mark.parametrize("inplace", [None, True, False])
def test_gathered_reductions_of_the_other_reducing_collectives(kind, root, inplace):
    topo = switch(5)
    s = baseline(topo, make_collective(kind, 5, 2, root), "direct")
    _, program, reports = emit_verified_program(s, XmlOptions(instances=2, inplace=inplace,
                                                              gather=True))
    assert reports and all(len(op[3]) == 3 for op in _folded_reduces(program))


@pytest.mark.parametrize("profile", ["legacy", "rccl"])
def test_gathered_reductions_in_the_other_runtimes(profile):
    topo = switch(4)
    s = baseline(topo, make_collective("allreduce", 4, 2), "direct")
    _, program, reports = emit_verified_program(s, XmlOptions(profile=profile, gather=True))
    assert reports and _folded_reduces(program)
