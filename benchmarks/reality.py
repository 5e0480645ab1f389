"""Reality check: synth's model of NCCL (`--algo nccl`) against public NCCL measurements.

Reads every measurement of ``tests/data/nccl-tests/`` (nccl-tests logs and published tables, each
citing its source, hardware, node count and NCCL version; see its README) and, per file and size,
compares the measured time with

* **uncalibrated**: :mod:`synth.timing.nccl` — NCCL's tuner (algorithm, protocol, channels) and its
  latency/bandwidth terms from NVIDIA/nccl 2.30.7, nothing fitted;
* **calibrated, leave-one-out**: the same model with a launch floor, latency scale and bandwidth
  scale (:func:`synth.calibrate.nccl_fit.fit`) fitted to every *other* point measured on the same machine
  (same topology and node count, all collectives), then used to predict the held-out point;
* **transferred across collectives**: fitted to one collective of a machine, predicting another
  collective of the same machine (where the data has two);
* **ring (step model)**: synth's α-β ``ring`` baseline, one ring through one NIC, no floors — what
  synth compared against before this model existed.

Error is the symmetric factor max(pred/meas, meas/pred) (1.0 = exact). Goals (issue 14): median
<= 1.3 uncalibrated and <= 1.15 calibrated, worst <= 2.

    python benchmarks/reality.py     # writes results/reality.{json,md,png}
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from harness import RESULTS, ROOT, write_results

from synth.calibrate.nccl_fit import (
    Measurement,
    error_ratio,
    fit,
    load_suite,
    machine_for,
    predict_measurement,
)
from synth.collectives import make_collective
from synth.encodings.baseline import baseline
from synth.errors import NotApplicable
from synth.sizes import format_size
from synth.timing.lockstep import schedule_times_us
from synth.timing.nccl import SOURCE, choose
from synth.topology_io import load_topology

DATA = ROOT / "tests" / "data" / "nccl-tests"
GOALS = {"uncalibrated_median": 1.3, "calibrated_median": 1.15, "worst": 2.0}


def _ring_step_model(meas: Measurement) -> np.ndarray | None:
    topo = load_topology(meas.topology, meas.nodes)
    try:
        sched = baseline(topo, make_collective(meas.collective, topo.num_ranks, 1), "ring")
    except NotApplicable:
        return None
    return schedule_times_us(sched, topo, [int(s) for s in meas.sizes])


def _machine_key(m: Measurement) -> tuple[str, int]:
    return (m.topology, m.nodes)


def measure() -> dict:
    suite = load_suite(DATA)
    machines: dict = {}
    by_machine: dict[tuple[str, int], list[Measurement]] = defaultdict(list)
    for m in suite:
        by_machine[_machine_key(m)].append(m)
    files = []
    for m in suite:
        mach = machine_for(m, machines)
        chosen = [choose(mach, m.collective, int(s), None, m.algos or None) for s in m.sizes]
        uncal = np.array([c.time_us for c in chosen])
        # a run its reporter calls below expectation calibrates nothing but itself
        peers = [p for p in by_machine[_machine_key(m)] if p.status == "measured" or p is m]
        loo = []
        loo_fits = []
        for s in m.sizes:
            f = fit(peers, exclude=(m.label, int(s)), machines=machines, source="leave-one-out")
            loo_fits.append(f.fitted)
            one = Measurement(**{**m.__dict__, "sizes": np.array([s]),
                                 "times_us": m.times_us[m.sizes == s]})
            loo.append(float(predict_measurement(one, f.calibration, mach)[0]))
        loo_arr = np.array(loo)
        ring = _ring_step_model(m)
        transfers = []
        for other in peers:
            if other.collective == m.collective:
                continue
            f = fit([other], machines=machines, source=f"fit on {other.label}")
            pred = predict_measurement(m, f.calibration, mach)
            r = error_ratio(pred, m.times_us)
            transfers.append({"fitted_on": other.label, "calibration": f.calibration.to_dict(),
                              "fitted": list(f.fitted), "pred_us": _round(pred),
                              "median_error": round(float(np.median(r)), 4),
                              "max_error": round(float(np.max(r)), 4)})
        rows = []
        for i, s in enumerate(m.sizes):
            rows.append({"bytes": int(s), "measured_us": float(m.times_us[i]),
                         "nccl_algo": chosen[i].algo, "nccl_proto": chosen[i].proto,
                         "channels": chosen[i].channels,
                         "uncalibrated_us": round(float(uncal[i]), 4),
                         "calibrated_loo_us": round(float(loo_arr[i]), 4),
                         "loo_fitted": list(loo_fits[i]),
                         "ring_step_model_us": None if ring is None else round(float(ring[i]), 4)})
        e_un = error_ratio(uncal, m.times_us)
        e_loo = error_ratio(loo_arr, m.times_us)
        e_ring = error_ratio(ring, m.times_us) if ring is not None else None
        files.append({
            "file": Path(m.path).name, "collective": m.collective, "topology": m.topology,
            "nodes": m.nodes, "nccl": m.nccl, "forced_algo": list(m.algos), "status": m.status,
            "source": m.source,
            "machine": mach.to_dict(), "rows": rows,
            "uncalibrated": _stats(e_un), "calibrated_loo": _stats(e_loo),
            "ring_step_model": _stats(e_ring) if e_ring is not None else None,
            "transfers": transfers})
    def errors(key: str, subset: list[dict]) -> np.ndarray:
        return np.array([_err(r[key], r["measured_us"]) for f in subset for r in f["rows"]
                         if r[key] is not None])

    summary: dict = {"goals": GOALS, "transfer_median_errors": [t["median_error"] for f in files
                                                                for t in f["transfers"]]}
    for name, subset in (("all", files),
                         ("measured", [f for f in files if f["status"] == "measured"])):
        un, loo = errors("uncalibrated_us", subset), errors("calibrated_loo_us", subset)
        summary[name] = {
            "points": len(un), "files": len({f["file"] for f in subset}),
            "uncalibrated": _stats(un), "calibrated_loo": _stats(loo),
            "ring_step_model": _stats(errors("ring_step_model_us", subset)),
            "met": {"uncalibrated_median": float(np.median(un)) <= GOALS["uncalibrated_median"],
                    "calibrated_median": float(np.median(loo)) <= GOALS["calibrated_median"],
                    "worst_uncalibrated": float(np.max(un)) <= GOALS["worst"],
                    "worst_calibrated": float(np.max(loo)) <= GOALS["worst"]}}
    return {"model": SOURCE, "summary": summary, "measurements": files}


def _err(pred: float, meas: float) -> float:
    return max(pred / meas, meas / pred)


def _round(a: np.ndarray) -> list[float]:
    return [round(float(x), 4) for x in a]


def _stats(r: np.ndarray) -> dict:
    return {"median_error": round(float(np.median(r)), 4), "max_error": round(float(np.max(r)), 4),
            "within_1.15": round(float(np.mean(r <= 1.15)), 4),
            "within_1.3": round(float(np.mean(r <= 1.3)), 4)}


def to_markdown(data: dict) -> str:
    summ = data["summary"]
    goals = summ["goals"]
    lines = [
        "# Reality: synth's NCCL model against public NCCL measurements",
        "",
        "Generated by `python benchmarks/reality.py` from `tests/data/nccl-tests/` (each file cites "
        "its source, hardware, node count and NCCL version). Model: "
        f"`synth.timing.nccl`, {data['model']}. Error = max(pred/meas, meas/pred). Calibrated "
        "leave-one-out: launch floor, latency and bandwidth scales fitted to every other point of "
        "the same machine (topology and node count), predicting the held-out point.",
        ""]
    for key, title in (("all", "All files"),
                       ("measured", "Without the run its reporter calls below expectation")):
        s = summ[key]
        lines += [f"**{title}: {s['points']} measured points in {s['files']} files.**", "",
                  "| predictor | median error | worst | within 1.15x | within 1.3x |",
                  "|---|---|---|---|---|"]
        for k, name in (("uncalibrated", "NCCL model, uncalibrated"),
                        ("calibrated_loo", "NCCL model, calibrated leave-one-out"),
                        ("ring_step_model", "ring baseline, step model (before)")):
            st = s[k]
            lines.append(f"| {name} | {st['median_error']:.3f} | {st['max_error']:.3f} | "
                         f"{100 * st['within_1.15']:.0f}% | {100 * st['within_1.3']:.0f}% |")
        met = s["met"]
        lines += ["", f"Goals (issue 14): median <= {goals['uncalibrated_median']} uncalibrated "
                  f"({'met' if met['uncalibrated_median'] else 'MISSED'}), <= "
                  f"{goals['calibrated_median']} calibrated "
                  f"({'met' if met['calibrated_median'] else 'MISSED'}), worst <= {goals['worst']} "
                  f"(uncalibrated {'met' if met['worst_uncalibrated'] else 'MISSED'}, calibrated "
                  f"{'met' if met['worst_calibrated'] else 'MISSED'}).", ""]
    for f in data["measurements"]:
        m = f["machine"]
        forced = f", NCCL_ALGO={','.join(f['forced_algo'])}" if f["forced_algo"] else ""
        lines += [f"## {f['file']}: {f['collective']} on {f['topology']} x {f['nodes']} "
                  f"(NCCL {f['nccl']}{forced})",
                  "", f"Source: {f['source']}" + (
                      f" **Status: {f['status']}.**" if f["status"] != "measured" else ""), "",
                  f"NCCL's graphs as modelled: ring {m['ring']['channels']} x "
                  f"{m['ring']['bw_intra_GBps']:g} GB/s, tree {m['tree']['channels']} x "
                  f"{m['tree']['bw_intra_GBps']:g}/{m['tree']['bw_inter_GBps']:g} GB/s"
                  + (f", NVLS {m['nvls']['channels']} x {m['nvls']['bw_intra_GBps']:g}/"
                     f"{m['nvls']['bw_inter_GBps']:g} GB/s" if m["nvls"] else "") + ".", "",
                  f"Uncalibrated: median {f['uncalibrated']['median_error']:.3f}, worst "
                  f"{f['uncalibrated']['max_error']:.3f}; calibrated leave-one-out: median "
                  f"{f['calibrated_loo']['median_error']:.3f}, worst "
                  f"{f['calibrated_loo']['max_error']:.3f}"
                  + (f"; ring step model: median {f['ring_step_model']['median_error']:.3f}, worst "
                     f"{f['ring_step_model']['max_error']:.3f}" if f["ring_step_model"] else "")
                  + ".", "",
                  "| size | measured µs | NCCL runs (model) | uncalibrated µs | calibrated LOO µs "
                  "| ring step model µs |",
                  "|---|---|---|---|---|---|"]
        for r in f["rows"]:
            ring = f"{r['ring_step_model_us']:.2f}" if r["ring_step_model_us"] is not None else "-"
            lines.append(f"| {format_size(r['bytes'])} | {r['measured_us']:.2f} | "
                         f"{r['nccl_algo']}/{r['nccl_proto']} x{r['channels']} | "
                         f"{r['uncalibrated_us']:.2f} | {r['calibrated_loo_us']:.2f} | {ring} |")
        for t in f["transfers"]:
            c = t["calibration"]
            lines += ["", f"Calibration transferred from {t['fitted_on']} (launch "
                      f"{c['launch_us']:.2f} µs, latency x{c['latency_scale']:.3f}, bandwidth "
                      f"x{c['bandwidth_scale']:.3f}; fitted {', '.join(t['fitted'])}): median "
                      f"error {t['median_error']:.3f}, worst {t['max_error']:.3f}."]
        lines.append("")
    lines += ["## Where it misses, and why", "", *MISSES, ""]
    return "\n".join(lines)


MISSES = [
    "- **Allreduce between 512 KB and 64 MB on one H100 node** (ND H100 v5): measured times are "
    "1.14-1.39x the model (worst 1.39x at 512 KB, Ring/LL; 1.38x at 8 MB, NVLS). NCCL's model "
    "gives NVLS its full bus bandwidth (476 GB/s) from the first byte, but NVLS needs large "
    "messages to fill the switch, and LL's modelled bandwidth holds until the tuner switches. "
    "The calibrated fit trades this against the small sizes (bandwidth scale < 1, latency "
    "scale > 1).",
    "- **NVLS tree on 2 x 8 H20** (latency regime only, NCCL_ALGO forced): NCCL's latency table "
    "says 25 µs NVLink SHARP + 2 x 20.9 µs network = 66.8 µs; 46-48 µs were measured (1.43x). "
    "NCCL 2.21.5 ran there; the model is 2.30.7's table. Calibration on the same machine's other "
    "points removes it (a latency scale of ~0.7), which is what `synth calibrate` is for.",
    "- **2 x 8 H20, default algorithm, 1-512 MB** (the run its reporter calls below expectation: "
    "343 GB/s busbw against ~460 expected): measured times are 1.38-2.06x the model (worst at "
    "1 MB, where ~124 µs is flat from 1 to 4 MB: a floor no NCCL latency term has; and at "
    "128-256 MB, where the busbw drops from 269 to 227 GB/s as the size doubles). The model is "
    "NCCL's view of a healthy machine, so the gap is the machine's. Calibrated on itself "
    "(leave-one-out, scales held within 4x of NCCL's) it is 1.28x median, 1.81x worst. The old "
    "one-ring step model was 4.0x median, 6.3x worst on the same points: it runs one ring "
    "through one NIC.",
    "- **Transfer across collectives is weaker than within one**: a fit on the H100 allgather "
    "(Ring: latency x0.69, launch +3.2 µs) predicts the allreduce (NVLS at large sizes) with "
    "median 1.21x and worst 1.49x, no better than uncalibrated (1.14x / 1.39x), because the two "
    "collectives run different algorithms whose errors differ; one set of three scales per "
    "machine cannot hold both. The reverse direction is 1.18x / 1.27x.",
    "- **Coverage**: only one-node H100/H200 tables and one two-node latency excerpt have full, "
    "hardware-stated public data in the corpus this was built from; A100 and two-node bandwidth "
    "points are not in the suite, so the two-node channel search (8 x 24 GB/s on DGX A100, "
    "8 x 48 GB/s on DGX H100) is checked against NCCL's printed graphs in the tests, not against "
    "measured times.",
]


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meas = data["measurements"]
    fig, axes = plt.subplots(1, len(meas), figsize=(4.2 * len(meas), 3.6), squeeze=False)
    for ax, f in zip(axes[0], meas, strict=True):
        x = [r["bytes"] for r in f["rows"]]
        ax.loglog(x, [r["measured_us"] for r in f["rows"]], "ko", label="measured", ms=4)
        ax.loglog(x, [r["uncalibrated_us"] for r in f["rows"]], "x-", label="NCCL model")
        ax.loglog(x, [r["calibrated_loo_us"] for r in f["rows"]], "+--", label="calibrated LOO")
        if f["ring_step_model"]:
            ax.loglog(x, [r["ring_step_model_us"] for r in f["rows"]], ".:", label="ring step model")
        ax.set_title(f"{f['collective']} {f['topology']} x{f['nodes']}\n{f['file'][:34]}",
                     fontsize=8)
        ax.set_xlabel("bytes")
        ax.set_ylabel("µs")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main() -> int:
    data = measure()
    write_results("reality", data, to_markdown(data), indent=2)
    plot(data, RESULTS / "reality.png")
    for key in ("all", "measured"):
        s = data["summary"][key]
        print(f"{key}: {s['points']} points: uncalibrated median "
              f"{s['uncalibrated']['median_error']}, worst {s['uncalibrated']['max_error']}; "
              f"calibrated LOO median {s['calibrated_loo']['median_error']}, worst "
              f"{s['calibrated_loo']['max_error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
