"""What is written against what was found: per case, the best candidate's % of bound at 1 GiB and
the % of the program ``synth solve`` writes for 1 GiB (issue 15).

Each case is the default ``solve`` (``--encoding auto``, sizes 1 KB..1 GB, exec profile, every
protocol and instance count, the default threadblock budget): :func:`synth.solve.solve` then
:func:`synth.solve.write_winners` into a scratch folder, which writes the winner of every size
range with its interpreter-verified XML. Figures, all from the lock-step model (``synth.timing.lockstep``)
that decides the winners today:

* ``best %``: the fastest verified candidate at 1 GiB, whether or not a file could be made of it;
* ``written %``: the candidate whose written XML serves 1 GiB;
* ``lost``: the difference in points, and why, from the selection's notes (a candidate passed over
  because its XML breaks a runtime limit, with the limit and the excess; or one whose
  ``nchunksperloop`` does not divide 1 GiB's element count, so no runtime selects its file there).

* ``program %``: the same written file timed by the timed program model
  (:mod:`synth.timing.program`, which runs the XML event by event: threadblocks, FIFOs, flags,
  shared links) at 1 GiB, over the same bound.

Wall times are per case on a shared 2-core machine (load averages recorded).

    python benchmarks/emit.py                     # every case
    python benchmarks/emit.py --only a100x2_ag    # some cases; rows of the others are kept
    python benchmarks/emit.py --only x --add rows.jsonl   # rows :func:`run_case` printed in a
                                                          # separate run (the 512-rank cases)
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import RESULTS, commit, cpus, load_average, machine, python_version, stopwatch, write_results

from synth.collectives import make_collective
from synth.emit.program import PROTOCOLS
from synth.emit.xml_parse import parse_program
from synth.errors import SynthError
from synth.guards import Budget, TooBig
from synth.outputs import write_winners
from synth.outputs.msccl import DEFAULT_XML
from synth.select.ranges import INSTANCES
from synth.select.ranking import splits_call_kinds
from synth.select.scorers import deciding_scorer
from synth.solve import solve, within_budget
from synth.timing.program import program_times_us
from synth.topology_io import load_topology

GiB = 2 ** 30
CASES: tuple[tuple[str, str, int, str], ...] = (
    ("trn1_ag", "trn1_32", 1, "allgather"),
    ("trn1_ar", "trn1_32", 1, "allreduce"),
    *((f"a100x{n}_{short}", "dgx_a100", n, coll)
      for n in (2, 4, 8)
      for short, coll in (("ag", "allgather"), ("rs", "reducescatter"), ("ar", "allreduce"),
                          ("a2a", "alltoall"))),
    *((f"h100x{n}_{short}", "dgx_h100", n, coll)
      for n in (8, 64)
      for short, coll in (("ag", "allgather"), ("ar", "allreduce"), ("a2a", "alltoall"))),
    ("trn1x16_ag", "trn1_32", 16, "allgather"),
    ("trn1x16_ar", "trn1_32", 16, "allreduce"),
    ("mi300x_ag", "mi300x", 1, "allgather"),
    ("mi300x_ar", "mi300x", 1, "allreduce"),
)
BARS = {"a100x8_ag": 99.0, "trn1_ag": 95.0, "h100x64_ag": 96.0}
"""Issue 15's bars on the written file's % of bound at 1 GiB."""


def _below(size: int) -> str:
    """The 'by' cell's note where the program model's budget ran out partway."""
    from synth.sizes import format_size

    return f" (lock-step below {format_size(size)}: budget)"


def _why(best: str, written: str, notes: list[str]) -> str:
    if best == written:
        return ""
    mine = [n for n in notes if n.startswith(f"{best} ")]
    return "; ".join(mine) or f"{best} is faster at 1 GiB but another candidate's file was chosen"


def _program_at_1g(model: Any, result: Any) -> dict[str, dict[str, float]]:
    """Each candidate's fastest timed configuration at 1 GiB in the program model that decided
    the winners: ``{name: {"instances": i, "us": t}}``; candidates it did not time there (the
    file cannot run at 1 GiB, is over a limit, or the prunes skipped it) are absent."""
    sizes = [p.bytes for p in result.best.costs]
    if GiB not in sizes:
        return {}
    i = sizes.index(GiB)
    out: dict[str, dict[str, float]] = {}
    for (cand, proto, inst), times in sorted(model.run().items()):
        t = times[i]
        if math.isfinite(t) and (cand not in out or t < out[cand]["us"]):
            out[cand] = {"proto": proto, "instances": inst, "us": round(t, 1)}
    return out


def _writable(result: Any) -> tuple[Any | None, str]:
    """``result`` with only the candidates ``synth solve`` would try to write, and why none when
    none fits. The CLI sizes every candidate against its XML budget before compiling
    (:func:`synth.solve.within_budget` with the default ``--max-memory`` and XML options) and
    passes over, with a note, one whose estimated program is over a limit (the estimate never
    exceeds the compiled program, so no file that could be written is lost). The solve above ran
    without that budget so that every candidate is costed for the best-found column. Without
    this, a 512-rank case compiled each such candidate for minutes before rejecting it."""
    try:
        kept, notes = within_budget({c.name: c.schedule for c in result.candidates},
                                    Budget.of(None, DEFAULT_XML))
    except TooBig as exc:      # the CLI refuses the run with this message
        return None, exc.message
    cands = [c for c in result.candidates if c.name in kept]    # the solve's ranking
    return replace(result, best=cands[0], candidates=cands, notes=[*result.notes, *notes]), ""


def run_case(name: str, topo: str, nodes: int, coll: str, winners_by: str = "auto",
             time_program: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {"case": name, "topology": topo, "nodes": nodes, "collective": coll}
    start = stopwatch()
    topology = load_topology(topo, nodes)
    row["ranks"] = topology.num_ranks
    try:
        result = solve(topology, make_collective(coll, topology.num_ranks))
        row["solve_s"] = round(result.seconds, 1)
        at = {c.name: {p.bytes: p for p in c.costs}[GiB] for c in result.candidates}
        best = max(at, key=lambda n: (at[n].pct_of_bound, n))
        writable, refused = _writable(result)
        if writable is None:
            row.update({"best": best, "best_pct": round(at[best].pct_of_bound, 2),
                        "candidates": {n: round(p.pct_of_bound, 2) for n, p in sorted(at.items())},
                        "status": "no_file", "why": refused})
            row["wall_s"] = round(start(), 1)
            return row
        result = writable
        with tempfile.TemporaryDirectory() as tmp:
            # the CLI's default: the program model decides (with the instance count) where its
            # estimated work fits its budget, else lock-step (the note says which)
            # as `synth solve` runs: every protocol, the in-place file ranked where each kind
            # of call gets its own file (synth.select.ranking.splits_call_kinds)
            split = splits_call_kinds(result.collective, DEFAULT_XML)
            xml = replace(DEFAULT_XML, inplace=True) if split else DEFAULT_XML
            model, by, notes = deciding_scorer(result, topology, xml, winners_by,
                                               instances=INSTANCES, protocols=PROTOCOLS)
            result.notes += notes
            written = write_winners(result, Path(tmp), xml, model, winners_by=by, split=split)
            row["winners_by"] = by
            if getattr(model, "cut", None) is not None:  # the budget ran out partway
                row["lockstep_below"] = model.cut[0]
            if by == "program":
                row["program_1g"] = _program_at_1g(model, result)
            serving = next(r for r in written.ranges if GiB in r.sizes)
            if serving.candidate is None:   # left to NCCL: its model is faster at 1 GiB
                nccl = {p.bytes: p for p in result.nccl or ()}[GiB]
                row.update({"best": best, "best_pct": round(at[best].pct_of_bound, 2),
                            "written": "nccl", "status": "nccl", "ranges": len(written.ranges),
                            "nccl_us": round(nccl.time_us, 1), "notes": written.notes,
                            "program_pct": round(100 * at[best].bound_us / nccl.time_us, 2),
                            "why": "left to NCCL: its model is faster at 1 GiB than every "
                                   "candidate's file as the runtime runs it"})
                row["wall_s"] = round(start(), 1)
                return row
            row["instances_1g"] = serving.instances
            row["proto_1g"] = serving.proto
            if serving.text is not None and not time_program:
                row["program_skipped"] = "--no-program: the written file was not timed"
            elif serving.text is not None:
                sim = stopwatch()
                program = parse_program(serving.text, "serving 1 GiB", "exec")
                us = program_times_us(program, topology, [GiB])[0]
                row["program_pct"] = round(100 * at[serving.candidate.name].bound_us / us, 2)
                row["program_us"] = round(us, 1)
                row["program_sim_s"] = round(sim(), 1)
            files = [Path(f).name for f in written.range_files if f]
            row["file_1g"] = next((Path(f).name for r, f in
                                   zip(written.ranges, written.range_files, strict=True)
                                   if r is serving and f), None)
        row.update({
            "best": best, "best_pct": round(at[best].pct_of_bound, 2),
            "written": serving.candidate.name,
            "written_pct": round(at[serving.candidate.name].pct_of_bound, 2),
            "ranges": len(written.ranges), "xml_files": len(files), "notes": written.notes,
            "candidates": {n: round(p.pct_of_bound, 2) for n, p in sorted(at.items())},
        })
        row["lost"] = round(row["best_pct"] - row["written_pct"], 2)
        row["why"] = _why(best, serving.candidate.name, written.notes)
        row["status"] = "ok"
    except SynthError as exc:
        row.update({"status": "error", "error": exc.message})
    row["wall_s"] = round(start(), 1)
    if name in BARS and row.get("status") == "ok":
        row["bar"] = BARS[name]
        row["meets_bar"] = row["written_pct"] >= BARS[name]
    return row


def _faster_by_lockstep(r: dict[str, Any]) -> str:
    """The program model's 1 GiB times of the candidates the lock-step model ranks above the
    written one (their best instance count), beside the written file's: why each lost."""
    timed = r["program_1g"]
    written = r["written"]
    above = sorted((n for n, p in r["candidates"].items() if p > r["written_pct"]),
                   key=lambda n: -r["candidates"][n])
    parts = []
    for n in [written, *above]:
        t = timed.get(n)
        what = (f"{t['us']:,.1f} µs at x{t['instances']}" if t else
                "not timed there (over a limit, not runnable at 1 GiB, or pruned)")
        parts.append(f"{n}{' (written)' if n == written else ''} {what}")
    return "program model at 1 GiB: " + ", ".join(parts)


