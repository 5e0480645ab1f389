"""Algorithm bandwidth vs message size for every candidate algorithm, the catalog's envelope on top.

One PNG per collective. Each algorithm is drawn at its best knobs per size (protocol, chunks,
instances: what the catalog could pick for it there), the best baseline as a dashed line, and the
chosen envelope — the files the catalog holds — as a thick line with its range boundaries marked.
Matplotlib's Agg backend (no display); the bytes depend only on the data, so reruns are identical.
"""

from __future__ import annotations

import io
import math

from ..select.buckets import Bucket
from ..sizes import format_size
from .build import CollectiveResult


def plot_collective(cr: CollectiveResult, buckets: list[Bucket], title: str,
                    nccl_us: list[float] | None = None) -> bytes:
    """The PNG bytes of one collective's plot (``nccl_us``: NCCL's time per bucket, drawn too)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = cr.table
    sizes = [b.size for b in buckets]
    fig, ax = plt.subplots(figsize=(13, 6.5), dpi=110)
    cmap = plt.get_cmap("tab20")
    for i, fam in enumerate(t.families):
        configs = [c for c in t.all_configs() if c.family == fam]
        bw = []
        for b in buckets:
            best = min((t.time(c, b.index) for c in configs), default=math.inf)
            bw.append(b.size / (best * 1e3) if math.isfinite(best) else math.nan)
        style = "-" if fam.startswith("baseline/") else "-."
        ax.plot(sizes, bw, style, color=cmap(i % 20), linewidth=1.2, alpha=0.85, label=fam,
                marker="o", markersize=2.5)
    from .report import best_baseline, winner_time, winners

    base_bw, env_bw = [], []
    for b, (_, cfg) in zip(buckets, winners(cr), strict=True):
        env_bw.append(b.size / (winner_time(cr, b.index, cfg) * 1e3))   # NCCL's where it serves
        base = best_baseline(cr, b.index)
        base_bw.append(b.size / (t.time(base, b.index) * 1e3) if base is not None else math.nan)
    ax.plot(sizes, base_bw, "--", color="black", linewidth=1.6, label="best baseline")
    if nccl_us is not None:
        ax.plot(sizes, [b.size / (t_us * 1e3) for b, t_us in zip(buckets, nccl_us, strict=True)],
                ":", color="navy", linewidth=2.2, label="NCCL as it runs (synth.timing.nccl)")
    ax.plot(sizes, env_bw, "-", color="crimson", linewidth=3.2, alpha=0.8,
            label="catalog envelope (chosen files; NCCL where left to it)")
    for r in cr.choice.ranges[1:]:
        ax.axvline(r.lo, color="crimson", linewidth=0.6, linestyle=":", alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sizes[:: max(1, len(sizes) // 11)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(s) for s in ticks], rotation=30)
    ax.set_xlabel("message size (bytes per the collective's convention)")
    ax.set_ylabel("algorithm bandwidth (GB/s, predicted)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
