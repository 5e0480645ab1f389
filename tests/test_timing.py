"""The time-model registry: every model builds through one call and prices what it says it does."""

from __future__ import annotations

import math

import numpy as np
import pytest

from synth.calibration import class_figures
from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_verified_xml
from synth.emit.xml_parse import parse_program
from synth.encodings.baseline.algorithms import baseline
from synth.errors import SynthError
from synth.timing import TIME_MODELS, time_model
from synth.timing.lockstep import schedule_times_us, step_model
from synth.timing.protocol import Run
from synth.topology_io import load_topology

SIZES = [1024, 2**20, 2**30]


@pytest.fixture(scope="module")
def dgx1_ring():
    topo = load_topology("dgx1")
    return topo, baseline(topo, make_collective("allgather", 8), "ring")


def test_every_registered_model_builds_and_names_itself():
    for name, spec in TIME_MODELS.items():
        topo = load_topology("trn1_32" if name == "closed" else "dgx_h100")
        model = time_model(name, topo)
        assert model.name == name == spec.name
        assert model.source and spec.validated.startswith("results/")
    with pytest.raises(SynthError, match="unknown time model"):
        time_model("wallclock", load_topology("dgx1"))


def test_models_price_their_own_subjects(dgx1_ring):
    topo, ring = dgx1_ring
    lock = time_model("lockstep", topo).times_us(ring, SIZES)
    assert lock == [float(t) for t in schedule_times_us(ring, topo, SIZES)]
    proto = time_model("protocol", topo).times_us(Run(ring, "LL", 1), SIZES)
    assert all(p > w for p, w in zip(proto, lock, strict=True))    # floors on top of the wire
    text, _ = emit_verified_xml(ring, XmlOptions(proto="LL"))
    prog = time_model("program", topo).times_us(parse_program(text, "ring.xml"), SIZES[:2])
    assert all(math.isfinite(t) and t > 0 for t in prog)
    nccl = time_model("nccl", load_topology("dgx_h100")).times_us("allreduce", SIZES)
    assert nccl[0] < nccl[1] < nccl[2]


def test_step_model_is_the_lockstep_model_at_the_topologys_own_figures(dgx1_ring):
    """The fit's parametric form (per-class α/β with derivatives) must agree with the model."""
    topo, ring = dgx1_ring
    classes = tuple(sorted(class_figures(topo)))
    sm = step_model(ring, topo, classes)
    fig = class_figures(topo)
    alpha = np.array([fig[c][0] for c in classes])
    beta = np.array([fig[c][1] for c in classes])
    got, _, _ = sm.times(alpha, beta, np.array(SIZES, float))
    assert np.allclose(got, schedule_times_us(ring, topo, SIZES), rtol=1e-12)
