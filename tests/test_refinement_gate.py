"""Stage 3 of a MILP plan is skipped only where it cannot change what is written.

``synth solve`` on Trainium gives the MILP encoding a :class:`synth.solve_closed.RefinementGate`:
stage 3 only reorders a plan's last steps (:func:`synth.encodings.milp.schedule.stage3_keeps`
counts the ones it keeps), and where the program lowered from the kept steps alone is slower than
the runtime's own call at every size, no ordering of the rest can serve a size. These tests pin the
three facts that argument rests on, and that the gate changes nothing when it lets stage 3 run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from synth.collectives import make_collective
from synth.encodings.milp import milp_encoding
from synth.encodings.options import Options
from synth.errors import VerificationError
from synth.schedule import Schedule
from synth.sizes import DEFAULT_SIZES
from synth.topology_io import load_topology
from synth.verify import verify


@pytest.fixture(scope="module")
def trn1_phase():
    """trn1_32 allgather's routed phase at 16 chunks per rank (31 stage-2 steps at 1 GiB, whose
    drain stage 3 does re-batch: tests/test_milp.py) and its chunk size in MB."""
    from synth.encodings.milp.encoding import _Phase, resolve_sketch
    from synth.encodings.options import MilpOptions
    from synth.encodings.work import WorkBudget
    from synth.topology import MB

    topo = load_topology("trn1_32")
    _, links, policies = resolve_sketch(topo, None)
    phase = _Phase.solve(topo, make_collective("allgather", 32, 16), links, policies,
                         reverse=False, opts=MilpOptions(), solver="highs", work=None,
                         safety=WorkBudget(60), progress=None)
    return phase, 2**30 / (32 * 16) / MB


def _step_sets(tasks, steps: list[int]) -> list[list[int]]:
    from synth.encodings.milp.schedule import step_arrays

    return [sorted(a.tolist()) for a in step_arrays(tasks, steps)]


@pytest.mark.parametrize("window, work, gap", [(2, 10, False), (2, 10, True), (4, 10, False),
                                               (4, 3, False)])
def test_stage3_keeps_the_leading_steps_it_says_it_keeps(trn1_phase, window, work, gap):
    """Whatever the narrow and wide passes find, the plan's first ``stage3_keeps`` non-empty steps
    are the stage-2 plan's, also when that plan has an empty step (``gap``: every step from the
    middle on moved one later); stage 3 did move tasks, so the comparison is not vacuous."""
    from synth.encodings.milp.schedule import order, schedule_tasks, stage3_keeps

    phase, chunk_mb = trn1_phase
    initial, _, _ = order(phase.tasks, chunk_mb)
    if gap:
        mid = max(initial) // 2
        initial = [s + 1 if s >= mid else s for s in initial]
    steps, report = schedule_tasks(phase.tasks, initial, chunk_mb, window=window, solver="highs",
                                   time_limit_s=120, work=work)
    kept = stage3_keeps(initial, window, work)
    assert kept >= 20
    assert "stage3_us" in report
    assert _step_sets(phase.tasks, steps)[:kept] == _step_sets(phase.tasks, initial)[:kept]
    assert len(report["stage3_passes"]) == (2 if window > 2 and work >= 10 else 1)
    if len(report["stage3_passes"]) == 2:
        # no task of the kept steps is free in the wide pass, which starts from the narrow plan
        narrow, first = schedule_tasks(phase.tasks, initial, chunk_mb, window=2, solver="highs",
                                       time_limit_s=120, work=work)
        start = narrow if "stage3_us" in first else initial
        kept_steps = sorted(set(initial))[:kept]
        assert all(start[i] < max(start) - window
                   for i, s in enumerate(initial) if s in kept_steps)


def test_stage3_keeps_counts_for_the_shortest_narrow_plan():
    """The wide pass frees the last ``window + 1`` steps of the narrow pass's plan, which may be as
    short as the steps the narrow pass kept plus one: 8 steps, narrow window 2 keeps 5 (0..4), the
    wide window 4 then only 1. An empty step is not counted."""
    from synth.encodings.milp.schedule import stage3_keeps

    assert stage3_keeps(list(range(8)), 4, 10) == 1
    assert stage3_keeps(list(range(8)), 4, 2) == 5  # too small a budget for the wide pass
    assert stage3_keeps(list(range(8)), 2, 10) == 5
    assert stage3_keeps([0, 2, 3, 4, 5, 6, 7, 8], 2, 10) == 5  # step 1 is empty
    assert stage3_keeps([0, 1, 2], 4, 10) == 0


def _gate(sizes=DEFAULT_SIZES):
    from synth.solve_closed import RefinementGate

    topo = load_topology("trn1_32")
    return topo, RefinementGate(topo, "allgather", "neuron", sizes)


def _ring(topo) -> Schedule:
    from synth.encodings.baseline.algorithms import all_baselines

    return all_baselines(topo, make_collective("allgather", 32, 1))["ring"]


def _lowered_times(gate, schedule: Schedule) -> list[float]:
    from synth.closed.columns import build_unit
    from synth.closed.lower import LoweredPlan
    from synth.solve_closed import DTYPE

    mesh, _ = gate._mesh_model()
    unit = build_unit(LoweredPlan("allgather", schedule, schedule.algorithm), mesh, gate.topology,
                      DTYPE)
    return gate._times(unit.program, unit.elements)


def test_the_kept_steps_bound_every_reordering_of_the_rest():
    """The lowered program cut after the kept steps is a lower bound on any schedule that begins
    with them: here the ring with its tail reversed, merged into one step, or cut off, at every
    size; and the bound grows with the steps kept."""
    topo, gate = _gate()
    ring = _ring(topo)
    n = len(ring.steps)
    bounds = {kept: np.array(gate.kept_steps_us(ring, kept)) for kept in (1, n // 2, n - 3, n)}
    for kept in (n // 2, n - 3):
        head, tail = ring.steps[:kept], ring.steps[kept:]
        merged = tail[0].__class__(tuple(t for s in tail for t in s.transfers))
        for rest in (tail[::-1], (merged,), ()):
            other = Schedule(ring.collective, ring.topology, ring.topology_hash,
                             (*head, *rest), ring.algorithm, ring.encoding, {})
            assert np.all(bounds[kept] <= np.array(_lowered_times(gate, other)) + 1e-9)
    assert np.all(bounds[n] <= np.array(_lowered_times(gate, ring)) + 1e-9)
    ordered = [bounds[k] for k in sorted(bounds)]
    assert all(np.all(a <= b + 1e-9) for a, b in itertools.pairwise(ordered))
    assert not np.allclose(ordered[0], ordered[-1])


def test_the_gate_skips_only_behind_the_vendor_call_at_every_size(monkeypatch):
    """The whole ring, lowered, is behind the runtime's own call at every size: the gate gives the
    reason. Its first step alone is not: the gate lets stage 3 run (None). So does it when the
    vendor call fails its proof, or with nothing kept."""
    import synth.solve_closed as sc

    topo, gate = _gate()
    ring = _ring(topo)
    n = len(ring.steps)
    vendor_us = np.array(gate._vendor_times()[1])
    assert np.all(np.array(gate.kept_steps_us(ring, n)) > 1.01 * vendor_us)
    why = gate(ring, n)
    assert why is not None and "runtime's own call" in why
    assert gate(ring, 1) is None
    assert gate(ring, 0) is None

    def unproven(*_args, **_kw):
        raise VerificationError("postcondition", "wrong result on the stand-in")

    monkeypatch.setattr(sc, "_prove", unproven)
    _, fresh = _gate()
    assert fresh(ring, n) is None


def test_a_skipped_stage3_leaves_the_stage2_plan_and_says_why():
    """With a gate that rules stage 3 out, each single-phase candidate whose stage 3 keeps a step
    is the stage-2 plan, verified, its report saying why stage 3 did not run; the gate saw each
    such schedule with the count of steps stage 3 keeps. A gate that lets it run changes no byte."""
    topo = load_topology("torus:4x4")
    coll = make_collective("allgather", 16, 1)
    base = Options(time_limit_s=8, extra={"window": 2})
    asked: list[tuple[str, int, int]] = []

    def no(schedule: Schedule, kept: int) -> str:
        asked.append((schedule.algorithm, kept, len(schedule.steps)))
        return "ruled out by the test"

    skipped = milp_encoding(topo, coll, Options(time_limit_s=8, extra={"window": 2},
                                                refine_gate=no))
    assert asked and all(1 <= kept < steps for _, kept, steps in asked)
    for name, _, _ in asked:
        stage = skipped[name].meta["stages"][0]
        assert stage["stage3"] == "not run: ruled out by the test"
        assert "stage3_passes" not in stage
        verify(skipped[name], topo)
    plain = milp_encoding(topo, coll, base)
    ran = milp_encoding(topo, coll, Options(time_limit_s=8, extra={"window": 2},
                                            refine_gate=lambda s, k: None))
    assert {k: s.to_json() for k, s in plain.items()} == {k: s.to_json() for k, s in ran.items()}
    # the skipped candidates differ from the refined ones only where stage 3 moved tasks
    for name, kept, _ in asked:
        assert skipped[name].steps[:kept] == plain[name].steps[:kept]


def test_a_reducing_collective_is_never_asked():
    """Reducescatter's plan is reversed (stage 3's free steps become the first ones): the gate is
    not asked, and stage 3 runs."""
    topo = load_topology("torus:2x2")
    asked: list[str] = []
    milp_encoding(topo, make_collective("reducescatter", 4, 1),
                  Options(time_limit_s=4, extra={"window": 2},
                          refine_gate=lambda s, k: asked.append(s.algorithm) or "no"))
    assert asked == []


@pytest.mark.slow  # two trn1_32 main jobs: .ci/run runs it in its second pass
def test_the_main_job_writes_the_same_bytes_with_stage3_skipped(tmp_path, monkeypatch):
    """``synth solve --topo trn1_32 --coll allgather`` skips stage 3 of the MILP's main candidate
    (the gate rules it out) and writes the files it writes with every stage 3 run."""
    import hashlib

    import synth.solve_closed as sc
    from synth.cli import main

    def run(out) -> dict[str, str]:
        try:
            main(["solve", "--topo", "trn1_32", "--coll", "allgather", "--out", str(out)])
        except SystemExit as exc:
            assert not exc.code
        return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(out.rglob("*")) if p.is_file()}

    said: list[str | None] = []
    real = sc.RefinementGate.__call__
    monkeypatch.setattr(sc.RefinementGate, "__call__",
                        lambda self, s, k: said.append(real(self, s, k)) or said[-1])
    gated = run(tmp_path / "gated")
    assert any(why is not None for why in said)
    monkeypatch.setattr(sc.RefinementGate, "__call__", lambda self, s, k: None)
    assert run(tmp_path / "full") == gated
