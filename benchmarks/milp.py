"""MILP encoding benchmark (issue 4): TACCL-style synthesis with sketches, on open solvers.

Writes ``results/milp.md``, ``results/milp.json`` and ``results/milp.png``.

    python benchmarks/milp.py                      # every problem + solver comparison (~20 min)
    python benchmarks/milp.py --only trn1_ag,ndv2x2_ag
    python benchmarks/milp.py --quick              # no solver comparison, no SMT frontier
    python benchmarks/milp.py --time-scale 0.5     # every time limit halved

Every problem runs in a fresh subprocess; its timings start after the imports (OR-Tools, PuLP,
SciPy and the encoding's modules are loaded first, outside the clock, as ``benchmarks/smt.py`` does).
What is measured, per problem:

* **synthesis s**: wall time of ``run_encoding("milp", ...)`` (every stage of every chunking it
  tries, both candidates ``milp`` and ``milp_1MB``); **verify s**: :func:`synth.verify.verify` on
  every candidate. The bar is checked against synthesis + verify.
* **% of bound at 1 GB** (1 GB = 2^30 bytes): :func:`synth.bounds.lower_bound` time divided by the
  MILP's time under :mod:`synth.timing.lockstep`, taking the better of the candidates ``milp`` and
  ``milp_1MB`` at each size (as a catalog would).
* **baselines**: every NCCL-style baseline that applies (``--encoding baseline``, each with its
  preferred chunk count), verified and costed at every size 1 KB .. 1 GB; the worst ratio MILP /
  best baseline over the sweep says whether the MILP is ever slower.
* **model sizes** and statuses from ``schedule.meta["stages"]`` (one entry per routed phase:
  allreduce has a reduce phase and an allgather phase).

Time limits: the sketches' hints (300-600 s) are above most bars, so each problem passes
``time_limit_s``, a deterministic work budget (about a second a unit here), chosen so that the
*worst case* (the routing MILPs' shared ``0.6 x time_limit``, and every stage-3 MILP at
``min(0.25 x time_limit, 10 s)``) stays within 80% of the bar; the rest is left for model
building, ordering, replication and verifying.

The dgx1 allgather bar compares with the SMT encoding's Pareto frontier (SCCL-style, CP-SAT),
computed here in the same run (``synth.encodings.smt.search.pareto``), every point verified.
The solver comparison runs three problems again with CBC and CP-SAT (same time limits).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import (
    RESULTS,
    ROOT,
    changed_since,
    commit,
    cpus,
    load_average,
    machine,
    modified,
    platform_name,
    python_version,
    stopwatch,
    write_results,
)

GB = 2**30
SIZES = tuple(2**e for e in range(10, 31))
"""1 KB .. 1 GB in powers of two (synth.sizes.DEFAULT_SIZES)."""
TACCL_NDV2X2_GBPS = 18.6
TECCL_NDV2X2_GBPS = 22.86
SMT_LIMIT_S = 180.0
WORST_CASE_SHARE = 0.8
"""The worst case of the time limits may use this share of a problem's time bar."""


@dataclass(frozen=True)
class Problem:
    key: str
    topo: str
    nodes: int
    kind: str
    min_pct: float | None
    max_s: float
    never_slower: bool = False
    """The bar also asks: never slower than the best baseline at any size 1 KB .. 1 GB."""
    smt_within: float | None = None
    """The bar is: 1 GB time within this fraction of the SMT frontier's best (dgx1)."""
    timed: bool = True
    """False: the issue sets no time bar; ``max_s`` only sizes the time limit."""


PROBLEMS = [
    Problem("trn1_ag", "trn1_32", 1, "allgather", 95.0, 60, never_slower=True),
    Problem("trn1_ar", "trn1_32", 1, "allreduce", 90.0, 180),
    Problem("trn1_rs", "trn1_32", 1, "reducescatter", 90.0, 180),
    Problem("trn1_a2a", "trn1_32", 1, "alltoall", 90.0, 180),
    Problem("ndv2x2_ag", "ndv2", 2, "allgather", 95.0, 60),
    Problem("dgx2x2_ag", "dgx2", 2, "allgather", 90.0, 300),
    Problem("dgx2x2_a2a", "dgx2", 2, "alltoall", 90.0, 600),
    Problem("a100x4_ag", "dgx_a100", 4, "allgather", 90.0, 300),
    Problem("a100x4_ar", "dgx_a100", 4, "allreduce", 90.0, 300),
    Problem("dgx1_ag", "dgx1", 1, "allgather", None, 120, smt_within=0.05, timed=False),
]
SOLVER_PROBLEMS = ("ndv2x2_ag", "trn1_ag", "dgx2x2_a2a")
SOLVERS = ("highs", "cbc", "cpsat")


def problem(key: str) -> Problem:
    for p in PROBLEMS:
        if p.key == key:
            return p
    raise SystemExit(f"unknown problem {key}; known: {', '.join(p.key for p in PROBLEMS)}")


# ------------------------------------------------------------------------------ time limits
def worst_case_s(topology, kind: str, time_limit: float) -> tuple[float, int, int]:
    """(worst-case MILP seconds, routing MILPs, stage-3 MILPs) of ``milp_encoding`` at this limit.

    The limit is a work budget (:mod:`synth.encodings.work`, about a second a unit on this
    machine): the routing MILPs of every chunking and direction share ``ROUTING_SHARE`` of it (a
    model whose root alone may take more than ``ROOT_SHARE`` of that is not started), and each
    stage-3 MILP (one per candidate and direction) gets ``min(0.25 x limit, STAGE3_MAX_S)``.
    """
    from synth.encodings.milp.encoding import (
        CHUNK_MULTIPLES,
        MAX_REP_TASKS,
        ROUTING_SHARE,
        STAGE3_MAX_S,
    )
    from synth.sketches import sketch_for

    sketch = sketch_for(topology)
    n = topology.num_ranks
    k0 = sketch.chunks_per_rank if sketch is not None else 1
    per_k = (n - 1) * (n - 1 if kind == "alltoall" else 1)
    ks = {k0 * m for m in CHUNK_MULTIPLES if k0 * m * per_k <= MAX_REP_TASKS} or {k0}
    directions = 2 if kind == "allreduce" else 1
    routing = len(ks | {1}) * directions
    stage3 = 2 * directions
    return (ROUTING_SHARE * time_limit + stage3 * min(0.25 * time_limit, STAGE3_MAX_S), routing,
            stage3)


