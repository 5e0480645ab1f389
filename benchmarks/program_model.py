"""Speed of the timed program model (issue 14: a 64-rank 1 GiB program in <= 60 s).

Programs: synth's own ring allgather and ring allreduce baselines on 8 x dgx_h100 (64 ranks),
emitted as verified MSCCL-IR (Simple), and the largest production ndv5 file (ag-32m-1g, 8 ranks).
Each is timed by :func:`synth.timing.program.sweep` at 1 GiB; the wall-clock time of that call
(the simulation plus the lower bound for "% of bound"; not emission or verification) is
recorded, with the simulated time, messages and grid iterations.

    python benchmarks/program_model.py        # writes results/program_model.{json,md}
"""

from __future__ import annotations

import sys

from harness import ROOT, machine, python_version, stopwatch, write_results

from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_verified_xml
from synth.emit.xml_parse import parse_program, read_program
from synth.encodings.baseline import baseline, preferred_chunks
from synth.timing.program import sweep
from synth.topology_io import load_topology

NBYTES = 2**30
LIMIT_S = 60.0


def cases():
    topo64 = load_topology("dgx_h100", 8)
    for kind in ("allgather", "allreduce"):
        coll = make_collective(kind, topo64.num_ranks, preferred_chunks("ring", kind, 64))
        text, _reports = emit_verified_xml(baseline(topo64, coll, "ring"), XmlOptions(proto="Simple"))
        yield f"synth ring {kind}", topo64, parse_program(text, f"ring_{kind}.xml")
    topo8 = load_topology("dgx_h100")
    path = ROOT / "tests" / "data" / "msccl_ndv5" / "ndv5__ag-32m-1g.xml"
    yield "ndv5 ag-32m-1g (MSCCL production)", topo8, read_program(path)


def measure() -> list[dict]:
    rows = []
    for name, topo, program in cases():
        t0 = stopwatch()
        (pt,) = sweep(program, topo, [NBYTES])
        wall = t0()
        steps = sum(len(tb.steps) for g in program.gpus for tb in g.tbs)
        rows.append({"program": name, "topology": topo.name, "ranks": program.ngpus,
                     "proto": program.proto, "threadblocks": sum(len(g.tbs) for g in program.gpus),
                     "xml_steps": steps, "bytes": NBYTES, "simulated_us": round(pt.time_us, 3),
                     "busbw_GBps": round(pt.busbw_GBps, 3), "pct_of_bound": round(pt.pct_of_bound, 2),
                     "iterations": pt.iterations, "messages": pt.messages,
                     "wall_s": round(wall, 3), "within_limit": wall <= LIMIT_S})
    return rows


def to_markdown(rows: list[dict]) -> str:
    lines = [
        "# Timed program model: speed",
        "",
        f"Wall-clock seconds to simulate one 1 GiB call (goal: 64 ranks in <= {LIMIT_S:.0f} s), "
        f"on {machine('arch')} with Python {python_version()}, one process "
        "(the machine is shared). Written by `python benchmarks/program_model.py`.",
        "",
        "| program | topology | ranks | proto | blocks | XML steps | simulated µs | busbw GB/s | "
        "% of bound | iterations | messages | wall s |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['program']} | {r['topology']} | {r['ranks']} | {r['proto']} | "
                     f"{r['threadblocks']} | {r['xml_steps']} | {r['simulated_us']:.1f} | "
                     f"{r['busbw_GBps']:.1f} | {r['pct_of_bound']:.1f} | {r['iterations']} | "
                     f"{r['messages']} | {r['wall_s']:.2f} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    rows = measure()
    md = to_markdown(rows)
    write_results("program_model", {"limit_s": LIMIT_S, "rows": rows}, md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
