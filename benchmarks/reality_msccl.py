"""MSCCL's published ND H100 v5 times against synth's timed program model of the same XML files.

Measurements: Azure/msccl ``docs/performance-nd-h100-v5.md`` @ 050b4a10 (1 node, 8 x H100, MSCCL
executor 6eacec0 on NCCL 2.18.3, msccl-tests-nccl in place, fp16), transcribed in
``tests/data/msccl_ndv5/performance-nd-h100-v5.json``. Programs: the production ndv5 algorithm
files of Azure/msccl-scheduler (``tests/data/msccl_ndv5/``). For every table size the file the
executor would select is found as the runtime selects it (collective, ngpus, in place,
``minBytes <= size <= maxBytes``, element count divisible by ``nchunksperloop``; spec §3.1); a size no
file covers ran NCCL's own kernels and is left out (allreduce from 32 MB). Each file is first
verified by the interpreter; then the program model (``synth.program_model``) times it on
``dgx_h100``.

Variants:

* ``cited`` -- only the cited floors: NCCL's per-protocol ring ``baseLat`` as the launch, no
  executor step cost beyond NCCL's per-hop ``hwLat``;
* ``shipped`` -- the module's defaults: the cited launch and ``STEP_US``, the executor step cost
  fitted here on all points (in-sample; it comes out 0.0 µs, so shipped = cited);
* ``leave-one-file-out`` -- the step cost fitted on the *other* files' points and used to predict
  each file's points (out-of-sample: how a calibration transfers to a program it has not seen);
* for comparison, one launch for every protocol fitted together with the step cost, in-sample and
  leave-one-file-out.

The fit minimises the squared log error. ``launch_us`` is additive, so for each ``step_us`` on a
grid (0.05 µs) the best launch is a 1-D minimisation over precomputed runs.

    python benchmarks/reality_msccl.py        # writes results/reality_msccl.{json,md}
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

from synth.cost import format_size
from synth.emit.interpreter import verify_program
from synth.emit.xml_parse import read_program
from synth.files import atomic_write
from synth.program_model import program_model, program_time
from synth.protocols import _BASE_LAT
from synth.topology_io import load_topology

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "msccl_ndv5"
STEP_GRID = np.round(np.arange(0.0, 1.01, 0.05), 3)
ELEMENT_BYTES = 2   # fp16 (-d half)


def select(programs: dict[str, object], coll: str, nbytes: int):
    """The file the executor would run for an in-place call of ``nbytes`` (None: NCCL's own)."""
    for name in sorted(programs):
        p = programs[name]
        if p.coll != coll or not p.inplace:
            continue
        if not (p.min_bytes <= nbytes and (p.max_bytes == 0 or nbytes <= p.max_bytes)):
            continue
        if (nbytes // ELEMENT_BYTES) % p.nchunksperloop:
            continue
        return name, p
    return None


def fit_launch(rest: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """Best additive launch for predictions ``launch + rest`` (least squares on log)."""
    def loss(launch: float) -> float:
        return float(np.sum(np.log((launch + rest) / measured) ** 2))
    res = minimize_scalar(loss, bounds=(0.0, 30.0), method="bounded")
    return float(res.x), float(res.fun)


def fit(rest_by_step: np.ndarray, measured: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """(launch_us, step_us) minimising the squared log error over the points in ``mask``."""
    best = (np.inf, 0.0, 0.0)
    for j, step in enumerate(STEP_GRID):
        launch, loss = fit_launch(rest_by_step[mask, j], measured[mask])
        if loss < best[0]:
            best = (loss, launch, float(step))
    return best[1], best[2]


def fit_step(rest_by_step: np.ndarray, launch: np.ndarray, measured: np.ndarray,
             mask: np.ndarray) -> float:
    """step_us on the grid minimising the squared log error, each point with its own launch."""
    loss = np.sum(np.log((launch[mask, None] + rest_by_step[mask]) / measured[mask, None]) ** 2,
                  axis=0)
    return float(STEP_GRID[int(np.argmin(loss))])


def measure() -> dict:
    doc = json.loads((DATA / "performance-nd-h100-v5.json").read_text())
    topo = load_topology("dgx_h100")
    programs = {f.name: read_program(f) for f in sorted(DATA.glob("ndv5__*.xml"))}
    verified = {}
    for name, p in programs.items():
        reps = verify_program(p)
        verified[name] = [r.mode for r in reps]
    points = []
    skipped = []
    for coll in ("allreduce", "allgather"):
        for row in doc[coll]:
            chosen = select(programs, coll, row["bytes"])
            if chosen is None:
                skipped.append({"collective": coll, "bytes": row["bytes"]})
                continue
            points.append({"collective": coll, "bytes": row["bytes"], "file": chosen[0],
                           "proto": chosen[1].proto, "nchannels": chosen[1].nchannels,
                           "msccl_us": row["msccl_us"], "nccl_us": row["nccl_us"]})
    # runs without launch, for every step cost on the grid (launch is additive)
    t0 = time.perf_counter()
    rest = np.zeros((len(points), len(STEP_GRID)))
    for i, pt in enumerate(points):
        p = programs[pt["file"]]
        base = replace(program_model(topo, p.proto), launch_us=0.0)
        for j, step in enumerate(STEP_GRID):
            rest[i, j] = program_time(p, topo, pt["bytes"],
                                      model=replace(base, step_us=float(step))).time_us
    sim_seconds = time.perf_counter() - t0
    measured = np.array([pt["msccl_us"] for pt in points])
    everything = np.ones(len(points), dtype=bool)
    launch_all, step_all = fit(rest, measured, everything)
    files = sorted({pt["file"] for pt in points})
    cited_launch = np.array([_BASE_LAT[pt["proto"]] for pt in points])
    step_cited = fit_step(rest, cited_launch, measured, everything)
    loo: dict[str, tuple[float, float]] = {}
    loo_step: dict[str, float] = {}
    for f in files:
        mask = np.array([pt["file"] != f for pt in points])
        loo[f] = fit(rest, measured, mask)
        loo_step[f] = fit_step(rest, cited_launch, measured, mask)
    # predictions
    shipped_model = {p: program_model(topo, p) for p in ("Simple", "LL", "LL128")}
    for i, pt in enumerate(points):
        p = programs[pt["file"]]
        shipped = program_time(p, topo, pt["bytes"], model=shipped_model[p.proto])
        cited = program_time(p, topo, pt["bytes"], model=replace(
            shipped_model[p.proto], launch_us=_BASE_LAT[p.proto], step_us=0.0))
        la, st = loo[pt["file"]]
        j = int(np.argmin(np.abs(STEP_GRID - st)))
        pt["shipped_us"] = round(shipped.time_us, 3)
        pt["cited_us"] = round(cited.time_us, 3)
        pt["loo_us"] = round(la + rest[i, j], 3)
        pt["fit_all_us"] = round(launch_all + rest[i, int(np.argmin(np.abs(STEP_GRID - step_all)))], 3)
        pt["loo_floors"] = {"launch_us": round(la, 3), "step_us": st}
        js = int(np.argmin(np.abs(STEP_GRID - loo_step[pt["file"]])))
        pt["loo_step_us"] = round(cited_launch[i] + rest[i, js], 3)
        pt["messages"] = shipped.messages
        pt["iterations"] = shipped.iterations
    summary = {}
    for key in ("cited_us", "shipped_us", "loo_step_us", "fit_all_us", "loo_us"):
        ratio = np.array([pt[key] / pt["msccl_us"] for pt in points])
        err = np.exp(np.abs(np.log(ratio)))
        summary[key] = {"median_error": round(float(np.median(err)), 4),
                        "worst_error": round(float(err.max()), 4),
                        "within_1.3x": int(np.sum(err <= 1.3)), "points": len(points),
                        "median_ratio": round(float(np.median(ratio)), 4)}
    return {"source": doc["source"], "hardware": doc["hardware"], "software": doc["software"],
            "topology": topo.name, "verified": verified,
            "fit_all": {"launch_us": round(launch_all, 3), "step_us": step_all},
            "fit_step_with_cited_launch": step_cited,
            "loo_step": loo_step,
            "shipped": {p: {"launch_us": m.launch_us, "step_us": m.step_us,
                            "nvlink_efficiency": m.nvlink_efficiency,
                            "channel_GBps": m.proto.channel_GBps} for p, m in shipped_model.items()},
            "loo_floors": {f: {"launch_us": round(a, 3), "step_us": b} for f, (a, b) in loo.items()},
            "points": points, "skipped": skipped, "summary": summary,
            "simulations": int(rest.size), "simulation_seconds": round(sim_seconds, 2)}


def to_markdown(res: dict) -> str:
    s = res["summary"]
    lines = [
        "# MSCCL's published times vs synth's timed program model",
        "",
        f"Measured: {res['source']} ({res['hardware']}; {res['software']}). Modelled: the same "
        f"production XML files (Azure/msccl-scheduler ndv5, in `tests/data/msccl_ndv5/`), each "
        f"verified by synth's interpreter first, timed by `synth.program_model` on "
        f"`{res['topology']}`. Written by `python benchmarks/reality_msccl.py`.",
        "",
        "Error = max(pred/meas, meas/pred). Goal (issue 14): median <= 1.3x, worst <= 2x.",
        "",
        "| variant | median error | worst error | points within 1.3x | median pred/meas |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {"cited_us": "cited floors only (NCCL baseLat launch per protocol, no step cost)",
             "shipped_us": "**shipped**: cited launch + step cost fitted on all points (in-sample)",
             "loo_step_us": "cited launch + step cost fitted leaving the file out (out-of-sample)",
             "fit_all_us": "one launch + step cost, both fitted on all points (in-sample)",
             "loo_us": "one launch + step cost, both fitted leaving the file out"}
    for key, label in names.items():
        v = s[key]
        lines.append(f"| {label} | {v['median_error']:.3f}x | {v['worst_error']:.3f}x | "
                     f"{v['within_1.3x']}/{v['points']} | {v['median_ratio']:.3f} |")
    fa = res["fit_all"]
    sh = res["shipped"]
    lines += [
        "",
        f"Shipped floors: launch = NCCL's ring baseLat (LL {sh['LL']['launch_us']}, LL128 "
        f"{sh['LL128']['launch_us']}, Simple {sh['Simple']['launch_us']} µs; NVIDIA/nccl "
        f"src/graph/tuning.cc @ b6475625), step {sh['LL']['step_us']} µs per message (fit with "
        f"that launch: {res['fit_step_with_cited_launch']} µs). Both fitted: launch "
        f"{fa['launch_us']} µs, step {fa['step_us']} µs. "
        f"NVLink efficiency {res['shipped']['LL']['nvlink_efficiency']:.3f} (NCCL's 20.6 GB/s "
        "per lane over 25). "
        f"{res['simulations']} simulations in {res['simulation_seconds']} s.",
        "",
        "LOO = cited launch, step cost fitted on the other files.",
        "",
        "| coll | size | file | proto | ch | MSCCL µs | NCCL µs | cited µs | shipped µs | "
        "shipped/meas | LOO µs | LOO/meas |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pt in res["points"]:
        lines.append(
            f"| {pt['collective']} | {format_size(pt['bytes'])} | {pt['file'].split('__')[1]} | "
            f"{pt['proto']} | {pt['nchannels']} | {pt['msccl_us']} | {pt['nccl_us']} | "
            f"{pt['cited_us']:.2f} | {pt['shipped_us']:.2f} | "
            f"{pt['shipped_us'] / pt['msccl_us']:.2f} | {pt['loo_step_us']:.2f} | "
            f"{pt['loo_step_us'] / pt['msccl_us']:.2f} |")
    sk = ", ".join(f"{d['collective']} {format_size(d['bytes'])}" for d in res["skipped"])
    lines += ["", f"Not compared (no ndv5 file covers the size, MSCCL ran NCCL's kernels): {sk}.",
              "", "## Where it misses, and why", ""]
    by_file: dict[str, list[float]] = {}
    for pt in res["points"]:
        by_file.setdefault(pt["file"].split("__")[1], []).append(pt["shipped_us"] / pt["msccl_us"])
    lines += ["| file | points | pred/meas min | max |", "|---|---:|---:|---:|"]
    for f, r in sorted(by_file.items()):
        lines.append(f"| {f} | {len(r)} | {min(r):.2f} | {max(r):.2f} |")
    lines += [
        "",
        "* **Small LL allgathers (ag-1k-512k, 1 KB-128 KB) are predicted up to 1.35x slow.** The "
        "model's floor there is the launch alone: NCCL's ring `baseLat` for LL (6.6 µs) plus one "
        "hop. MSCCL measures 5.43-5.75 µs in total, so the executor's own per-call cost is below "
        "NCCL's ring `baseLat` (which also covers NCCL's ring set-up). A single fitted launch "
        "(5.08 µs) removes this, but then the LL128 and the all-pairs allreduce floors are too "
        "low: one launch figure for all protocols does not fit both (rows 4-5 of the summary).",
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
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    res = measure()
    out = ROOT / "results"
    out.mkdir(exist_ok=True)
    atomic_write(out / "reality_msccl.json", json.dumps(res, indent=1) + "\n")
    md = to_markdown(res)
    atomic_write(out / "reality_msccl.md", md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