def time_limit_for(topology, p: Problem, scale: float = 1.0) -> float:
    """The largest limit (0.1 s grid) whose worst case fits ``WORST_CASE_SHARE`` of the bar."""
    from synth.sketches import sketch_for

    sketch = sketch_for(topology)
    hint = float((sketch.hints if sketch is not None else {}).get("time_limit_s") or 600.0)
    budget = WORST_CASE_SHARE * p.max_s
    lo, hi = 0.1, hint
    if worst_case_s(topology, p.kind, hi)[0] <= budget:
        return round(hint * scale, 1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if worst_case_s(topology, p.kind, mid)[0] <= budget else (lo, mid)
    return round(math.floor(lo * 10) / 10 * scale, 1)


# ------------------------------------------------------------------------------ one problem (child)
def _status(outcome: str | None) -> str | None:
    """``"highs: optimal, objective 312.5, gap 0.00%"`` -> ``"optimal"`` (``"skipped"`` as is)."""
    if not outcome:
        return None
    return outcome.split(": ", 1)[-1].split(",")[0].split(";")[0].strip()


def recorder():
    """A :class:`~synth.progress.SolverProgress` that records every MILP solve, silently.

    The encoding's stage reports carry no wall-clock figures (its schedules are byte-identical per
    input), so per-solve seconds come from here: ``solve_milp`` calls ``begin``/``end`` around
    every routing, scheduling and diagnosis solve.
    """
    from synth.progress import SolverProgress as Progress

    class Recorder(Progress):
        def __init__(self) -> None:
            super().__init__(enabled=False)
            self.log: list[dict] = []
            self._t = stopwatch()
            self.current = ""

        def begin(self, stage: str, solver: str) -> None:
            self._t = stopwatch()
            self.current = stage

        def update(self, *, incumbent=None, bound=None) -> None:
            pass

        def end(self, result) -> None:
            self.current = ""
            self.log.append({"stage": result.stage, "solver": result.solver, "status": result.status,
                             "objective": result.objective, "bound": result.best_bound,
                             "gap": result.gap, "seconds": round(self._t(), 3),
                             "solver_seconds": round(result.seconds, 3),
                             "variables": result.variables,
                             "integer_variables": result.integer_variables,
                             "constraints": result.constraints})

    return Recorder()


def _phases(schedule) -> list[dict]:
    out = []
    n = schedule.collective.num_ranks
    k = schedule.collective.chunks_per_rank
    chunk_mb = schedule.meta.get("planned_bytes", GB) / (n * k) / 1e6
    for st in schedule.meta.get("stages", []):
        rs, ss = st.get("routing_size", {}), st.get("stage3_size", {})
        out.append({
            "direction": st.get("direction"), "group": st.get("group"),
            "rep_chunks": st.get("rep_chunks"), "candidate_pairs": st.get("candidate_pairs"),
            "routing_variables": rs.get("variables"),
            "routing_integer_variables": rs.get("integer_variables"),
            "routing_constraints": rs.get("constraints"),
            "routing_status": _status(st.get("routing")), "routing_gap": st.get("routing_gap"),
            "routing": st.get("routing"),
            "routing_busiest_us_per_mb": st.get("routing_busiest_us_per_mb"),
            "routing_proxy_us": (None if st.get("routing_busiest_us_per_mb") is None
                                 else st["routing_busiest_us_per_mb"] * chunk_mb),
            "stage2_us": st.get("stage2_us"), "stage2_steps_per_load": st.get("stage2_steps_per_load"),
            "stage3_variables": ss.get("variables"), "stage3_constraints": ss.get("constraints"),
            "stage3_status": _status(st.get("stage3")), "stage3": st.get("stage3"),
            "stage3_us": st.get("stage3_us"), "window": st.get("window"),
        })
    return out


def run_problem(p: Problem, solver: str, time_limit: float | None, scale: float,
                baselines: bool, smt: bool, diagnose: bool = False) -> dict:
    """Inside the child: synthesise, verify, cost against the bound and the baselines."""
    import scipy.optimize

    import synth.encodings.milp.encoding  # noqa: F401  (loads OR-Tools, then PuLP: outside the clock)
    from synth.bounds import lower_bound
    from synth.collectives import make_collective
    from synth.encodings import Options, run_encoding
    from synth.select.candidates import cost_profile
    from synth.sketches import sketch_for
    from synth.timing.lockstep import schedule_times_us
    from synth.topology_io import load_topology
    from synth.verify import verify

    scipy.optimize.linprog([1.0], bounds=[(0, 1)], method="highs")
    topo = load_topology(p.topo, nodes=p.nodes)
    n = topo.num_ranks
    coll = make_collective(p.kind, n)
    sketch = sketch_for(topo)
    if time_limit is None:
        time_limit = time_limit_for(topo, p, scale)
    worst, n_routing, n_stage3 = worst_case_s(topo, p.kind, time_limit)
    out: dict = {"key": p.key, "topology": f"{p.topo} x {p.nodes}", "ranks": n,
                 "collective": p.kind, "solver": solver, "sketch": sketch.name if sketch else None,
                 "time_limit_s": time_limit, "worst_case_milp_s": round(worst, 1),
                 "routing_milps_max": n_routing, "stage3_milps_max": n_stage3}
    t = stopwatch()
    bound = lower_bound(topo, coll)
    out["bound_s"] = t()
    out["bound_method"] = bound.method
    out["bound_us_1GB"] = bound.time_us(GB)
    out["bound_algbw_GBps_1GB"] = GB / (bound.time_us(GB) * 1e3)

    rec = recorder()
    _CHILD["recorder"] = rec
    t = stopwatch()
    found = run_encoding("milp", topo, coll,
                         Options(time_limit_s=time_limit, extra={"solver": solver, "progress": rec}))
    out["synth_s"] = t()
    out["milp_solves"] = rec.log
    for stage in ("routing", "scheduling"):
        mine = [x for x in rec.log if x["stage"] == stage]
        out[f"{stage}_solves"] = len(mine)
        out[f"{stage}_s"] = sum(x["seconds"] for x in mine)
        out[f"{stage}_at_limit"] = sum(x["status"] not in ("optimal", "infeasible") for x in mine)
    cands = {}
    reports = {}
    t = stopwatch()
    for name in sorted(found):
        reports[name] = verify(found[name], topo)  # raises on any failure
    out["verify_s"] = t()
    out["verified"] = True
    for name in sorted(found):
        s, rep = found[name], reports[name]
        prof = cost_profile(s, topo, SIZES, bound)
        cands[name] = {"chunks_per_rank": s.collective.chunks_per_rank, "steps": rep.steps,
                       "transfers": rep.transfers, "why": s.meta.get("why"),
                       "chunkings_tried": s.meta.get("chunkings_tried"),
                       "planned_bytes": s.meta.get("planned_bytes"),
                       "times_us": [pt.time_us for pt in prof],
                       "pct_of_bound": [pt.pct_of_bound for pt in prof],
                       "phases": _phases(s), **resource_floor(s, topo)}
    out["candidates"] = cands
    best_t = [min(c["times_us"][i] for c in cands.values()) for i in range(len(SIZES))]
    best_n = [min(cands, key=lambda c, i=i: cands[c]["times_us"][i]) for i in range(len(SIZES))]
    out["milp_times_us"] = best_t
    out["milp_best_candidate"] = best_n
    out["time_us_1GB"] = best_t[-1]
    out["candidate_1GB"] = best_n[-1]
    out["pct_of_bound_1GB"] = 100.0 * bound.time_us(GB) / best_t[-1]
    out["algbw_GBps_1GB"] = GB / (best_t[-1] * 1e3)

    if baselines:
        t = stopwatch()
        base = run_encoding("baseline", topo, coll, Options())
        bt: dict[str, list[float]] = {}
        for name in sorted(base):
            verify(base[name], topo)
            bt[name] = [float(x) for x in schedule_times_us(base[name], topo, SIZES)]
        out["baselines_s"] = t()
        out["baseline_times_us"] = bt
        bb_t = [min(v[i] for v in bt.values()) for i in range(len(SIZES))]
        bb_n = [min(bt, key=lambda b, i=i: bt[b][i]) for i in range(len(SIZES))]
        ratios = [m / b for m, b in zip(best_t, bb_t, strict=True)]
        worst_i = max(range(len(SIZES)), key=ratios.__getitem__)
        out["best_baseline_1GB"] = bb_n[-1]
        out["best_baseline_pct_1GB"] = 100.0 * bound.time_us(GB) / bb_t[-1]
        out["best_baseline_times_us"] = bb_t
        out["best_baseline_names"] = bb_n
        out["ratio_vs_best_baseline"] = ratios
        out["worst_ratio"] = ratios[worst_i]
        out["worst_ratio_bytes"] = SIZES[worst_i]
        out["worst_ratio_baseline"] = bb_n[worst_i]
        out["slower_sizes"] = [SIZES[i] for i, r in enumerate(ratios) if r > 1 + 1e-9]
        out["never_slower"] = not out["slower_sizes"]
    if smt and p.smt_within is not None:
        out["smt"] = smt_frontier(topo, bound)
    if diagnose and misses_quality(p, out) and p.kind != "alltoall":
        ks = {cands[out["candidate_1GB"]]["chunks_per_rank"]}
        best = (out.get("smt") or {}).get("best")
        if best:
            ks.add(best["chunks"])
        t = stopwatch()
        out["tree_hop_diagnostic"] = tree_hop_diagnostic(topo, bound, sorted(ks), solver)
        out["diagnostic_s"] = t()
    return out


def misses_quality(p: Problem, r: dict) -> bool:
    if p.min_pct is not None and r["pct_of_bound_1GB"] < p.min_pct:
        return True
    best = (r.get("smt") or {}).get("best")
    return bool(p.smt_within is not None and best
                and r["time_us_1GB"] > (1 + p.smt_within) * best["time_us_1GB"])


def resource_floor(schedule, topo) -> dict:
    """The schedule's busiest resource over all its steps at 1 GB, and its Σα over steps.

    ``floor_us`` is what the schedule would take if every resource streamed without step
    boundaries: above the bound it is the routing's fault, the rest (schedule time - floor) is the
    ordering into synchronous steps (α per step and per-step imbalance).
    """
    from synth.steps import step_loads

    chunk_mb = GB / schedule.collective.buffer_chunks / 1e6
    total: dict[tuple, float] = {}
    alpha = 0.0
    for step in schedule.steps:
        if not step.transfers:
            continue
        loads = step_loads(step.transfers, topo)
        for res, (cnt, _a, beta, lanes) in loads.items():
            total[res] = total.get(res, 0.0) + cnt * beta / lanes
        alpha += max(a for _, a, _, _ in loads.values())
    if not total:
        return {"floor_us": 0.0, "busiest": None, "busiest_count": 0, "alpha_sum_us": 0.0}
    top = max(total.values())
    busiest = sorted(r for r, v in total.items() if v >= top * (1 - 1e-9))
    return {"floor_us": top * chunk_mb, "busiest": "/".join(map(str, busiest[0])),
            "busiest_count": len(busiest), "alpha_sum_us": alpha}


def tree_hop_diagnostic(topo, bound, ks: list[int], solver: str, limit_s: float = 30.0) -> list[dict]:
    """Diagnostic only (no schedule): the routing MILP alone, with trees on the shortest-path DAG
    (what the encoding keeps when it is feasible) and with one extra tree hop (layered trees).

    Uses the encoding's internals (``resolve_sketch``, ``build_problem``, ``route``) exactly as
    ``_Phase`` does; reports the routing proxy (busiest orbit) at 1 GB as % of the bound.
    """
    from synth.collectives import make_collective
    from synth.encodings.milp.encoding import resolve_sketch
    from synth.encodings.milp.problem import build_problem
    from synth.encodings.milp.route import route

    out = []
    try:
        sketch, links, policies = resolve_sketch(topo, None)
        hops = int((sketch.hints if sketch is not None else {}).get("max_extra_hops", 0))
    except Exception as exc:  # the internals moved: say so, do not fail the benchmark
        return [{"error": f"{type(exc).__name__}: {str(exc)[:200]}"}]
    for k in ks:
        coll = make_collective("allgather", topo.num_ranks, k)
        chunk_mb = GB / (topo.num_ranks * k) / 1e6
        for tree_hops in (0, 1):
            rec = {"k": k, "tree_extra_hops": tree_hops, "limit_s": limit_s}
            t = stopwatch()
            try:
                prob = build_problem(topo, coll, links, extra_hops=hops, tree_extra_hops=tree_hops)
                r = route(prob, policies, solver=solver, time_limit_s=limit_s, mip_gap=None,
                          progress=None)
                proxy = r.objective_us_per_mb * chunk_mb
                rec.update({"status": r.result.status, "gap": r.result.gap,
                            "variables": r.result.variables, "constraints": r.result.constraints,
                            "proxy_us": proxy, "proxy_pct_of_bound": 100 * bound.time_us(GB) / proxy})
            except Exception as exc:
                rec["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:240]}"
            rec["seconds"] = t()
            out.append(rec)
    return out


def smt_frontier(topo, bound) -> dict:
    """The SMT encoding's Pareto frontier (CP-SAT), every point verified and costed at 1 GB."""
    from synth.collectives import make_collective
    from synth.encodings.smt.encoding import SmtProblem
    from synth.encodings.smt.search import pareto
    from synth.timing.lockstep import schedule_times_us
    from synth.verify import verify

    coll = make_collective("allgather", topo.num_ranks, 1)
    t = stopwatch()
    report = pareto(SmtProblem(topo, coll, engine="cpsat"), time_limit_s=SMT_LIMIT_S)
    points = []
    for pt in report.points:
        verify(pt.schedule, topo)
        tus = float(schedule_times_us(pt.schedule, topo, [GB])[0])
        points.append({"steps": pt.steps, "rounds": pt.rounds, "chunks": pt.chunks, "time_us_1GB": tus,
                       "pct_of_bound_1GB": 100.0 * bound.time_us(GB) / tus})
    best = min(points, key=lambda x: x["time_us_1GB"]) if points else None
    return {"seconds": t(), "complete": report.complete, "stop": report.stop,
            "source": f"computed in this run (synth.encodings.smt.search.pareto, CP-SAT, "
                      f"limit {SMT_LIMIT_S:g} s)", "points": points, "best": best}


_CHILD: dict = {}


def child_main(arg: str) -> None:
    job = json.loads(arg)
    try:
        res = run_problem(problem(job["key"]), job["solver"], job.get("time_limit"), job["scale"],
                          job["baselines"], job["smt"], job.get("diagnose", False))
    except (Exception, KeyboardInterrupt) as exc:  # reported in the tables (e.g. a solver that
        # cannot take a model); KeyboardInterrupt too: this benchmark sends no signal, so one
        # raised here comes from the encoding itself
        text = _fold(" ".join(str(exc).split()))
        if isinstance(exc, KeyboardInterrupt):
            text = "raised inside the encoding (this benchmark sends no signal)"
        rec = _CHILD.get("recorder")
        during = f" (during a {rec.current} MILP solve)" if rec is not None and rec.current else ""
        res = {"key": job["key"], "solver": job["solver"],
               "error": f"{type(exc).__name__}{during}: {text[:400]}{' …' if len(text) > 400 else ''}",
               "milp_solves": rec.log if rec is not None else []}
    print(json.dumps(res))


def run_child(key: str, solver: str, scale: float, *, baselines: bool, smt: bool,
              diagnose: bool = False, time_limit: float | None = None) -> dict:
    job = {"key": key, "solver": solver, "scale": scale, "baselines": baselines, "smt": smt,
           "diagnose": diagnose, "time_limit": time_limit}
    t = stopwatch()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)],
                          capture_output=True, text=True, cwd=ROOT)
    wall = t()
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["failed"])[-3:]
        return {"key": key, "solver": solver, "error": " | ".join(tail)[-600:], "process_wall_s": wall}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = wall
    return res


