"""MSCCL's published ND H100 v5 times against synth's timed program model of the same XML files.

Measurements: Azure/msccl ``docs/performance-nd-h100-v5.md`` @ 050b4a10 (1 node, 8 x H100, MSCCL
executor 6eacec0 on NCCL 2.18.3, msccl-tests-nccl in place, fp16), transcribed in
``tests/data/msccl_ndv5/performance-nd-h100-v5.json``. Programs: the production ndv5 algorithm
files of Azure/msccl-scheduler (``tests/data/msccl_ndv5/``). For every table size the file the
executor would select is found as the runtime selects it (collective, ngpus, in place,
``minBytes <= size <= maxBytes``, element count divisible by ``nchunksperloop``; spec §3.1); a size no
file covers ran NCCL's own kernels and is left out (allreduce from 32 MB). Each file is first
verified by the interpreter; then the program model (``synth.timing.program``) times it on
``dgx_h100``.

Variants:

* ``shipped`` -- the module's defaults, uncalibrated: NCCL's per-protocol ring ``baseLat`` as the
  launch and no executor step cost beyond NCCL's per-hop ``hwLat`` (``STEP_US`` = 0.0: the
  best step cost with the cited launch, found by this script on a 0.05 µs grid);
* ``calibrated`` -- ``synth calibrate --format msccl`` (:func:`synth.calibrate.program_fit.fit_floors`): a
  launch per protocol and one step cost fitted to all points (in-sample), and the same fit
  refitted without each file's points to predict them (leave-one-file-out, out-of-sample).

    python benchmarks/reality_msccl.py        # writes results/reality_msccl.{json,md}
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np
from harness import ROOT, write_results

from synth.calibrate.program_fit import STEP_GRID, errors, fit_floors, read_measurements
from synth.emit.interpreter import verify_program
from synth.emit.xml_parse import read_program
from synth.sizes import format_size
from synth.timing.program import program_model, program_time
from synth.topology_io import load_topology

DATA = ROOT / "tests" / "data" / "msccl_ndv5"


def step_with_cited_launch(programs, points, topo) -> float:
    """The executor step cost (grid) that best fits with NCCL's launch: the shipped STEP_US."""
    meas = np.array([pt["measured_us"] for pt in points])
    best = (np.inf, 0.0)
    for step in STEP_GRID:
        pred = np.array([program_time(programs[pt["file"]], topo, pt["bytes"], model=replace(
            program_model(topo, programs[pt["file"]].proto), step_us=step)).time_us
            for pt in points])
        loss = float(np.sum(np.log(pred / meas) ** 2))
        if loss < best[0] - 1e-12:
            best = (loss, step)
    return best[1]


def measure() -> dict:
    doc = json.loads((DATA / "performance-nd-h100-v5.json").read_text())
    topo = load_topology("dgx_h100")
    programs = {f.name: read_program(f) for f in sorted(DATA.glob("ndv5__*.xml"))}
    verified = {name: [r.mode for r in verify_program(p)] for name, p in programs.items()}
    fit = fit_floors(programs, read_measurements(doc, "performance-nd-h100-v5.json"), topo)
    nccl = {(c, row["bytes"]): row["nccl_us"] for c in ("allreduce", "allgather")
            for row in doc[c]}
    shipped = {p: program_model(topo, p) for p in ("Simple", "LL", "LL128")}
    for pt in fit.points:
        p = programs[pt["file"]]
        run = program_time(p, topo, pt["bytes"], model=shipped[p.proto])
        pt["shipped_us"] = round(run.time_us, 4)
        pt["nccl_us"] = nccl[(pt["collective"], pt["bytes"])]
        pt["nchannels"] = p.nchannels
        pt["messages"] = run.messages
        pt["iterations"] = run.iterations
    meas = np.array([pt["measured_us"] for pt in fit.points])
    summary = {"shipped": errors(np.array([pt["shipped_us"] for pt in fit.points]), meas),
               "calibrated_in_sample": fit.in_sample,
               "calibrated_leave_one_file_out": fit.leave_one_file_out}
    for key, pred in (("shipped", [pt["shipped_us"] for pt in fit.points]),
                      ("calibrated_in_sample", [pt["fitted_us"] for pt in fit.points]),
                      ("calibrated_leave_one_file_out",
                       [pt["leave_one_file_out_us"] for pt in fit.points])):
        err = np.exp(np.abs(np.log(np.array(pred) / meas)))
        summary[key] = {**summary[key], "within_1.3x": int(np.sum(err <= 1.3)),
                        "points": len(fit.points)}
    return {"source": doc["source"], "hardware": doc["hardware"], "software": doc["software"],
            "topology": topo.name, "verified": verified,
            "shipped": {p: {"launch_us": m.launch_us, "step_us": m.step_us,
                            "nvlink_efficiency": round(m.nvlink_efficiency, 4),
                            "channel_GBps": m.proto.channel_GBps} for p, m in shipped.items()},
            "step_with_cited_launch": step_with_cited_launch(programs, fit.points, topo),
            "calibration": fit.program_section(), "points": fit.points, "skipped": fit.skipped,
            "summary": summary}


