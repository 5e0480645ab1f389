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
    from synth.calibrated import apply_calibration
    from synth.calibration import Calibration
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
    from synth.calibrated import apply_calibration
    from synth.collectives import custom_collective
    from synth.sketches.schema import parse_sketch
    from synth.topology_io import parse_topology

    topology = parse_topology(TOPOLOGY, "t.yaml")
    custom_collective(COLLECTIVE, "c.yaml")
    parse_sketch(_sketch(), "s.yaml")
    apply_calibration(topology, CALIBRATION)


# ------------------------------------------------------------------- adversarial extensions
# The kinds a fuzz campaign found hangs, memory blow-ups and tracebacks with: numbers past any size
# synth means, YAML aliases (bombs, recursion), documents that are well formed but describe no
# machine, and MSCCL++ plan fields. Each property runs the real reader on text (not parsed data),
# so the reader's own limits are what is tested.

HUGE = (st.integers(2**64, 10**60) | st.integers(-(10**60), -(2**64))
        | st.sampled_from([10**400, -(10**400)]))
"""Whole numbers no synth input means (past 2^64); ``10**400`` overflows every ``float()``."""


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


@FUZZ
@given(st.data(), st.sampled_from(["topology", "calibration", "sketch", "collective"]),
       HUGE.map(str) | st.sampled_from(["9" * 5000, "-" + "9" * 4400, "0x" + "f" * 40]))
def test_huge_integers_anywhere(data, kind, literal):
    """A whole number past 2^64 (or of thousands of digits) in place of any value of a topology,
    calibration, sketch or custom collective file is one short line naming its field, from YAML
    and from JSON alike -- not an OverflowError from ``float()`` or a ValueError from ``int()``'s
    4300-digit limit."""
    from synth.files import parse_data

    doc = copy.deepcopy({"topology": TOPOLOGY, "calibration": CALIBRATION, "sketch": _sketch(),
                         "collective": {**COLLECTIVE, "pre": {"0": [0], "1": [2]}}}[kind])
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    _get(doc, path[:-1])[path[-1]] = "__N__"
    for fmt in ("json", "yaml"):
        if fmt == "json" and literal.startswith("0x"):
            continue  # JSON has no hexadecimal literals
        text = json.dumps(doc).replace('"__N__"', literal)
        with pytest.raises(SynthError) as info:
            parse_data(text, f"f.{fmt}", fmt)
        message = info.value.message
        assert "\n" not in message and len(message) < 400, message
        assert "too large a number" in message and "field '" in message, message


FIELDS = ("name", "ranks", "link_classes", "links", "meta", "description")


@st.composite
def yaml_with_aliases(draw) -> str:
    """A topology-shaped YAML document with aliases in one field: an alias bomb (``fan`` aliases
    of the previous level, ``depth`` levels: fan^depth values), an alias of an enclosing anchor
    (a recursive document, through a list, a mapping or a ``<<`` merge), or shared anchors."""
    field = draw(st.sampled_from(FIELDS))
    kind = draw(st.sampled_from(["bomb", "recursive", "merge", "shared"]))
    head = "name: t\nranks: 2\nlink_classes: {nv: {alpha_us: 1, bandwidth_GBps: 25}}\n"
    head = "".join(line + "\n" for line in head.splitlines() if not line.startswith(field + ":"))
    if kind == "bomb":
        depth, fan = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        levels = ["l0: &l0 [x, y]"] + [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]"
                                        for i in range(1, depth + 1)]
        return "defs:\n" + "".join(f"  {line}\n" for line in levels) + head + \
            f"{field}: *l{depth}\n"
    if kind == "recursive":
        depth = draw(st.integers(0, 5))
        inner = "*r"
        for i in range(depth):
            inner = draw(st.sampled_from([f"[{inner}]", f"{{k{i}: {inner}}}"]))
        return head + f"{field}: &r [1, {inner}]\n"
    if kind == "merge":
        return head + f"{field}: &m\n  <<: *m\n  x: 1\n"
    uses = draw(st.integers(1, 50))
    return ("defs: &d {alpha_us: 1, bandwidth_GBps: 25}\n" + head
            + f"{field}: [" + ", ".join(["*d"] * uses) + "]\n")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_with_aliases())
