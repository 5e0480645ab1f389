"""Time models: one interface, one registry, for everything synth predicts a time for.

A time model answers one question: how long does *this* take at each of these message sizes? What
"this" is depends on the model, and each says so (``TimeModelSpec.prices``):

================  ==========================  ==================================================
name              prices                      what it is
================  ==========================  ==================================================
``lockstep``      a Schedule                  α-β steps run one after another (:mod:`.lockstep`);
                                              the wire alone, what the bounds compare with
``protocol``      a protocol.Run              the same steps plus the MSCCL runtime's protocol
                                              floors and channel caps (:mod:`.protocol`)
``program``       a parsed MSCCL-IR Program   a discrete-event run of the written file
                                              (:mod:`.program`): threadblocks, FIFOs, shared links
``plan``          an MSCCL++ Plan             the same machine figures for MSCCL++ plans
                                              (:mod:`.plan`)
``nccl``          a collective kind           what NCCL's own tuner runs, and its time
                                              (:mod:`.nccl`)
``closed``        a closed-stack Program      vendor collective calls on Trainium / TPU
                                              (:mod:`synth.closed.cost`)
================  ==========================  ==================================================

Every model is built the same way, ``TIME_MODELS[name].build(topology, calibration)`` (or
:func:`time_model`), and calibration applies only through that call: each model reads its own
section of a calibration file (``protocols``, ``program``, ``nccl_model``, closed-stack
``terms``). The topology given is the machine as measured: a calibration's link-class figures are
applied to it first (:func:`synth.calibrated.apply_calibration`), once, by the caller,
because the encodings must optimise for the same figures the models price.

Who uses which: encodings optimise lock-step; :mod:`synth.select` ranks candidates by
``program`` where it can and ``lockstep`` elsewhere, with ``nccl`` as a candidate of its own;
``synth simulate`` runs ``program`` or ``plan``; catalogs tune with ``protocol``;
``synth strategies`` ranks closed-stack programs by ``closed``. How well each agrees with
measurements is in the results file its spec names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import unknown_name
from ..topology import Topology
from .lockstep import LockstepModel
from .nccl import NcclTimes
from .plan import PlanTimes
from .program import ProgramTimes
from .protocol import ProtocolTimes


class TimeModel(Protocol):
    """What every time model is: a name, where its figures come from, and times."""

    name: str
    source: str
    """Where the model's figures come from, with the calibration applied if any."""

    def times_us(self, subject: Any, sizes: Sequence[int]) -> list[float]:
        """Predicted µs of ``subject`` at each size (``inf`` where it cannot run at that size)."""
        ...


@dataclass(frozen=True)
class TimeModelSpec:
    """A registered model: its name, what it prices, how to build it, how it was validated."""

    name: str
    prices: str
    summary: str
    validated: str
    """Where its error against public measurements is reported (a results/ file)."""
    build: Callable[[Topology, Any], TimeModel]


def _closed(topology: Topology, calibration: Any = None) -> TimeModel:
    # deferred: synth.closed's package pulls in the strategy search, which sits above this layer
    from ..closed.cost import ClosedTimes

    return ClosedTimes(topology, calibration)


TIME_MODELS: dict[str, TimeModelSpec] = {spec.name: spec for spec in (
    TimeModelSpec("lockstep", "Schedule", "α-β steps, the wire alone", "results/baselines.md",
                  LockstepModel),
    TimeModelSpec("protocol", "protocol.Run", "steps + MSCCL protocol floors and channel caps",
                  "results/tuning.md", ProtocolTimes),
    TimeModelSpec("program", "emit.program.Program", "discrete-event run of an MSCCL-IR file",
                  "results/reality_msccl.md", ProgramTimes),
    TimeModelSpec("plan", "mscclpp.plan.Plan", "discrete-event run of an MSCCL++ plan",
                  "results/mscclpp.md (modelled, not measured)", PlanTimes),
    TimeModelSpec("nccl", "collective kind", "NCCL's own tuner and its time",
                  "results/reality.md", NcclTimes),
    TimeModelSpec("closed", "closed.ir.Program", "vendor collective calls (Neuron, XLA)",
                  "results/closed.md", _closed),
)}
"""Every time model synth has, by name (declared once, like :data:`synth.encodings.ENCODINGS`)."""


def time_model(name: str, topology: Topology, calibration: Any = None) -> TimeModel:
    """The model called ``name`` for ``topology`` with ``calibration``'s own section applied."""
    if name not in TIME_MODELS:
        raise unknown_name("time model", name, tuple(TIME_MODELS))
    return TIME_MODELS[name].build(topology, calibration)


__all__ = ["TIME_MODELS", "TimeModel", "TimeModelSpec", "time_model"]
