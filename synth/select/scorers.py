"""Scorers: a candidate's predicted times at the solve's sizes under one time model.

A time model (:mod:`synth.timing`) prices an artifact: a schedule, a compiled program, a plan. A
*scorer* prices a :class:`~synth.select.candidates.Candidate` by building the artifact the model
needs and calling the model: :func:`lockstep_scorer` reads the lock-step costs the candidates were
verified with; :class:`~synth.select.program_scorer.ProgramScorer` compiles each candidate to XML
and runs the program model, within a budget. :func:`deciding_scorer` picks the one that decides
the winners (``--winners-by``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .. import progress
from ..emit import XmlOptions, xml_unsupported_reason
from ..errors import SynthError
from ..timing.program import not_a_gpu
from ..topology import Topology
from .candidates import Candidate, SolveResult
from .program_scorer import (
    PROGRAM_COST_BUDGET,
    ProgramBudgetExceeded,
    ProgramScorer,
    estimated_program_work,
)

Scorer = Callable[[Candidate], Sequence[float]]
"""Predicted µs of a candidate at each of the solve's sizes (``Candidate.costs`` order).

This is the one seam where the model that decides the winners plugs in (:func:`choose_ranges`,
:func:`prepare_winners`): :func:`lockstep_scorer`, or a :class:`ProgramScorer` (the written
file's own model), chosen by :func:`deciding_scorer`."""

WINNERS_BY = ("auto", "program", "lockstep")
"""``synth solve --winners-by``: auto = the timed program model where the ranks are GPUs
(:func:`synth.timing.program.not_a_gpu`) and its estimated cost fits :data:`PROGRAM_COST_BUDGET`,
else the lock-step model (with a note saying why)."""

def lockstep_scorer(candidate: Candidate) -> list[float]:
    """The synchronous-step α-β model the candidates were costed with (:func:`cost_profile`)."""
    return [p.time_us for p in candidate.costs]


def deciding_scorer(result: SolveResult, topology: Topology, xml: XmlOptions | None,
                  winners_by: str = "auto", calibration: Any = None,
                  budget: float = PROGRAM_COST_BUDGET, instances: Sequence[int] | None = None,
                  protocols: Sequence[str] | None = None) -> tuple[Scorer, str, list[str]]:
    """The model that decides the winners, its name (``program`` or ``lockstep``) and notes.

    ``protocols``: the protocols each candidate is also compiled in and timed
    (:class:`ProgramScorer`; ``synth solve`` without ``--proto`` passes all three); None:
    ``xml.proto`` alone. ``instances``: the instance counts the program model lets each candidate compete at
    (:class:`ProgramScorer`; ``synth solve`` passes :data:`synth.select.INSTANCES`
    when ``--instances`` is not given); None: ``xml.instances`` alone. The lock-step model has no
    notion of instances (it times the wire), so with it every file has ``xml.instances``.

    The program model times what is written (threadblocks, grid iterations, FIFO slots, shared
    links), so it decides wherever it can: ``program`` always (no budget), ``auto`` when the ranks
    are GPUs and its estimated work fits ``budget`` (:data:`PROGRAM_COST_BUDGET`; a count, not a
    clock, so two runs decide alike). Without XML there is no program to time, and ``lockstep``
    is asked for: both use the lock-step model. A note says why whenever ``auto`` falls back.

    Why not on other accelerators (:func:`synth.timing.program.not_a_gpu`): its figures are a GPU's,
    and they decide close calls. On trn1_32 allgather at 1 GiB it ranked ``milp_coarse`` x2
    (2,865.1 µs; 94.54% of the bound by lock-step) above ``trees_aligned`` x1 (2,894.4 µs;
    95.35%): 1% apart, a gap that rests on NCCL's Ampere figures (a threadblock capped at 24 GB/s
    for Simple: in the first tenth of the run the 48 GB/s ring links averaged 38.4) and on where
    the compiler puts the first local copies, in blocks a NeuronCore does not have. There the
    lock-step model, priced with the machine's own link figures, decides; ``--winners-by
    program`` still asks for the GPU model.
    """
    if winners_by not in WINNERS_BY:
        raise SynthError(f"winners_by must be one of {', '.join(WINNERS_BY)}, got '{winners_by}'")
    if winners_by == "lockstep":
        return lockstep_scorer, "lockstep", []
    if xml is None or xml_unsupported_reason(result.best.schedule, xml):
        return lockstep_scorer, "lockstep", ["winners by the lock-step model: no XML to time "
                                            "with the program model"]
    if winners_by == "auto":
        why = not_a_gpu(topology)
        if why:
            return lockstep_scorer, "lockstep", [f"winners by the lock-step model: {why} "
                                                "(--winners-by program times them anyway)"]
        ahead = estimated_program_work(result, xml)
        if ahead > budget:
            return lockstep_scorer, "lockstep", [
                f"winners by the lock-step model: compiling and timing the {len(result.candidates)}"
                f" candidates once at the largest size is estimated at {ahead:,} op-iterations "
                f"before any is compiled, over the program model's budget ({budget:,.0f}; "
                "--winners-by program times them all)"]
    model = ProgramScorer(result, topology, xml, calibration,
                             math.inf if winners_by == "program" else budget,
                             instances=instances, protocols=protocols)
    counts = "/".join(f"x{i}" for i in model.instances)
    if len(model.protocols) > 1:
        counts = f"{'/'.join(model.protocols)} {counts}"
    with progress.phase(f"program model: timing {len(result.candidates)} candidates "
                        f"({counts})"):
        try:
            model.run()
        except ProgramBudgetExceeded as exc:
            return lockstep_scorer, "lockstep", [
                *model.notes, f"winners by the lock-step model: {exc} (--winners-by program "
                "times them all)"]
    stopped = ([f"instance counts above x{model.instances[0]} not all tried: {model.stopped}"]
               if model.stopped else [])
    if model.cut is not None:
        stopped.append(f"winners by the lock-step model below {model.cut[0]} bytes: {model.cut[1]}"
                       " (--winners-by program times them all)")
    return model, "program", [*model.notes, *stopped,
                              f"winners by the program model at instances {counts}: "
                              f"{model.simulated} (candidate, form, size) triples simulated "
                              f"({model.cost:,} op-iterations estimated), {model.skipped} skipped "
                              f"by the prunes (factor {model.prune_factor:g}; {model.bounded} by "
                              "the sound lower bound)"]
