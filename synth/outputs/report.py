"""The range report: which file serves which message sizes, and how fast each is predicted to be
(``<topo>_<coll>.ranges.md`` and ``--json``'s ``range_table``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..emit.xml_parse import parse_program
from ..select.candidates import SolveResult
from ..select.ranking import SizeRange
from ..sizes import format_size
from ..timing.program import cached_times, program_model
from ..timing.protocol import RuntimeProfile, runtime_profile
from ..topology import Topology


def ranges_table(result: SolveResult, ranges: Sequence[SizeRange], files: Sequence[str | None],
                 winners_by: str = "lockstep", oop_files: Sequence[str | None] = ()
                 ) -> list[dict[str, Any]]:
    """One row per range: the algorithm, and at the largest requested size in the range (the one
    the row's bandwidth is quoted at) its lock-step time and % of bound (the bound is a wire
    bound: lock-step is the model comparable with it) and ``decided_us``, the time under the model
    that chose it (``winners_by``; null where that model gives none). A range left to NCCL names
    ``nccl``, has no file, and quotes NCCL's own time in both columns. A range with one file per
    call kind (``oop_files``) has its in-place file in ``file`` and ``decided_us``, and its
    out-of-place file and time in ``oop_file`` and ``oop_us`` (null elsewhere)."""
    rows = []
    oops = list(oop_files) or [None] * len(ranges)
    for r, f, oop in zip(ranges, files, oops, strict=True):
        at = {p.bytes: p for p in (r.candidate.costs if r.candidate else result.nccl or ())}
        p = at[r.sizes[-1]] if r.sizes else None
        decided = r.model_us[-1] if r.sizes and r.model_us else None
        rows.append({"min_bytes": r.lo, "max_bytes": r.hi,
                     "algorithm": r.candidate.name if r.candidate else "nccl",
                     "served_by": r.served_by,
                     "proto": r.proto if r.candidate else None,
                     "instances": r.instances if r.candidate else None,
                     "at_bytes": p.bytes if p else None,
                     "time_us": round(p.time_us, 6) if p else None,
                     "pct_of_bound": round(p.pct_of_bound, 4) if p else None,
                     "winners_by": r.decided_by or winners_by,
                     "decided_us": round(decided, 6) if decided is not None
                     and math.isfinite(decided) else None, "file": f,
                     "oop_file": oop if r.oop is not None else None,
                     "oop_us": round(r.oop.model_us[-1], 6) if r.oop is not None and r.sizes
                     else None})
    return rows


def ranges_markdown(result: SolveResult, rows: Sequence[dict[str, Any]]) -> str:
    models = list(dict.fromkeys(r["winners_by"] for r in rows if r["winners_by"] != "nccl"))
    models = models or ["lockstep"]
    by = "program" if "program" in models else models[0]
    both = by != "lockstep"     # one lock-step column when lock-step decided
    mixed = (" (lock-step in the rows it names: the program model's budget ran out before "
             "their sizes, so `program µs` is lock-step's time there)" if len(models) > 1 else "")
    nccl = (" Rows `nccl` are left to NCCL: no file covers them, and the times are NCCL's own "
            "model's (synth.timing.nccl)." if any(r["served_by"] == "nccl" for r in rows) else "")
    cols = (f"{by} µs | lock-step µs" if both else "lock-step µs")
    head = (f"# {result.collective.name} on {result.topology.name} ({result.topology.num_ranks} "
            f"ranks): the file serving each message size\n\nWinners chosen by the {by} model"
            f"{mixed}. At the largest swept size of the range: "
            + (f"the {by} model's time, and " if both else "")
            + f"the lock-step time and % of bound (bound: {result.bound.method}); `max` is "
            f"inclusive, 0 = unbounded; form: the file's protocol and instances (the channel sets it "
            f"runs on).{nccl}\n\n"
            f"| min bytes | max bytes | algorithm | form | at | {cols} | % of bound | file |"
            f"\n|---|---|---|---|---|---|{'---|' if both else ''}---|---|\n")

    def row(r: dict[str, Any]) -> str:
        tag = " (lock-step)" if r["winners_by"] not in (by, "nccl") else ""
        decided = (f"{r['decided_us'] if r['decided_us'] is not None else '—'} | " if both else "")
        form = f"{r['proto']} x{r['instances']}" if r["instances"] is not None else "—"
        return (f"| {r['min_bytes']} | {r['max_bytes']} | {r['algorithm']}{tag} | "
                f"{form} | "
                f"{format_size(r['at_bytes']) if r['at_bytes'] else '—'} | {decided}"
                f"{r['time_us'] if r['time_us'] is not None else '—'} | "
                f"{r['pct_of_bound'] if r['pct_of_bound'] is not None else '—'} | "
                f"{Path(r['file']).name if r['file'] else '—'}{oop(r)} |\n")

    def oop(r: dict[str, Any]) -> str:
        if not r.get("oop_file"):
            return ""
        return f" (in-place calls); {Path(r['oop_file']).name} (out-of-place, {r['oop_us']} µs)"
    return head + "".join(row(r) for r in rows)


def served_sizes(written: Any, result: SolveResult) -> list[tuple[Any, str, str | None]]:
    """Per swept size: (its cost point under what serves it, the candidate's name or ``nccl``,
    the file serving it); empty when no size ranges were chosen (an MSCCL++ plan). A size left to
    NCCL has NCCL's own cost point and no file."""
    out = []
    for r, f in zip(written.ranges, written.range_files, strict=True):
        at = {p.bytes: p for p in (r.candidate.costs if r.candidate else result.nccl or ())}
        out.extend((at[size], r.candidate.name if r.candidate else "nccl", f) for size in r.sizes)
    return out