def to_markdown(res: dict) -> str:
    s = res["summary"]
    lines = [
        "# MSCCL's published times vs synth's timed program model",
        "",
        f"Measured: {res['source']} ({res['hardware']}; {res['software']}). Modelled: the same "
        f"production XML files (Azure/msccl-scheduler ndv5, in `tests/data/msccl_ndv5/`), each "
        f"verified by synth's interpreter first, timed by `synth.timing.program` on "
        f"`{res['topology']}`. Written by `python benchmarks/reality_msccl.py`.",
        "",
        "Error = max(pred/meas, meas/pred). Goal (issue 14): median <= 1.3x, worst <= 2x.",
        "",
        "| variant | median error | worst error | points within 1.3x | median pred/meas |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {"shipped": "**shipped** (uncalibrated: NCCL launch, no extra step cost)",
             "calibrated_in_sample": "calibrated, in-sample (launch per protocol + step cost)",
             "calibrated_leave_one_file_out": "calibrated, leave-one-file-out (out-of-sample)"}
    for key, label in names.items():
        v = s[key]
        lines.append(f"| {label} | {v['median_error']:.3f}x | {v['worst_error']:.3f}x | "
                     f"{v['within_1.3x']}/{v['points']} | {v['median_ratio']:.3f} |")
    sh, cal = res["shipped"], res["calibration"]

    def loo_ratio(file: str, nbytes: int) -> float:
        return next(p["leave_one_file_out_us"] / p["measured_us"] for p in res["points"]
                    if p["file"] == file and p["bytes"] == nbytes)

    def max_loo(file: str) -> float:
        return max(p["leave_one_file_out_us"] / p["measured_us"] for p in res["points"]
                   if p["file"] == file)
    lines += [
        "",
        f"Shipped floors: launch = NCCL's ring baseLat (LL {sh['LL']['launch_us']}, LL128 "
        f"{sh['LL128']['launch_us']}, Simple {sh['Simple']['launch_us']} µs; NVIDIA/nccl "
        f"src/graph/tuning.cc @ b6475625), executor step cost {sh['LL']['step_us']} µs per message "
        f"(the best fit with that launch: {res['step_with_cited_launch']} µs); NVLink at "
        f"{sh['LL']['nvlink_efficiency']} of nominal (NCCL topo.h: 20.6 GB/s per lane over 25). "
        f"Calibrated (`synth calibrate --format msccl`): launch "
        + ", ".join(f"{k} {v} µs" for k, v in cal["launch_us"].items())
        + f", step {cal['step_us']} µs per message.",
        "",
        "| coll | size | file | proto | ch | MSCCL µs | NCCL µs | shipped µs | shipped/meas | "
        "calibrated µs | LOO µs | LOO/meas |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pt in res["points"]:
        m = pt["measured_us"]
        lines.append(
            f"| {pt['collective']} | {format_size(pt['bytes'])} | {pt['file'].split('__')[1]} | "
            f"{pt['proto']} | {pt['nchannels']} | {m} | {pt['nccl_us']} | {pt['shipped_us']:.2f} | "
            f"{pt['shipped_us'] / m:.2f} | {pt['fitted_us']:.2f} | "
            f"{pt['leave_one_file_out_us']:.2f} | {pt['leave_one_file_out_us'] / m:.2f} |")
    sk = ", ".join(f"{d['collective']} {format_size(d['bytes'])}" for d in res["skipped"])
    lines += ["", f"Not compared (no ndv5 file covers the size, MSCCL ran NCCL's kernels): {sk}.",
              "", "## Where it misses, and why", ""]
    by_file: dict[str, list[float]] = {}
    for pt in res["points"]:
        by_file.setdefault(pt["file"].split("__")[1], []).append(pt["shipped_us"]
                                                                 / pt["measured_us"])
    lines += ["Shipped (uncalibrated) model, per file:", "",
              "| file | points | pred/meas min | max |", "|---|---:|---:|---:|"]
    for f, r in sorted(by_file.items()):
        lines.append(f"| {f} | {len(r)} | {min(r):.2f} | {max(r):.2f} |")
    lines += [
        "",
        "* **Small LL allgathers (ag-1k-512k, 1 KB-128 KB) are predicted up to 1.35x slow.** The "
        "model's floor there is the launch alone: NCCL's ring `baseLat` for LL (6.6 µs) plus one "
        "hop. MSCCL measures 5.43-5.75 µs in total, so the executor's own per-call cost is below "
        "NCCL's ring `baseLat` (which also covers NCCL's ring set-up). Calibration lowers the LL "
        f"launch to {cal['launch_us'].get('LL', float('nan'))} µs, and then adds a step cost per "
        "message that the all-pairs and ring files need.",
        "* **LL128 at 2 MB (r48ll128 1.30x, ag-2m 1.20x) is slow for the same reason:** LL128's "
        "`baseLat` is 14 µs; at 4 MB and above the bandwidth term dominates and the error falls.",
        "* **The all-pairs allreduce ap4ll (64-256 KB) is 0.84x, r48ll at 1 MB 0.83x, large LL128 "
        "and Simple (8-16 MB) 0.86-0.91x: predicted too fast.** These files send 256 or 64 "
        "chunks over 4-32 channels with many small messages per step; the model charges each "
        "message NCCL's per-hop latency and no extra executor flag cost (its fit is 0.0 µs), "
        "and it lets a block forward LL lines as soon as they land. The runtime's per-message "
        "work (thread-block barriers, the LL flag polling of every 8-byte line, reduction "
        "arithmetic on fp16) is not in the model beyond the per-channel rate cap.",
        "* **Large Simple allgathers (32 MB-1 GB) are within 0.99-1.12x**: bandwidth-bound, set by "
        "the NVSwitch port at NCCL's usable NVLink figure (18 x 20.6 GB/s).",
        "* **Leave-one-file-out misses most where a file carries its protocol's evidence.** "
        "Without r48ll128 only one LL128 point is left (ag-2m), fewer than the 3 a launch is "
        "fitted from, so LL128 falls back to NCCL's 14 µs plus the fitted step cost (2 MB: "
        f"{loo_ratio('ndv5__r48ll128.xml', 2**21):.2f}x). Without ag-1k-512k the LL launch is "
        "fitted on the allreduce files only, whose floors are higher (LL allgathers up to "
        f"{max_loo('ndv5__ag-1k-512k.xml'):.2f}x). The calibrated floors transfer between files "
        "of one kind, not across kinds: a calibration should include files like the ones it will "
        "predict.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    res = measure()
    md = to_markdown(res)
    write_results("reality_msccl", res, md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
