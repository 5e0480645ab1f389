"""The Schedule -> MSCCL-IR compiler (synth.emit.compile, passes, xml_write).

Every emitted file is checked by the project's independent XML interpreter (parse as the runtime
tokenizer does, lint, execute in each declared mode with FIFO capacity and races, postcondition).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import builders
from synth.collectives import Collective, make_collective
from synth.emit.compile import compile_schedule, compile_stats, emit_xml
from synth.emit.interpreter import verify_program
from synth.emit.program import Program
from synth.emit.xml_parse import parse_program
from synth.emit.xml_write import program_to_xml
from synth.encodings.baseline.algorithms import ALGORITHMS, baseline, preferred_chunks
from synth.errors import NotApplicable, SynthError
from synth.schedule import Schedule, Step, Transfer
from synth.topology_io import load_topology
from synth.verify import verify

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
TOPOLOGIES = {"dgx1": ("dgx1", 1), "dgx_a100x2": ("dgx_a100", 2), "trn1_32": ("trn1_32", 1)}
_TOPO_CACHE: dict[str, object] = {}


def topo(name: str):
    if name not in _TOPO_CACHE:
        spec, nodes = TOPOLOGIES[name]
        _TOPO_CACHE[name] = load_topology(spec, nodes=nodes)
    return _TOPO_CACHE[name]


def baselines(topology, kind: str) -> dict[str, Schedule]:
    """Every baseline that applies, each with the chunk count it prefers."""
    out = {}
    n = topology.num_ranks
    for name in ALGORITHMS:
        coll = make_collective(kind, n, preferred_chunks(name, kind, n))
        try:
            out[name] = baseline(topology, coll, name)
        except NotApplicable:
            continue
    return out


def check(program: Program, profile: str = "exec", collective: Collective | None = None) -> list[str]:
    """Round-trip through the XML text and the interpreter; returns the modes that ran.

    The interpreter derives the postcondition from the file; broadcast/reduce files carry no root,
    so schedules whose root also sends (receives) pass ``collective`` to name it.
    """
    text = program_to_xml(program, profile)
    parsed = parse_program(text, "compiled.xml", profile)
    return [rep.mode for rep in verify_program(parsed, profile=profile, collective=collective)]


# ------------------------------------------------------------------------------ baselines

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("topo_name", [pytest.param(n, marks=pytest.mark.slow) if n == "trn1_32" else n
                                       for n in TOPOLOGIES])
def test_every_baseline_compiles_and_runs(topo_name: str, kind: str) -> None:
    t = topo(topo_name)
    found = baselines(t, kind)
    assert found, f"no baseline for {kind} on {topo_name}"
    for name, sch in found.items():
        both = compile_schedule(sch)          # one file for both call kinds where possible
        expect = ["outofplace"] if kind == "alltoall" else ["inplace", "outofplace"]
        assert check(both) == expect, name
        assert check(compile_schedule(sch, inplace=True)) == ["inplace"], name
        assert check(compile_schedule(sch, inplace=False)) == ["outofplace"], name


@pytest.mark.parametrize(("kind", "alg"), [("allreduce", "ring"), ("allgather", "direct"),
                                           ("reducescatter", "recursive_halving"),
                                           ("alltoall", "bidir_ring"), ("broadcast", "binomial_tree")])
def test_profiles_protocols_instances(kind: str, alg: str) -> None:
    sch = baseline(topo("dgx1"), make_collective(kind, 8, 2), alg)
    for kw in (dict(profile="legacy"), dict(profile="rccl", proto="LL128"),
               dict(proto="LL", max_bytes=1 << 20), dict(instances=2), dict(instances=3, proto="LL")):
        prog = compile_schedule(sch, **kw)
        assert check(prog, kw.get("profile", "exec")), kw
    prog = compile_schedule(sch, instances=2)
    base = compile_schedule(sch)
    assert prog.nchunksperloop == 2 * base.nchunksperloop
    assert prog.nchannels == 2 * base.nchannels


def test_rooted_collectives_keep_their_root() -> None:
    t = topo("dgx1")
    for kind in ("broadcast", "reduce"):
        sch = baseline(t, make_collective(kind, 8, 2, root=5), "tree")
        prog = compile_schedule(sch, inplace=False)
        check(prog)
        if kind == "broadcast":      # only the root reads its input
            assert [g.i_chunks for g in prog.gpus] == [2 if g.id == 5 else 0 for g in prog.gpus]
        else:                        # only the root writes its output
            assert [g.o_chunks for g in prog.gpus] == [2 if g.id == 5 else 0 for g in prog.gpus]


# ------------------------------------------------------------------------------ the passes

@pytest.mark.parametrize(("kind", "alg", "kw"), [
    ("allgather", "ring", {}), ("allreduce", "ring", {"instances": 2, "proto": "LL"}),
    ("reducescatter", "recursive_halving", {"inplace": False}),
    ("alltoall", "bidir_ring", {"aggregate": False})])
def test_a_build_leaves_no_cyclic_garbage(kind: str, alg: str, kw: dict) -> None:
    """Every build unlinks its op graphs when it is over (``synth.emit.passes.Graphs``), so the
    cyclic collector, paused while it runs, finds none of its objects when it is back on (it
    traced millions of them after each large compile before)."""
    import gc
    from collections import Counter

    sch = baseline(topo("dgx1"), make_collective(kind, 8, 2), alg)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        check(compile_schedule(sch, **kw))
        direct = baseline(topo("dgx1"), make_collective("allgather", 8, 2), "direct")
        with pytest.raises(SynthError, match="threadblocks"):   # a refused build unlinks too
            compile_schedule(direct, max_threadblocks=2)
        gc.collect()
        left = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not {"IOp", "Send", "Recv", "Copy", "Reduce", "Tb", "Dag", "Ir"} & set(left), left
    assert gc.isenabled()



def test_fusion_and_aggregation_shrink_ring_allgather() -> None:
    sch = baseline(topo("dgx1"), make_collective("allgather", 8, 2), "ring")
    st_ = compile_stats(sch, max_bytes=1 << 20)
    dag, fused, agg = st_.get("dag"), st_.get("fusion"), st_.get("aggregation")
    assert dag.steps > fused.steps > agg.steps
    assert dag.threadblocks > agg.threadblocks
    assert dict(agg.by_type).get("rcs", 0) > 0 and max(dict(agg.by_type)) and agg.nops == 0
    # the canonical ring: per rank one threadblock: cpy, s, rcs x (n-2), r -- every cnt = 2
    prog = compile_schedule(sch, max_bytes=1 << 20)
    for g in prog.gpus:
        assert len(g.tbs) == 1
        assert [s.type for s in g.tbs[0].steps] == ["cpy", "s"] + ["rcs"] * 6 + ["r"]
        assert {s.cnt for s in g.tbs[0].steps} == {2}
    assert st_.get("program").steps == agg.steps


def test_wide_ops_are_split_where_they_would_serialise_one_block() -> None:
    """dgx1 allgather by trees: aggregation bundles up to 12 chunks into one op, which one
    threadblock moves message after message; the compiler keeps the one-op-per-chunk program,
    whose busiest block moves fewer chunks, and the program model runs it faster at 1 GiB (the
    ring above keeps its aggregated ops: one block a rank carries them either way)."""
    from synth.emit import compile as C
    from synth.solve import solve
    from synth.timing.program import program_times_us

    t = topo("dgx1")
    sch = next(c.schedule for c in solve(t, make_collective("allgather", 8, 1), encoding="trees",
                                         sizes=[1 << 30]).candidates if c.name == "trees")
    kw = dict(profile="exec", proto="Simple", instances=1, min_bytes=0, max_bytes=0, inplace=None)
    agg = C._build_passes(sch, **kw).program
    prog = compile_schedule(sch)
    assert check(prog) == ["inplace", "outofplace"]
    assert C._widest_op(agg) > 1 and C._widest_op(prog) == 1
    assert C._block_load(prog) < C._block_load(agg)
    narrow_us, agg_us = (program_times_us(p, t, [1 << 30])[0] for p in (prog, agg))
    assert narrow_us < 0.9 * agg_us


def test_fusion_and_aggregation_shrink_direct_allreduce() -> None:
    # dgx1 is not fully connected: direct relays through neighbours (4 steps)
    sch = baseline(topo("dgx1"), make_collective("allreduce", 8, 2), "direct")
    ll = compile_stats(sch, proto="LL")
    assert ll.get("dag").steps > ll.get("fusion").steps > ll.get("aggregation").steps
    assert ll.get("aggregation").instructions * 2 <= ll.get("dag").instructions
    assert ll.get("dag").threadblocks > ll.get("aggregation").threadblocks
    # with 2-message FIFOs at unbounded sizes the relays cannot stay fused, aggregation still helps
    simple = compile_stats(sch)
    assert simple.get("program").unfused > 0
    assert simple.get("dag").steps > simple.get("aggregation").steps
    check(compile_schedule(sch, proto="LL"))
    # all pairs: the owner's last receive-reduce forwards the result (rrcs), chunks pair up
    sch = baseline(builders.fully_connected(8), make_collective("allreduce", 8, 2), "direct")
    full = compile_stats(sch)
    assert full.get("dag").steps > full.get("fusion").steps > full.get("aggregation").steps
    assert dict(full.get("aggregation").by_type)["rrcs"] == 8


def test_ring_allreduce_is_mscclang_shaped() -> None:
    """s, rrs x (n-2), rrcs, rcs x (n-2), r -- one threadblock per rank, no dependencies."""
    sch = baseline(builders.ring(6), make_collective("allreduce", 6), "ring")
    prog = compile_schedule(sch)
    for g in prog.gpus:
        assert len(g.tbs) == 1
        assert [s.type for s in g.tbs[0].steps] == ["s"] + ["rrs"] * 4 + ["rrcs"] + ["rcs"] * 4 + ["r"]
        assert all(s.depid == -1 for s in g.tbs[0].steps)
    check(prog)


@pytest.mark.slow  # three compiles of a 2,000-op-a-rank program and two timings: about a minute
def test_wide_ops_that_cannot_go_narrow_are_spread_over_spare_blocks() -> None:
    """dgx_h100 x 4 rail_blocks at 64 chunks a rank: one op per chunk breaks the node limit, so
    the aggregated ops stay, each fan-out connection on one block (320 chunks); placed unfused
    over the spare blocks, the busiest moves fewer and the program model runs it faster."""
    from synth.emit import compile as C
    from synth.timing.program import program_times_us

    t = load_topology("dgx_h100", 4)
    sch = baseline(t, make_collective("allgather", 32, 64), "rail_blocks")
    kw = dict(profile="exec", proto="Simple", instances=1, min_bytes=0, max_bytes=0, inplace=None)
    fused = C._build_passes(sch, **kw).program
    prog = compile_schedule(sch)
    assert C._widest_op(prog) > 1                                 # still aggregated ...
    assert C._block_load(prog) < C._block_load(fused)             # ... but spread
    assert max(len(g.tbs) for g in prog.gpus) > max(len(g.tbs) for g in fused.gpus)
    assert max(len(g.tbs) for g in prog.gpus) <= 64
    check(prog)
    spread_us, fused_us = program_times_us(prog, t, [1 << 30])[0], program_times_us(fused, t, [1 << 30])[0]
    assert spread_us < 0.95 * fused_us


def test_progress_model_splits_fused_ops_when_fifos_are_small() -> None:
    """Two chunks per ring step cannot be relayed by fused ops through 2-message FIFOs at M = 1;
    with LL's 8 slots, or at sizes where one message carries both chunks, they can."""
    sch = baseline(topo("dgx1"), make_collective("allgather", 8, 2), "ring")
    unbounded = compile_stats(sch).get("program")
    assert unbounded.unfused > 0
    for kw in (dict(proto="LL"), dict(max_bytes=1 << 20)):
        assert compile_stats(sch, **kw).get("program").unfused == 0
        check(compile_schedule(sch, **kw))
    check(compile_schedule(sch))


