"""Solver work budgets: what ``--time-limit`` means for the solver-backed encodings (smt, milp).

Same inputs must give byte-identical outputs, so no answer may depend on how fast the machine
happened to be. A wall-clock limit that stops a search does exactly that (under load the search
stops earlier, at another incumbent or undecided instance). So a time limit of ``S`` seconds is a
*deterministic work budget* of ``S`` work units, spent the same way on every machine:

* CP-SAT (smt engine ``cpsat``, milp ``--solver cpsat``): ``max_deterministic_time`` — CP-SAT's own
  deterministic clock, built to be about one second of a single worker on a typical machine;
* HiGHS / CBC / Gurobi (milp): a branch-and-bound node limit, ``nodes_for(units, nonzeros)``
  (fewer nodes for a bigger model: each costs more).

A wall-clock limit stays, only as a safety net of :data:`SAFETY_FACTOR` times the budget (at least
:data:`SAFETY_FLOOR_S`): it should never be what stops a search. When it is (a very loaded machine,
or an engine without a deterministic clock: z3), :attr:`WorkBudget.safety_notes` says so and the
caller surfaces it in ``synth solve``'s notes, so a user knows that run may not be reproducible.
"""

from __future__ import annotations

import math
import time

SAFETY_FACTOR = 10.0
"""The wall-clock safety net is this many times the work budget (in seconds)."""
SAFETY_FLOOR_S = 30.0
"""... and never less than this (small budgets on a loaded machine must not trip it)."""
NODES_PER_UNIT = 200
"""Branch-and-bound nodes per work unit for the node-limited MILP backends (HiGHS, CBC, Gurobi).

Measured with HiGHS on ``synth solve --topo dgx1 --coll allreduce`` (milp under auto, the shared
2-core machine): the routing MILPs explored about 380 nodes a second (221 nodes in 0.58 s), the
scheduling MILPs about 6 (55 nodes in 9.4 s); 200 keeps a routing budget near its old seconds.
Stage 3 is capped by its own node budget (``STAGE3_NODES``) anyway. That figure holds for models of
up to :data:`NODE_REF_NONZEROS` nonzeros; a node of a bigger model costs more (:func:`node_weight`)."""
NODE_REF_NONZEROS = 2000
"""Constraint-matrix nonzeros up to which one branch-and-bound node is one node's worth of work.

A node re-solves the LP, so its cost grows with the model. Measured with HiGHS 1.16 on this 2-core
machine (dgx2 x 2 allgather routing models, the same model run to two node limits, the difference
per node): 0.03 s a node at 19,512 nonzeros, 0.04 s at 38,958, 0.28 s at 77,850, 0.37 s at 116,742,
0.45 s at 155,634, against 0.0018 s at 1,292 (dgx1): about nonzeros^1.25."""
ROOT_REF_NONZEROS = 6000
"""Scale of :func:`root_work`: the root of a model this size costs about one work unit."""


def node_weight(nonzeros: int) -> float:
    """Work of one branch-and-bound node of a model with ``nonzeros`` constraint-matrix entries, in
    nodes of a small model (1 up to :data:`NODE_REF_NONZEROS`, then growing as nonzeros^1.25)."""
    return max(1.0, (nonzeros / NODE_REF_NONZEROS) ** 1.25)


def root_work(nonzeros: int) -> float:
    """Work units the root of a model this size may take before any node limit applies.

    A node limit cannot stop the root (presolve, the first LP, cuts, heuristics), and on big models
    the root is most of the solve: measured with HiGHS 1.16 on the dgx2 x 2 allgather routing
    models, 8 s at 19,512 nonzeros, 11 s at 38,958, 100 s at 77,850, 34 s at 116,742, 290 s at
    155,634 (a unit is about a second here). ``(nonzeros / 6000) ** 1.7`` is near the worst of those
    (7, 24, 78, 158, 255); models whose root alone would take most of a budget are not started
    (``max_root_work`` in :func:`synth.encodings.milp.solvers.solve_milp`)."""
    return (nonzeros / ROOT_REF_NONZEROS) ** 1.7


