"""synth catalog with NCCL as a candidate: the rule ``synth solve`` uses (one function,
:func:`synth.select.nccl.with_nccl`), the program model's veto on the written files
(:func:`synth.select.nccl.choose_with_nccl`), sizes NCCL's models win get no file, and nothing
changes where NCCL does not run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from synth.cli import main
from synth.select.buckets import Bucket
from synth.select.nccl import NCCL, choose_with_nccl, nccl_choices, with_nccl
from synth.select.ranges import BucketTuning, Choice, Config, Range, choose
from synth.topology_io import load_topology

# 8 x H100: NCCL runs NVLS allreduce, which its model puts ahead of every MSCCL-IR file at 64 MB
# and 1 GB under the protocol model; at 1 KB the files are about 2x faster than NCCL's ring LL
TOPO = "dgx_h100"
SIZES = "1KB,64MB,1GB"


def _catalog(out: Path, cache: Path, *extra: str) -> dict:
    main(["catalog", "--topo", TOPO, "--collectives", "allreduce", "--sizes", SIZES,
          "--time-limit", "2", "--workers", "1", "--out", str(out), "--cache-dir", str(cache),
          "--quiet", *extra])
    return json.loads((out / "catalog.json").read_text())


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalog_nccl")
    out, cache = root / "cat", root / "cache"
    return out, cache, _catalog(out, cache)


def _key(cfg: dict) -> tuple:
    return cfg["algorithm"], cfg["chunks"], cfg["proto"], cfg["instances"]


# ------------------------------------------------------------------------------ the rule itself
def _tuning(index: int, ranking: list[Config], times: dict[Config, float] | None = None
            ) -> BucketTuning:
    return BucketTuning(Bucket(index, 1024 << index, 1024 << index, 1024 << index), ranking,
                        len(ranking), len(ranking), ranking[0], times or {})


A, B = Config("a", 1, "Simple", 1), Config("b", 1, "LL", 1)


def test_with_nccl_ranks_the_slower_after_nccl_and_keeps_it_out_of_near_ties():
    runtime = {(A, 0): 5.0, (B, 0): 9.0, (A, 1): 20.0, (B, 1): 30.0}
    tunings = [_tuning(0, [A, B], {A: 5.0, B: 9.0}), _tuning(1, [A, B], {A: 20.0, B: 30.0})]
    got = with_nccl(tunings, [8.0, 10.0], lambda cfg, t: runtime[(cfg, t.bucket.index)])
    assert got[0].ranking == [A, NCCL] and got[0].times == {A: 5.0}     # B is not faster: after
    assert got[1].ranking == [NCCL] and got[1].times == {NCCL: 10.0}    # NCCL wins, no settling
    # equal is not faster: the file is not worth it
    tie = with_nccl(tunings[:1], [5.0], lambda cfg, t: runtime[(cfg, 0)])
    assert tie[0].ranking == [NCCL]
    # the catalog's tunings carry no times, and carry none after (no near-tie settling)
    bare = with_nccl([_tuning(0, [A, B])], [8.0], lambda cfg, t: runtime[(cfg, 0)])
    assert bare[0].ranking == [A, NCCL] and bare[0].times == {}
    # NCCL does not run: unchanged
    assert with_nccl(tunings, None, lambda cfg, t: math.inf) == tunings
    # NCCL always succeeds: a configuration whose file fails falls back to NCCL, not to B
    choice = choose(got, lambda r: "no file" if r.config == A else None)
    assert [r.config for r in choice.ranges] == [NCCL] and A in choice.excluded


def test_the_program_model_vetoes_a_file_it_puts_behind_nccl_at_that_bucket_only():
    """The protocol model ranks A, then B, ahead of NCCL at both buckets; the program model puts
    A's file behind NCCL at both and B's at bucket 1: bucket 0 goes to B, bucket 1 to NCCL."""
    model = {A: 5.0, B: 6.0}
    program = {(A, 0): 9.0, (A, 1): 12.0, (B, 0): 7.0, (B, 1): 11.0}
    tunings = [_tuning(0, [A, B]), _tuning(1, [A, B])]
    tried: list[Range] = []
    timed: list[list[Config]] = []

    def times(choice: Choice) -> dict[int, float]:
        timed.append([r.config for r in choice.ranges])
        return {b: program[(r.config, b)] for r in choice.ranges if r.config != NCCL
                for b in r.buckets}

    got = choose_with_nccl(tunings, [8.0, 10.0], lambda cfg, t: model[cfg],
                           lambda r: tried.append(r) or None, times)
    assert [(r.config, r.buckets) for r in got.choice.ranges] == [(B, (0,)), (NCCL, (1,))]
    assert got.program_us == {0: 7.0}                    # the final files' times, for the report
    assert [(v.config, v.bucket, v.program_us, v.nccl_us) for v in got.vetoes] == [
        (A, 0, 9.0, 8.0), (A, 1, 12.0, 10.0), (B, 1, 11.0, 10.0)]
    assert got.rounds == 3 and timed == [[A], [B], [B, NCCL]]
    # equal is not faster; a deadlock (inf) is vetoed too
    program.update({(B, 0): 8.0, (B, 1): math.inf})
    again = choose_with_nccl(tunings, [8.0, 10.0], lambda cfg, t: model[cfg], lambda r: None,
                             times)
    assert [r.config for r in again.choice.ranges] == [NCCL] and again.program_us == {}
    # NCCL does not run: no veto, the files are timed once for the report
    timed.clear()
    free = choose_with_nccl(tunings, None, lambda cfg, t: model[cfg], lambda r: None, times)
    assert [(r.config, r.buckets) for r in free.choice.ranges] == [(A, (0, 1))]
    assert free.vetoes == [] and free.rounds == 1 and free.program_us == {0: 9.0, 1: 12.0}
    assert timed == [[A]]


def test_nccl_does_not_run_off_nvidia():
    assert nccl_choices(load_topology("trn1_32"), "allgather", [1024, 2**30]) is None
    assert nccl_choices(load_topology("ring:4"), "allreduce", [1024]) is None
    assert nccl_choices(load_topology("dgx_h100"), "allreduce", [1024]) is not None


# ------------------------------------------------------------------------- the catalog, end to end
def test_sizes_nccl_wins_get_no_file_and_no_config_entry(h100):
    out, _, data = h100
    d = data["collectives"]["allreduce"]
    rows = d["buckets"]
    left = [r for r in rows if r["served_by"] == "nccl"]
    served = [r for r in rows if r["served_by"] == "synth"]
    assert left and served                          # NCCL wins some sizes, not all
    assert rows[0]["served_by"] == "synth"          # 1 KB: a file, about 2x NCCL
    for r in left:
        assert r["file"] is None and r["winner"]["algorithm"] == "nccl"
        assert r["time_us"] == r["nccl"]["time_us"] and r["speedup_vs_nccl"] == 1.0
        # NCCL is faster there than every configuration the catalog could have written: under
        # the protocol model, or under the program model (its file vetoed there) or it has none
        vetoed = {_key(v["config"]) for v in d["program_vetoes"] if v["bucket"] == r["index"]}
        vetoed |= {_key(e["config"]) for e in d["excluded"]}
        for c in d["candidates"]:
            for proto, per in c["predicted_us"].items():
                for inst, ts in per.items():
                    t = ts[r["index"]]
                    assert t is None or t >= r["nccl"]["time_us"] or \
                        (c["algorithm"], c["chunks"], proto, int(inst)) in vetoed
    for v in d["program_vetoes"]:
        assert v["program_us"] is None or v["program_us"] >= v["nccl_us"]
    for r in served:                                # no size is served slower than NCCL's models
        assert r["file"] is not None and r["winner"]["algorithm"] != "nccl"
        assert r["time_us"] < r["nccl"]["time_us"]
        assert r["speedup_timed_by"] == "program" and r["program_us"] < r["nccl"]["time_us"]
    # no file, no MSCCL_CONFIG entry reaches into a size left to NCCL
    spans = [(f["minBytes"], f["maxBytes"]) for f in d["files"]]
    assert sorted(p.name for p in (out / "msccl-algorithms").iterdir()) == sorted(
        Path(f["file"]).name for f in d["files"])
    loads = [(int(lo), int(hi) - 1) for lo, hi in
             re.findall(r'minbytes="(\d+)" maxbytes="(\d+)"', (out / "msccl_config.xml").read_text())]
    assert loads == spans
    assert [i for x in d["left_to_nccl"] for i in x["buckets"]] == [r["index"] for r in left]
    for x in d["left_to_nccl"]:     # adjacent buckets left to NCCL merge into one span
        assert (x["minBytes"], x["maxBytes"]) == (rows[x["buckets"][0]]["lo"],
                                                  rows[x["buckets"][-1]]["hi"])
    for lo, hi in spans:
        for r in left:
            assert hi < r["lo"] or lo > r["hi"]
    md = (out / "catalog.md").read_text()
    assert "Left to NCCL" in md and "NCCL (no file)" in md
    png = (out / "plots" / "allreduce.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_calibrations_nccl_model_is_what_competes(h100, tmp_path):
    """A calibration whose ``nccl_model`` halves NCCL's bandwidth leaves it no size here."""
    _, cache, before = h100
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": "synth-calibration/1",
                               "nccl_model": {"bandwidth_scale": 0.5}}))
    data = _catalog(tmp_path / "cat", cache, "--calibration", str(cal))
    rows = data["collectives"]["allreduce"]["buckets"]
    old = before["collectives"]["allreduce"]["buckets"]
    assert all(r["served_by"] == "synth" for r in rows)
    assert data["collectives"]["allreduce"]["left_to_nccl"] == []
    assert rows[-1]["nccl"]["time_us"] > old[-1]["nccl"]["time_us"]
    assert "No size is left to NCCL" in (tmp_path / "cat" / "catalog.md").read_text()


