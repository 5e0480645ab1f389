"""Both ends of every message name one transfer (spec E2): synth's files, its check, a third party.

The runtimes ignore a receiver's source fields, but the third-party MSCCL-XML-Verifier (github
dromniscience/MSCCL-XML-Verifier) compares both ends of each message and rejected every
out-of-place synth file with ``rcs`` steps. These tests pin the compiler's agreement, the check
that guards it (:mod:`synth.emit.agreement`) and, when a built copy is at hand
(``SYNTH_MSCCL_XML_VERIFIER=<folder with allgather-verifier and alltoall-verifier>``), the verdict
of that verifier itself.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_verified_xml
from synth.emit import passes as P
from synth.emit.agreement import disagreements
from synth.emit.compile import compile_schedule
from synth.emit.interpreter import verify_program
from synth.emit.program import Program
from synth.emit.xml_parse import parse_program
from synth.encodings.baseline import baseline
from synth.errors import VerificationError
from synth.topology_io import load_topology

from .conftest import xml_corpus_file

VERIFIER_ENV = "SYNTH_MSCCL_XML_VERIFIER"

# (topology, collective, baseline algorithm, chunks per rank): relays, forwards, reduce chains
CASES = [
    ("dgx1", "allgather", "ring", 1),
    ("dgx1", "allgather", "ring", 2),
    ("dgx1", "allgather", "recursive_doubling", 1),
    ("hypercube:3", "allgather", "tree", 1),
    ("ring:6", "alltoall", "bidir_ring", 1),
    ("line:4", "alltoall", "direct", 1),
    ("torus:2x3", "alltoall", "direct", 1),
    ("ring:6", "allreduce", "ring", 1),
    ("dgx1", "allreduce", "direct", 2),
    ("dgx1", "reducescatter", "ring", 1),
    ("dgx1", "broadcast", "tree", 1),
]


def _schedule(topo: str, kind: str, algo: str, chunks: int):
    t = load_topology(topo)
    return baseline(t, make_collective(kind, t.num_ranks, chunks), algo)


def _rcs_count(program: Program) -> int:
    return sum(st.type == "rcs" for g in program.gpus for tb in g.tbs for st in tb.steps)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("inplace", [None, False])
def test_emitted_messages_agree(case, inplace) -> None:
    sch = _schedule(*case)
    text, reports = emit_verified_xml(sch, XmlOptions(inplace=inplace))
    program = parse_program(text, "x.xml")
    assert disagreements(program) == []
    assert reports and not any("[E2]" in w for r in reports for w in r.warnings)


def test_ring_allgather_keeps_its_forwards() -> None:
    """Out-of-place ring allgather: each rank sends its chunk from the output copy it makes
    anyway, so the next ranks can forward it as rcs and still agree (no fusion is lost)."""
    sch = _schedule("dgx1", "allgather", "ring", 1)
    program = compile_schedule(sch, inplace=False)
    assert _rcs_count(program) == 8 * 6
    heads = [st for g in program.gpus for tb in g.tbs for st in tb.steps if st.type == "s"]
    assert heads and all(st.srcbuf == "o" for st in heads)
    assert disagreements(program) == []


def test_check_finds_a_tampered_receive() -> None:
    sch = _schedule("dgx1", "allgather", "ring", 1)
    program = compile_schedule(sch, inplace=False)
    gpus = list(program.gpus)
    g = gpus[1]
    tbs = list(g.tbs)
    for i, tb in enumerate(tbs):
        steps = list(tb.steps)
        for j, st in enumerate(steps):
            if st.type == "rcs":
                steps[j] = dataclasses.replace(st, srcbuf="i", srcoff=0)
                tbs[i] = dataclasses.replace(tb, steps=tuple(steps))
                break
        else:
            continue
        break
    gpus[1] = dataclasses.replace(g, tbs=tuple(tbs))
    bad = dataclasses.replace(program, gpus=tuple(gpus))
    issues = disagreements(bad)
    assert len(issues) == 2      # the rcs names two cells, and its message's source differs
    assert any("rcs names two locations" in i for i in issues)
    assert any("rank 0 -> rank 1" in i and "says i[0] -> o[0]" in i for i in issues)
    # the runtime ignores those fields: the interpreter still runs it, and warns
    reports = verify_program(bad)
    assert all(any(w.startswith("[E2]") for w in r.warnings) for r in reports)


def test_emission_refuses_disagreeing_files(monkeypatch) -> None:
    """Were the compiler to stop splitting disagreeing forwards (alltoall relays land in scratch,
    their sources sit in the input), nothing would be written."""
    monkeypatch.setattr(P, "disagreements", lambda ir: [])
    sch = _schedule("ring:6", "alltoall", "bidir_ring", 1)
    with pytest.raises(VerificationError, match="agreement"):
        emit_verified_xml(sch, XmlOptions(inplace=False))


def test_production_files_are_advised_not_rejected() -> None:
    """The MSCCL scheduler's hierarchical allgather keeps the sender's location in its rcs steps:
    valid for the runtime (verified), flagged as a portability warning."""
    path = xml_corpus_file("ncv4__ag_hier_4_LL.xml")
    reports = verify_program(parse_program(path.read_text(), path.name))
    assert reports and all(any(w.startswith("[E2]") for w in r.warnings) for r in reports)


# ------------------------------------------------------------------------ the third-party verifier
def _verifier() -> Path:
    where = os.environ.get(VERIFIER_ENV)
    if not where:
        pytest.skip(f"{VERIFIER_ENV} is not set (a folder holding a build of "
                    "github.com/dromniscience/MSCCL-XML-Verifier: allgather-verifier, "
                    "alltoall-verifier)")
    folder = Path(where)
    if not (folder / "allgather-verifier").is_file():
        pytest.skip(f"{VERIFIER_ENV}={where} holds no allgather-verifier executable")
    return folder


VERIFIER_CASES = [
    ("ring:4", "allgather", "ring", 1),
    ("dgx1", "allgather", "ring", 2),
    ("dgx1", "allgather", "bidir_ring", 2),
    ("dgx1", "allgather", "recursive_doubling", 1),
    ("hypercube:3", "allgather", "tree", 1),
    ("fully_connected:4", "allgather", "direct", 1),
    ("ring:6", "alltoall", "bidir_ring", 1),
    ("torus:2x3", "alltoall", "direct", 1),
    ("hypercube:3", "alltoall", "ring", 1),
]


@pytest.mark.parametrize("case", VERIFIER_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("profile", ["exec", "rccl"])
def test_third_party_verifier_accepts_out_of_place_files(case, profile, tmp_path) -> None:
    """It only runs out-of-place allgather and alltoall files made of s, r, rcs, cpy and nop."""
    folder = _verifier()
    sch = _schedule(*case)
    text, _ = emit_verified_xml(sch, XmlOptions(profile=profile, inplace=False))
    exe = "allgather-verifier"
    if case[1] == "alltoall":
        # its alltoall driver insists on coll="allreduce" (its README calls it not a typo)
        text = text.replace('coll="alltoall"', 'coll="allreduce"', 1)
        exe = "alltoall-verifier"
    path = tmp_path / "algo.xml"
    path.write_text(text)
    run = subprocess.run([str(folder / exe), str(path), "5"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "All tests passed." in run.stdout, run.stderr[-2000:]
