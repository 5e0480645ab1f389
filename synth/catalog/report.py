"""What a catalog says about itself: ``catalog.json`` (everything) and ``catalog.md`` (the table).

Both are functions of the inputs alone — no wall-clock times, no cache hit counts, no worker
counts, no temporary paths — so an unchanged rerun writes the same bytes. The "best baseline" of a
size is the fastest configuration of any baseline algorithm (ring, trees, direct, ...) run as an
MSCCL-IR file over the same protocol/chunk/instance knobs (``gain_pct``: how much faster the winner
is, on the same protocol model). The speed-up a user reads, ``vs NCCL``, is against NCCL as it
runs (:mod:`synth.timing.nccl`: the algorithm, protocol and channels NCCL's tuner picks, with its
latency floors; validated in ``results/reality.md``), the winner timed as the MSCCL runtime runs
it: its written file under the timed program model where that was run (``speedup_timed_by`` =
``program``), else the protocol model with the runtime's floors (:mod:`synth.timing.protocol`,
``model``).

Where NCCL's model is faster than every configuration at a bucket (:func:`synth.select.nccl.
with_nccl`), or than every configuration whose written file the program model does not put behind
NCCL there (:func:`synth.select.nccl.choose_with_nccl`; ``program_vetoes`` lists those), the
bucket is left to NCCL: its row says ``served_by: "nccl"``, its winner's algorithm is ``nccl``,
it has no file, and its times are NCCL's own.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..select.nccl import NCCL
from ..select.nccl import nccl_choices as _nccl_choices
from ..select.ranges import INSTANCES, Config
from ..sizes import format_size
from ..timing.protocol import PROTOCOLS
from .build import CatalogResult, CollectiveResult

FORMAT = "synth-catalog/1"
XML_DIR = "msccl-algorithms"
LEGACY_DIR = "legacy"
CONFIG_FILE = "msccl_config.xml"
PLOT_DIR = "plots"
PLAN_DIR = "mscclpp-plans"


def _r(x: float) -> float | None:
    return float(f"{x:.6g}") if math.isfinite(x) else None


def xml_name(kind: str, index: int, cfg: Config) -> str:
    slug = cfg.family.replace("/", "-")
    return f"{kind}_{index:02d}_{slug}_c{cfg.chunks}_{cfg.proto}_x{cfg.instances}.xml"


def algbw_GBps(nbytes: float, time_us: float) -> float:
    return nbytes / (time_us * 1e3) if time_us > 0 and math.isfinite(time_us) else 0.0


def best_baseline(cr: CollectiveResult, bucket: int) -> Config | None:
    """The fastest baseline configuration at a bucket (None when no baseline runs there)."""
    t = cr.table
    configs = [c for c in t.all_configs(baseline_only=True) if math.isfinite(t.time(c, bucket))]
    if not configs:
        return None
    from ..select.tuned import rank_key
    return min(configs, key=rank_key(t, bucket))


def winners(cr: CollectiveResult) -> list[tuple[int | None, Config]]:
    """(file index, winning config) per bucket; the file index counts the ranges that have a file
    (:attr:`CollectiveResult.emitted`), None for a bucket left to NCCL (:data:`NCCL`)."""
    out: list[tuple[int | None, Config]] = []
    files = 0
    for r in cr.choice.ranges:
        if r.config == NCCL:
            out += [(None, r.config)] * len(r.buckets)
        else:
            out += [(files, r.config)] * len(r.buckets)
            files += 1
    return out


def winner_time(cr: CollectiveResult, bucket: int, cfg: Config) -> float:
    """The winner's predicted µs at a bucket: its protocol-model time, or NCCL's own modelled
    time where the bucket is left to NCCL."""
    if cfg == NCCL:
        assert cr.nccl is not None, "NCCL won a bucket where it does not run"
        return float(cr.nccl[bucket].time_us)
    return cr.table.time(cfg, bucket)


def nccl_choices(result: CatalogResult, kind: str, sizes: list[int]) -> list[Any] | None:
    """What NCCL runs at each size and its time (None where NCCL has no such collective)."""
    return _nccl_choices(result.topology, kind, sizes, result.nccl_calibration)


def program_times(result: CatalogResult, cr: CollectiveResult) -> dict[int, float]:
    """Per bucket a file serves, the winning file run by the timed program model
    (:func:`synth.catalog.emit.program_times`, computed once while choosing: the same times NCCL's
    veto compared). ``model_us`` (``time_us``) is the lock-step protocol model the tuner ranks by;
    this is the same file as the runtime would execute it (threadblocks, grid iterations, FIFO
    slots, shared links)."""
    return cr.program_us


def _vs_nccl(nccl_us: float | None, model_us: float, program_us: float | None
             ) -> dict[str, Any]:
    """NCCL's time over the winner's: the written file's program time where it was timed and runs,
    else its protocol-model time (both carry the MSCCL runtime's floors)."""
    if nccl_us is None:
        return {"speedup_vs_nccl": None, "speedup_timed_by": None}
    if program_us is not None and math.isfinite(program_us) and program_us > 0:
        return {"speedup_vs_nccl": _r(nccl_us / program_us), "speedup_timed_by": "program"}
    if model_us > 0 and math.isfinite(model_us):
        return {"speedup_vs_nccl": _r(nccl_us / model_us), "speedup_timed_by": "model"}
    return {"speedup_vs_nccl": None, "speedup_timed_by": None}


def winner_dict(cfg: Config) -> dict[str, Any]:
    """The winner's knobs; NCCL (no file) has none of synth's: only ``algorithm: nccl``."""
    if cfg == NCCL:
        return {"algorithm": "nccl", "chunks": None, "proto": None, "instances": None}
    return cfg.to_dict()


def bucket_rows(cr: CollectiveResult, buckets: list, nccl: list[Any] | None = None,
                program_us: dict[int, float] | None = None) -> list[dict[str, Any]]:
    t = cr.table
    rows = []
    for j, (b, (ri, cfg)) in enumerate(zip(buckets, winners(cr), strict=True)):
        tw = winner_time(cr, b.index, cfg)
        base = best_baseline(cr, b.index)
        tb = t.time(base, b.index) if base is not None else math.inf
        tun = cr.tunings[b.index]
        rows.append({
            "index": b.index, "size": b.size, "lo": b.lo, "hi": b.hi,
            "served_by": "nccl" if ri is None else "synth",
            "file": None if ri is None else xml_name(cr.kind, ri, cfg),
            "winner": winner_dict(cfg), "time_us": _r(tw),
            "algbw_GBps": _r(algbw_GBps(b.size, tw)),
            "program_us": _r(program_us[b.index]) if program_us and b.index in program_us else None,
            "best_baseline": base.to_dict() if base is not None else None,
            "baseline_time_us": _r(tb),
            "gain_pct": _r(100.0 * (tb - tw) / tb) if math.isfinite(tb) and tb > 0 else None,
            "nccl": None if nccl is None else {
                "algo": nccl[j].algo, "proto": nccl[j].proto, "channels": nccl[j].channels,
                "time_us": _r(nccl[j].time_us)},
            **({"speedup_vs_nccl": 1.0, "speedup_timed_by": "nccl"} if ri is None else
               _vs_nccl(nccl[j].time_us if nccl is not None else None, tw,
                        program_us.get(b.index) if program_us else None)),
            "tuner": {"evaluations": tun.evaluations, "full_evaluations": tun.full_evaluations,
                      "best": tun.tuner_best.to_dict(), "ranked": len(tun.ranking)},
        })
    return rows


def catalog_json(result: CatalogResult, xml_dir: str, config_paths: dict[str, str]) -> dict[str, Any]:
    topo = result.topology
    data: dict[str, Any] = {
        "format": FORMAT,
        "topology": {"name": topo.name, "spec": result.topo_spec, "nodes": result.nodes,
                     "ranks": topo.num_ranks, "content_hash": topo.content_hash,
                     "link_classes": {k: {"alpha_us": a, "bandwidth_GBps": round(bw, 6)}
                                      for k, (a, bw) in sorted(topo.link_classes().items())}},
        "calibration": result.calibration,
        "calibration_notes": result.calibration_notes,
        "protocol_model": result.model.to_dict(),
        "tuner": result.tuner,
        "knobs": {"proto": list(PROTOCOLS), "instances": list(INSTANCES),
                  "chunks": "per algorithm: its own choice and 1, 2, 4, 8 per rank"},
        "sizes": list(result.sizes),
        "buckets": [{"index": b.index, "size": b.size, "lo": b.lo, "hi": b.hi} for b in result.buckets],
        "runtime": {"MSCCL_ALGO_DIR": xml_dir, "MSCCL_CONFIG": CONFIG_FILE,
                    "maxBytes": "inclusive (executor, RCCL); the legacy config's maxbytes is "
                                "exclusive, so it is written as maxBytes + 1"},
        "collectives": {},
    }
    for cr in result.results:
        t = cr.table
        files = []
        for i, e in enumerate(cr.emitted):
            name = xml_name(cr.kind, i, e.range.config)
            m = re.search(r'\bnchunksperloop="(\d+)"', e.exec_xml)
            files.append({"file": f"{XML_DIR}/{name}", "minBytes": e.range.lo, "maxBytes": e.range.hi,
                          "config": e.range.config.to_dict(), "buckets": list(e.range.buckets),
                          "nchunksperloop": int(m.group(1)) if m else None,
                          "interpreter_verified_modes": list(e.modes),
                          "threadblocks_per_rank": e.threadblocks, "nchannels": e.nchannels,
                          "legacy_file": config_paths.get(name), "legacy_note": e.legacy_note})
        cands = []
        for c in cr.candidates:
            cands.append({
                "algorithm": c.family, "encoding": c.encoding, "name": c.name, "chunks": c.chunks,
                "steps": c.steps, "transfers": c.schedule.num_transfers, "verified": True,
                "cache_key": c.key,
                "predicted_us": {p: {str(i): [_r(x) for x in t.times[(c.family, c.chunks, p, i)]]
                                     for i in INSTANCES} for p in PROTOCOLS},
            })
        data["collectives"][cr.kind] = {
            "files": files,
            "buckets": bucket_rows(cr, result.buckets, cr.nccl, program_times(result, cr)),
            "left_to_nccl": [{"minBytes": r.lo, "maxBytes": r.hi, "buckets": list(r.buckets)}
                             for r in cr.choice.ranges if r.config == NCCL],
            "excluded": [{"config": c.to_dict(), "reason": why}
                         for c, why in sorted(cr.choice.excluded.items())],
            "program_vetoes": [v.to_dict() for v in cr.vetoes],
            "program_veto_rounds": cr.rounds,
            "candidates": cands,
            "not_candidates": [{"encoding": r.encoding, "chunks": r.chunks, "status": r.status,
                                "message": r.message} for r in cr.rejected],
        }
    return data


def _cfg_text(cfg: dict[str, Any] | None) -> str:
    if cfg is None:
        return "-"
    if cfg["algorithm"] == "nccl":
        return "NCCL (no file)"
    return f"{cfg['algorithm']} c{cfg['chunks']} {cfg['proto']} x{cfg['instances']}"


def _range_text(lo: int, hi: int) -> str:
    return f"{format_size(lo)} – {format_size(hi)}" if lo != hi else format_size(lo)


def catalog_md(result: CatalogResult, data: dict[str, Any], out_abs: str) -> str:
    topo = result.topology
    lines = [f"# Collective catalog: {topo.name}", "",
             f"{topo.num_ranks} ranks on {topo.num_nodes} node(s) ({topo.description}). "
             f"Sizes {format_size(result.sizes[0])} – {format_size(result.sizes[-1])} in "
             f"{len(result.buckets)} buckets; tuner `{result.tuner}`; cost model: α-β steps "
             "(`synth.timing.lockstep`) with the protocol model (`synth.timing.protocol`): "
             f"{result.model.source}. "
             "NCCL: its own tuning model (`synth.timing.nccl`, validated against public "
             "measurements in results/reality.md).",
             ""]
    if result.calibration:
        lines += [f"Calibration: `{result.calibration}`."]
        lines += [f"- {n}" for n in result.calibration_notes]
        lines.append("")
    lines += ["## Using it", "",
              f"- msccl-executor-nccl / RCCL: `MSCCL_ALGO_DIR={out_abs}/{XML_DIR}` — every file "
              "there is one algorithm; `minBytes`/`maxBytes` are inclusive and the files of one "
              "collective tile the size range with no gap and no overlap.",
              f"- microsoft/msccl (legacy): `MSCCL_CONFIG={out_abs}/{CONFIG_FILE}` — it loads at "
              "most 4 algorithms per communicator (`MSCCL_MAX_NUM_ALGOS`), in file order, and its "
              "twins are out-of-place only.",
              "- A file is used only for communicators of exactly "
              f"{topo.num_ranks} ranks, and only for calls whose element count divides into its "
              "`nchunksperloop` chunks (spec §3.1); other calls fall back to NCCL. A configuration "
              "competed at a size only if that holds there for fp32 elements (so for 2- and 1-byte "
              "types too). Broadcast and reduce files serve root 0 only (MSCCL-IR has no root "
              "attribute).",
              "- Every file was executed by synth's MSCCL-IR interpreter in each mode it declares, "
              "with the deadlock analysis at its `maxBytes`, before this folder was written.", ""]
    for cr in result.results:
        d = data["collectives"][cr.kind]
        served = [r for r in d["buckets"] if r["served_by"] == "synth"]
        ups = [r["speedup_vs_nccl"] for r in served if r["speedup_vs_nccl"] is not None]
        lines += [f"## {cr.kind}", ""]
        lines.append(f"{len(cr.candidates)} verified candidate schedules from "
                     f"{len(cr.table.families)} algorithms; {len(d['files'])} file(s).")
        if ups:
            best = max(served, key=lambda r: r["speedup_vs_nccl"] or 0.0)
            lines[-1] += (f" Against NCCL as it runs (its tuner's choice and time, "
                          f"`synth.timing.nccl`, validated in results/reality.md) the files' "
                          f"predicted time is {min(ups):.2f}x – {max(ups):.2f}x NCCL's speed "
                          f"(median {sorted(ups)[len(ups) // 2]:.2f}x; largest at "
                          f"{format_size(best['size'])}).")
        if d["left_to_nccl"]:
            spans = ", ".join(_range_text(x["minBytes"], x["maxBytes"]) for x in d["left_to_nccl"])
            lines[-1] += (f" Left to NCCL (no file, no `MSCCL_CONFIG` entry: the runtime falls "
                          f"back to NCCL, whose model is faster there than every configuration's "
                          f"protocol-model time, or than the written file of every configuration "
                          f"the protocol model puts ahead, run by the timed program model): "
                          f"{spans}.")
        elif d["buckets"] and d["buckets"][0]["nccl"] is not None:
            lines[-1] += " No size is left to NCCL: a file is faster at every size."
        lines.append("")
        t = cr.table
        space = len(t.families) * len(PROTOCOLS) * t.chunk_levels() * len(INSTANCES)
        evals = [tun.evaluations for tun in cr.tunings]
        lines += [f"Tuner `{result.tuner}`: {sum(evals) / len(evals):.0f} model evaluations per "
                  f"bucket on average, of {space} configurations (algorithm × protocol × chunk level "
                  f"× instances); every baseline configuration is ranked as well.", ""]
        lines += ["| size | bucket | winner | model_us | program_us | algbw GB/s | best baseline | "
                  "baseline µs | NCCL runs | NCCL µs | vs NCCL |",
                  "|---:|---|---|---:|---:|---:|---|---:|---|---:|---:|"]
        for r in d["buckets"]:
            nc = r["nccl"]
            nccl_cfg = f"{nc['algo']}/{nc['proto']} x{nc['channels']}" if nc else "-"
            up = f"{r['speedup_vs_nccl']:.2f}x" if r["speedup_vs_nccl"] is not None else "-"
            lines.append(f"| {format_size(r['size'])} | {_range_text(r['lo'], r['hi'])} | "
                         f"{_cfg_text(r['winner'])} | {_num(r['time_us'])} | "
                         f"{_num(r.get('program_us'))} | "
                         f"{_num(r['algbw_GBps'])} | {_cfg_text(r['best_baseline'])} | "
                         f"{_num(r['baseline_time_us'])} | {nccl_cfg} | "
                         f"{_num(nc['time_us'] if nc else None)} | {up} |")
        lines += ["", "vs NCCL: NCCL's modelled time (`synth.timing.nccl`) over the winner's program_us "
                  "where the file was timed, else its model_us.", ""]
        lines += ["model_us: the lock-step protocol model the tuner ranks by; program_us: the "
                  "written file run by the timed program model (`synth.timing.program`).", ""]
        lines += ["", "Files:", ""]
        for f in d["files"]:
            lines.append(f"- `{f['file']}`: {_range_text(f['minBytes'], f['maxBytes'])} "
                         f"(`minBytes={f['minBytes']}` `maxBytes={f['maxBytes']}`), "
                         f"{_cfg_text(f['config'])}, {f['nchannels']} channel(s), "
                         f"{f['threadblocks_per_rank']} threadblocks per rank"
                         + (f"; {f['legacy_note']}" if f["legacy_note"] else ""))
        if d["program_vetoes"]:
            lines += ["", "Put behind NCCL by the timed program model (the protocol model ranked "
                      "them ahead; their written file was not faster than NCCL there, so the "
                      "bucket went to its next configuration or to NCCL):", ""]
            per: dict[int, list[dict[str, Any]]] = {}
            for v in d["program_vetoes"]:
                per.setdefault(v["bucket"], []).append(v)
            for b, vs in sorted(per.items()):
                first = vs[0]   # the first found: the protocol model's best there
                lines.append(f"- {format_size(result.buckets[b].size)}: {len(vs)} "
                             f"configuration(s), first {_cfg_text(first['config'])} at "
                             f"{'at least ' if first.get('lower_bound') else ''}"
                             f"{_num(first['program_us'])} µs vs NCCL's "
                             f"{_num(first['nccl_us'])} µs")
        if d["excluded"]:
            lines += ["", "Passed over (the bucket went to its next-best configuration):", ""]
            lines += [f"- {_cfg_text(e['config'])}: {e['reason']}" for e in d["excluded"]]
        lines += ["", f"![{cr.kind}](plots/{cr.kind}.png)", ""]
    return "\n".join(lines).rstrip() + "\n"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"