def served_runtime(result: SolveResult, written: Any, topology: Topology, sizes: list[int],
                   proto: str, instances: int, calibration: str | None) -> RuntimeProfile:
    """:func:`synth.timing.protocol.runtime_profile` of what synth serves (the best candidate's
    file when no size ranges were chosen), each range with its file's instances; ``max_bytes``
    and ``instances`` are the largest range's file's; sizes left to NCCL are not in it."""
    if not any(r.candidate for r in written.ranges):
        return runtime_profile(result.best.schedule, topology, sizes, proto, instances, calibration)
    # a range with a file runs in that file's protocol; without one (--no-xml), in the request's
    parts = [runtime_profile(r.candidate.schedule, topology, list(r.sizes),
                             r.proto if r.text is not None else proto, r.instances, calibration)
             for r in written.ranges if r.sizes and r.candidate]
    return RuntimeProfile(parts[-1].proto, parts[-1].instances, parts[-1].max_bytes, parts[-1].source,
                          [p for part in parts for p in part.points])


def program_times(written: Any, result: SolveResult, texts: dict[str, str],
                  topology: Topology, sizes: list[int], profile: str, calibration: str | None
                  ) -> list[float] | None:
    """Per size, the time of the XML that serves it under the timed program model (None without
    an XML; ``inf`` at a size no XML serves, such as one left to NCCL).

    ``texts``: the files to be written (absolute path -> text); they are timed before anything is
    written, so a failure here leaves no file behind. Times already found for the same text
    (:func:`synth.timing.program.cached_times`: the range files' worker found them) are not
    simulated again (nor parsed: a range's file is in its range's protocol). Every XML was
    verified by the interpreter when it was produced (``emit_verified_xml``).
    """
    by_name = dict(texts)
    serving = {p.bytes: f for p, _, f in served_sizes(written, result)}
    protos = {f: r.proto for r, f in zip(written.ranges, written.range_files, strict=True) if f}
    models: dict[str, Any] = {}
    if not any(serving.values()):
        xml = [f for f in by_name if f.endswith(".xml")]
        if not xml or any(r.candidate is None for r in written.ranges):
            return None
        serving = dict.fromkeys(sizes, xml[0])
    out: dict[int, float] = {}
    for f in dict.fromkeys(v for v in serving.values() if v):
        mine = [n for n in sizes if serving.get(n) == f]
        proto = protos.get(f) or parse_program(by_name[f], f, profile).proto
        if proto not in models:
            models[proto] = program_model(topology, proto, calibration)
        times = cached_times(by_name[f], topology, mine, model=models[proto], profile=profile)
        out.update(zip(mine, times, strict=True))
    return [out.get(n, float("inf")) for n in sizes]
