"""The SMT (SCCL) encoding: known SAT/UNSAT answers, both engines, constructions, searches, CLI.

Known answers were cross-checked against SCCL (msccl-tools) itself by ``benchmarks/smt.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.collectives import custom_collective, make_collective
from synth.encodings import Options, run_encoding
from synth.encodings.smt.encoding import NoAlgorithm, SmtProblem, least_steps, pareto, smt_encoding
from synth.encodings.smt.model import ModelBuilder, demand_of, network
from synth.encodings.smt.search import pareto_sccl
from synth.encodings.work import WorkBudget
from synth.errors import NotApplicable, SynthError
from synth.schedule import Schedule
from synth.topology_io import load_topology
from synth.verify import verify


def _problem(topo: str, kind: str, root: int | None = None, engine: str = "cpsat") -> SmtProblem:
    t = load_topology(topo)
    return SmtProblem(t, make_collective(kind, t.num_ranks, 1, root), engine=engine)


def _check(problem: SmtProblem, steps: int, rounds: int, chunks: int) -> str:
    res = problem.solve(steps, rounds, chunks, time_limit_s=30)
    if res.status == "sat":
        assert res.schedule is not None
        verify(res.schedule, problem.topology)
        assert res.schedule.num_steps == steps and res.schedule.total_rounds <= rounds
        assert res.schedule.collective.chunks_per_rank == chunks
        # the file round-trips byte for byte
        text = res.schedule.to_json()
        assert Schedule.from_json(text).to_json() == text
    return res.status


# ring:4 answers (SCCL agrees on every one; see results/smt.md)
RING4 = {
    "allgather": {(1, 1, 1): "unsat", (1, 3, 1): "unsat", (2, 2, 1): "sat", (2, 2, 2): "unsat",
                  (2, 3, 2): "sat", (3, 3, 2): "sat"},
    "alltoall": {(2, 2, 1): "sat", (2, 3, 2): "unsat", (3, 3, 2): "unsat", (2, 4, 2): "sat"},
    "reducescatter": {(1, 2, 1): "unsat", (2, 2, 1): "sat", (2, 2, 2): "unsat", (2, 3, 2): "sat"},
}


@pytest.mark.parametrize("kind", sorted(RING4))
def test_ring4_known_answers_both_engines(kind):
    for engine in ("cpsat", "z3"):
        problem = _problem("ring:4", kind, engine=engine)
        for inst, want in RING4[kind].items():
            assert _check(problem, *inst) == want, (engine, kind, inst)


def test_dgx1_allgather_known_answers():
    problem = _problem("dgx1", "allgather")
    assert _check(problem, 2, 3, 2) == "sat"
    assert _check(problem, 2, 2, 2) == "unsat"  # below the 7/6 rounds-per-chunk bound
    assert _check(problem, 2, 4, 3) == "unsat"  # a real proof, not a bound
    assert _check(problem, 3, 4, 3) == "sat"


def test_engines_agree_on_dgx1_instances():
    for kind, root, insts in (("allgather", None, [(2, 4, 3), (2, 3, 2)]),
                              ("gather", 0, [(2, 6, 5), (2, 5, 4)]),
                              ("alltoall", None, [(2, 3, 1), (2, 2, 1)])):
        answers = [[_check(_problem("dgx1", kind, root, engine), *i) for i in insts]
                   for engine in ("cpsat", "z3")]
        assert answers[0] == answers[1], (kind, answers)


def test_symmetry_breaking_keeps_answers():
    """The full model (with lex-leader symmetry breaking) and the plain one agree."""
    for topo in ("ring:5", "line:4", "torus:2x3"):
        t = load_topology(topo)
        for kind in ("allgather", "alltoall", "scatter"):
            problem = SmtProblem(t, make_collective(kind, t.num_ranks, 1, 0 if kind == "scatter"
                                                    else None))
            part = problem.family.part(2)
            for steps in (2, 3):
                for rounds in (steps, steps + 2):
                    verdicts = []
                    for name in ("plain", "full"):
                        status, _sol, _m = problem._run(part, steps, rounds, name, 30,
                                                        WorkBudget(30))
                        verdicts.append(status)
                    assert verdicts[0] == verdicts[1], (topo, kind, steps, rounds, verdicts)


def test_hop_pruning_and_steps_bound():
    t = load_topology("ring:8")
    builder = ModelBuilder(network(t), demand_of(make_collective("allgather", 8, 1)))
    assert builder.steps_lower_bound() == 4
    model = builder.build(4)
    net = network(t)
    for (c, e, s) in model.sends:
        a, _b = net.edges[e]
        assert net.dist[c][a] <= s - 1  # the sender can hold chunk c (owned by rank c) by then
    assert _problem("ring:8", "allgather").solve(3, 9, 1).reason.startswith("every algorithm needs")


@pytest.mark.parametrize("kind,root", [("reducescatter", None), ("reduce", 0), ("allreduce", None),
                                       ("broadcast", 2), ("scatter", 1), ("gather", 3)])
def test_constructions_verify(kind, root):
    problem = _problem("dgx1", kind, root)
    report = least_steps(problem, chunks=2, time_limit_s=30)
    assert report.points, report.stop
    sched = report.points[0].schedule
    verify(sched, problem.topology)
    if kind in ("reducescatter", "reduce"):
        assert all(t.op == "reduce" for s in sched.steps for t in s.transfers)
    if kind == "allreduce":
        assert sched.meta["construction"] == "reducescatter+allgather"


def test_pareto_frontiers():
    ring = pareto(_problem("ring:8", "allgather"), time_limit_s=30)
    assert ring.complete and [(p.steps, p.rounds, p.chunks) for p in ring.points] == [(4, 7, 2)]
    dgx1 = pareto(_problem("dgx1", "allgather"), time_limit_s=30)
    assert [(p.steps, p.rounds, p.chunks) for p in dgx1.points] == [(2, 3, 2), (3, 7, 6)]
    for p in dgx1.points:
        verify(p.schedule, load_topology("dgx1"))
    # SCCL's walk with its monotonicity assumption misses (S2, R7, C6) for gather; the exact walk
    # finds it (SCCL's own solver confirms that instance SAT)
    exact = pareto(_problem("dgx1", "gather", 0), time_limit_s=30)
    assert [(p.steps, p.rounds, p.chunks) for p in exact.points] == [(2, 7, 6)]
    literal = pareto_sccl(_problem("dgx1", "gather", 0), time_limit_s=30)
    assert [(p.steps, p.rounds, p.chunks) for p in literal.points] == [(2, 5, 4), (3, 7, 6)]


def test_least_steps_skips_by_bounds():
    report = least_steps(_problem("trn1_32", "allgather"), time_limit_s=60)
    assert report.points[0].steps == 7  # 31 chunks over 5 in-links need 7 rounds
    assert report.steps_lb == 5


def test_encoding_entry_points():
    t = load_topology("ring:4")
    coll = make_collective("allgather", 4, 2)
    found = smt_encoding(t, coll, Options(extra={"steps": 2, "rounds": 3}))
    (sched,) = found.values()
    verify(sched, t)
    with pytest.raises(NoAlgorithm, match="no algorithm with 2 steps, 2 rounds, 2 chunks"):
        smt_encoding(t, coll, Options(extra={"steps": 2, "rounds": 2}))
    # auto: cheap only; 32 ranks step aside quickly
    big = load_topology("trn1_32")
    with pytest.raises(NotApplicable, match="16 ranks"):
        smt_encoding(big, make_collective("allgather", 32, 1), Options())
    assert any(name.startswith("smt_") for name in
               run_encoding("auto", t, make_collective("allgather", 4, 1), Options()))


def test_unsupported_combining_collective():
    t = load_topology("ring:4")
    coll = custom_collective({"ranks": 4, "chunks": 1, "combining": True,
                              "pre": {0: [0, 1, 2, 3]}, "post": {0: [0, 1]}}, "x")
    with pytest.raises(NotApplicable, match="baseline"):
        SmtProblem(t, coll)


# ---------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("args,needle", [
    (["--steps", "0"], "--steps must be in 1..1024"),
    (["--steps", "3", "--rounds", "2"], "must be at least --steps"),
    (["--steps", "2", "--chunks", "0"], "--chunks must be at least 1"),
    (["--steps", "2", "--least-steps"], "exclude each other"),
    (["--steps", "2", "--engine", "cplex"], "unknown engine"),
])
def test_cli_bad_input(synth_cli, tmp_path, args, needle):
    r = synth_cli("solve", "--encoding", "smt", "--topo", "ring:4", "--coll", "allgather", *args,
                  "--out", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_cli_unsat_and_sat(synth_cli, tmp_path):
    r = synth_cli("solve", "--encoding", "smt", "--topo", "dgx1", "--coll", "allgather",
                  "--steps", "2", "--rounds", "2", "--chunks", "2", "--out", str(tmp_path))
    assert r.returncode == 2 and "no algorithm with 2 steps, 2 rounds, 2 chunks" in r.stderr
    r = synth_cli("solve", "--encoding", "smt", "--topo", "dgx1", "--coll", "allgather",
                  "--steps", "2", "--rounds", "3", "--chunks", "2", "--engine", "z3", "--json",
                  "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["steps"], data["rounds"], data["chunks_per_rank"]) == (2, 3, 2)


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_cli_pareto_json(synth_cli, tmp_path):
    plot = tmp_path / "front.png"
    r = synth_cli("pareto", "--topo", "ring:4", "--coll", "allgather", "--json", "--out",
                  str(tmp_path / "o"), "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["steps"], x["rounds"], x["chunks"]) for x in rows] == [(2, 3, 2)]
    for row in rows:
        assert set(row) >= {"steps", "rounds", "chunks", "solve_seconds", "files", "costs"}
        assert row["costs"][0]["bytes"] == 1024 and row["costs"][-1]["bytes"] == 2**30
        for f in row["files"]:
            again = synth_cli("verify", f)
            assert again.returncode == 0, again.stderr
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_cli_pareto_limit_and_bad_input(synth_cli, tmp_path):
    r = synth_cli("pareto", "--topo", "dgx1", "--coll", "broadcast", "--time-limit", "2",
                  "--out", str(tmp_path))
    assert r.returncode == 3, r.stderr
    assert "best found" in r.stderr and "Proven" in r.stderr
    r = synth_cli("pareto", "--topo", "ring:4", "--coll", "allgather", "--max-steps", "0")
    assert r.returncode == 2 and "--max-steps" in r.stderr
    r = synth_cli("pareto", "--topo", "ring:4", "--coll", "allgather", "--plot", "x.svg")
    assert r.returncode == 2 and "PNG" in r.stderr


def test_cli_analyze(synth_cli):
    r = synth_cli("analyze", "steps", "--topo", "ring:8", "--coll", "allgather", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["steps"] == 4
    r = synth_cli("analyze", "rounds", "--topo", "dgx1", "--coll", "alltoall", "--json")
    data = json.loads(r.stdout)
    assert data["rounds_per_chunk"] == "8/3" and data["sccl_lp"] == "5/3"


@pytest.mark.slow  # long end-to-end case: .ci/run runs it in its second pass
def test_schedule_files_are_deterministic(synth_cli, tmp_path):
    outs = []
    for sub in ("a", "b"):
        r = synth_cli("pareto", "--topo", "dgx1", "--coll", "allgather", "--json", "--out",
                      str(tmp_path / sub))
        assert r.returncode == 0, r.stderr
        outs.append([Path(f).read_bytes() for row in json.loads(r.stdout) for f in row["files"]])
    assert outs[0] == outs[1]


def test_custom_chunks_rejected():
    t = load_topology("ring:4")
    coll = custom_collective({"ranks": 4, "chunks": 1, "pre": {0: [0]}, "post": {0: [0, 1, 2, 3]}},
                             "x")
    with pytest.raises(SynthError, match="--chunks 1"):
        smt_encoding(t, coll, Options(chunks=2, extra={"steps": 2}))
