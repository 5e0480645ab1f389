"""The encoding registry and its typed options: a misspelled or foreign option is an error."""

from __future__ import annotations

import dataclasses

import pytest

from synth.collectives import make_collective
from synth.encodings import ENCODINGS, Options, run_encoding
from synth.encodings.options import (
    DEFAULT_SIZE,
    BaselineOptions,
    FlowOptions,
    MilpOptions,
    SmtOptions,
    TreesOptions,
)
from synth.errors import SynthError
from synth.topology_io import load_topology


@pytest.fixture(scope="module")
def ring4():
    return load_topology("ring:4"), make_collective("allgather", 4)


def test_registry_is_declared_once_in_order() -> None:
    assert list(ENCODINGS) == ["baseline", "trees", "flow", "smt", "milp"]
    assert {name: enc.options for name, enc in ENCODINGS.items()} == {
        "baseline": BaselineOptions, "trees": TreesOptions, "flow": FlowOptions,
        "smt": SmtOptions, "milp": MilpOptions}
    for enc in ENCODINGS.values():
        assert enc.summary and enc.name == enc.options.ENCODING
        assert dataclasses.is_dataclass(enc.options) and enc.options.__dataclass_params__.frozen


def test_parse_converts_values_and_keeps_defaults() -> None:
    opts = TreesOptions.parse({"size": "1MB", "max_tasks": "1500", "symmetry": 0})
    assert (opts.size, opts.max_tasks, opts.symmetry) == (1 << 20, 1500, False)
    assert opts.max_transfers == TreesOptions().max_transfers and opts.max_pieces is None
    assert MilpOptions.parse({}).size == DEFAULT_SIZE == FlowOptions.parse(None).size
    assert SmtOptions.parse({"steps": 3, "rounds": None}) == SmtOptions(steps=3)


@pytest.mark.parametrize("cls,values,match", [
    (TreesOptions, {"max_task": 3}, r"trees encoding has no option 'max_task'; did you mean max_tasks"),
    (BaselineOptions, {"steps": 2}, r"baseline encoding has no option 'steps'.*its options: none"),
    (TreesOptions, {"size": -1}, r"trees option size: must be a positive number of bytes"),
    (FlowOptions, {"max_paths": "many"}, r"flow option max_paths"),
    (MilpOptions, {"window": True}, r"milp option window: must be an integer"),
    (TreesOptions, {"size": "12 parsecs"}, r"trees option size"),
])
def test_parse_rejects_unknown_names_and_bad_values(cls, values, match) -> None:
    with pytest.raises(SynthError, match=match):
        cls.parse(values)


def test_named_encoding_rejects_a_foreign_option(ring4) -> None:
    topo, coll = ring4
    with pytest.raises(SynthError, match="trees encoding has no option 'steps'"):
        run_encoding("trees", topo, coll, Options(extra={"steps": 2}))
    with pytest.raises(SynthError, match="baseline encoding has no option 'size'"):
        ENCODINGS["baseline"](topo, coll, Options(extra={"size": 1024}))


def test_auto_rejects_an_option_no_encoding_takes(ring4) -> None:
    topo, coll = ring4
    with pytest.raises(SynthError, match=r"unknown encoding option 'stepz'; did you mean steps"):
        run_encoding("auto", topo, coll, Options(extra={"stepz": 2}))
    with pytest.raises(SynthError, match="unknown encoding option"):
        run_encoding("auto", topo, coll, Options(algorithm="ring", extra={"stepz": 2}))


def test_auto_hands_each_encoding_only_its_own_options(ring4) -> None:
    """``steps`` goes to smt alone (its one instance), ``size`` to the scale encodings; baselines
    still run, and --algo under auto still names a baseline."""
    topo, coll = ring4
    found = run_encoding("auto", topo, coll, Options(extra={"steps": 2, "size": "1MB"}))
    assert "smt_s2_r2_c1" in found and "ring" in found and "trees" in found
    assert sorted(run_encoding("auto", topo, coll, Options(algorithm="ring", extra={"steps": 2}))) \
        == ["ring"]


def test_cli_foreign_option_is_exit_2(synth_cli, tmp_path) -> None:
    r = synth_cli("solve", "--topo", "ring:4", "--coll", "allgather", "--encoding", "trees",
                  "--steps", "2", "--no-xml", "--out", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip().startswith("synth: error: the trees encoding has no option 'steps'")
    assert "Traceback" not in r.stderr
