"""The range report: which file serves which message sizes, and how fast each is predicted to be
(``<topo>_<coll>.ranges.md`` and ``--json``'s ``range_table``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..select.candidates import SolveResult
from ..select.ranking import SizeRange
from ..sizes import format_size


def ranges_table(result: SolveResult, ranges: Sequence[SizeRange], files: Sequence[str | None],
                 winners_by: str = "lockstep") -> list[dict[str, Any]]:
    """One row per range: the algorithm, and at the largest requested size in the range (the one
    the row's bandwidth is quoted at) its lock-step time and % of bound (the bound is a wire
    bound: lock-step is the model comparable with it) and ``decided_us``, the time under the model
    that chose it (``winners_by``; null where that model gives none)."""
    rows = []
    for r, f in zip(ranges, files, strict=True):
        at = {p.bytes: p for p in r.candidate.costs}
        p = at[r.sizes[-1]] if r.sizes else None
        decided = r.model_us[-1] if r.sizes and r.model_us else None
        rows.append({"min_bytes": r.lo, "max_bytes": r.hi, "algorithm": r.candidate.name,
                     "instances": r.instances, "at_bytes": p.bytes if p else None,
                     "time_us": round(p.time_us, 6) if p else None,
                     "pct_of_bound": round(p.pct_of_bound, 4) if p else None,
                     "winners_by": r.decided_by or winners_by,
                     "decided_us": round(decided, 6) if decided is not None
                     and math.isfinite(decided) else None, "file": f})
    return rows


def ranges_markdown(result: SolveResult, rows: Sequence[dict[str, Any]]) -> str:
    models = list(dict.fromkeys(r["winners_by"] for r in rows)) or ["lockstep"]
    by = "program" if "program" in models else models[0]
    mixed = (" (lock-step in the rows it names: the program model's budget ran out before "
             "their sizes, so `program µs` is lock-step's time there)" if len(models) > 1 else "")
    head = (f"# {result.collective.name} on {result.topology.name} ({result.topology.num_ranks} "
            f"ranks): the file serving each message size\n\nWinners chosen by the {by} model"
            f"{mixed}. At the largest swept size of the range: the {by} model's time, and the lock-step "
            f"time and % of bound (bound: {result.bound.method}); `max` is inclusive, "
            f"0 = unbounded; instances: the channel sets the file runs on.\n\n| min bytes | "
            f"max bytes | algorithm | instances | at | {by} µs | lock-step µs | % of bound | file |"
            f"\n|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['min_bytes']} | {r['max_bytes']} | "
        f"{r['algorithm']}{' (lock-step)' if r['winners_by'] != by else ''} | {r['instances']} | "
        f"{format_size(r['at_bytes']) if r['at_bytes'] else '—'} | "
        f"{r['decided_us'] if r['decided_us'] is not None else '—'} | "
        f"{r['time_us'] if r['time_us'] is not None else '—'} | "
        f"{r['pct_of_bound'] if r['pct_of_bound'] is not None else '—'} | "
        f"{Path(r['file']).name if r['file'] else '—'} |\n" for r in rows)
    return head + body


def served_sizes(written: Any) -> list[tuple[Any, Any, str | None]]:
    """Per swept size: (its cost point under the winner, the winner, the file serving it); empty
    when no size ranges were chosen (an MSCCL++ plan)."""
    out = []
    for r, f in zip(written.ranges, written.range_files, strict=True):
        at = {p.bytes: p for p in r.candidate.costs}
        out.extend((at[size], r.candidate, f) for size in r.sizes)
    return out
