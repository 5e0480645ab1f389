"""synth's MSCCL++ plans against MSCCL++'s own DSL algorithms and NCCL's rings, one model for all.

For dgx_a100 x1, dgx_a100 x2 and dgx_h100 x1 and each of allgather, reducescatter, allreduce and
alltoall, every plan is priced by the same timed plan model (:mod:`synth.timing.plan`: the
program model's NCCL figures, max-min fair sharing of the topology's ports) at each size:

* **synth**: the schedule ``solve`` picks (``encoding=auto``), emitted with ``--format mscclpp`` as
  Simple and LL plans with 1, 2 and 4 instances; the fastest at each size is the synth column;
* **MSCCL++ DSL**: every plan of ``tests/data/mscclpp-plans`` (MSCCL++'s own DSL programs,
  microsoft/mscclpp@1f5f065d) for the same collective and rank count that ``synth verify``
  accepts, within its ``min/max_message_size``;
* **NCCL ring**: synth's ``nccl_rings`` baseline (NCCL's rings, one per rail; alltoall: direct), emitted
  as Simple plans with 1, 2 and 4 instances (NCCL's channels), the fastest per size — NCCL's
  algorithm executed in the same model, not NCCL's own tuning model.

Every plan is verified by the plan interpreter before it is timed. Modelled times only: no GPU run.

    python benchmarks/mscclpp.py          # writes results/mscclpp.{json,md}
"""

from __future__ import annotations

import json
import sys

from harness import ROOT, stopwatch, write_results

from synth.collectives import make_collective
from synth.errors import SynthError
from synth.mscclpp import load_plan, verify_plan
from synth.mscclpp.emit import PlanOptions, emit_verified_plan
from synth.outputs.msccl import sm_count
from synth.sizes import format_size
from synth.solve import solve
from synth.timing.plan import plan_time_us
from synth.timing.program import program_model
from synth.topology_io import load_topology

CORPUS = ROOT / "tests" / "data" / "mscclpp-plans"
PROBLEMS = [("dgx_a100", 1), ("dgx_a100", 2), ("dgx_h100", 1)]
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall")
SIZES = (2**10, 2**16, 2**20, 2**24, 2**28)
TIME_LIMIT_S = 30.0
INSTANCES = (1, 2, 4)


def corpus_plans(kind: str, ranks: int) -> list[tuple[str, object]]:
    out = []
    for path in sorted(CORPUS.rglob("*.json")):
        if "unit_tests" in path.parts:
            continue
        text = path.read_text()
        obj = json.loads(text)
        if obj["collective"] != kind or len(obj["gpus"]) != ranks:
            continue
        try:
            plan = load_plan(text, str(path))
            verify_plan(plan)
        except SynthError:
            continue  # the corpus README lists the plans the verifier rejects
        out.append((path.relative_to(CORPUS).as_posix(), plan))
    return out


def times(plan, topo, sizes) -> list[float | None]:
    model = program_model(topo, plan.protocol)
    return [plan_time_us(plan, topo, model, n)
            if plan.min_message_size <= n <= plan.max_message_size else None for n in sizes]


def best_of_instances(schedule, topo, proto: str, row: dict) -> list[float | None]:
    """Per size, the fastest of the plan emitted with 1, 2 or 4 instances (channels), leaving out
    plans with more threadblocks per rank than the GPU has SMs (they could not be co-resident)."""
    sms = sm_count(topo)
    best: list[float | None] = [None] * len(SIZES)
    for inst in INSTANCES:
        try:
            text, _ = emit_verified_plan(schedule, topo, PlanOptions(proto=proto, instances=inst,
                                                                     max_threadblocks=sms))
        except SynthError as exc:
            row.setdefault("notes", []).append(f"{schedule.algorithm} {proto} x{inst}: {exc.message}")
            continue
        plan = load_plan(text)
        for i, t in enumerate(times(plan, topo, SIZES)):
            if t is not None and (best[i] is None or t < best[i]):
                best[i] = t
    return best


