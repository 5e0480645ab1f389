"""The MILP encoding (TACCL-style): verified schedules, sketch semantics, symmetry, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from synth.collectives import make_collective
from synth.encodings import Options
from synth.encodings.milp.encoding import milp_encoding, resolve_sketch
from synth.encodings.milp.problem import all_links, build_problem, chunk_images, sketch_group
from synth.encodings.milp.route import build_routing_model
from synth.errors import SynthError
from synth.topology_io import load_topology
from synth.verify import verify
from tests.conftest import run_synth

FAST = {"window": 0}  # stage 3 off where a test is about routing/semantics, not batching


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_every_collective_verifies(kind):
    topo = load_topology("torus:2x2")
    out = milp_encoding(topo, make_collective(kind, 4, 1), Options(time_limit_s=20))
    assert set(out) == {"milp", "milp_1MB"}
    for schedule in out.values():
        report = verify(schedule, topo)
        assert report.steps == schedule.num_steps
        assert schedule.encoding == "milp"
        assert schedule.meta["stages"][0]["routing_size"]["variables"] > 0


def test_reduction_reverses_the_allgather():
    topo = load_topology("torus:2x2")
    rs = milp_encoding(topo, make_collective("reducescatter", 4, 1), Options(chunks=1))["milp"]
    assert all(t.op == "reduce" for step in rs.steps for t in step.transfers)
    ar = milp_encoding(topo, make_collective("allreduce", 4, 1), Options(chunks=1))["milp"]
    ops = [{t.op for t in step.transfers} for step in ar.steps]
    first_copy = next(i for i, o in enumerate(ops) if "copy" in o)
    assert all(o == {"reduce"} for o in ops[:first_copy]) and all(o == {"copy"} for o in ops[first_copy:])
    verify(ar, topo)


def test_relay_sketch_restricts_inter_node_traffic():
    topo = load_topology("ndv2", 2)
    out = milp_encoding(topo, make_collective("allgather", 16, 1),
                        Options(chunks=1, extra={"sketch": "ndv2-relay", **FAST}))
    schedule = out["milp"]
    verify(schedule, topo)
    crossing = {(topo.nodes[topo.node_of[t.src]].index(t.src), topo.nodes[topo.node_of[t.dst]].index(t.dst))
                for step in schedule.steps for t in step.transfers
                if topo.node_of[t.src] != topo.node_of[t.dst]}
    assert crossing == {(0, 1)}
    assert schedule.meta["sketch"] == "ndv2-relay"


def test_symmetry_preserves_the_sketch_and_maps_chunks():
    topo = load_topology("ndv2", 2)
    _, links, _ = resolve_sketch(topo, "ndv2-relay")
    group = sketch_group(topo, links)
    assert group.order > 1
    for perm in group.perms:
        assert all((int(perm[u]), int(perm[v])) in links.pairs for u, v in links.pairs)
    coll = make_collective("alltoall", 16, 2)
    images = chunk_images(coll, group)
    for h in range(group.order):  # every element permutes the chunks
        assert sorted(images[h].tolist()) == list(range(coll.num_chunks))
        c = 2 * 16 + 5 * 2 + 1  # chunk (s=1, d=5, piece 1)
        perm = group.perms[h]
        assert images[h, c] == (int(perm[1]) * 16 + int(perm[5])) * 2 + 1


def test_routing_model_is_sparse():
    """One representative rank's chunks, links on shortest paths only: far below TACCL's dense count."""
    topo = load_topology("trn1_32")
    problem = build_problem(topo, make_collective("allgather", 32, 4), all_links(topo))
    model, _ = build_routing_model(problem)
    dense = 32 * 4 * len(all_links(topo).pairs)
    assert len(problem.chunks) == 4 and problem.group.order == 32
    assert len(model.variables()) < dense / 20


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_trn1_allgather_near_bound_at_1gb():
    from synth.solve import solve

    topo = load_topology("trn1_32")
    result = solve(topo, make_collective("allgather", 32, 1), encoding="milp", sizes=(2**30,),
                   time_limit_s=30, extra=FAST)
    assert result.best.costs[0].pct_of_bound > 90.0


def test_solvers_agree_on_routing():
    topo = load_topology("torus:2x2")
    coll = make_collective("allgather", 4, 2)
    busiest = set()
    for solver in ("highs", "cbc", "cpsat"):
        out = milp_encoding(topo, coll, Options(chunks=2, extra={"solver": solver, **FAST}))
        verify(out["milp"], topo)
        busiest.add(out["milp"].meta["stages"][0]["routing_busiest_us_per_mb"])
    assert len(busiest) == 1


def test_peer_cap_needs_extra_hops_and_is_met():
    """dgx2-switch caps each GPU at 4 NVSwitch peers: a one-hop broadcast is infeasible, so the
    routing retries with the sketch's extra hop, and the schedule respects the cap."""
    topo = load_topology("dgx2")
    out = milp_encoding(topo, make_collective("allgather", 16, 1), Options(chunks=1, extra=FAST))
    schedule = out["milp"]
    verify(schedule, topo)
    peers: dict[int, set[int]] = {}
    for step in schedule.steps:
        for t in step.transfers:
            peers.setdefault(t.src, set()).add(t.dst)
    assert max(len(p) for p in peers.values()) <= 4


