"""Solver work budgets: what ``--time-limit`` means for the solver-backed encodings (smt, milp).

Same inputs must give byte-identical outputs, so no answer may depend on how fast the machine
happened to be. A wall-clock limit that stops a search does exactly that (under load the search
stops earlier, at another incumbent or undecided instance). So a time limit of ``S`` seconds is a
*deterministic work budget* of ``S`` work units, spent the same way on every machine:

* CP-SAT (smt engine ``cpsat``, milp ``--solver cpsat``): ``max_deterministic_time`` — CP-SAT's own
  deterministic clock, built to be about one second of a single worker on a typical machine;
* HiGHS / CBC / Gurobi (milp): a branch-and-bound node limit, ``nodes_for(units)``.

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
Stage 3 is capped by its own node budget (``STAGE3_NODES``) anyway."""


def cpsat_work_used(solver: object) -> float:
    """CP-SAT's deterministic time spent by the last solve, on every OR-Tools release synth admits.

    ``CpSolver.deterministic_time`` is a recent property (absent in ortools 9.9/9.10, the oldest
    releases pyproject admits, which ``.ci/compat`` tests); the response proto has carried the
    same figure all along."""
    used = getattr(solver, "deterministic_time", None)
    if used is None:
        used = solver.ResponseProto().deterministic_time  # type: ignore[attr-defined]
    return float(used() if callable(used) else used)


def nodes_for(units: float) -> int:
    """The node limit that stands for ``units`` of work (at least one node: the root)."""
    return max(1, math.ceil(NODES_PER_UNIT * units))


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

    def note_safety_stop(self, what: str) -> None:
        """A wall-clock limit, not the deterministic budget, stopped ``what``."""
        line = (f"{what}: stopped by the wall-clock safety net, not the deterministic work budget "
                "- this result may differ from run to run")
        if line not in self.safety_notes:
            self.safety_notes.append(line)