def test_step_limit_spreads_over_channels() -> None:
    sch = baseline(builders.ring(80), make_collective("allgather", 80), "ring")
    prog = compile_schedule(sch)
    assert prog.nchannels > 1
    assert max(len(tb.steps) for g in prog.gpus for tb in g.tbs) <= 64
    legacy = compile_schedule(sch, profile="legacy")      # 256 steps per block
    assert legacy.nchannels == 1
    check(prog)


def test_limits_raise_with_the_limit_named() -> None:
    sch = baseline(builders.ring(80), make_collective("allgather", 80), "ring")
    with pytest.raises(SynthError, match=r"MSCCL_MAX_NUM_STEPS\).*over"):
        compile_schedule(sch, instances=32)               # 1 channel per instance: too few
    with pytest.raises(SynthError, match="MAXCHANNELS"):
        compile_schedule(sch, instances=33)
    sch = baseline(topo("dgx1"), make_collective("allgather", 8), "ring")
    with pytest.raises(SynthError, match="no buffer layout for gather"):
        emit_xml(baseline(topo("dgx1"), make_collective("gather", 8), "direct"))
    with pytest.raises(SynthError, match="refuses in-place alltoall"):
        compile_schedule(baseline(topo("dgx1"), make_collective("alltoall", 8), "ring"),
                         profile="legacy", inplace=True)
    for bad in (dict(profile="nccl"), dict(proto="ll"), dict(instances=0),
                dict(min_bytes=10, max_bytes=5), dict(max_bytes=-1)):
        with pytest.raises(SynthError):
            compile_schedule(sch, **bad)