def test_infeasible_sketch_names_the_constraint_group(tmp_path):
    sketch = tmp_path / "tight.yaml"
    sketch.write_text(
        "name: tight\ndescription: one peer per GPU and no extra hops\ntopology: dgx2\nnodes: [1]\n"
        "chunks_per_rank: 1\nintranode: {strategy: all}\ninternode: {strategy: direct}\n"
        "switches:\n  - {switch: nvswitch, max_peers: 1}\nhints:\n  max_extra_hops: 0\n")
    topo = load_topology("dgx2")
    with pytest.raises(SynthError, match="switch_max_peers"):
        milp_encoding(topo, make_collective("allgather", 16, 1),
                      Options(chunks=1, extra={"sketch": str(sketch), **FAST}))


def test_deterministic_output():
    topo = load_topology("torus:2x2")
    a = milp_encoding(topo, make_collective("alltoall", 4, 1), Options(chunks=2))["milp"]
    b = milp_encoding(topo, make_collective("alltoall", 4, 1), Options(chunks=2))["milp"]
    assert a.to_json() == b.to_json()


def test_cli_milp_writes_verified_outputs(tmp_path):
    proc = run_synth("solve", "--encoding", "milp", "--topo", "torus:2x2", "--coll", "allgather",
                     "--sizes", "1KB,1GB", "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["encoding"] == "milp" and data["verified"]
    assert data["xml_verified_modes"] == ["inplace", "outofplace"]
    assert "milp" in data["why"]


@pytest.mark.parametrize("args, message", [
    (["--solver", "glpk"], "unknown solver 'glpk'"),
    (["--sketch", "ndv2-relay"], "sketch"),
    (["--sketch", "no-such-sketch"], "no-such-sketch"),
    (["--encoding", "trees", "--solver", "cbc"], "options of the milp encoding"),
])
def test_cli_bad_input(tmp_path, args, message):
    proc = run_synth("solve", "--encoding", "milp", "--topo", "dgx1", "--coll", "allgather",
                     "--no-xml", "--out", str(tmp_path), *args)
    assert proc.returncode == 2
    assert message in proc.stderr or message in proc.stdout
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())


def test_chunk_images_identity_first():
    topo = load_topology("torus:2x2")
    group = sketch_group(topo, all_links(topo))
    images = chunk_images(make_collective("allgather", 4, 3), group)
    assert np.array_equal(images[0], np.arange(12))


def test_stage3_rebatches_the_drain_and_keeps_the_rest():
    """Stage 3 frees only the ordering's last ``window + 1`` steps (plus ``window`` new ones): the
    tasks before them keep their steps, and on trn1_32 allgather (16 chunks, 1 GiB) the drain's
    trailing step of intra-chip copies is re-batched: 2782.8 -> 2772.7 µs."""
    from synth.encodings.milp.encoding import _Phase
    from synth.encodings.milp.schedule import order, plan_cost, schedule_tasks
    from synth.encodings.options import MilpOptions
    from synth.encodings.work import WorkBudget
    from synth.topology import MB

    topo = load_topology("trn1_32")
    _, links, policies = resolve_sketch(topo, None)
    phase = _Phase.solve(topo, make_collective("allgather", 32, 16), links, policies,
                         reverse=False, opts=MilpOptions(), solver="highs", work=None,
                         safety=WorkBudget(60), progress=None)
    chunk_mb = 2**30 / (32 * 16) / MB
    initial, cost, _ = order(phase.tasks, chunk_mb)
    steps, report = schedule_tasks(phase.tasks, initial, chunk_mb, window=2, solver="highs",
                                   time_limit_s=120, work=10)
    first = max(initial) - 2
    assert all(s == s0 for s, s0 in zip(steps, initial, strict=True) if s0 < first)
    assert plan_cost(phase.tasks, steps, chunk_mb) < cost - 5
    assert report["stage3"].startswith("highs: optimal")


