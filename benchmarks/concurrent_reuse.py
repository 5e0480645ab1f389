"""``solve --concurrent``: every group solved vs one solve per machine and the rest relabelled.

For each case, ``synth solve --topo T --nodes N --concurrent P --coll C`` runs twice, each in a
fresh process (no warm in-process caches): with :data:`synth.relabel.REUSE` off (every group
solved, as before relabelling existed) and on (one solve per machine up to the name, the other
groups' files relabelled and verified again). Recorded: each run's wall-clock seconds, the load
averages around it (the machine is shared), how many groups were relabelled, and whether the two
out dirs are equal file for file and byte for byte (they must be).

    python benchmarks/concurrent_reuse.py            # dgx1 x2 stride:8 allreduce (~1.5 min)
    python benchmarks/concurrent_reuse.py --nodes 8  # the dgx1 x8 case too (~45 min on 2 cores)

Writes results/concurrent_reuse.{json,md}.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import ROOT, commit, cpus, load_average, python_version, stopwatch, write_results

RUN = ("import sys, synth.relabel; synth.relabel.REUSE = sys.argv[1] == 'on'; "
       "from synth.cli import main; sys.argv = ['synth', *sys.argv[2:]]; main()")
SAME = "is the same machine as group"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def run_case(topo: str, nodes: int, partition: str, coll: str) -> dict[str, Any]:
    """Both runs of one case, and how their out dirs compare."""
    row: dict[str, Any] = {"command": f"synth solve --topo {topo} --nodes {nodes} --concurrent "
                                      f"{partition} --coll {coll}"}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for mode in ("off", "on"):
            out = Path(tmp) / mode
            before = load_average(2)
            clock = stopwatch()
            done = subprocess.run(
                [sys.executable, "-c", RUN, mode, "solve", "--topo", topo, "--nodes", str(nodes),
                 "--concurrent", partition, "--coll", coll, "--out", str(out)],
                capture_output=True, text=True, cwd=ROOT,
                env={**os.environ, "SYNTH_PROGRESS": "off"})
            seconds = clock()
            if done.returncode != 0:
                raise SystemExit(f"{row['command']} (reuse {mode}) failed: {done.stderr[-2000:]}")
            row[f"reuse_{mode}"] = {"wall_s": round(seconds, 2), "load_before": before,
                                    "load_after": load_average(2),
                                    "relabelled_groups": done.stdout.count(SAME)}
            trees[mode] = _tree(out)
        a, b = trees["off"], trees["on"]
        row["files"] = len(a)
        row["byte_identical"] = a == b
        row["differing_files"] = sorted(f for f in a.keys() | b.keys() if a.get(f) != b.get(f))
    row["speedup"] = round(row["reuse_off"]["wall_s"] / row["reuse_on"]["wall_s"], 2)
    return row


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["# `solve --concurrent`: relabelling groups on one machine",
             "",
             f"Commit {meta['commit']}, Python {meta['python']}, {meta['cpus']} CPUs (shared: load "
             "averages 1/5/15 min beside each run). Each run in a fresh process; `reuse off` "
             "solves every group (`synth.relabel.REUSE = False`), `reuse on` solves one group per "
             "machine and relabels the others (each schedule and XML verified again).",
             "",
             "| command | reuse off s | load | reuse on s | load | relabelled | speedup | "
             "files | byte-identical |",
             "|---|---:|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        off, on = r["reuse_off"], r["reuse_on"]
        lines.append(f"| `{r['command']}` | {off['wall_s']} | {off['load_before']} | "
                     f"{on['wall_s']} | {on['load_before']} | {on['relabelled_groups']} | "
                     f"{r['speedup']}x | {r['files']} | {r['byte_identical']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    cases = [("dgx1", 2, "stride:8", "allreduce")]
    if "--nodes" in sys.argv and sys.argv[sys.argv.index("--nodes") + 1] == "8":
        cases.append(("dgx1", 8, "stride:8", "allreduce"))
    rows = [run_case(*case) for case in cases]
    meta = {"commit": commit(), "python": python_version(), "cpus": cpus()}
    write_results("concurrent_reuse", {**meta, "cases": rows}, markdown(rows, meta))
    for r in rows:
        print(r["command"], r["reuse_off"]["wall_s"], "s ->", r["reuse_on"]["wall_s"], "s",
              "byte-identical" if r["byte_identical"] else f"DIFFER: {r['differing_files'][:3]}")
    if not all(r["byte_identical"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
