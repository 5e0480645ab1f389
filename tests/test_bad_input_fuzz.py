"""Property test: a valid input with one part replaced or removed is read or refused, never a crash.

Each parser that turns a user's file into synth's objects (topology, custom collective, sketch,
calibration, schedule, MSCCL-IR XML) gets a known-good document with one random subtree replaced
by random JSON-like data, or deleted. It must either accept the result or raise
:class:`~synth.errors.SynthError` (which the CLI prints as one line, exit 2 or 1) -- a TypeError,
KeyError or MemoryError here would be a traceback for the user.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.errors import SynthError

SCALARS = (st.none() | st.booleans() | st.integers(-(10**40), 10**40)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6)
           | st.sampled_from(["per_rank", "nv", "0", "-1", "", "all", "relay", "switch"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)

TOPOLOGY = {
    "name": "tiny", "ranks": 4, "nodes": [[0, 1], [2, 3]],
    "link_classes": {"nv": {"alpha_us": 1.0, "bandwidth_GBps": 25},
                     "ib": {"alpha_us": 3.0, "beta_us_per_mb": 40.0}},
    "links": [{"between": [0, 1], "class": "nv", "count": 2}, {"src": 2, "dst": 3, "class": "nv"},
              {"src": 3, "dst": 2, "class": "nv"}],
    "switches": [{"name": "fabric", "class": "ib", "ports": [{"name": "a", "ranks": [0, 1]},
                                                             {"name": "b", "ranks": [2, 3]}]}],
    "nics": [{"name": "a", "ranks": [0, 1], "class": "ib"}, {"name": "b", "ranks": [2, 3],
                                                             "class": "ib"}],
}
COLLECTIVE = {"name": "twohop", "ranks": 4, "chunks": 2, "combining": False,
              "pre": {0: [0], 1: [2]}, "post": [[0, [1, 2, 3]], [1, [0, 3]]]}
CALIBRATION = {"link_classes": {"nv": {"alpha_us": 1.5, "beta_us_per_mb": 22.0},
                                "ib": {"alpha_us": 4.0, "bandwidth_GBps": 20}},
               "instance_overhead_us": 0.5}


def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    found = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, (*at, i))
    return found


@st.composite
def mutated(draw, doc: Any) -> Any:
    """``doc`` with one subtree replaced by random data, or deleted (not the root)."""
    doc = copy.deepcopy(doc)
    path = draw(st.sampled_from(_paths(doc)))
    if not path:
        return draw(VALUES)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(VALUES)
    return doc


def accepts_or_refuses(parse, data: Any) -> None:
    try:
        parse(data)
    except SynthError as exc:
        assert "\n" not in exc.message.strip(), exc.message


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutated(TOPOLOGY))
def test_topology_parser(data):
    from synth.topology_io import parse_topology

    accepts_or_refuses(lambda d: parse_topology(d, "t.yaml"), data)


@FUZZ
@given(mutated(COLLECTIVE))
def test_custom_collective_parser(data):
    from synth.collectives import custom_collective

    accepts_or_refuses(lambda d: custom_collective(d, "c.yaml"), data)


@cache
def _sketch() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(__file__).resolve().parents[1].joinpath(
        "synth/sketches/shipped/dgx2-relay.yaml").read_text())


@FUZZ
@given(st.data())
def test_sketch_parser(data):
    from synth.sketches.schema import parse_sketch

    accepts_or_refuses(lambda d: parse_sketch(d, "s.yaml"), data.draw(mutated(_sketch())))


@FUZZ
@given(mutated(CALIBRATION))
def test_calibration_parser(data):
    from synth.calibrate.format import Calibration, apply_calibration
    from synth.topology_io import parse_topology

    topology = parse_topology(TOPOLOGY, "t.yaml")  # a calibration file is JSON: read_data, then this
    accepts_or_refuses(lambda d: apply_calibration(topology, Calibration.from_json(d, "c.json")),
                       data)


@cache
def _schedule() -> tuple[dict[str, Any], Any]:
    from synth.collectives import make_collective
    from synth.encodings.baseline import baseline
    from synth.topology_io import load_topology

    topology = load_topology("ring:4")
    schedule = baseline(topology, make_collective("allgather", 4, 1), "ring")
    return json.loads(schedule.to_json()), topology


@FUZZ
@given(st.data())
def test_schedule_reader_and_verifier(data):
    from synth.schedule import Schedule
    from synth.verify import verify

    doc, topology = _schedule()

    def read_and_verify(d: Any) -> None:
        verify(Schedule.from_json(json.dumps(d), "s.json"), topology)

    accepts_or_refuses(read_and_verify, data.draw(mutated(doc)))


XML = Path(__file__).parent / "data" / "msccl_ndv5" / "ndv5__ag-1m.xml"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_xml_reader_and_interpreter(data):
    """One attribute value of a real MSCCL-IR file replaced by random text or a number."""
    import re

    from synth.emit.interpreter import verify_program
    from synth.emit.xml_parse import parse_program

    text = XML.read_text()
    attrs = list(re.finditer(r'(\w+)="([^"]*)"', text))
    at = data.draw(st.sampled_from(attrs))
    value = data.draw(st.text(alphabet="0123456789-ixos,e .", max_size=8)
                      | st.integers(-(10**30), 10**30).map(str))
    bad = text[:at.start(2)] + value + text[at.end(2):]

    def read_and_run(t: str) -> None:
        verify_program(parse_program(t, "x.xml", "exec"), profile="exec")

    accepts_or_refuses(read_and_run, bad)


@pytest.mark.parametrize("name", ["ring:4", "switch:3"])
def test_good_documents_are_accepted(name):
    """The seeds themselves are valid, so the fuzz starts from the accepting side."""
    from synth.calibrate.format import apply_calibration
    from synth.collectives import custom_collective
    from synth.sketches.schema import parse_sketch
    from synth.topology_io import parse_topology

    topology = parse_topology(TOPOLOGY, "t.yaml")
    custom_collective(COLLECTIVE, "c.yaml")
    parse_sketch(_sketch(), "s.yaml")
    apply_calibration(topology, CALIBRATION)