def test_node_budget_shrinks_with_the_model_and_big_roots_are_not_started():
    """A work unit buys fewer nodes of a bigger model, and a model whose root alone may cost more
    than ``max_root_work`` is not solved (dgx2 x 2's routing roots ran minutes past the budget)."""
    from synth.encodings.milp.route import NoRouting, route
    from synth.encodings.milp.solvers import solve_milp
    from synth.encodings.work import nodes_for, root_work, units_for_nodes

    assert nodes_for(10, 0) == nodes_for(10, 2000) == 2000
    assert nodes_for(10, 20000) < nodes_for(10, 8000) < 2000
    assert units_for_nodes(nodes_for(10, 50000), 50000) == pytest.approx(10, rel=0.05)
    assert root_work(155634) > 100 * root_work(6000)

    topo = load_topology("torus:2x2")
    problem = build_problem(topo, make_collective("allgather", 4, 2), all_links(topo))
    model, _ = build_routing_model(problem, ())
    result = solve_milp(model, "highs", work=10, max_root_work=1e-6)
    assert (result.status, result.stopped_by, result.nodes, result.work_used) == \
        ("no_solution", "work", 0, 0.0)
    assert "not started" in result.note
    with pytest.raises(NoRouting) as err:
        route(problem, (), solver="highs", time_limit_s=60, mip_gap=None, work=10,
              max_root_work=1e-6)
    assert err.value.result.work_used == 0.0
    assert route(problem, (), solver="highs", time_limit_s=60, mip_gap=None, work=10,
                 max_root_work=1e6).result.status == "optimal"


@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_a_finer_chunking_can_follow_a_coarser_routing(kind):
    """When a chunking's own routing model is not solved, its pieces follow the routes of a chunking
    that divides it: same load on every resource, a verified schedule, and the phase says so."""
    from synth.encodings.milp.encoding import _Phase
    from synth.encodings.milp.schedule import orbit_totals
    from synth.encodings.options import MilpOptions
    from synth.encodings.work import WorkBudget
    from synth.schedule import Schedule
    from synth.topology import MB

    topo = load_topology("torus:2x2")
    base = _Phase.solve(topo, make_collective(kind, 4, 1), all_links(topo), (), reverse=False,
                        opts=MilpOptions(), solver="highs", work=None, safety=WorkBudget(60),
                        progress=None)
    fine = _Phase.split(base, make_collective(kind, 4, 3))
    assert fine is not None and fine.split_from == 1 and fine.describe()["routing_split_from"] == 1
    assert len(fine.tasks) == 3 * len(base.tasks)
    coarse_load, fine_load = orbit_totals(base.tasks), orbit_totals(fine.tasks)
    assert fine_load.keys() == coarse_load.keys()
    assert all(fine_load[o] == pytest.approx(3 * w) for o, w in coarse_load.items())
    assert _Phase.split(base, make_collective("allgather" if kind == "alltoall" else "alltoall",
                                              4, 2)) is None
    assert _Phase.split(fine, make_collective(kind, 4, 4)) is None  # 3 does not divide 4
    chunk_mb = 2**30 / 12 / MB
    initial, _, rate = fine.order(chunk_mb)
    steps, _ = fine.finish(initial, rate, chunk_mb, window=0, solver="highs", work=1.0,
                           safety=WorkBudget(60), progress=None)
    coll = make_collective(kind, 4, 3)
    verify(Schedule(coll, topo.name, topo.content_hash, tuple(steps), "milp", "milp", {}), topo)


def test_an_unstarted_routing_is_charged_nothing():
    """A chunking whose routing model is not started (its root over the cap) fails with the work
    its models used, 0, so the chunkings after it keep the routing budget; one that runs is
    charged its nodes."""
    from synth.encodings.milp.encoding import _Phase, _Unrouted
    from synth.encodings.options import MilpOptions
    from synth.encodings.work import WorkBudget

    topo = load_topology("torus:2x2")
    kw = dict(reverse=False, opts=MilpOptions(), solver="highs", work=10.0,
              safety=WorkBudget(60), progress=None)
    coll = make_collective("allgather", 4, 2)
    with pytest.raises(_Unrouted) as err:
        _Phase.solve(topo, coll, all_links(topo), (), max_root_work=1e-6, **kw)
    assert err.value.work_used == 0.0 and "not started" in err.value.message
    phase = _Phase.solve(topo, coll, all_links(topo), (), max_root_work=1e6, **kw)
    assert 0.0 < phase.work_used <= 10.0