# ------------------------------------------------------------------------------ verdicts
def verdict(r: dict) -> tuple[str, list[str]]:
    """("meets"/"MISSES", what misses and by how much)."""
    p = problem(r["key"])
    misses = []
    total = r["synth_s"] + r["verify_s"]
    if p.timed and total > p.max_s:
        misses.append(f"time {total:.0f} s > {p.max_s:g} s (+{total - p.max_s:.0f} s)")
    if p.min_pct is not None and r["pct_of_bound_1GB"] < p.min_pct:
        misses.append(f"{r['pct_of_bound_1GB']:.1f}% < {p.min_pct:g}% of bound "
                      f"(-{p.min_pct - r['pct_of_bound_1GB']:.1f} pts)")
    if p.never_slower and not r.get("never_slower", True):
        misses.append(f"slower than the best baseline at {len(r['slower_sizes'])} size(s), worst "
                      f"{r['worst_ratio']:.3f}x at {_size(r['worst_ratio_bytes'])}")
    if p.smt_within is not None:
        best = (r.get("smt") or {}).get("best")
        if best is None:
            if not misses:
                return "unchecked", ["SMT frontier not computed in this run (--quick)"]
            misses.append("SMT comparison unchecked (no frontier computed)")
        else:
            rel = r["time_us_1GB"] / best["time_us_1GB"] - 1
            if rel > p.smt_within:
                misses.append(f"1 GB time {100 * rel:.1f}% above the SMT frontier's best (bar "
                              f"{100 * p.smt_within:g}%)")
    return ("meets" if not misses else "MISSES"), misses


