"""The SMT encoding (SCCL, PPoPP'21): steps/rounds/chunks instances, least steps, Pareto frontier.

One model (:mod:`.model`), two engines: OR-Tools CP-SAT (``cpsat``, the default: fast) and z3
(``z3``: SMT fidelity, SCCL's own solver); both decide the same instances the same way, so the
frontier does not depend on the engine. The pieces:

* :mod:`.model` — the constraints, hop-distance pruning, symmetry breaking, symmetric models;
* :mod:`.backend_cpsat`, :mod:`.backend_z3` — the engines (incremental across round budgets);
* :mod:`.problem` — bounds (hops, SCCL's rounds LP, a flow LP), instance solving, the
  reducescatter/reduce duals and the allreduce composition, decoding to a Schedule;
* :mod:`.search` — least steps and SCCL's Pareto walk.

As an encoding (``synth solve --encoding smt``), :class:`~synth.encodings.options.SmtOptions`
selects the search:

* ``steps`` (and ``rounds``, default = steps): one instance; UNSAT raises
  :class:`NoAlgorithm` ("no algorithm with S steps, R rounds, C chunks", exit code 2);
* ``least_steps``: the fewest steps from the proven lower bound up (R = S unless ``rounds``);
* neither (``--encoding auto``): least steps, only when cheap — at most
  :data:`AUTO_MAX_RANKS` ranks and :data:`AUTO_SECONDS` deterministic seconds of work — else it
  steps aside.

``engine`` picks ``cpsat`` / ``z3`` (``auto`` = cpsat). A time limit that hits before an answer
raises SynthError with exit code 3 (:data:`synth.errors.LIMIT_REACHED`), saying what was proven.
The time limit is a deterministic work budget (:mod:`synth.encodings.work`), so whether it hits,
and what was found before it did, is the same on every machine.
"""

from __future__ import annotations

import math

from ...collectives import Collective
from ...errors import LIMIT_REACHED, NotApplicable, SynthError
from ...schedule import Schedule
from ...topology import Topology
from ..options import Options, SmtOptions
from ..work import WorkBudget
from .problem import (
    ENGINES,
    SAT,
    UNKNOWN,
    UNSAT,
    InstanceResult,
    SmtProblem,
    check_instance,
    no_algorithm_message,
    resolve_engine,
)
from .search import SearchReport, least_steps, pareto

__all__ = [
    "AUTO_MAX_RANKS",
    "AUTO_SECONDS",
    "ENGINES",
    "InstanceResult",
    "NoAlgorithm",
    "SearchReport",
    "SmtProblem",
    "least_steps",
    "pareto",
    "smt_encoding",
]

AUTO_MAX_RANKS = 16
"""``--encoding auto`` runs the smt encoding only on topologies up to this many ranks."""
AUTO_SECONDS = 3.0
"""... and gives it at most this much work (CP-SAT deterministic seconds; least steps, R = S)."""


class NoAlgorithm(NotApplicable):
    """The instance is UNSAT: no algorithm with these steps, rounds and chunks exists."""


def _chunks(collective: Collective, options: Options) -> int:
    if options.chunks is not None:
        return options.chunks
    return collective.chunks_per_rank if collective.custom is None else 1


def smt_encoding(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """``{name: schedule}`` for the instance, least-steps or cheap search that ``options`` ask for."""
    opts = SmtOptions.parse(options.extra)
    steps = opts.steps
    rounds = opts.rounds
    least = opts.least_steps
    explicit = steps is not None or least
    if options.algorithm and not options.algorithm.startswith("smt"):
        raise NotApplicable(f"the smt encoding has no algorithm '{options.algorithm}' (that names a "
                            "baseline); use --steps/--least-steps with --encoding smt")
    chunks = _chunks(collective, options)
    check_instance(steps, rounds, chunks)
    if steps is not None and least:
        raise SynthError("--steps and --least-steps exclude each other: --steps solves one "
                         "instance, --least-steps searches for the fewest steps")
    if rounds is not None and not explicit:
        raise SynthError("--rounds applies with --steps S (one instance) or --least-steps")
    engine = resolve_engine(opts.engine)
    limit = options.time_limit_s
    if limit is not None and not (limit > 0 and math.isfinite(limit)):
        raise SynthError(f"--time-limit must be a positive number of seconds, got {limit:g}")
    if not explicit:
        if topology.num_ranks > AUTO_MAX_RANKS:
            raise NotApplicable(f"smt runs automatically only up to {AUTO_MAX_RANKS} ranks "
                                f"('{topology.name}' has {topology.num_ranks}); ask for it with "
                                "--encoding smt --least-steps or --steps S")
        limit = AUTO_SECONDS if limit is None else min(limit, AUTO_SECONDS)
    problem = SmtProblem(topology, collective, engine=engine)
    budget = WorkBudget(limit)
    try:
        return _run(problem, topology, collective, steps, rounds, chunks, limit, explicit, budget)
    finally:
        if options.notes is not None:
            options.notes.extend(n for n in budget.safety_notes if n not in options.notes)


def _run(problem: SmtProblem, topology: Topology, collective: Collective, steps: int | None,
         rounds: int | None, chunks: int, limit: float | None, explicit: bool,
         budget: WorkBudget) -> dict[str, Schedule]:
    if collective.custom is not None and chunks != 1:
        problem.collective(chunks)  # raises the clear message
    if steps is not None:
        r = steps if rounds is None else rounds
        res = problem.solve(steps, r, chunks, budget=budget)
        if res.status == SAT:
            assert res.schedule is not None
            return {res.schedule.algorithm: res.schedule}
        if res.status == UNSAT:
            raise NoAlgorithm(no_algorithm_message(steps, r, chunks, res.reason) +
                              f" for {collective.name} on '{topology.name}'")
        raise SynthError(f"time limit ({limit:g} s) reached before deciding whether an algorithm "
                         f"with {steps} steps, {r} rounds, {chunks} chunks exists; raise "
                         "--time-limit", exit_code=LIMIT_REACHED)
    report = least_steps(problem, chunks=chunks, rounds=rounds, budget=budget)
    if report.points:
        sched = report.points[0].schedule
        assert sched is not None
        return {sched.algorithm: sched}
    proven = least_steps_proven(report)
    if report.stop == "time limit":
        if not explicit:
            raise NotApplicable(f"smt: no answer within {limit:g} s in auto mode ({proven})")
        raise SynthError(f"time limit ({limit:g} s) reached: {proven}; no algorithm found yet",
                         exit_code=LIMIT_REACHED)
    raise NoAlgorithm(f"{report.stop} for {collective.name} on '{topology.name}'")


def least_steps_proven(report: SearchReport) -> str:
    """'proved S < k impossible' style summary of a least-steps search."""
    unsat = [r for r in report.tried if r.status == UNSAT]
    pending = [r for r in report.tried if r.status == UNKNOWN]
    parts = [f"steps lower bound {report.steps_lb}"]
    if unsat:
        last = max(unsat, key=lambda r: r.steps)
        parts.append(f"no algorithm with up to {last.steps} steps ({last.rounds} rounds, "
                     f"{last.chunks} chunks)")
    if pending:
        p = pending[-1]
        parts.append(f"{p.describe()} undecided")
    return "; ".join(parts)