def test_invalid_schedule_is_a_user_error() -> None:
    coll = make_collective("allgather", 4)
    t = builders.ring(4)
    bad = Schedule(coll, t.name, t.content_hash, (Step((Transfer(1, 2, 0),)),), "bad", "test")
    with pytest.raises(SynthError, match="before it holds it"):
        compile_schedule(bad)


# ------------------------------------------------------------------------------ XML text

ATTR = re.compile(r' [A-Za-z_]+="[^"<>&]*"')


def test_lexical_rules_and_profile_spellings() -> None:
    t = topo("dgx1")
    sch = baseline(t, make_collective("reducescatter", 8, 2), "ring")
    for profile, coll in (("exec", "reducescatter"), ("rccl", "reducescatter"),
                          ("legacy", "reduce_scatter")):
        text = emit_xml(sch, profile=profile)
        assert "\t" not in text and "<?xml" not in text and "\r" not in text
        lines = text.splitlines()
        assert lines[0].startswith("<algo ") and lines[-1] == "</algo>" and text.endswith("\n")
        for line in lines:
            body = line.lstrip(" ")
            assert body.startswith("<")
            if body.startswith("</"):
                assert re.fullmatch(r"</(algo|gpu|tb)>", body)
                continue
            m = re.fullmatch(r"<(algo|gpu|tb|step)((?: [A-Za-z_]+=\"[^\"]*\")*)(/?)>", body)
            assert m, line
            attrs = ATTR.findall(m.group(2))
            assert "".join(attrs) == m.group(2) and len(attrs) <= 16
            for a in attrs:
                value = a.split('"')[1]
                if re.fullmatch(r"-?\d+", value):
                    assert value == str(int(value)), f"non-canonical integer in {line}"
        head = lines[0]
        assert f'coll="{coll}"' in head
        keys = re.findall(r' ([A-Za-z_]+)=', head)
        if profile == "legacy":
            assert keys == ["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
                            "minBytes", "maxBytes"]
            assert 'maxBytes="9223372036854775807"' in head      # 0 means "never" there
        else:
            assert keys == ["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
                            "outofplace", "minBytes", "maxBytes"]
        step = next(line for line in lines if "<step " in line).strip()
        assert re.findall(r' ([A-Za-z_]+)=', step) == ["s", "type", "srcbuf", "srcoff", "dstbuf",
                                                      "dstoff", "cnt", "depid", "deps", "hasdep"]
        assert step.endswith('"/>')