def test_yaml_aliases_and_recursion_end_at_once(text):
    """Aliases, alias bombs (nine aliases of nine, nested) and aliases of an enclosing anchor are
    read or refused in bounded time: the reader never walks a cycle or an exponential expansion."""
    import time

    from synth.files import parse_data
    from synth.topology_io import parse_topology

    start = time.perf_counter()
    try:
        parse_topology(parse_data(text, "t.yaml"), "t.yaml")
    except SynthError as exc:
        assert "\n" not in exc.message and len(exc.message) < 1000, exc.message
        if "&r [1" in text or "<<: *m" in text:
            assert "recursive YAML document" in exc.message, exc.message
    else:
        assert "&r [1" not in text and "<<: *m" not in text, "a recursive document was read"
    assert time.perf_counter() - start < 5


SEMANTIC = st.sampled_from([
    # (path into TOPOLOGY, value): well-formed data describing no machine
    (("links", 0, "between"), [1, 1]), (("links", 1, "dst"), 2), (("links", 1, "src"), 9),
    (("links", 0, "between"), [0, 99]), (("links", 0, "class"), "nope"),
    (("link_classes", "nv", "bandwidth_GBps"), 0), (("link_classes", "nv", "bandwidth_GBps"), -5),
    (("link_classes", "nv", "bandwidth_GBps"), 5e-324), (("link_classes", "nv", "alpha_us"), -1),
    (("link_classes", "ib", "beta_us_per_mb"), 1e300), (("nics", 0, "ranks"), [0, 7]),
    (("nics", 1, "name"), "a"), (("nics", 0, "class"), "efa"),
    (("switches", 0, "ports", 1, "name"), "a"), (("switches", 0, "ports", 1, "ranks"), [1, 2]),
    (("switches", 0, "ports", 0, "ranks"), [0, 16]), (("switches", 0, "class"), "x"),
    (("nodes",), [[0, 1], [1, 2, 3]]), (("nodes",), [[0, 1]]), (("nodes", 0), []),
    (("ranks",), 1), (("ranks",), 2.0), (("links", 0, "between", 0), 1.0),
    (("links", 1, "src"), 2.5), (("links", 0, "count"), 2.0), (("switches", 0, "ports"), "per_rank"),
    (("switches",), []), (("links",), []), (("nics",), []),
])


@FUZZ
@given(st.lists(SEMANTIC, min_size=1, max_size=4))
def test_semantically_wrong_topologies(changes):
    """Self-loops, dangling ranks, classes and NICs, duplicates, zero/negative/denormal bandwidth,
    whole numbers written as floats, disconnected or one-rank machines: read or refused in one
    line, never a crash in what comes after the schema (a TypeError from ``range(2.0)``)."""
    from synth.summary import topology_summary
    from synth.topology_io import parse_topology

    doc = copy.deepcopy(TOPOLOGY)
    for path, value in changes:
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed what this one edits
    try:
        topology = parse_topology(doc, "t.yaml")
    except SynthError as exc:
        assert "\n" not in exc.message, exc.message
        return
    assert all(isinstance(r, int) for m in topology.nodes for r in m)
    accepts_or_refuses(topology_summary, topology)


@cache
def _plan() -> dict[str, Any]:
    return json.loads(Path(__file__).parent.joinpath(
        "data/mscclpp-plans/single_node/allgather.json").read_text())


PLAN_NUMBERS = (HUGE | st.integers(-(10**12), -1) | st.sampled_from([10**12, 2**63, 0, 1.5, 2.0,
                                                                      "1", True, None, [], {}]))


@st.composite
def mutated_plan_fields(draw) -> dict[str, Any]:
    """A real plan with up to three integer fields (counts, ids, offsets, sizes, init values)
    replaced by huge, negative, float or wrong-typed values, or deleted."""
    doc = copy.deepcopy(_plan())
    doc["gpus"][0]["semaphores"] = [{"init_value": 0}]
    numeric = [p for p in _paths(doc) if p and isinstance(_get(doc, p), int)
               and not isinstance(_get(doc, p), bool)]
    for path in draw(st.lists(st.sampled_from(numeric), min_size=1, max_size=3)):
        parent = _get(doc, path[:-1])
        if draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(PLAN_NUMBERS)
    return doc


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_plan_fields())
def test_mscclpp_plan_fields(doc):
    """Huge counts and chunk numbers, negative offsets, missing keys, floats and strings in an
    MSCCL++ plan: the verifier answers (a verdict or a one-line input error) in bounded time and
    memory -- it never sizes a queue, a buffer or a loop by a number it was given unchecked."""
    import time

    from synth.mscclpp import load_plan, verify_plan

    start = time.perf_counter()
    accepts_or_refuses(lambda d: verify_plan(load_plan(json.dumps(d), "p.json")), doc)
    assert time.perf_counter() - start < 5