def test_unstarted_chunkings_follow_the_coarsest_routing(monkeypatch):
    """With every root priced over the cap, only the coarsest chunking is solved (it always runs:
    nothing coarser to cut) and every finer one is its routing cut into pieces."""
    import synth.encodings.milp.solvers as solvers
    from synth.encodings.milp.encoding import _Phase

    monkeypatch.setattr(solvers, "root_work", lambda nonzeros: 1e9)
    cut: list[tuple[int, int]] = []
    split = _Phase.split.__func__

    def recorded(cls, base, routed):
        cut.append((base.problem.collective.chunks_per_rank, routed.chunks_per_rank))
        return split(cls, base, routed)

    monkeypatch.setattr(_Phase, "split", classmethod(recorded))
    topo = load_topology("torus:4x4")
    schedule = milp_encoding(topo, make_collective("allgather", 16, 1),
                             Options(time_limit_s=60, extra=FAST))["milp"]
    verify(schedule, topo)
    tried = schedule.meta["chunkings_tried"]
    assert cut == [(1, k) for k in tried if k > 1] and len(cut) >= 3
    assert schedule.meta["chunkings_not_routed_in_time"] == []


def test_a_coarse_candidate_keeps_a_smaller_program():
    """Besides the cheapest chunking, ``milp_coarse`` is the best with at most half its chunks (the
    program model may prefer its smaller XML at more instances); both verify."""
    topo = load_topology("torus:4x4")
    out = milp_encoding(topo, make_collective("allgather", 16, 1), Options(time_limit_s=60,
                                                                          extra=FAST))
    assert set(out) == {"milp", "milp_coarse", "milp_1MB"}
    main, coarse = out["milp"], out["milp_coarse"]
    assert 2 <= coarse.collective.chunks_per_rank <= main.collective.chunks_per_rank // 2
    assert coarse.meta["chunkings_tried"] == main.meta["chunkings_tried"]
    for schedule in (main, coarse):
        verify(schedule, topo)


def test_a_wide_stage3_window_runs_after_the_narrow_one_and_never_loses():
    from synth.encodings.milp.encoding import _Phase
    from synth.encodings.milp.schedule import order, plan_cost, schedule_tasks
    from synth.encodings.options import MilpOptions
    from synth.encodings.work import WorkBudget
    from synth.topology import MB

    topo = load_topology("torus:4x4")
    phase = _Phase.solve(topo, make_collective("allgather", 16, 4), all_links(topo), (),
                         reverse=False, opts=MilpOptions(), solver="highs", work=None,
                         safety=WorkBudget(60), progress=None)
    chunk_mb = 2**30 / 64 / MB
    initial, _, _ = order(phase.tasks, chunk_mb)
    narrow, _ = schedule_tasks(phase.tasks, initial, chunk_mb, window=2, solver="highs",
                               time_limit_s=120, work=10)
    wide, report = schedule_tasks(phase.tasks, initial, chunk_mb, window=4, solver="highs",
                                  time_limit_s=120, work=10)
    assert [p["window"] for p in report["stage3_passes"]] == [2, 4]
    assert plan_cost(phase.tasks, wide, chunk_mb) <= plan_cost(phase.tasks, narrow, chunk_mb) + 1e-9
    # a small stage-3 budget runs the narrow pass only (the wide one's nodes are too dear for it)
    _, small = schedule_tasks(phase.tasks, initial, chunk_mb, window=4, solver="highs",
                              time_limit_s=120, work=2)
    assert [p["window"] for p in small["stage3_passes"]] == [2]


def test_parallel_stage3_gives_the_inline_schedules(monkeypatch):
    """Stage 3 on worker processes (``PARALLEL_WORKERS``) returns the same candidates, in the same
    order, byte for byte (meta included), as the inline path: each scheduling MILP has its own
    deterministic budget, and the results are assembled in pick order."""
    import synth.encodings.milp.encoding as enc

    pooled: list[bool] = []
    close = enc._Finishes.close

    def spy(self):
        pooled.append(self._pool is not None)
        close(self)

    monkeypatch.setattr(enc._Finishes, "close", spy)
    topo = load_topology("torus:4x4")

    def run(workers: int) -> dict[str, str]:
        monkeypatch.setattr(enc, "PARALLEL_WORKERS", workers)
        out = milp_encoding(topo, make_collective("allgather", 16, 1),
                            Options(time_limit_s=8, extra={"window": 2}))
        return {name: s.to_json() for name, s in out.items()}

    inline, parallel = run(1), run(2)
    assert pooled == [False, True]  # the second run did use worker processes
    assert list(inline) == list(parallel) == ["milp_1MB", "milp", "milp_coarse"]
    # stage 3 ran (a skipped stage 3 would make the comparison vacuous)
    assert all('"stage3_passes"' in text for text in inline.values())
    assert inline == parallel


