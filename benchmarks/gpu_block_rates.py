"""Measure one threadblock's local copy and reduce rates, and the kernel launch floor, on a GPU.

Why: the timed program model (:mod:`synth.timing.program`) prices an MSCCL step's local work --
``cpy``, the copy-out of a receive, a reduction (``re``, ``rrc``, ``rrs``) -- at one threadblock's
rate, and takes that rate from NCCL's tuning model (``channel_GBps``: 38.7 GB/s for Hopper
Simple, ``perChMaxTreeBw``), a cap NCCL uses for a channel's *network/NVLink* throughput. Its
reduction costs are assumed multiples of a copy. Neither had been measured on a GPU. This script
measures them on the machine it runs on:

* ``copy``: ``dst[i] = src[i]`` in 16-byte words, one block of ``threads`` threads (and 2..132
  blocks, to see where HBM saturates), the way a threadblock's copy loop streams memory;
* ``reduce2``: ``dst[i] = a[i] + b[i]`` in fp32 (a two-source reduction: 2 reads, 1 write);
* ``launch``: an empty kernel, launched back to back (per-launch cost) and launched then
  synchronised (round trip).

Rates count the bytes written (the payload a step moves), as the program model does; each figure
is the median of ``--repeats`` timed runs after a warm-up, timed with CUDA events.

Run on a CUDA machine with CuPy (``python benchmarks/gpu_block_rates.py --out DIR``: writes
``DIR/gpu_block_rates.json``); then here ``--render FILE`` writes ``results/gpu_block_rates.md``
(and copies the JSON) from that file. CuPy is not a dependency of synth: only this script needs it,
only where a GPU is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from harness import write_results

KERNELS = r"""
extern "C" __global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst,
                                  long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    // 4 independent 16-byte loads in flight per thread, as NCCL's unrolled copy loop has
    for (; i + 3 * stride < n; i += 4 * stride) {
        int4 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
        dst[i] = v0; dst[i + stride] = v1; dst[i + 2 * stride] = v2; dst[i + 3 * stride] = v3;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

extern "C" __global__ void reduce2(const float4* __restrict__ a, const float4* __restrict__ b,
                                   float4* __restrict__ dst, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + stride < n; i += 2 * stride) {
        float4 x0 = a[i], y0 = b[i], x1 = a[i + stride], y1 = b[i + stride];
        dst[i] = make_float4(x0.x + y0.x, x0.y + y0.y, x0.z + y0.z, x0.w + y0.w);
        dst[i + stride] = make_float4(x1.x + y1.x, x1.y + y1.y, x1.z + y1.z, x1.w + y1.w);
    }
    for (; i < n; i += stride) {
        float4 x = a[i], y = b[i];
        dst[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

extern "C" __global__ void empty() {}
"""


def measure(nbytes: int, repeats: int, threads: list[int], blocks: list[int]) -> dict:
    import cupy as cp

    mod = cp.RawModule(code=KERNELS)
    copy16, reduce2, empty = (mod.get_function(n) for n in ("copy16", "reduce2", "empty"))
    words = nbytes // 16
    src = cp.arange(words * 4, dtype=cp.float32).view(cp.int32)
    other = cp.ones(words * 4, dtype=cp.float32)
    dst = cp.empty(words * 4, dtype=cp.float32)
    start, stop = cp.cuda.Event(), cp.cuda.Event()

    def timed(launch) -> float:
        """Median µs of one call over ``repeats`` (after a warm-up)."""
        launch()
        cp.cuda.Device().synchronize()
        out = []
        for _ in range(repeats):
            start.record()
            launch()
            stop.record()
            stop.synchronize()
            out.append(cp.cuda.get_elapsed_time(start, stop) * 1000.0)
        return statistics.median(out)

    rows = []
    for t in threads:
        for b in blocks:
            us = timed(lambda b=b, t=t: copy16((b,), (t,), (src, dst, cp.int64(words))))
            rows.append({"op": "copy", "threads": t, "blocks": b, "bytes": nbytes, "us": us,
                         "GBps_total": nbytes / us / 1e3, "GBps_per_block": nbytes / us / 1e3 / b})
            us = timed(lambda b=b, t=t: reduce2((b,), (t,), (src.view(cp.float32), other, dst,
                                                             cp.int64(words))))
            rows.append({"op": "reduce2", "threads": t, "blocks": b, "bytes": nbytes, "us": us,
                         "GBps_total": nbytes / us / 1e3, "GBps_per_block": nbytes / us / 1e3 / b})
    ok = bool(cp.all(dst == src.view(cp.float32) + other))     # the last reduce2 ran correctly
    n_launch = 1000
    start.record()
    for _ in range(n_launch):
        empty((1,), (32,), ())
    stop.record()
    stop.synchronize()
    back_to_back = cp.cuda.get_elapsed_time(start, stop) * 1000.0 / n_launch
    import time

    trips = []
    for _ in range(200):
        t0 = time.perf_counter()
        empty((1,), (32,), ())
        cp.cuda.Device().synchronize()
        trips.append((time.perf_counter() - t0) * 1e6)
    props = cp.cuda.runtime.getDeviceProperties(0)
    return {"device": props["name"].decode(), "sms": props["multiProcessorCount"],
            "cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
            "driver": cp.cuda.runtime.driverGetVersion(), "repeats": repeats, "rows": rows,
            "reduce_checked": ok,
            "launch_us": {"back_to_back_per_launch": back_to_back,
                          "launch_and_sync_median": statistics.median(trips)}}


def render(data: dict) -> str:
    from synth.timing.protocol import default_model
    from synth.topology_io import load_topology

    model = default_model(load_topology("dgx_h100")).get("Simple").channel_GBps  # Hopper's cap
    lines = [
        "# One threadblock's local copy and reduce rates, and the launch floor, measured on a GPU",
        "",
        f"Measured by `python benchmarks/gpu_block_rates.py` on one {data['device']} "
        f"({data['sms']} SMs; CUDA runtime {data['cuda_runtime']}, driver {data['driver']}, "
        f"CuPy {data['cupy']}), {data['bytes_label']} per call, median of {data['repeats']} "
        "calls after a warm-up, CUDA events. Rates count the bytes written (a step's payload). "
        f"The reduction's result was checked: {data['reduce_checked']}.",
        "",
        f"The program model (`synth.timing.program`) prices a block's local copy, and a receive's "
        f"copy-out, at NCCL's per-channel Simple cap for Hopper, **{model} GB/s**, and a "
        "two-source reduction at 2 copies' time (assumed: `(k + 2) / 2` for k sources).",
        "",
        "| op | threads | blocks | µs | GB/s total | GB/s per block | per block / model cap |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["rows"]:
        lines.append(f"| {r['op']} | {r['threads']} | {r['blocks']} | {r['us']:.1f} | "
                     f"{r['GBps_total']:.1f} | {r['GBps_per_block']:.1f} | "
                     f"{r['GBps_per_block'] / model:.2f} |")
    by = {(r["op"], r["threads"], r["blocks"]): r for r in data["rows"]}
    lines += ["", "What it says about the model (NCCL's Simple kernels run up to 512 threads a block, "
              "`NCCL_SIMPLE_MAX_NTHREADS`; its kernels at most 640, `NCCL_MAX_NTHREADS`):", ""]
    for t in (512, 640):
        cp1, re1 = by[("copy", t, 1)], by[("reduce2", t, 1)]
        cp64 = by[("copy", t, 64)]
        lines.append(
            f"- {t} threads: a lone block copies at {cp1['GBps_per_block']:.1f} GB/s, "
            f"{cp1['GBps_per_block'] / model:.2f} times the model's {model} GB/s; a two-source "
            f"reduction takes {cp1['GBps_per_block'] / re1['GBps_per_block']:.2f} times a copy's "
            f"time (the model assumes 1.5 for `rrc`); with 64 blocks copying at once, each gets "
            f"{cp64['GBps_per_block']:.1f} GB/s (HBM shared: {cp64['GBps_total']:.0f} GB/s "
            "written in all).")
    lines += ["", "Not measured here: a block's rate over NVLink or a NIC (one GPU has no peer); "
              "the model's cap stands for those.", ""]
    la = data["launch_us"]
    lines += ["", f"Empty kernel: {la['back_to_back_per_launch']:.2f} µs per launch back to back; "
              f"{la['launch_and_sync_median']:.2f} µs launch + synchronise (median of 200, "
              "host clock).", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for gpu_block_rates.json (measure: needs a GPU)")
    ap.add_argument("--render", help="a gpu_block_rates.json measured elsewhere -> results/")
    ap.add_argument("--mib", type=int, default=256, help="MiB per call")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if args.render:
        try:
            data = json.loads(Path(args.render).read_text())
        except (OSError, ValueError) as exc:
            sys.exit(f"gpu_block_rates: cannot read {args.render}: {exc}")
        write_results("gpu_block_rates", data, render(data))
        return
    if not args.out:
        ap.error("give --out DIR (measure) or --render FILE")
    try:
        import cupy  # noqa: F401
    except ImportError:
        sys.exit("gpu_block_rates: needs CuPy and a CUDA GPU (run it on the GPU machine)")
    data = measure(args.mib << 20, args.repeats, [256, 512, 640, 1024],
                   [1, 2, 4, 8, 16, 32, 64, 132])
    data["bytes_label"] = f"{args.mib} MiB"
    write_results("gpu_block_rates", data, out_dir=args.out)
    print(json.dumps({k: v for k, v in data.items() if k != "rows"}))
    for r in data["rows"]:
        print(r["op"], r["threads"], r["blocks"], round(r["us"], 1), round(r["GBps_per_block"], 1))


if __name__ == "__main__":
    main()