@pytest.fixture(scope="module")
def h100_16mb(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalog_nccl_veto")
    out = root / "cat"
    main(["catalog", "--topo", TOPO, "--collectives", "allreduce", "--sizes", "1KB,16MB",
          "--time-limit", "2", "--workers", "1", "--out", str(out), "--cache-dir",
          str(root / "cache"), "--quiet"])
    return out, json.loads((out / "catalog.json").read_text())


def test_a_size_the_program_model_gives_nccl_gets_no_file(h100_16mb):
    """16 MB allreduce on 8 x H100: the protocol model puts files ahead of NCCL, the program model
    puts each of them behind it as written, so NCCL serves the size; 1 KB keeps its file."""
    out, data = h100_16mb
    d = data["collectives"]["allreduce"]
    small, big = d["buckets"]
    nccl_us = big["nccl"]["time_us"]
    ahead = {(c["algorithm"], c["chunks"], p, int(i))
             for c in d["candidates"] for p, per in c["predicted_us"].items()
             for i, ts in per.items() if ts[1] is not None and ts[1] < nccl_us}
    assert ahead                                    # the protocol model alone would write a file
    assert big["served_by"] == "nccl" and big["file"] is None and big["program_us"] is None
    vetoed = {_key(v["config"]) for v in d["program_vetoes"] if v["bucket"] == 1}
    assert vetoed and vetoed <= ahead               # only what the protocol model put ahead
    # the tuner's best there (first in its ranking) was vetoed, or its file cannot be produced
    assert _key(big["tuner"]["best"]) in vetoed | {_key(e["config"]) for e in d["excluded"]}
    assert small["served_by"] == "synth" and small["program_us"] < small["nccl"]["time_us"]
    assert [f["buckets"] for f in d["files"]] == [[0]]
    assert d["left_to_nccl"] == [{"minBytes": big["lo"], "maxBytes": big["hi"], "buckets": [1]}]
    assert f'maxbytes="{small["hi"] + 1}"' in (out / "msccl_config.xml").read_text()
    md = (out / "catalog.md").read_text()
    assert "Put behind NCCL by the timed program model" in md


def test_a_lower_bound_not_below_nccl_vetoes_without_a_time():
    """The timer may give the program model's lower bound where it already is not below NCCL's
    time (synth.catalog.emit.program_times): the veto says so, and the next configuration is
    timed; a bound cannot stand for a time a file is served with."""
    from synth.select.nccl import Timed

    tunings = [_tuning(0, [A, B])]

    def times(choice: Choice) -> Timed:
        (r,) = choice.ranges
        return Timed({0: 9.0}, bounds={0}) if r.config == A else Timed({0: 7.0})

    got = choose_with_nccl(tunings, [8.0], lambda cfg, t: 5.0, lambda r: None, times)
    assert [r.config for r in got.choice.ranges] == [B] and got.program_us == {0: 7.0}
    assert [(v.config, v.bound, v.to_dict()["lower_bound"]) for v in got.vetoes] == [
        (A, True, True)]
    with pytest.raises(AssertionError, match="a bound below NCCL"):
        choose_with_nccl(tunings, [8.0], lambda cfg, t: 5.0, lambda r: None,
                         lambda c: Timed({0: 7.0}, bounds={0}))