def cpsat_work_used(solver: object) -> float:
    """CP-SAT's deterministic time spent by the last solve, on every OR-Tools release synth admits.

    ``CpSolver.deterministic_time`` is a recent property (absent in ortools 9.9/9.10, the oldest
    releases pyproject admits, which ``.ci/compat`` tests); the response proto has carried the
    same figure all along."""
    used = getattr(solver, "deterministic_time", None)
    if used is None:
        used = solver.ResponseProto().deterministic_time  # type: ignore[attr-defined]
    return float(used() if callable(used) else used)


def nodes_for(units: float, nonzeros: int = 0) -> int:
    """The node limit that stands for ``units`` of work on a model with ``nonzeros`` constraint-matrix
    entries (at least one node: the root)."""
    return max(1, math.ceil(NODES_PER_UNIT * units / node_weight(nonzeros)))


def units_for_nodes(nodes: int, nonzeros: int = 0) -> float:
    """The work units that ``nodes`` branch-and-bound nodes of such a model stand for."""
    return nodes * node_weight(nonzeros) / NODES_PER_UNIT


class WorkBudget:
    """A deterministic work budget shared by several solves, with a wall-clock safety net.

    ``left()`` is the deterministic work still available (None: unlimited); solvers report what
    they used with :meth:`charge`. ``wall_left()`` is the safety net's remaining seconds.
    """

    def __init__(self, units: float | None, *, safety_factor: float = SAFETY_FACTOR,
                 parent: WorkBudget | None = None) -> None:
        if units is not None and not (units > 0 and math.isfinite(units)):
            raise ValueError(f"work budget must be positive, got {units}")
        self.units = units
        self.spent = 0.0
        self.parent = parent
        self.safety_notes: list[str] = [] if parent is None else parent.safety_notes
        if parent is not None:
            self._wall_deadline = parent._wall_deadline
        elif units is None:
            self._wall_deadline = None
        else:
            self._wall_deadline = time.monotonic() + max(SAFETY_FLOOR_S, safety_factor * units)

    def left(self) -> float | None:
        """Work units still available here (and in every enclosing budget); None when unlimited."""
        own = None if self.units is None else max(0.0, self.units - self.spent)
        up = self.parent.left() if self.parent is not None else None
        if own is None:
            return up
        return own if up is None else min(own, up)

    def exhausted(self) -> bool:
        left = self.left()
        return (left is not None and left <= 1e-9) or self.wall_hit()

    def charge(self, units: float) -> None:
        """Record work a solve used (propagated to the enclosing budgets)."""
        self.spent += units
        if self.parent is not None:
            self.parent.charge(units)

    def sub(self, units: float) -> WorkBudget:
        """A budget of at most ``units`` inside this one (its spending counts here too)."""
        return WorkBudget(units, parent=self)

    def wall_left(self) -> float | None:
        """Seconds until the safety net (None: no net); never negative."""
        if self._wall_deadline is None:
            return None
        return max(0.0, self._wall_deadline - time.monotonic())

    def wall_hit(self) -> bool:
        left = self.wall_left()
        return left is not None and left <= 0.0

    def __getstate__(self) -> dict:
        """Pickled (sent to a worker process) as the seconds the safety net has left, not as a
        reading of this process's monotonic clock, whose origin another process need not share;
        the send time (wall clock) lets the receiver deduct the time the budget spent in transit
        (a job may wait in a pool's queue)."""
        state = dict(self.__dict__)
        state["_wall_deadline"] = self.wall_left()
        state["_sent_at"] = time.time()
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        sent_at = state.pop("_sent_at")
        left = state["_wall_deadline"]
        if left is not None:
            state["_wall_deadline"] = time.monotonic() + left - max(0.0, time.time() - sent_at)
        self.__dict__.update(state)

    def note_safety_stop(self, what: str) -> None:
        """A wall-clock limit, not the deterministic budget, stopped ``what``."""
        line = (f"{what}: stopped by the wall-clock safety net, not the deterministic work budget "
                "- this result may differ from run to run")
        if line not in self.safety_notes:
            self.safety_notes.append(line)