def markdown(data: dict[str, Any], lockstep: dict[str, Any] | None = None) -> str:
    """The table; with ``lockstep`` (the rows of a ``--winners-by lockstep`` run) each row also
    gives the program model's % of the file lock-step would have written, side by side."""
    env = data["environment"]
    other = {r["case"]: r for r in (lockstep or {}).get("cases", [])}
    by_commit: dict[str, list[str]] = {}
    for r in data["cases"]:
        by_commit.setdefault(r.get("commit") or "an earlier run", []).append(r["case"])
    commits = (f"commit {env['commit']}" if len(by_commit) <= 1 else "rows measured at commits "
               + "; ".join(f"{c} ({', '.join(cases)})" for c, cases in by_commit.items()))
    lines = [
        "# Emit: the best schedule found vs the program written (issue 15)",
        "",
        f"Machine: {env['machine']}, {env['cpu_count']} CPUs shared with other jobs (load "
        f"averages per case in emit.json); Python {env['python']}; {commits}. "
        f"Default `solve` per case (auto encoding, 1 KB..1 GB, exec profile, threadblock budget "
        f"64; the rows measured at df148a3 or later: every protocol, and the in-place file where "
        f"each kind of call gets its own; earlier rows: Simple, one file for both kinds), winners "
        f"decided "
        f"`--winners-by {data.get('winners_by', 'lockstep')}` (auto: "
        "the timed program model, which also picks each file's instance count, on GPU machines "
        "where its estimated work fits its budget, else lock-step: the trn1 rows are ranked by "
        "lock-step because their ranks are NeuronCores, which run no MSCCL GPU executor; `by` "
        "says which decided). `best %` and "
        "`written %`: % of bound at 1 GiB under the lock-step model (the wire: what the schedule "
        "moves); `program %`: the written file under the timed program model (what the runtime "
        "does with it: threadblock copy rates, FIFO slots, launch), same bound. `lost` = best − "
        "written (lock-step), in points.",
        "",
        "| case | ranks | best candidate | best % | written (serves 1 GiB) | written % | program % "
        "| by | lock-step's pick: program % | lost | bar | ranges | wall s | why |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["cases"]:
        if r.get("status") == "no_file":
            lines.append(f"| {r['case']} | {r['ranks']} | {r['best']} | {r['best_pct']} | none | — | "
                         f"— | — | — | — | {BARS.get(r['case'], '')} | 0 | {r['wall_s']} | "
                         f"{r['why']} |")
            continue
        if r.get("status") == "nccl":   # program %: NCCL's model's time over the same bound
            lines.append(f"| {r['case']} | {r['ranks']} | {r['best']} | {r['best_pct']} | NCCL "
                         f"(no file) | — | {r['program_pct']} (NCCL) | {r.get('winners_by', '')} | "
                         f"— | — | {BARS.get(r['case'], '')} | {r['ranges']} | {r['wall_s']} | "
                         f"{r['why']} |")
            continue
        if r.get("status") != "ok":
            lines.append(f"| {r['case']} | {r.get('ranks', '')} | — | — | — | — | — | — | — | — | "
                         f"{BARS.get(r['case'], '')} | — | {r['wall_s']} | error: "
                         f"{r.get('error', r.get('status'))} |")
            continue
        bar = ""
        if "bar" in r:
            bar = f"≥ {r['bar']:g}: {'meets' if r['meets_bar'] else 'misses'}"
        why = "" if r["lost"] <= 0 else r["why"].replace("|", "/")  # 0: a tie at 1 GiB
        written = r["written"] + (f" {r['proto_1g']}" if r.get("proto_1g", "Simple") != "Simple"
                                  else "") + (f" x{r['instances_1g']}"
                                              if r.get("instances_1g", 1) > 1 else "")
        if r.get("winners_by") == "program" and r["lost"] > 0:
            generic = why.endswith("another candidate's file was chosen")
            why = (f"the program model runs the written file faster at 1 GiB than {r['best']}'s "
                   f"in every configuration it timed" + ("" if generic else f"; {why}"))
            if "program_1g" in r:
                why += "; " + _faster_by_lockstep(r)
        program_na = "not timed" if "program_skipped" in r else "—"
        o = other.get(r["case"], {})
        pick = (f"{o['written']}: {o['program_pct']}"
                if "program_pct" in o and r.get("winners_by") != "lockstep" else "—")  # else: this row
        lines.append(f"| {r['case']} | {r['ranks']} | {r['best']} | {r['best_pct']} | "
                     f"{written} | {r['written_pct']} | {r.get('program_pct', program_na)} | "
                     f"{r.get('winners_by', 'lockstep')}"
                     f"{_below(r['lockstep_below']) if 'lockstep_below' in r else ''} | "
                     f"{pick} | {r['lost']} | {bar} | "
                     f"{r['ranges']} | "
                     f"{r['wall_s']} | {why} |")
    missing = [c[0] for c in CASES if c[0] not in {r["case"] for r in data["cases"]}]
    if missing:
        lines += ["", f"Not run in this file: {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--add", default=None, help="JSON lines of rows run_case measured elsewhere")
    ap.add_argument("--render", action="store_true",
                    help="rewrite the markdown from the JSON already in results/, run nothing")
    ap.add_argument("--winners-by", default="auto", choices=("auto", "program", "lockstep"),
                    help="the model that decides the winners (results/emit.md: auto, the CLI's "
                         "default; otherwise results/emit_<model>.md)")
    ap.add_argument("--no-program", action="store_true",
                    help="do not time the written 1 GiB file with the program model (a 512-rank "
                         "file takes over 10 min on 2 cores); the row says it was not timed")
    args = ap.parse_args()
    only = {c for c in args.only.split(",") if c}
    previous: dict[str, Any] = {}
    stem0 = "emit" if args.winners_by == "auto" else f"emit_{args.winners_by}"
    side = RESULTS / "emit_lockstep.json"
    lockstep = json.loads(side.read_text()) if stem0 != "emit_lockstep" and side.exists() else None
    if args.render:
        data = json.loads((RESULTS / f"{stem0}.json").read_text())
        (RESULTS / f"{stem0}.md").write_text(markdown(data, lockstep))
        return
    stem = "emit" if args.winners_by == "auto" else f"emit_{args.winners_by}"
    old = RESULTS / f"{stem}.json"
    if only and old.exists():
        previous = {r["case"]: r for r in json.loads(old.read_text())["cases"]}
    if args.add:
        for line in Path(args.add).read_text().splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                previous[row["case"]] = row
    env = {"machine": machine("system"), "cpu_count": cpus(), "python": python_version(),
           "commit": commit()}
    rows = []
    for name, topo, nodes, coll in CASES:
        if only and name not in only:
            if name in previous:
                rows.append(previous[name])
            continue
        before = load_average(2)
        row = run_case(name, topo, nodes, coll, args.winners_by, not args.no_program)
        row["load_before"], row["load_after"] = before, load_average(2)
        row["commit"] = env["commit"]
        print(json.dumps({k: row.get(k) for k in ("case", "status", "best_pct", "written_pct",
                                                  "lost", "wall_s")}), flush=True)
        rows.append(row)
    data = {"environment": env, "winners_by": args.winners_by, "cases": rows}
    write_results(stem, data, markdown(data, lockstep))


if __name__ == "__main__":
    main()