def _routed_torus_phase():
    """A routed allgather phase on torus:2x2 (2 chunks per rank) and its ordering: stage-3 input
    small enough to solve in a test, inline or on a worker."""
    from synth.encodings.milp.encoding import _Phase
    from synth.encodings.milp.schedule import order
    from synth.encodings.options import MilpOptions
    from synth.encodings.work import WorkBudget

    topo = load_topology("torus:2x2")
    phase = _Phase.solve(topo, make_collective("allgather", 4, 2), all_links(topo), (),
                         reverse=False, opts=MilpOptions(), solver="highs", work=None,
                         safety=WorkBudget(60), progress=None)
    initial, _, _ = order(phase.tasks, 1.0)
    return phase, initial


def test_a_worker_error_surfaces_as_the_inline_one(monkeypatch):
    """A SynthError raised in a stage-3 worker comes back with the inline path's message and exit
    code when its result is asked for."""
    from synth.encodings.milp.encoding import _Finishes
    from synth.encodings.work import WorkBudget

    phase, initial = _routed_torus_phase()
    errors = []
    for workers in (1, 2):
        finishes = _Finishes(workers, WorkBudget(60), None)
        try:
            handle = finishes.submit(phase.tasks, initial, 1.0, window=2, solver="no-such-solver",
                                     work=1)
            with pytest.raises(SynthError) as exc:
                finishes.result(handle)
        except SynthError as raised:  # the inline path raises at submit
            assert workers == 1
            errors.append((raised.message, raised.exit_code))
        else:
            errors.append((exc.value.message, exc.value.exit_code))
        finally:
            finishes.close()
    assert errors[0] == errors[1] and "no-such-solver" in errors[0][0]


def test_stage3_workers_setting(monkeypatch):
    """``SYNTH_MILP_WORKERS`` sets the stage-3 processes; a bad value is a clear error; by default
    a small request stays inline (a worker's start would cost more than its scheduling MILPs)."""
    import synth.encodings.milp.encoding as enc

    monkeypatch.setattr(enc, "PARALLEL_WORKERS", None)
    monkeypatch.delenv(enc.WORKERS_ENV, raising=False)
    assert enc.scheduling_workers(enc.PARALLEL_MIN_TASKS - 1) == 1
    monkeypatch.setenv(enc.WORKERS_ENV, "3")
    assert enc.scheduling_workers(1) == 3
    monkeypatch.setenv(enc.WORKERS_ENV, "zero")
    with pytest.raises(SynthError, match=enc.WORKERS_ENV):
        enc.scheduling_workers(1)


def test_a_dead_worker_falls_back_to_the_inline_solve():
    """A stage-3 worker that dies (killed, or unable to start under the address-space backstop)
    breaks the pool; its plan, and any submitted after, are then solved in this process, with
    the inline path's answer."""
    import os
    import signal
    from concurrent.futures.process import BrokenProcessPool

    from synth.encodings.milp.encoding import _Finishes
    from synth.encodings.work import WorkBudget

    phase, initial = _routed_torus_phase()
    results = []
    for workers in (1, 2):
        finishes = _Finishes(workers, WorkBudget(60), None)
        try:
            handle = finishes.submit(phase.tasks, initial, 1.0, window=2, solver="highs", work=1)
            if workers == 2:
                future = finishes._jobs[handle][0]
                for pid in list(finishes._pool._processes):  # still importing: seconds from done
                    os.kill(pid, signal.SIGKILL)
                assert isinstance(future.exception(timeout=60), BrokenProcessPool)
                # a plan submitted after the pool broke is solved here as well
                later = finishes.submit(phase.tasks, initial, 1.0, window=2, solver="highs", work=1)
                assert finishes._jobs[later][0] is None
                assert finishes.result(later) == finishes.result(handle)
            results.append(finishes.result(handle))
        finally:
            finishes.close()
    assert results[0] == results[1]