def test_recompilation_is_byte_identical() -> None:
    t = topo("dgx_a100x2")
    for kind, alg in (("allreduce", "hierarchical"), ("alltoall", "direct"), ("reduce", "tree")):
        sch = baseline(t, make_collective(kind, 16, 2), alg)
        assert emit_xml(sch) == emit_xml(sch)
        assert emit_xml(sch, instances=2, proto="LL") == emit_xml(sch, instances=2, proto="LL")
    # and across interpreter processes with different hash seeds
    code = ("import hashlib;from synth.topology_io import load_topology;"
            "from synth.collectives import make_collective;"
            "from synth.encodings.baseline.algorithms import baseline;"
            "from synth.emit.compile import emit_xml;"
            "t=load_topology('dgx_a100',nodes=2);"
            "s=baseline(t,make_collective('allreduce',16,2),'double_binary_tree');"
            "print(hashlib.sha256(emit_xml(s).encode()).hexdigest())")
    root = Path(__file__).resolve().parents[1]
    digests = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                             env=env, timeout=120, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_512_rank_ring_allgather_compiles() -> None:
    """262k transfers, within the runtime's limits. The 10 s bar is measured by
    ``benchmarks/compiler.py`` (``results/compiler.md``: 5.07 s of CPU); here only a guard against
    a blow-up, because CPU time doubles when the slow pass's other test shares the 2 cores
    (11.0 s in a fresh-clone CI run at a9791e8, against the 10 s this test once asserted)."""
    sch = baseline(builders.ring(512), make_collective("allgather", 512), "ring")
    t0 = time.process_time()
    prog = compile_schedule(sch)
    elapsed = time.process_time() - t0
    assert elapsed <= 60.0, f"compiling took {elapsed:.1f}s of CPU"
    assert max(len(tb.steps) for g in prog.gpus for tb in g.tbs) <= 64
    assert prog.ngpus == 512 and prog.nchannels <= 32


