"""Baseline quality: every baseline algorithm on every shipped topology, as % of the lower bound.

For each (topology, collective) it builds and verifies every applicable baseline, costs it over
1 KB..1 GB on the step model, and records the best per size and its percentage of the bound, plus
build+verify time per algorithm. The ``nccl`` baseline is priced by NCCL's own tuning model
(:mod:`synth.timing.nccl`: launch and per-step floors included), a different model from the others',
so it is reported in its own column (what NCCL runs, and its % of the bound) and never competes
for "best".

    python benchmarks/baselines.py            # writes results/baselines.{json,md}
"""

from __future__ import annotations

import sys

from harness import stopwatch, write_results

from synth.bounds import lower_bound
from synth.collectives import make_collective
from synth.encodings.baseline.algorithms import ALGORITHMS, baseline, preferred_chunks
from synth.errors import NotApplicable
from synth.select.candidates import cost_profile, nccl_points
from synth.sizes import format_size
from synth.topology_io import load_topology
from synth.verify import verify

PROBLEMS = [(name, 1) for name in ("dgx1", "ndv2", "dgx2", "dgx_a100", "dgx_h100", "mi300x",
                                   "trn1_32", "trn2_64")] + [("dgx_a100", 2), ("trn1_32", 2)]
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")
SIZES = (2**10, 2**20, 2**30)


def measure() -> list[dict]:
    rows = []
    for name, nodes in PROBLEMS:
        topo = load_topology(name, nodes)
        for kind in KINDS:
            bound = lower_bound(topo, make_collective(kind, topo.num_ranks))
            algos = {}
            for algo in ALGORITHMS:
                if kind == "alltoall" and algo in ("ring", "bidir_ring") and topo.num_ranks > 32:
                    continue
                k = preferred_chunks(algo, kind, topo.num_ranks, topo)
                coll = make_collective(kind, topo.num_ranks, k)
                start = stopwatch()
                try:
                    sched = baseline(topo, coll, algo)
                except NotApplicable:
                    continue
                verify(sched, topo)
                seconds = start()
                costs = cost_profile(sched, topo, SIZES, bound)
                algos[algo] = {"steps": sched.num_steps, "seconds": round(seconds, 3),
                               "time_us": [round(p.time_us, 3) for p in costs],
                               "pct_of_bound": [round(p.pct_of_bound, 2) for p in costs]}
            best = []
            step_model = list(algos)
            nccl_pts = nccl_points(topo, make_collective(kind, topo.num_ranks), SIZES, bound)
            nccl = None if nccl_pts is None else {
                "time_us": [round(p.time_us, 3) for p in nccl_pts],
                "pct_of_bound": [round(p.pct_of_bound, 2) for p in nccl_pts]}
            for i, size in enumerate(SIZES):
                winner = min(step_model, key=lambda a, i=i: (algos[a]["time_us"][i], a))
                best.append({"bytes": size, "algorithm": winner,
                             "time_us": algos[winner]["time_us"][i],
                             "pct_of_bound": algos[winner]["pct_of_bound"][i],
                             "bound_us": round(bound.time_us(size), 3)})
            rows.append({"topology": topo.name, "ranks": topo.num_ranks, "collective": kind,
                         "bound_method": bound.method, "best": best, "algorithms": algos,
                         "nccl": nccl})
            print(f"{topo.name:>12} {kind:>13}: " + ", ".join(
                f"{format_size(b['bytes'])} {b['algorithm']} {b['pct_of_bound']}%" for b in best),
                file=sys.stderr)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["# Baselines as a percentage of the lower bound", "",
             "Best verified baseline algorithm per message size (α-β step model, `synth.timing.lockstep`, "
             "no runtime floors), and its percentage of the lower bound (`synth.bounds`). "
             "*NCCL* is what NCCL runs, priced by NCCL's own tuning model with its floors "
             "(`synth.timing.nccl`, validated in results/reality.md): a different model, so it is "
             "a column of its own, not a competitor for best. NCCL above 100% (dgx_h100 allreduce): "
             "NVLink SHARP reduces inside the NVSwitch, which the point-to-point bound does not "
             "model. Produced by "
             "`python benchmarks/baselines.py`.", "",
             "| topology | ranks | collective | " + " | ".join(
                 f"best @ {format_size(s)} (% of bound)" for s in SIZES) + " | " + " | ".join(
                 f"NCCL @ {format_size(s)} (% of bound)" for s in SIZES) + " | bound |",
             "|---|---|---|" + "---|" * (2 * len(SIZES)) + "---|"]
    for r in rows:
        cells = [f"{b['algorithm']} ({b['pct_of_bound']:.1f}%)" for b in r["best"]]
        nccl = r.get("nccl")
        cells += ([f"{p:.1f}%" for p in nccl["pct_of_bound"]] if nccl else ["-"] * len(SIZES))
        lines.append(f"| {r['topology']} | {r['ranks']} | {r['collective']} | "
                     + " | ".join(cells) + f" | {r['bound_method']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = measure()
    write_results("baselines", rows, markdown(rows), sort_keys=True)


if __name__ == "__main__":
    main()
