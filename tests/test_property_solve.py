"""The fuzz campaign of issue 12 as a property test that keeps running.

Random valid small problems -- builder topologies (``ring:N``, ``line:N``, ``fully_connected:N``,
``switch:N``, ``torus:AxB``, ``hypercube:D``) and random YAML topology files read through the
same loader users go through -- times every collective times the encodings that apply and are
fast at this size, solved and written as ``synth solve`` does (:func:`synth.solve.solve`,
:func:`synth.solve.write_best`) with random XML options. Properties:

* nothing but a :class:`~synth.errors.SynthError` (one line, an exit code) ever escapes;
* every written schedule JSON re-verifies, every written XML file passes the interpreter in every
  mode it declares (and both ends of its messages agree, spec E2);
* the same inputs give byte-identical files.

The default variant runs a few fixed examples (derandomized: CI stays reproducible and under a
minute); the ``slow`` variant draws many new ones each run (``pytest -m slow
tests/test_property_solve.py``; hypothesis keeps the failures it finds in its database).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from synth.collectives import KINDS, ROOTED, load_collective
from synth.emit import XmlOptions
from synth.emit.agreement import disagreements
from synth.emit.interpreter import verify_file
from synth.emit.xml_parse import read_program
from synth.errors import SynthError
from synth.outputs import write_best
from synth.schedule import Schedule
from synth.solve import solve
from synth.topology_io import load_topology
from synth.verify import verify

ENCODINGS = ("baseline", "trees", "flow", "smt", "milp")
"""Every encoding but ``auto`` (which runs them all): each is fast at these sizes or says it does
not apply. SMT and MILP get a time limit; hitting it is a SynthError (exit 3), which is allowed."""
TIME_LIMIT_S = 10.0
SIZES = (2**10, 2**20, 2**28)


@st.composite
def builder_specs(draw) -> str:
    kind = draw(st.sampled_from(("ring", "line", "fully_connected", "switch", "torus",
                                 "hypercube")))
    if kind == "torus":
        return f"torus:{draw(st.integers(2, 3))}x{draw(st.integers(2, 3))}"
    if kind == "hypercube":
        return f"hypercube:{draw(st.integers(1, 3))}"
    return f"{kind}:{draw(st.integers(2, 6))}"


@st.composite
def yaml_topologies(draw) -> dict:
    """A random connected topology in the user file format (``synth/topology_io.py``): a random
    spanning tree plus extra links of two classes, directed or both ways, maybe a switch."""
    n = draw(st.integers(2, 6))
    pairs = {(draw(st.integers(0, r - 1)), r) for r in range(1, n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=n))
    pairs |= {(min(a, b), max(a, b)) for a, b in extra if a != b}
    links = []
    for a, b in sorted(pairs):
        cls = draw(st.sampled_from(("fast", "slow")))
        count = draw(st.integers(1, 2))
        if draw(st.booleans()):
            links.append({"between": [a, b], "class": cls, "count": count})
        else:   # the same capacity as two directed links
            links += [{"src": a, "dst": b, "class": cls, "count": count},
                      {"src": b, "dst": a, "class": cls, "count": count}]
    data = {"name": f"fuzz{n}", "ranks": n,
            "link_classes": {"fast": {"alpha_us": draw(st.sampled_from((0.3, 0.7))),
                                      "bandwidth_GBps": 25.0},
                             "slow": {"alpha_us": 2.0, "beta_us_per_mb": 80.0}},
            "links": links}
    if n >= 3 and draw(st.booleans()):
        data["link_classes"]["sw"] = {"alpha_us": 0.7, "bandwidth_GBps": 50.0}
        data["switches"] = [{"name": "sw0", "class": "sw", "ports": "per_rank"}]
    return data


@st.composite
def problems(draw):
    topo = draw(builder_specs()) if draw(st.booleans()) else draw(yaml_topologies())
    kind = draw(st.sampled_from(KINDS))
    encoding = draw(st.sampled_from(ENCODINGS))
    chunks = draw(st.sampled_from((None, 1, 2)))
    root_pick = draw(st.integers(0, 63))
    xml = XmlOptions(profile=draw(st.sampled_from(("exec", "rccl", "legacy"))),
                     proto=draw(st.sampled_from(("Simple", "LL", "LL128"))),
                     instances=draw(st.sampled_from((1, 2))),
                     max_bytes=draw(st.sampled_from((0, 2**20))),
                     inplace=draw(st.sampled_from((None, False, True))))
    return topo, kind, encoding, chunks, root_pick, xml


def _load(topo, folder: Path):
    if isinstance(topo, str):
        return load_topology(topo)
    path = folder / "topo.yaml"
    path.write_text(yaml.safe_dump(topo, sort_keys=False))
    return load_topology(str(path))


def _run(problem, folder: Path) -> dict[str, bytes] | None:
    """Solve and write as ``synth solve`` does; the written files (name -> bytes), or None when
    the problem is refused with a SynthError (the CLI's one-line error)."""
    topo, kind, encoding, chunks, root_pick, xml = problem
    folder.mkdir(parents=True, exist_ok=True)
    try:
        topology = _load(topo, folder)
        root = root_pick % topology.num_ranks if kind in ROOTED else None
        # as `synth solve --inplace`: the collective is solved in place too
        collective = load_collective(kind, topology.num_ranks, chunks or 1, root, bool(xml.inplace))
        result = solve(topology, collective, encoding=encoding, sizes=SIZES,
                       time_limit_s=TIME_LIMIT_S, chunks=chunks)
        out = folder / "out"
        _, written = write_best(result, out, xml)
    except SynthError as exc:
        assert exc.message and "\n" not in exc.message.strip(), exc.message
        event(f"{encoding}: refused ({type(exc).__name__})")
        return None
    event(f"{encoding}: written")
    files = {}
    for path in written.files:
        if path.name.endswith(".schedule.json"):
            schedule = Schedule.from_json(path.read_text(), str(path))
            verify(schedule, topology)
        else:
            assert path.suffix == ".xml"
            reports = verify_file(path, xml.profile)
            assert reports
            assert disagreements(read_program(path, xml.profile)) == []
        files[path.name] = path.read_bytes()
    assert any(name.endswith(".schedule.json") for name in files)
    return files


def _check(problem) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        first = _run(problem, Path(tmp) / "a")
        second = _run(problem, Path(tmp) / "b")
    assert (first is None) == (second is None)
    if first is not None:
        assert first == second, "the same inputs wrote different files"


_COMMON = dict(deadline=None, derandomize=True, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=10, **_COMMON)
@given(problems())
def test_random_problems_write_verified_deterministic_files(problem) -> None:
    _check(problem)


@pytest.mark.slow
@settings(max_examples=300, **{**_COMMON, "derandomize": False})
@given(problems())
def test_random_problems_many(problem) -> None:
    _check(problem)