def bar_text(p: Problem) -> str:
    parts = []
    if p.min_pct is not None:
        parts.append(f"≥ {p.min_pct:g}%")
    if p.smt_within is not None:
        parts.append(f"≤ SMT best +{100 * p.smt_within:g}%")
    if p.never_slower:
        parts.append("never slower than baselines")
    parts.append(f"≤ {p.max_s:g} s" if p.timed else f"no time bar (limit sized for {p.max_s:g} s)")
    return ", ".join(parts)


def _size(b: int) -> str:
    for unit, v in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if b >= v:
            return f"{b // v}{unit}"
    return f"{b}B"


def _fmt(v, spec: str = ".1f", none: str = "—") -> str:
    return none if v is None else format(v, spec)


def _tried(r: dict) -> str:
    return "{" + ", ".join(map(str, r["candidates"]["milp"].get("chunkings_tried") or [])) + "}"


def _fold(text: str) -> str:
    """Repeated ``name: N`` runs (CP-SAT's model dumps in its messages) folded to one."""
    return re.sub(r"(?:\b\w+: -?\d+ ?){3,}", "… ", text)


def _error(text: str, limit: int = 300) -> str:
    """An error for a table cell."""
    return _cell(_fold(text)[:limit])


def _dirty(meta: dict) -> str:
    files = meta.get("encoding_files_modified")
    return f" (with uncommitted changes: {', '.join(files)})" if files else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _pct(gap) -> str:
    return "—" if gap is None else f"{100 * gap:.2f}%"


