"""The chunk-oriented DSL (synth.dsl) and its examples (examples/*.py).

Every example builds a Schedule that the verifier passes and that compiles to MSCCL-IR XML the
interpreter passes in every declared mode; DSL errors name the ranks and chunks involved; and the
as-soon-as-possible placement keeps the program's sequential meaning (checked against a synchronous
re-execution of the steps on random programs).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from synth import builders
from synth.collectives import make_collective
from synth.dsl import chunk, parallelize, program, verified_xml, xml_options
from synth.emit import XmlOptions, emit_verified_xml
from synth.encodings.baseline.algorithms import baseline
from synth.errors import SynthError, VerificationError
from synth.schedule import Schedule
from synth.topology_io import load_topology
from synth.verify import verify

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NAMES = ("ring_allgather", "allpairs_allreduce", "hierarchical_allreduce", "two_step_alltoall",
         "alltonext")
_TOPOS: dict[tuple[str, int], object] = {}


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"dsl_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def topo(name: str, nodes: int = 1):
    if (name, nodes) not in _TOPOS:
        _TOPOS[(name, nodes)] = load_topology(name, nodes=nodes)
    return _TOPOS[(name, nodes)]


# ------------------------------------------------------------------------------ examples

EXPECTED_STEPS = {"ring_allgather": 7, "allpairs_allreduce": 2, "hierarchical_allreduce": 3,
                  "two_step_alltoall": 3, "alltonext": 3}


@pytest.mark.parametrize("name", NAMES)
def test_example_builds_verifies_and_compiles(name: str) -> None:
    topology, sched = example(name).build()
    assert isinstance(sched, Schedule)
    assert sched.encoding == "dsl"
    assert sched.topology_hash == topology.content_hash
    verify(sched, topology)
    assert sched.num_steps == EXPECTED_STEPS[name]
    assert Schedule.from_json(sched.to_json()).steps == sched.steps
    coll = sched.collective
    if coll.custom is None:
        text, reports = emit_verified_xml(sched, XmlOptions())
        modes = {r.mode for r in reports}
        assert modes == ({"outofplace"} if coll.kind == "alltoall" else {"inplace", "outofplace"})
    else:
        # a custom collective is checked against its own pre/postcondition (legacy profile only)
        text, reports = verified_xml(sched, XmlOptions(profile="legacy"))
        assert [r.mode for r in reports] == ["outofplace"]
    assert text.startswith("<algo ")


def test_example_main_prints_summary(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    runpy.run_path(str(EXAMPLES / "allpairs_allreduce.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "allpairs: allreduce on dgx_a100" in out and "verified" in out
    assert "inplace ok" in out and "outofplace ok" in out


def test_ring_allgather_equals_the_ring_baseline() -> None:
    ring = example("ring_allgather")
    t = topo("dgx1")
    base = baseline(t, make_collective("allgather", 8), "ring")
    _, sched = ring.build(t, base.meta["order"])
    assert sched.steps == base.steps                        # transfers and rounds, step by step
    assert tuple(base.meta["order"]) == ring.DGX1_RING
    _, default = ring.build()
    assert default.steps == base.steps
    for n, k in ((5, 1), (8, 2)):                           # multi-chunk references (size=k)
        t = builders.ring(n)
        base = baseline(t, make_collective("allgather", n, k), "ring")
        assert ring.build(t, base.meta["order"], chunks=k)[1].steps == base.steps


def test_allpairs_reduces_share_one_step() -> None:
    _, sched = example("allpairs_allreduce").build(chunks=2)
    first, second = sched.steps
    assert {t.op for t in first.transfers} == {"reduce"} and len(first.transfers) == 8 * 7 * 2
    assert {t.op for t in second.transfers} == {"copy"} and len(second.transfers) == 8 * 7 * 2


def test_hierarchical_exchange_reads_values_before_the_step() -> None:
    _, sched = example("hierarchical_allreduce").build()
    cross = sched.steps[1].transfers
    assert len(cross) == 32 and all(t.op == "reduce" and abs(t.src - t.dst) == 8 for t in cross)


def test_two_step_alltoall_crosses_once_per_node_pair() -> None:
    topology, sched = example("two_step_alltoall").build()
    node = topology.node_of
    crossing = [(t.src, t.dst) for s in sched.steps for t in s.transfers if node[t.src] != node[t.dst]]
    assert set(crossing) == {(1, 8), (8, 1)}                # one gateway pair
    assert all(node[t.src] != node[t.dst] for t in sched.steps[1].transfers)


def test_instances_hint_reaches_the_compiler() -> None:
    t = builders.ring(4)
    with program(t, make_collective("allgather", 4), name="ring") as p, parallelize(2):
        for r in range(4):
            c = chunk(r, "input", 0)
            for _ in range(3):
                c = c.copy((c.rank + 1) % 4, "output", r)
    sched = p.schedule()
    assert sched.meta["instances"] == 2
    assert xml_options(sched).instances == 2
    text, reports = verified_xml(sched)
    assert 'nchannels="2"' in text and len(reports) == 2


# ------------------------------------------------------------------------------ errors

def _allgather(n: int = 4, topology=None):
    return program(topology or builders.fully_connected(n), make_collective("allgather", n))


def test_single_writer_same_step() -> None:
    t = builders.fully_connected(4)
    with program(t, make_collective("allgather", 4)) as p:
        a = chunk(0, "input", 0).copy(1)                    # step 0
        b = chunk(0, "input", 0).copy(3)                    # step 0
        a.copy(2, "output", 0)                              # step 1
        with pytest.raises(VerificationError) as err:
            b.copy(2, "output", 0)                          # also step 1: two writers
    e = err.value
    assert e.reason == "conflict" and e.rank == 2 and e.chunk == 0 and e.step == 1
    assert "copy from rank 1" in str(e) and "copy from rank 3" in str(e)
    assert "rank 2" in str(e) and "chunk 0" in str(e)
    with pytest.raises(VerificationError) as err:
        p.chunk(0, "input", 0).copy(2, "output", 0)         # ready at 0, slot written at 1: race
    assert err.value.reason == "conflict" and "copy from rank 0" in str(err.value)
    assert p.schedule(verify=False).num_steps == 2          # the errors left no trace


def test_missing_chunk_is_named() -> None:
    with _allgather(), pytest.raises(VerificationError) as err:
        chunk(1, "output", 0)                           # rank 1 has not received chunk 0 yet
    assert err.value.reason == "not_held" and err.value.rank == 1 and err.value.chunk == 0
    assert "rank 1 does not hold chunk 0" in str(err.value)
    t = builders.fully_connected(3)
    with program(t, make_collective("allreduce", 3)) as p, pytest.raises(VerificationError) as err:
        p.chunk(0, "scratch", 0)
    assert err.value.reason == "not_held" and err.value.rank == 0


def test_missing_link_is_named() -> None:
    dgx1 = program(topo("dgx1"), make_collective("allgather", 8))
    with dgx1, pytest.raises(VerificationError) as err:
        chunk(0, "input", 0).copy(5, "output", 0)           # dgx1: 0 links to 1, 2, 3, 4 only
    assert err.value.reason == "no_link" and err.value.rank == 0 and err.value.chunk == 0
    assert "rank 0 to rank 5" in str(err.value)


def test_reduce_errors() -> None:
    with _allgather(), pytest.raises(VerificationError) as err:
        chunk(0, "input", 0).reduce(1)
    assert err.value.reason == "bad_op" and "not a combining" in str(err.value)
    t = builders.fully_connected(3)
    with program(t, make_collective("allreduce", 3)):
        chunk(0, "input", 2).reduce(2, "input", 2)
        with pytest.raises(VerificationError) as err:
            chunk(0, "input", 2).reduce(2, "input", 2)      # rank 0's part counted twice
        assert err.value.reason == "double_count" and err.value.rank == 2 and err.value.chunk == 2
        with pytest.raises(SynthError, match="into itself"):
            chunk(1, "input", 1).reduce(1)


def test_layout_and_argument_errors() -> None:
    with _allgather() as p:
        with pytest.raises(SynthError, match=r"output\[1\] is chunk 1, but the reference carries "
                                              "chunk 0"):
            chunk(0, "input", 0).copy(2, "output", 1)
        with pytest.raises(SynthError, match="out of range"):
            chunk(0, "input", 1)
        with pytest.raises(SynthError, match=r"outside 0\.\.3"):
            chunk(4, "input", 0)
        with pytest.raises(SynthError, match="unknown buffer"):
            chunk(0, "inbox", 0)
        with pytest.raises(VerificationError) as err:
            chunk(0, "input", 0).copy(1).copy(2, step=0)    # data at rank 1 only from step 1
        assert err.value.reason == "not_ready" and "earliest step" in str(err.value)
        with pytest.raises(VerificationError) as err:
            p.schedule()                                    # postcondition checked
        assert err.value.reason == "missing"
    with pytest.raises(SynthError, match="no current program"):
        chunk(0, "input", 0)


def test_stale_references() -> None:
    t = builders.fully_connected(3)
    with program(t, make_collective("allreduce", 3)):
        old = chunk(1, "input", 0)                          # rank 1's own part of chunk 0
        chunk(0, "input", 0).reduce(1, "input", 0)          # step 0: rank 1's slot now holds 0+1
        chunk(1, "input", 0).reduce(2, "input", 0)          # step 1
        with pytest.raises(VerificationError) as err:
            old.copy(2)                                     # would run at step 1: value is gone
    e = err.value
    assert e.reason == "stale" and e.rank == 1 and e.chunk == 0
    assert "overwritten by reduce from rank 0 in step 0" in str(e)
    with program(t, make_collective("allreduce", 3)) as p:
        first = chunk(1, "input", 0).reduce(0, "input", 0)  # step 0
        last = chunk(2, "input", 0).reduce(0, "input", 0)   # joins step 0
        with pytest.raises(VerificationError) as err:
            first.copy(1)
        assert err.value.reason == "stale" and "reduce from rank 2" in str(err.value)
        last.copy(1, "output", 0)
        last.copy(2, "output", 0)
        for c in (1, 2):
            chunk(c % 2 + 1, "input", c).reduce(c, "input", c)
            chunk(0, "input", c).reduce(c, "input", c)
            for q in range(3):
                if q != c:
                    chunk(c, "input", c).copy(q, "output", c)
    assert p.schedule().num_steps == 2


def test_msccllang_reduce_form_is_the_same() -> None:
    t = builders.fully_connected(4)

    def build(msccl: bool) -> Schedule:
        with program(t, make_collective("allreduce", 4), name="ap") as p:
            for r in range(4):
                for q in range(4):
                    if q != r:
                        if msccl:
                            chunk(r, "input", r).reduce(chunk(q, "input", r))
                        else:
                            chunk(q, "input", r).reduce(r, "input", r)
            for r in range(4):
                for q in range(4):
                    if q != r:
                        chunk(r, "input", r).copy(q, "output", r)
        return p.schedule()

    assert build(True).steps == build(False).steps


def test_local_copy_and_scratch() -> None:
    t = builders.ring(4)
    with program(t, make_collective("allgather", 4)) as p:
        for r in range(4):
            c = chunk(r, "input", 0).copy(r, "output", r)   # same rank: already in place
            assert c.rank == r and c.ready == 0
            c = c.copy((r + 1) % 4, "scratch", 7)           # relay through a scratch slot
            assert chunk((r + 1) % 4, "scratch", 7).chunk == r
            for _ in range(2):
                c = c.copy((c.rank + 1) % 4)
    assert p.schedule().num_steps == 3


# ------------------------------------------------------------------------------ semantics

def _simulate(sched: Schedule, n: int) -> dict[tuple[int, int], int]:
    """Synchronous re-execution: reads at the start of a step, writes at its end."""
    state = {(r, c): 1 << r for r in range(n) for c in range(sched.collective.num_chunks)}
    for step in sched.steps:
        new = dict(state)
        for t in step.transfers:
            if t.op == "copy":
                new[(t.dst, t.chunk)] = state[(t.src, t.chunk)]
        for t in step.transfers:
            if t.op == "reduce":
                new[(t.dst, t.chunk)] = new[(t.dst, t.chunk)] | state[(t.src, t.chunk)]
        state = new
    return state


@pytest.mark.parametrize("seed", range(40))
def test_asap_placement_keeps_sequential_meaning(seed: int) -> None:
    """Random copy/reduce programs (with old references kept and reused): the steps the DSL places
    them in, run synchronously, end in the state the program means run one statement at a time."""
    rng = random.Random(seed)
    n, chunks = 4, 2
    t = builders.fully_connected(n)
    coll = make_collective("allreduce", n, chunks)
    model = {(r, c): 1 << r for r in range(n) for c in range(coll.num_chunks)}
    refs: list[tuple[object, int]] = []
    applied = 0
    with program(t, coll) as p:
        for _ in range(30):
            if refs and rng.random() < 0.4:
                ref, value = rng.choice(refs)
            else:
                r, c = rng.randrange(n), rng.randrange(coll.num_chunks)
                ref, value = chunk(r, "input", c), model[(r, c)]
            dst = rng.choice([q for q in range(n) if q != ref.rank])
            op = rng.choice(("copy", "reduce"))
            try:
                out = ref.copy(dst) if op == "copy" else ref.reduce(dst)
            except VerificationError as exc:
                assert exc.reason in ("conflict", "double_count", "stale"), exc
                continue
            applied += 1
            key = (dst, ref.chunk)
            model[key] = value if op == "copy" else model[key] | value
            refs.append((out, model[key]))
            refs.append((ref, value))
        sched = p.schedule(verify=False)
    assert applied > 0
    assert _simulate(sched, n) == model