# ------------------------------------------------------------------------------ random schedules

def _random_schedule(seed: int, kind: str, n: int, k: int) -> Schedule:
    """A valid random schedule on a fully connected machine: per chunk, reduction trees with
    several children per step or pairwise exchange-reduce, then relayed broadcast trees, extra
    redundant re-sends, all at random start steps (non-combining: broadcast trees only)."""
    rng = random.Random(seed)
    coll = make_collective(kind, n, k, root=rng.randrange(n) if kind in ("broadcast", "reduce")
                           else None)
    t = builders.fully_connected(n)
    steps: dict[int, list[Transfer]] = {}

    def add(step: int, src: int, dst: int, c: int, op: str = "copy") -> None:
        steps.setdefault(step, []).append(Transfer(src, dst, c, op))

    for c in range(coll.num_chunks):
        start = rng.randrange(3)
        holders = list(coll.pre[c])
        post = list(coll.post[c])
        if coll.combining:
            group = holders[:]
            rng.shuffle(group)
            if len(group) >= 2 and len(group) & (len(group) - 1) == 0 and rng.random() < 0.5:
                half = 1          # recursive doubling: exchange-reduce in the same step
                while half < len(group):
                    for i, a in enumerate(group):
                        add(start, a, group[i ^ half], c, "reduce")
                    start += 1
                    half *= 2
                have = set(group)
            else:
                level = [group[0]]
                rest = group[1:]
                have = {group[0]}
                tree: list[list[tuple[int, int]]] = []
                while rest:       # build top-down, reduce bottom-up (several children per step)
                    layer = []
                    for parent in level:
                        for _ in range(rng.randint(1, 3)):
                            if rest:
                                layer.append((rest.pop(), parent))
                    tree.append(layer)
                    level = [ch for ch, _ in layer]
                for layer in reversed(tree):
                    for child, parent in layer:
                        add(start, child, parent, c, "reduce")
                    start += 1
                have = {group[0]}
        else:
            have = {holders[0]}
        # broadcast the complete value to every post rank, maybe through relays
        need = [r for r in post if r not in have]
        rng.shuffle(need)
        frontier = sorted(have)
        while need:
            nxt = []
            for src in frontier:
                for _ in range(rng.randint(1, 2)):
                    if need:
                        dst = need.pop()
                        add(start, src, dst, c)
                        nxt.append(dst)
            if rng.random() < 0.3 and len(frontier) > 1:      # a redundant re-send (overwrite)
                a, b = rng.sample(frontier, 2)
                add(start, a, b, c)
            frontier += nxt
            start += 1
    last = max(steps) + 1 if steps else 0
    sched = Schedule(coll, t.name, t.content_hash,
                     tuple(Step(tuple(steps.get(s, ()))) for s in range(last)), "random", "test")
    verify(sched, t, check_bandwidth=False)
    return sched


