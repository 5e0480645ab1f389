"""Memory per transfer: the figures behind synth.guards' estimates.

Runs ``synth solve --topo dgx1 --coll allgather --algo ring --chunks K`` (one process per run, so
peak RSS is the run's own), with and without XML, over a few chunk counts, and fits peak RSS =
base + slope x transfers. synth.guards uses rounded-down slopes (SCHEDULE_BYTES_PER_TRANSFER for
the schedule alone, plus XML_BYTES_PER_TRANSFER with XML) so that a refusal is never for a run
that would have fitted.

    python benchmarks/guards_memory.py        # writes results/guards_memory.{json,md}
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

import numpy as np
from harness import commit, cpus, load_average, stopwatch, write_results

CHUNKS = (1, 250, 1000, 2000)
RANKS = 8


def run(chunks: int, xml: bool) -> dict:
    """One solve in its own process; its peak RSS from the child's own rusage."""
    probe = ("import resource, runpy, sys\n"
             "sys.argv = ['synth', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('synth', run_name='__main__')\n"
             "finally:\n    print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
             " file=sys.stderr)\n")
    with tempfile.TemporaryDirectory() as out:
        elapsed = stopwatch()
        done = subprocess.run([sys.executable, "-c", probe, "solve", "--topo", "dgx1", "--coll",
                               "allgather", "--algo", "ring", "--chunks", str(chunks),
                               "--xml" if xml else "--no-xml", "--json", "--out", out],
                              capture_output=True, text=True)
    peak_kb = int(done.stderr.rsplit("PEAK", 1)[1].split()[0])
    return {"chunks": chunks, "xml": xml, "transfers": RANKS * (RANKS - 1) * chunks,
            "peak_rss_bytes": peak_kb * 1024, "seconds": round(elapsed(), 2)}


def main() -> None:
    rows = [run(k, xml) for xml in (False, True) for k in CHUNKS]
    fits = {}
    for xml in (False, True):
        pts = [r for r in rows if r["xml"] == xml]
        x = np.array([r["transfers"] for r in pts], dtype=float)
        y = np.array([r["peak_rss_bytes"] for r in pts], dtype=float)
        slope, base = np.polyfit(x, y, 1)
        fits["xml" if xml else "schedule"] = {"bytes_per_transfer": round(float(slope), 1),
                                              "base_bytes": round(float(base))}
    data = {"command": "synth solve --topo dgx1 --coll allgather --algo ring --chunks K",
            "runs": rows, "fit": fits, "cpus": cpus(), "load_average": load_average(2),
            "commit": commit()}
    lines = ["# Memory per transfer (synth.guards)", "",
             f"`{data['command']}`, peak RSS per run (one process each).", "",
             "| chunks | XML | transfers | peak RSS MB | seconds |", "|---:|:--|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['chunks']} | {'yes' if r['xml'] else 'no'} | {r['transfers']} | "
                     f"{r['peak_rss_bytes'] / 2**20:.0f} | {r['seconds']} |")
    lines += ["", "Fit peak = base + slope x transfers: schedule only (build, verify, cost) "
              f"{fits['schedule']['bytes_per_transfer']:.0f} B/transfer; with XML (compiler and "
              f"interpreter included) {fits['xml']['bytes_per_transfer']:.0f} B/transfer in all.",
              ""]
    write_results("guards_memory", data, "\n".join(lines), indent=2)


if __name__ == "__main__":
    main()