def measure() -> list[dict]:
    rows = []
    for name, nodes in PROBLEMS:
        topo = load_topology(name, nodes)
        for kind in KINDS:
            coll = make_collective(kind, topo.num_ranks, 1)
            t0 = stopwatch()
            result = solve(topo, coll, time_limit_s=TIME_LIMIT_S)
            schedule = result.best.schedule
            row = {"topology": name, "nodes": nodes, "ranks": topo.num_ranks, "collective": kind,
                   "sizes": list(SIZES), "synth_algorithm": schedule.algorithm, "plans": {}}
            for proto in ("Simple", "LL"):
                row["plans"][f"synth {proto}"] = best_of_instances(schedule, topo, proto, row)
            ring = solve(topo, coll, encoding="baseline", algorithm="nccl_rings").best.schedule
            row["plans"]["NCCL ring (as a plan)"] = best_of_instances(ring, topo, "Simple", row)
            for rel, plan in corpus_plans(kind, topo.num_ranks):
                row["plans"][f"MSCCL++ {rel}"] = times(plan, topo, SIZES)
            row["seconds"] = round(t0(), 1)
            rows.append(row)
            print(f"{name} x{nodes} {kind}: {len(row['plans'])} plans, {row['seconds']} s",
                  file=sys.stderr)
    return rows


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def markdown(rows: list[dict]) -> str:
    lines = ["# synth's MSCCL++ plans vs MSCCL++'s DSL algorithms vs NCCL's rings", "",
             "Modelled time (µs) of one call, every plan priced by the same timed plan model "
             "(`synth/mscclpp/timing.py`: NCCL's protocol figures, NVLink efficiency and launch "
             "from the program model, max-min fair sharing of NVSwitch/NIC ports). *synth* is the "
             "fastest of its Simple and LL plans with 1, 2 or 4 instances at each size; *NCCL ring* is "
             "NCCL's ring algorithm (synth's `nccl_rings` baseline) emitted as Simple plans with 1, 2 or 4 "
             "instances (channels) and run in the same model; *MSCCL++* "
             "columns are MSCCL++'s own DSL plans (`tests/data/mscclpp-plans`, "
             "microsoft/mscclpp@1f5f065d) for that collective and rank count. — : outside the "
             "plan's message-size range. No GPU measurement backs these numbers; NVLS in-switch "
             "reduction (H100) is priced as ordinary reads over the switch ports.",
             "", "Regenerate: `python benchmarks/mscclpp.py`.", ""]
    for r in rows:
        lines += [f"## {r['collective']} on {r['topology']} x{r['nodes']} ({r['ranks']} ranks)",
                  "", f"synth's schedule: `{r['synth_algorithm']}`.", ""]
        names = list(r["plans"])
        synth = [min((v for v in (r["plans"]["synth Simple"][i], r["plans"]["synth LL"][i])
                      if v is not None), default=None) for i in range(len(r["sizes"]))]
        others = [n for n in names if not n.startswith("synth ")]
        header = ["size", "synth", "synth Simple", "synth LL", *others, "synth vs best other"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for i, n in enumerate(r["sizes"]):
            vals = [r["plans"][k][i] for k in others]
            best_other = min((v for v in vals if v is not None), default=None)
            ratio = "—" if synth[i] is None or best_other is None else f"{best_other / synth[i]:.2f}x"
            lines.append("| " + " | ".join([format_size(n), _fmt(synth[i]),
                                            _fmt(r["plans"]["synth Simple"][i]),
                                            _fmt(r["plans"]["synth LL"][i]),
                                            *(_fmt(v) for v in vals), ratio]) + " |")
        for note in r.get("notes", []):
            lines.append(f"- not timed: {note}")
        lines.append("")
    lines += ["`synth vs best other` > 1: synth's plan is that many times faster than the fastest "
              "of the other columns at that size, in this model.", ""]
    return "\n".join(lines)


def main() -> None:
    rows = measure()
    write_results("mscclpp", rows, markdown(rows))


if __name__ == "__main__":
    main()