@settings(max_examples=int(os.environ.get("SYNTH_COMPILER_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), n=st.integers(2, 6),
       k=st.integers(1, 3), config=st.sampled_from([
           dict(), dict(inplace=True), dict(inplace=False), dict(proto="LL"),
           dict(max_bytes=1 << 16), dict(instances=2), dict(profile="legacy"),
           dict(profile="rccl", proto="LL128", max_bytes=1 << 30)]))
def test_random_schedules_compile_to_correct_programs(seed, kind, n, k, config) -> None:
    sch = _random_schedule(seed, kind, n, k)
    if config.get("inplace") and kind == "alltoall" and config.get("profile") == "legacy":
        return
    prog = compile_schedule(sch, **config)
    coll = sch.collective
    named = make_collective(kind, n, k * config.get("instances", 1), coll.root)
    assert check(prog, config.get("profile", "exec"), named)


# ------------------------------------------------------------------------------ node bound

def test_the_node_bound_never_exceeds_a_placements_nodes(monkeypatch) -> None:
    """``_nodes_at_least`` (what lets a refused compile skip placing its unfused fallback) is at
    most the nodes of the busiest rank of the placement made from the same ops."""
    from synth.emit import compile as C

    bounds: list[int] = []
    real = C._place_connections

    def place(ir, *args):
        bounds.append(C._nodes_at_least(ir, instances))
        return real(ir, *args)

    monkeypatch.setattr(C, "_place_connections", place)
    checked = 0
    for spec, nodes, kind in (("dgx1", 1, "allgather"), ("dgx_a100", 2, "allreduce"),
                              ("dgx_h100", 1, "alltoall")):
        for schedule in baselines(load_topology(spec, nodes=nodes), kind).values():
            for instances in (1, 2, 4):
                bounds.clear()
                try:
                    program = C._build_passes(schedule, profile="exec", proto="Simple",
                                              instances=instances, min_bytes=0, max_bytes=0,
                                              inplace=None, spread=True).program
                except SynthError:
                    continue
                nodes_ = max(1 + len(program.gpus) + len(g.tbs)
                             + sum(len(tb.steps) for tb in g.tbs) for g in program.gpus)
                assert 1 + program.ngpus + instances < bounds[-1] <= nodes_, schedule.algorithm
                checked += 1
    assert checked >= 20, checked


def _tree_baseline(spec: str, nodes: int, kind: str) -> Schedule:
    """The tree baseline with the chunk count it prefers: over the node limit from 2 or 4
    instances on (what the node-limit tests refuse)."""
    t = load_topology(spec, nodes=nodes)
    return baseline(t, make_collective(kind, t.num_ranks,
                                       preferred_chunks("tree", kind, t.num_ranks)), "tree")


def test_a_refusal_skips_the_unfused_placement_and_says_what_it_said(monkeypatch) -> None:
    """Where the fused program is over the node limit and the unfused ops alone are too, the
    unfused program is not placed (it could not be written) and the first error stands, word
    for word, as when it was placed and checked. (The driver's own check before each placement,
    :func:`_over_node_limit`, is off here: it would refuse before anything is placed.)"""
    from synth.emit import compile as C
    from synth.emit import proto_twins

    schedule = _tree_baseline("dgx_a100", 8, "allgather")
    placed: list[int] = []
    real = C._place_connections
    monkeypatch.setattr(C, "_place_connections", lambda ir, *a: placed.append(1) or real(ir, *a))
    monkeypatch.setattr(C, "_over_node_limit", lambda ir, instances: None)
    messages = []
    for bound in (C._nodes_at_least, lambda ir, instances: 0):   # the bound, then none
        monkeypatch.setattr(C, "_nodes_at_least", bound)
        proto_twins.forget()
        with pytest.raises(SynthError, match="tokenizer node count") as exc:
            emit_xml(schedule, instances=2)
        messages.append((exc.value.message, len(placed)))
    proto_twins.forget()
    assert messages[0][0] == messages[1][0]
    assert messages[0][1] == 0 and messages[1][1] > 0   # placed only without the bound


def test_a_compile_over_the_node_limit_is_refused_before_it_is_placed(monkeypatch) -> None:
    """The driver refuses a compile as soon as the ops it is about to place put a rank over the
    node limit (:func:`_over_node_limit`): nothing is placed, the message says what the count is
    at least and by how much it is over; without the check the same compile is placed, again
    and again, and refused all the same, at a count at least as high."""
    from synth.emit import compile as C
    from synth.emit import proto_twins

    schedule = _tree_baseline("dgx_a100", 8, "allgather")
    placed: list[int] = []
    real = C._place
    monkeypatch.setattr(C, "_place", lambda ir, *a: placed.append(1) or real(ir, *a))
    proto_twins.forget()
    with pytest.raises(SynthError) as exc:
        emit_xml(schedule, instances=2)
    checked = exc.value.message
    assert placed == []
    found = re.fullmatch(r"the tokenizer node count \(1 \+ gpus \+ tbs \+ steps\) is at least "
                         r"(\d+) \(rank (\d+): its operations alone, fused or not\); "
                         r"the exec runtime allows at most 4095 \(MAX_NODES - 1\): (\d+) over",
                         checked)
    assert found, checked
    assert int(found[1]) - 4095 == int(found[3]) > 0
    monkeypatch.setattr(C, "_over_node_limit", lambda ir, instances: None)
    proto_twins.forget()
    with pytest.raises(SynthError, match="tokenizer node count") as exc:
        emit_xml(schedule, instances=2)
    proto_twins.forget()
    assert placed
    full = re.search(r"is (\d+) \(rank", exc.value.message)
    assert full and int(full[1]) >= int(found[1]), exc.value.message


@pytest.mark.parametrize("spec,nodes,kind", [("dgx_a100", 8, "allgather"),
                                             ("dgx1", 4, "allreduce"), ("dgx_h100", 4, "alltoall")])
def test_the_node_check_refuses_only_what_the_loop_refused(monkeypatch, spec, nodes, kind) -> None:
    """Where the driver's node check refuses (:func:`_over_node_limit`), the loop without it
    refuses the same compile too (with whichever limit it met first), after more placements:
    the tree baseline at 1, 2, 4 and 8 instances, whose ops are over the node limit from 2 (64
    ranks) or 4 instances on. Where the check does not refuse, the file or the refusal is the
    same."""
    from synth.emit import compile as C
    from synth.emit import proto_twins

    schedule = _tree_baseline(spec, nodes, kind)
    placed: list[int] = []
    real_place, real_check = C._place, C._over_node_limit
    monkeypatch.setattr(C, "_place", lambda ir, *a: placed.append(1) or real_place(ir, *a))
    refused = 0
    for instances in (1, 2, 4, 8):
        outcomes = []
        for check in (real_check, lambda ir, instances: None):
            monkeypatch.setattr(C, "_over_node_limit", check)
            proto_twins.forget()
            placed.clear()
            try:
                outcomes.append((emit_xml(schedule, instances=instances), len(placed)))
            except SynthError as exc:
                outcomes.append((exc, len(placed)))
        proto_twins.forget()
        (checked, placed_checked), (looped, placed_looped) = outcomes
        if isinstance(checked, SynthError) and "is at least" in checked.message:
            assert isinstance(looped, SynthError), (instances, looped[:200])
            assert placed_checked < placed_looped
            refused += 1
        elif isinstance(checked, SynthError):     # refused as before, by the loop
            assert isinstance(looped, SynthError) and looped.message == checked.message
        else:
            assert checked == looped
    assert refused >= 2
