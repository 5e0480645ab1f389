"""What a user gets from ``synth solve`` against NCCL, on the machines people own.

For each case (machine x collective) this runs the default ``synth solve`` (the library's
:func:`synth.solve.run`, the same code path: every encoding, every candidate timed by the program
model in Simple, LL and LL128 at several instance counts, NCCL a candidate at every size) into a
scratch folder and reports, per size from 1 KB to 1 GiB in steps of x4:

* **synth**: the written file's time under the timed program model (``synth.timing.program``,
  validated against MSCCL's measured times in ``results/reality_msccl.md``), or NCCL's own time
  where synth left the size to NCCL (no file: the user runs NCCL there);
* **NCCL**: NCCL's tuning model for the machine (``synth.timing.nccl``: the algorithm, protocol and
  channels NCCL would pick, validated in ``results/reality.md``);
* **MSCCL**: MSCCL's production file for the size (``tests/data/msccl_ndv5``, 8 x H100 only, as the
  executor would select it), timed by the same program model;
* **measured**: NCCL as measured on such a machine where ``tests/data/nccl-tests`` has the size.

Per case: how many sizes synth serves, and the geomean and worst speed-up over NCCL's model of what
the user runs (synth's file where it serves the size, NCCL where it does not). Every synth and NCCL
figure is a model's prediction; the measured column is what grounds them.

    python benchmarks/vs_nccl.py                 # writes results/vs_nccl.{json,md}
    python benchmarks/vs_nccl.py --quick         # two cases, nothing written
    python benchmarks/vs_nccl.py --markdown-only # rewrite the markdown from the JSON
    python benchmarks/vs_nccl.py --resume        # measure only the cases the JSON lacks
    python benchmarks/vs_nccl.py --redo dgx_h100:1 --redo dgx1:1:allgather   # measure these again
    python benchmarks/vs_nccl.py --scale --resume  # also the 512-rank case (SCALE; ~20 min)

Each case records the commit it was measured at (a resumed or redone file can mix commits; the
summary table says which). Where a range has one file per kind of call, **synth** is the in-place
file (what MSCCL's production files and their published times are) and the case's rows also give
the out-of-place file's time.

Results are written after every case (``complete`` says whether all are in).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import RESULTS, ROOT, commit, load_average, machine, stopwatch, write_results

from synth.calibrate.nccl_fit import load_suite
from synth.calibrate.program_fit import select_program
from synth.emit.interpreter import verify_program
from synth.emit.xml_parse import read_program
from synth.sizes import DEFAULT_SIZES, format_size
from synth.solve import SolveRequest, run
from synth.timing.program import program_model, program_time
from synth.topology_io import load_topology

CASES = [("dgx_h100", 1), ("dgx_h100", 2), ("dgx_a100", 1), ("dgx_a100", 2), ("dgx1", 1),
         ("ndv2", 2)]
COLLECTIVES = ["allreduce", "allgather", "reducescatter", "alltoall"]
QUICK = [("dgx_h100", 1, "allreduce"), ("dgx1", 1, "allgather")]
SCALE = [("dgx_h100", 64, "allgather")]
"""Cases measured only with ``--scale``: 512 ranks, about 20 minutes a solve on 2 cores (the
speed issue's case), where the program model's budget runs out and lock-step ranks the middle
sizes, each written file then vetoed by the program model where it is behind NCCL."""
REPORTED = [1 << p for p in range(10, 31, 2)]       # 1 KB .. 1 GiB, x4
MSCCL_DATA = ROOT / "tests" / "data" / "msccl_ndv5"
CODE_COMMIT = commit()
"""The checkout's commit when this process started and imported synth: what every case runs, even
if the checkout moves on during a long run."""
NCCL_DATA = ROOT / "tests" / "data" / "nccl-tests"


def production_times(topo_name: str, nodes: int, coll: str) -> dict[int, tuple[str, float]]:
    """MSCCL's production file and its program-model time per reported size (8 x H100 only)."""
    if (topo_name, nodes) != ("dgx_h100", 1):
        return {}
    topo = load_topology(topo_name)
    programs = {f.name: read_program(f) for f in sorted(MSCCL_DATA.glob("ndv5__*.xml"))}
    out: dict[int, tuple[str, float]] = {}
    models: dict[str, Any] = {}
    for size in REPORTED:
        name = select_program(programs, coll, size)
        if name is None:
            continue
        program = programs[name]
        verify_program(program)
        model = models.setdefault(program.proto, program_model(topo, program.proto))
        out[size] = (name, program_time(program, topo, size, model=model).time_us)
    return out


def measured_times(topo_name: str, nodes: int, coll: str) -> dict[int, tuple[str, float]]:
    """NCCL as measured (the fastest public run per size) on a machine modelled as this case."""
    out: dict[int, tuple[str, float]] = {}
    for m in load_suite(NCCL_DATA):
        if (m.topology, m.nodes, m.collective) != (topo_name, nodes, coll):
            continue
        if m.status != "measured":
            continue
        for size, t in zip(m.sizes.tolist(), m.times_us.tolist(), strict=True):
            if int(size) in REPORTED and (int(size) not in out or t < out[int(size)][1]):
                out[int(size)] = (m.name, float(t))
    return out


def measure_case(topo_name: str, nodes: int, coll: str) -> dict[str, Any]:
    elapsed = stopwatch()
    with tempfile.TemporaryDirectory() as scratch:
        done = run(SolveRequest(topo=topo_name, coll=coll, nodes=nodes, sizes=DEFAULT_SIZES,
                                out_dir=Path(scratch) / "out"))
        files = [Path(f).name for f in done.written.files if str(f).endswith(".xml")]
    seconds = elapsed()
    prod = production_times(topo_name, nodes, coll)
    meas = measured_times(topo_name, nodes, coll)
    rows = []
    for c in done.vs_nccl or []:
        if c.bytes not in REPORTED:
            continue
        served = c.served_by == "synth"
        rows.append({
            "bytes": c.bytes, "served_by": c.served_by,
            "synth_us": round(c.runtime_us, 4), "timed_by": c.runtime_proto,
            "nccl_us": round(c.nccl_us, 4),
            "nccl_runs": f"{c.nccl_algo}/{c.nccl_proto} x{c.nccl_channels}",
            "speedup": round(c.speedup, 4),
            "msccl_file": prod[c.bytes][0] if c.bytes in prod else None,
            "msccl_us": round(prod[c.bytes][1], 4) if c.bytes in prod else None,
            "synth_over_msccl": (round(c.runtime_us / prod[c.bytes][1], 4)
                                 if c.bytes in prod and served else None),
            "measured_us": round(meas[c.bytes][1], 4) if c.bytes in meas else None,
            "measured_source": meas[c.bytes][0] if c.bytes in meas else None})
    oop = {s: us for r in done.written.ranges if r.oop is not None
           for s, us in zip(r.sizes, r.oop.model_us, strict=True)}
    for row in rows:
        row["oop_us"] = round(oop[row["bytes"]], 4) if row["bytes"] in oop else None
    ups = [r["speedup"] for r in rows]
    served = [r for r in rows if r["served_by"] == "synth"]
    forms = sorted({f"{r.candidate.name} {r.proto} x{r.instances}" for r in done.written.ranges
                    if r.candidate is not None})
    return {"topology": topo_name, "nodes": nodes, "collective": coll, "commit": CODE_COMMIT,
            "ranks": done.result.topology.num_ranks, "solve_s": round(seconds, 1),
            "served": len(served), "sizes": len(rows),
            "geomean_speedup": round(math.exp(sum(map(math.log, ups)) / len(ups)), 4) if ups
            else None,
            "worst_speedup": round(min(ups), 4) if ups else None,
            "worst_served_speedup": round(min(r["speedup"] for r in served), 4) if served
            else None,
            "files": files, "winners": forms, "rows": rows}


def measure(cases: list[tuple[str, int, str]], done: list[dict[str, Any]] | None = None,
            save: Any = None) -> dict[str, Any]:
    """Every case not already in ``done`` (a resumed run's), saving after each through ``save``."""
    out = list(done or [])
    have = {(c["topology"], c["nodes"], c["collective"]) for c in out}
    data: dict[str, Any] = {}
    for topo_name, nodes, coll in cases:
        if (topo_name, nodes, coll) in have:
            continue
        print(f"vs_nccl: {coll} on {topo_name} x{nodes} ...", file=sys.stderr, flush=True)
        rec = measure_case(topo_name, nodes, coll)
        print(f"  {rec['solve_s']} s; serves {rec['served']}/{rec['sizes']}; geomean "
              f"{rec['geomean_speedup']}x, worst served {rec['worst_served_speedup']}", file=sys.stderr,
              flush=True)
        out.append(rec)
        order = {case: i for i, case in enumerate(cases)}
        out.sort(key=lambda c: order.get((c["topology"], c["nodes"], c["collective"]), len(order)))
        data = {"commit": CODE_COMMIT, "machine": machine(), "load_average": load_average(2),
                "sizes": REPORTED, "cases": out,
                "complete": set(cases) <= {(c["topology"], c["nodes"], c["collective"])
                                           for c in out}}
        if save is not None:
            save(data)
    return data


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _us(v: float | None) -> str:
    return "—" if v is None else f"{v:,.2f}"


def to_markdown(data: dict[str, Any]) -> str:
    lines = ["# synth solve against NCCL, by the models", "",
             "Written by `python benchmarks/vs_nccl.py` (its docstring says what runs). Every case is "
             "the default `synth solve` for that machine and collective. **synth** is the written "
             "file under the timed program model (`synth.timing.program`, validated against MSCCL's "
             "measured times in [reality_msccl.md](reality_msccl.md)), or NCCL's own time where "
             "synth left the size to NCCL (no file); **NCCL** is NCCL's tuning model "
             "(`synth.timing.nccl`, validated in [reality.md](reality.md)); **MSCCL** is MSCCL's "
             "production file for 8 x H100 under the same program model; **measured** is NCCL as "
             "measured on such a machine where `tests/data/nccl-tests` has the size. Speed-up = "
             "NCCL's model / synth. These are model predictions, not runs on the hardware.", "",
             f"Commit {data['commit']}; {data['machine']}."
             + ("" if data.get("complete", True) else " **Incomplete: not every case has run "
                "yet** (`--resume` measures the rest)."), "",
             "## Summary (sizes 1 KB .. 1 GiB, x4)", "",
             "| machine | collective | synth serves | geomean vs NCCL | worst | worst where synth "
             "serves | solve s | files (candidate, protocol, instances) | commit |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for c in data["cases"]:
        lines.append(f"| {c['topology']} x{c['nodes']} | {c['collective']} | {c['served']}/"
                     f"{c['sizes']} | {_x(c['geomean_speedup'])} | {_x(c['worst_speedup'])} | "
                     f"{_x(c['worst_served_speedup'])} | {c['solve_s']} | "
                     f"{'; '.join(c['winners']) or '— (NCCL everywhere)'} | "
                     f"{c.get('commit') or data['commit']} |")
    lines += ["", "A size synth leaves to NCCL counts as 1.00x: the user runs NCCL there.", ""]
    for c in data["cases"]:
        lines += [f"## {c['collective']} on {c['topology']} x{c['nodes']} ({c['ranks']} ranks)", "",
                  "| size | served by | synth µs | timed by | NCCL µs | NCCL runs | vs NCCL | "
                  "MSCCL µs | synth / MSCCL | measured NCCL µs | synth out-of-place µs |",
                  "|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
        for r in c["rows"]:
            ratio = "—" if r["synth_over_msccl"] is None else f"{r['synth_over_msccl']:.3f}"
            lines.append(f"| {format_size(r['bytes'])} | {r['served_by']} | {_us(r['synth_us'])} | "
                         f"{r['timed_by']} | {_us(r['nccl_us'])} | {r['nccl_runs']} | "
                         f"{_x(r['speedup'])} | {_us(r['msccl_us'])} | "
                         f"{ratio} | {_us(r['measured_us'])} | {_us(r.get('oop_us'))} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two cases, nothing written")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite the markdown from the JSON")
    ap.add_argument("--resume", action="store_true",
                    help="keep the cases results/vs_nccl.json already has; measure the rest")
    ap.add_argument("--redo", action="append", default=[], metavar="MACHINE:NODES[:COLL]",
                    help="measure these cases again, keeping the others the JSON has")
    ap.add_argument("--scale", action="store_true", help="also the 512-rank cases (SCALE)")
    args = ap.parse_args()
    if args.markdown_only:
        data = json.loads((RESULTS / "vs_nccl.json").read_text())
        write_results("vs_nccl", markdown=to_markdown(data))
        return 0
    if args.quick:
        print(to_markdown(measure(QUICK)))
        return 0
    cases = [(t, n, c) for t, n in CASES for c in COLLECTIVES] + (SCALE if args.scale else [])
    done = None
    if (args.resume or args.redo) and (RESULTS / "vs_nccl.json").exists():
        done = json.loads((RESULTS / "vs_nccl.json").read_text())["cases"]
        redo = [spec.split(":") for spec in args.redo]
        done = [c for c in done if not any(
            c["topology"] == r[0] and str(c["nodes"]) == r[1] and (len(r) < 3 or c["collective"] == r[2])
            for r in redo)]
    measure(cases, done, lambda data: write_results("vs_nccl", data, to_markdown(data)))
    print(f"wrote {RESULTS / 'vs_nccl.json'} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