def _join(vals, spec: str = "d") -> str:
    vals = [v for v in vals if v is not None]
    return "+".join(format(v, spec) for v in vals) if vals else "—"


# ------------------------------------------------------------------------------ report
def render(data: dict) -> str:
    m = data["meta"]
    res = [r for r in data["problems"]]
    lines = [
        "# MILP encoding (TACCL-style, issue 4): quality, time and model sizes", "",
        f"Measured by `python benchmarks/milp.py` on {m['machine']}, {m['cpus']} CPU cores shared "
        "with other jobs (timings are noisy: load average "
        f"{', '.join(f'{x:.1f}' for x in m.get('load_average_at_end', []))} at the end of the run; "
        "a time limit that stops a search also makes the result depend on the machine's speed). "
        "Python "
        f"{m['python']}; commit {m.get('commit') or '?'}"
        f"{_dirty(m)}{_moved(m)}"
        f". Total benchmark wall time {m['total_wall_s'] / 60:.1f} min"
        f"{' (this run: ' + m['scope'] + ')' if m.get('scope') else ''}.", "",
        "Cost model `synth.timing.lockstep` (synchronous steps, α-β); 1 GB = 2^30 bytes; % of bound = "
        "`synth.bounds.lower_bound` time / schedule time. The MILP's time at each size is the "
        "better of its two candidates (`milp`, planned for 1 GB with the best of several chunkings, "
        "and `milp_1MB`, one chunk per rank planned for 1 MB), as a catalog would pick. Every "
        "schedule — both MILP candidates and every baseline — passed `synth.verify.verify`. "
        "*synth s* is the encoding's wall time (all stages, both candidates; imports excluded), "
        "*verify s* verifying both candidates; the time bar is checked on their sum. Solver: "
        "HiGHS (default). *limit* is the `time_limit_s` passed, a deterministic work budget "
        "(`synth.encodings.work`; about a second a unit here): the routing MILPs share 0.6 of it "
        "(a model whose root alone may take over half of that is not started when a coarser "
        "chunking can be cut into its pieces), stage-3 MILPs get min(¼, 10 s) each; chosen so "
        "that this worst case fits 80% of the time bar; the sketches' own hints (300-600 s) are "
        "above the bars.", "",
        "| problem | ranks | sketch | k (milp / 1MB) | synth s | verify s | limit s | % of bound "
        "@1GB | bound µs @1GB | best baseline @1GB (% of bound) | MILP / best baseline, worst "
        "over 1KB-1GB | bar | verdict |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in res:
        if "error" in r:
            lines.append(f"| {r['key']} | | | | | | | | | | | | ERROR: {_error(r['error'])} |")
            continue
        p = problem(r["key"])
        v, misses = verdict(r)
        c = r["candidates"]
        ks = " / ".join(str(c.get(name, {}).get("chunks_per_rank", "—")) for name in ("milp", "milp_1MB"))
        base = (f"{r['best_baseline_1GB']} ({r['best_baseline_pct_1GB']:.1f}%)"
                if r.get("best_baseline_1GB") else "—")
        worst = "—"
        if r.get("worst_ratio") is not None:
            worst = (f"{r['worst_ratio']:.3f}x at {_size(r['worst_ratio_bytes'])} vs "
                     f"{r['worst_ratio_baseline']}"
                     + ("" if r["never_slower"] else f"; slower at {len(r['slower_sizes'])} of "
                        f"{len(SIZES)} sizes"))
        pct = f"{r['pct_of_bound_1GB']:.2f}"
        if r["candidate_1GB"] != "milp":
            pct += f" ({r['candidate_1GB']})"
        vtext = v if not misses else f"{v}: " + "; ".join(misses)
        lines.append(
            f"| {r['topology']} {r['collective']} | {r['ranks']} | {r['sketch']} | {ks} | "
            f"{r['synth_s']:.1f} | {r['verify_s']:.1f} | {r['time_limit_s']:g} | {pct} | "
            f"{r['bound_us_1GB']:.1f} | {base} | {worst} | {bar_text(p)} | {vtext} |")

    lines += ["", "## Model sizes and solver statuses (candidate `milp`)", "",
              "One row per routed phase (allreduce: the reduce-scatter over reversed links, then "
              "the allgather; reducescatter is the reversed phase alone). Sizes are of the "
              "representative's model (symmetry: one rank's chunks per orbit). *proxy µs* is the "
              "routing objective (busiest resource orbit, µs per MB) times the chunk size at 1 GB; "
              "*stage 2 µs* and *stage 3 µs* are the ordering heuristic's and the scheduling MILP's "
              "predicted phase times at 1 GB (stage 3 keeps stage 2's plan when it cannot beat it).",
              "", "| problem | phase | k | group | cand. pairs | routing vars / int / cons | routing "
              "status, gap | proxy µs | stage 2 µs (steps/load) | stage 3 vars / cons | stage 3 "
              "status | stage 3 µs |",
              "|---|---|---:|---|---:|---|---|---:|---:|---|---|---:|"]
    for r in res:
        if "error" in r or "milp" not in r["candidates"]:
            continue
        c = r["candidates"]["milp"]
        for ph in c["phases"]:
            group = _cell((ph["group"] or "").split(" (")[0])
            gap = _pct(ph["routing_gap"])
            lines.append(
                f"| {r['key']} | {(ph['direction'] or '').split(' ')[0]} | {c['chunks_per_rank']} | "
                f"{group} | {ph['candidate_pairs']} | {ph['routing_variables']} / "
                f"{ph['routing_integer_variables']} / {ph['routing_constraints']} | "
                f"{ph['routing_status']}, {gap} | {_fmt(ph['routing_proxy_us'])} | "
                f"{_fmt(ph['stage2_us'])} ({_fmt(ph['stage2_steps_per_load'], 'g')}) | "
                f"{_fmt(ph['stage3_variables'], 'd')} / {_fmt(ph['stage3_constraints'], 'd')} | "
                f"{ph['stage3_status']} | {_fmt(ph['stage3_us'])} |")

    lines += ["", "Where the synthesis time went (every MILP solve of the run, all chunkings and both "
              "candidates, timed by a recording progress observer; *at limit* = stopped by the "
              "time limit with an incumbent or none; *other* = model building, ordering, "
              "replication):", "",
              "| problem | routing solves | routing s (at limit) | scheduling solves | "
              "scheduling s (at limit) | other s | synth s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in res:
        if "error" in r or "routing_s" not in r:
            continue
        other = r["synth_s"] - r["routing_s"] - r["scheduling_s"]
        lines.append(f"| {r['key']} | {r['routing_solves']} | {r['routing_s']:.1f} "
                     f"({r['routing_at_limit']}) | {r['scheduling_solves']} | "
                     f"{r['scheduling_s']:.1f} ({r['scheduling_at_limit']}) | {other:.1f} | "
                     f"{r['synth_s']:.1f} |")

    sol = data.get("solvers") or []
    lines += ["", "## HiGHS, CBC and CP-SAT on the same problems (same run, same time limits)", ""]
    if not sol:
        lines.append("not measured in this run (`--quick`).")
    else:
        lines += ["Each row is the whole encoding run with that solver for every MILP (routing and "
                  "stage 3, every chunking tried, both candidates), verified; the HiGHS rows are "
                  "the main runs above. *routing solves* counts every routing MILP of the run and "
                  "how many ended optimal; *routing proxy* is candidate `milp`'s routing objective "
                  "(busiest resource orbit) at 1 GB in µs for its chosen k (comparable across "
                  "solvers even when they pick different k; lower is better), with that MILP's "
                  "status and gap.", "",
                  "| problem | solver | synth s | routing s | scheduling s | % of bound @1GB | k | "
                  "routing solves (optimal) | routing proxy µs @1GB | routing status, gap | "
                  "stage 3 statuses |",
                  "|---|---|---:|---:|---:|---:|---:|---|---:|---|---|"]
        for r in sol:
            if "error" in r:
                lines.append(f"| {r['key']} | {r['solver']} | | | | | | | | ERROR: "
                             f"{_error(r['error'])} | |")
                continue
            phases = r["candidates"].get("milp", {}).get("phases", [])
            routes = [x for x in r.get("milp_solves", []) if x["stage"] == "routing"]
            stage3 = [x["status"] for x in r.get("milp_solves", []) if x["stage"] == "scheduling"]
            rstat = ", ".join(f"{ph['routing_status']}, {_pct(ph['routing_gap'])}" for ph in phases)
            lines.append(
                f"| {r['key']} | {r['solver']} | {r['synth_s']:.1f} | {r.get('routing_s', 0):.1f} | "
                f"{r.get('scheduling_s', 0):.1f} | {r['pct_of_bound_1GB']:.2f} | "
                f"{r['candidates'].get('milp', {}).get('chunks_per_rank', '—')} | "
                f"{len(routes)} ({sum(x['status'] == 'optimal' for x in routes)}) | "
                f"{_join([ph['routing_proxy_us'] for ph in phases], '.1f')} | "
                f"{rstat} | "
                f"{', '.join(stage3)} |")

    dgx1 = next((r for r in res if r["key"] == "dgx1_ag" and "error" not in r), None)
    lines += ["", "## dgx1 allgather against the SMT frontier", ""]
    if dgx1 is None or not dgx1.get("smt"):
        lines.append("not measured in this run.")
    else:
        smt = dgx1["smt"]
        lines += [f"SMT frontier {smt['source']}: {smt['seconds']:.1f} s, "
                  f"{'complete' if smt['complete'] else 'incomplete'} ({smt['stop']}). Every "
                  "frontier schedule verified and costed at 1 GB under the same cost model.", "",
                  "| schedule | 1 GB µs | % of bound |", "|---|---:|---:|"]
        for pt in smt["points"]:
            lines.append(f"| SMT (S{pt['steps']},R{pt['rounds']},C{pt['chunks']}) | "
                         f"{pt['time_us_1GB']:.1f} | {pt['pct_of_bound_1GB']:.2f} |")
        k1 = dgx1["candidates"][dgx1["candidate_1GB"]]["chunks_per_rank"]
        lines.append(f"| MILP ({dgx1['candidate_1GB']}, k={k1}) | "
                     f"{dgx1['time_us_1GB']:.1f} | {dgx1['pct_of_bound_1GB']:.2f} |")
        if smt["best"]:
            rel = 100 * (dgx1["time_us_1GB"] / smt["best"]["time_us_1GB"] - 1)
            lines += ["", f"MILP 1 GB time is {rel:+.2f}% relative to the SMT frontier's best "
                      f"(bar: ≤ +5%)."]

    nd = next((r for r in res if r["key"] == "ndv2x2_ag" and "error" not in r), None)
    lines += ["", "## TACCL / TE-CCL anchor: ndv2 × 2 (16 GPUs) allgather at 1 GB", ""]
    if nd is None:
        lines.append("not measured in this run.")
    else:
        lines += [f"synth MILP: **{nd['algbw_GBps_1GB']:.2f} GB/s** algbw (2^30 bytes / predicted "
                  f"time, GB = 10^9 B); synth's cut bound on the same model: "
                  f"{nd['bound_algbw_GBps_1GB']:.2f} GB/s; best baseline: "
                  f"{GB / (nd['best_baseline_times_us'][-1] * 1e3):.2f} GB/s "
                  f"({nd['best_baseline_1GB']}). TACCL reports {TACCL_NDV2X2_GBPS} GB/s (Gurobi) "
                  f"and TE-CCL {TECCL_NDV2X2_GBPS} GB/s — on *their* α/β and measured/simulated "
                  "times, not synth's `ndv2` topology and `synth.timing.lockstep` model, so the numbers are "
                  "context, not a like-for-like comparison; the like-for-like figure is the % of "
                  "synth's own bound."]

    a2a = next((r for r in res if r["key"] == "dgx2x2_a2a"), None)
    lines += ["", "## dgx2 × 2 alltoall (TACCL's issue #2: \"Infeasible model\")", ""]
    if a2a is None:
        lines.append("not measured in this run.")
    elif "error" in a2a:
        lines.append(f"**did not solve**: {a2a['error']}")
    else:
        ph = a2a["candidates"]["milp"]["phases"]
        lines.append(f"Solved and verified: {a2a['pct_of_bound_1GB']:.2f}% of bound at 1 GB in "
                     f"{a2a['synth_s']:.1f} s with sketch {a2a['sketch']}; routing "
                     f"{', '.join(str(x['routing_status']) for x in ph)} "
                     f"({ph[0]['routing_variables']} variables, {ph[0]['routing_constraints']} "
                     "constraints). TACCL's public code reports \"Infeasible model\" on this "
                     "problem.")

    lines += ["", "## Bars missed, and what the stage reports show", ""]
    any_miss = False
    for r in res:
        if "error" in r:
            any_miss = True
            lines.append(f"- **{r['key']}**: error — {r['error'][:300]}")
            continue
        v, misses = verdict(r)
        if v != "MISSES":
            continue
        any_miss = True
        lines.append(f"- **{r['topology']} {r['collective']}**: {'; '.join(misses)}. "
                     + diagnose(r))
    if not any_miss:
        lines.append("none.")
    else:
        lines += ["", "Resource names: `link/u/v` is the link from rank u to rank v; `out/S/pR` is "
                  "rank R's sending port into switch S (`S@i` is node i's switch), `in/S/pR` the "
                  "switch's port into rank R. The routing-MILP-alone lines are diagnostics of "
                  "the encoding's stage 1 (its `build_problem` + `route`, with the sketch's "
                  "`max_extra_hops` for paths) at the chunk counts shown, not schedules: the "
                  "encoding itself keeps broadcast trees on the shortest-path DAG whenever that "
                  "is feasible, and tries these chunkings: "
                  + "; ".join(f"{r['key']} k ∈ {_tried(r)}" for r in res
                              if "error" not in r and verdict(r)[0] == "MISSES"
                              and "milp" in r["candidates"])
                  + "."]
    lines += ["", "Notes written for the run that produced this file:", ""]
    lines += [f"- {x}" for x in data.get("notes", [])] or ["- none"]
    lines += ["", f"![% of bound]({data.get('plot', 'milp.png')})", ""]
    return "\n".join(lines)


def diagnose(r: dict) -> str:
    """From the stage reports and the schedule: is the loss in the routing or in the ordering?"""
    name = r["candidate_1GB"]
    c = r["candidates"][name]
    phases = c["phases"]
    bound = r["bound_us_1GB"]
    floor = c["floor_us"]
    st2 = sum(ph["stage2_us"] or 0 for ph in phases)
    st3 = sum(ph["stage3_us"] or ph["stage2_us"] or 0 for ph in phases)
    gaps = [ph["routing_gap"] for ph in phases if ph["routing_gap"]]
    routing = (f"routing {', '.join(str(ph['routing_status']) for ph in phases)}"
               + (f" (gap {', '.join(f'{100 * g:.1f}%' for g in gaps)})" if gaps else ""))
    order_loss = r["time_us_1GB"] - floor
    parts = [f"{name} (k={c['chunks_per_rank']}, {c['steps']} steps): {routing}; the schedule's "
             f"busiest resource ({c['busiest']}"
             + (f" and {c['busiest_count'] - 1} like it" if c["busiest_count"] > 1 else "")
             + f") carries {floor:.0f} µs at 1 GB = {100 * bound / floor:.1f}% of the bound "
             f"({bound:.0f} µs)"]
    if floor > bound * 1.005:
        parts.append("so the loss is in the **routing** (the sketch/candidate links force that "
                     f"load; stages 2-3 add only {order_loss:.0f} µs)")
    else:
        parts.append(f"so the routing is at the bound and the loss is the **ordering** into "
                     f"{c['steps']} synchronous steps: +{order_loss:.0f} µs over that floor "
                     f"(Σα over steps {c['alpha_sum_us']:.0f} µs, the rest per-step imbalance; "
                     f"stage 2 predicted {st2:.0f} µs, stage 3 "
                     f"{', '.join(str(ph['stage3_status']) for ph in phases)} "
                     + (f"re-batched its drain to {st3:.0f} µs)" if st3 < st2 - 1e-6
                        else "did not improve it)"))
    diag = r.get("tree_hop_diagnostic") or []
    if diag:
        bits = []
        for d in diag:
            what = (f"{d['proxy_pct_of_bound']:.1f}% ({d['status']})" if "proxy_pct_of_bound" in d
                    else d.get("error", "?").split(" (")[0][:120])
            bits.append(f"k={d['k']}, {'shortest-path DAG' if d['tree_extra_hops'] == 0 else '+1 tree hop'}"
                        f": {what}")
        parts.append("routing MILP alone (diagnostic, no schedule; busiest orbit as % of bound, "
                     f"{diag[0].get('limit_s', 30):g} s limit): " + "; ".join(bits))
    return "; ".join(parts) + "."


def plot(data: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in data["problems"] if "error" not in r]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    y = list(range(len(rows)))[::-1]
    milp = [r["pct_of_bound_1GB"] for r in rows]
    base = [r.get("best_baseline_pct_1GB") or 0 for r in rows]
    colors = [{"meets": "tab:green", "unchecked": "tab:gray"}.get(verdict(r)[0], "tab:red") for r in rows]
    ax.barh([v + 0.18 for v in y], milp, height=0.36, color=colors, label="MILP (better candidate)")
    ax.barh([v - 0.18 for v in y], base, height=0.36, color="lightgray", label="best baseline")
    for v, r, pct in zip(y, rows, milp, strict=True):
        p = problem(r["key"])
        if p.min_pct is not None:
            ax.plot([p.min_pct, p.min_pct], [v - 0.42, v + 0.42], color="black", lw=2)
        elif r.get("smt") and r["smt"].get("best"):
            target = 100 * r["bound_us_1GB"] / (r["smt"]["best"]["time_us_1GB"] * (1 + p.smt_within))
            ax.plot([target, target], [v - 0.42, v + 0.42], color="black", lw=2, ls=":")
        ax.text(101, v + 0.18, f"{pct:.2f}%", va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r['topology']} {r['collective']}" for r in rows], fontsize=8)
    ax.set_xlim(0, 110)
    ax.set_xlabel("% of cut bound at 1 GB (black tick: the bar; dotted: SMT best + 5%)")
    ax.set_title("MILP encoding vs bars (green meets, red misses)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def notes_for(data: dict) -> list[str]:
    out = []
    for r in data["problems"]:
        if "error" in r:
            continue
        if r["process_wall_s"] - r["synth_s"] - r["verify_s"] > 30:
            out.append(f"{r['key']}: the child process took {r['process_wall_s']:.0f} s in all "
                       f"(imports, bound {r['bound_s']:.1f} s, baselines "
                       f"{r.get('baselines_s', 0):.1f} s, SMT frontier "
                       f"{(r.get('smt') or {}).get('seconds', 0):.1f} s, routing diagnostic "
                       f"{r.get('diagnostic_s', 0):.1f} s) — outside the synthesis figure.")
        if r["candidate_1GB"] != "milp":
            out.append(f"{r['key']}: at 1 GB the 1 MB candidate beat the 1 GB one.")
    return out


MEASURED = ("synth/encodings", "synth/sketches", "synth/cost.py", "synth/bounds.py")
"""The files whose changes during a run the results say (they decide the figures)."""


def _git_state() -> dict:
    """The commit measured, and whether the encoding's files differed from it."""
    return {"commit": commit(), "encoding_files_modified": modified(MEASURED)}


def _changed(since: str) -> list[str]:
    """Encoding/sketch/cost/bound files that differ between commit ``since`` and HEAD."""
    return changed_since(since, MEASURED)


def _moved(meta: dict) -> str:
    end = meta.get("commit_at_end")
    if not end or end == meta.get("commit"):
        return ""
    changed = meta.get("encoding_files_changed_during_run") or []
    return (f"; HEAD moved to {end} during the run ("
            + (f"changing {', '.join(changed)}" if changed else "no change to the encoding, "
               "sketches, cost model or bounds") + ")")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated problem keys "
                    f"({', '.join(p.key for p in PROBLEMS)})")
    ap.add_argument("--quick", action="store_true", help="no solver comparison, no SMT frontier")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply every time limit")
    ap.add_argument("--solvers", default=",".join(SOLVERS[1:]),
                    help="solvers compared with HiGHS (default cbc,cpsat)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite milp.md and milp.png from the existing milp.json (no runs)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args.child)
        return
    if args.render_only:
        out_dir = Path(args.out)
        data = json.loads((out_dir / "milp.json").read_text())
        if plot(data, out_dir / "milp.png"):
            data["plot"] = "milp.png"
        write_results("milp", markdown=render(data), out_dir=out_dir)
        print(f"[milp] re-rendered {out_dir / 'milp.md'} from milp.json")
        return
    keys = [p.key for p in PROBLEMS] if not args.only else args.only.split(",")
    for k in keys:
        problem(k)
    git_start = _git_state()
    start = stopwatch()
    results = []
    for key in keys:
        print(f"[milp] {key} ...", flush=True)
        r = run_child(key, "highs", args.time_scale, baselines=True, smt=not args.quick,
                      diagnose=not args.quick)
        results.append(r)
        if "error" in r:
            print(f"[milp] {key}: ERROR {r['error']}", flush=True)
        else:
            v, misses = verdict(r)
            print(f"[milp] {key}: {r['pct_of_bound_1GB']:.2f}% of bound, synth {r['synth_s']:.1f} s "
                  f"(limit {r['time_limit_s']:g}), verify {r['verify_s']:.1f} s, worst vs baseline "
                  f"{r.get('worst_ratio', float('nan')):.3f}; {v} {'; '.join(misses)} "
                  f"[process {r['process_wall_s']:.0f} s]", flush=True)
    solvers = []
    if not args.quick:
        for key in SOLVER_PROBLEMS:
            if key not in keys:
                continue
            main_run = next(r for r in results if r["key"] == key)
            solvers.append(main_run)
            for s in args.solvers.split(","):
                print(f"[milp] solver {s} on {key} ...", flush=True)
                r = run_child(key, s, args.time_scale, baselines=False, smt=False,
                              time_limit=main_run.get("time_limit_s"))
                solvers.append(r)
                print(f"[milp] solver {s} on {key}: "
                      + (r.get("error") or f"{r['pct_of_bound_1GB']:.2f}% in {r['synth_s']:.1f} s"),
                      flush=True)
    total = start()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"machine": machine(), "cpus": cpus(), "python": python_version(),
            "platform": platform_name(), "total_wall_s": total,
            "load_average_at_end": load_average(), "scope": None, **git_start,
            "commit_at_end": _git_state()["commit"],
            "encoding_files_changed_during_run": _changed(git_start["commit"]),
            "problems": [asdict(p) for p in PROBLEMS if p.key in keys]}
    data = {"meta": meta, "problems": results, "solvers": solvers}
    previous = out_dir / "milp.json"
    if (args.only or args.quick) and previous.exists():
        # a partial run updates the published results problem by problem
        old = json.loads(previous.read_text())
        merged = {r["key"]: r for r in old.get("problems", [])}
        merged.update({r["key"]: r for r in results})
        order = [p.key for p in PROBLEMS]
        data["problems"] = sorted(merged.values(), key=lambda r: order.index(r["key"]))
        fresh = {(r["key"], r["solver"]) for r in solvers}
        data["solvers"] = solvers + [r for r in old.get("solvers", [])
                                     if (r["key"], r["solver"]) not in fresh]
        data["solvers"].sort(key=lambda r: (SOLVER_PROBLEMS.index(r["key"]), SOLVERS.index(r["solver"])))
        meta["scope"] = (f"partial run of {', '.join(keys)}{' --quick' if args.quick else ''}, "
                         f"merged into earlier results; earlier total "
                         f"{old.get('meta', {}).get('total_wall_s', 0) / 60:.1f} min")
    data["notes"] = notes_for(data)
    png = out_dir / "milp.png"
    if plot(data, png):
        data["plot"] = png.name
    write_results("milp", data, render(data), out_dir=out_dir, sort_keys=True)
    print(f"[milp] total {total / 60:.1f} min; wrote {out_dir / 'milp.md'}, milp.json"
          + (", milp.png" if data.get("plot") else ""), flush=True)


if __name__ == "__main__":
    main()
