"""Knob tuners for catalogs: exhaustive grid, TuCCL's TPE with Hyperband, AutoCCL's coordinate descent.

A catalog candidate is more than an algorithm: the same schedule runs with different protocols,
chunk counts, channels and instances, and the best setting changes with the machine and the message
size. The space is small enough to enumerate on one machine but each point costs a cost-model
evaluation (or, when a user plugs in a real measurement, a benchmark run), so the tuners are judged
by how few evaluations they need to get near the grid optimum.

* ``grid`` — every configuration at full budget: the reference every other tuner is measured against.
* ``tpe`` — TuCCL (the seed paper) tunes sketch and backend knobs *jointly* with optuna's TPE sampler
  and a Hyperband pruner. Each trial is evaluated at increasing budgets (1/9, 1/3, 1 of the work: e.g.
  a subset of the size buckets), reporting the intermediate value so that the pruner stops poor
  configurations after a cheap evaluation and only survivors get a full one.
* ``cd`` — AutoCCL (the seed paper) splits the space: the few *implementation* choices (algorithm,
  protocol) are searched exhaustively, and for each the *resource* knobs (chunks, channels,
  instances: ordered values with mostly unimodal cost) by coordinate descent from the default.

Every call of ``evaluate`` is counted (``evaluations``; ``full_evaluations`` are those at budget 1).
All tuners memoise: asking for a (configuration, budget) already evaluated costs nothing and is not
counted, so counts are honest. Everything is deterministic for a fixed seed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import SynthError, unknown_name

KINDS = ("implementation", "resource")
TUNERS = ("grid", "tpe", "cd")
BUDGETS = (1 / 9, 1 / 3, 1.0)
"""TPE's budget ladder: Hyperband with reduction factor 3 over resources 1, 3, 9 (TuCCL's setting)."""
PATIENCE = 25
"""Without a cap, TPE stops after max(PATIENCE, size/4) trials in a row that do not improve the best
full-budget value (or when every configuration was visited): a sampler that keeps proposing
known-bad points has converged, and running on would spend more evaluations than the grid."""

Evaluate = Callable[[dict[str, Any], float], float]
"""``(config, budget in (0, 1]) -> predicted cost`` (lower is better); budget < 1 is a cheaper,
less exact evaluation, 1.0 the full one."""


@dataclass(frozen=True)
class Knob:
    """One tunable: its name, its possible values and whether they are categorical or ordered.

    ``implementation`` knobs are categorical (algorithm, protocol): no value is "between" two
    others. ``resource`` knobs are ordered (chunks, channels, instances): neighbouring values
    usually have neighbouring costs, which coordinate descent and TPE's numeric prior exploit.
    """

    name: str
    values: tuple[Any, ...]
    kind: str = "resource"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise unknown_name("knob kind", self.kind, KINDS)
        if not self.values:
            raise SynthError(f"knob '{self.name}' has no values")
        if len(set(map(_key, self.values))) != len(self.values):
            raise SynthError(f"knob '{self.name}' repeats a value: {list(self.values)}")

    @property
    def default(self) -> Any:
        """First value for a categorical knob; the middle value for an ordered one (AutoCCL's start)."""
        return self.values[0] if self.kind == "implementation" else self.values[(len(self.values) - 1) // 2]


@dataclass(frozen=True)
class Space:
    """The cross product of the knobs' values."""

    knobs: tuple[Knob, ...]

    def __post_init__(self) -> None:
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise SynthError(f"knob names repeat: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise unknown_name("knob", name, self.names)

    def size(self) -> int:
        return math.prod(len(k.values) for k in self.knobs)

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every configuration, in a fixed order (the first knob varies slowest)."""
        for combo in itertools.product(*(k.values for k in self.knobs)):
            yield dict(zip(self.names, combo, strict=True))

    def default(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.knobs}

    def key(self, config: dict[str, Any]) -> tuple:
        """Hashable identity of a configuration (what the memo is keyed by)."""
        return tuple(_key(config[n]) for n in self.names)


def _key(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


@dataclass
class TuneResult:
    """What a tuner found and what it cost."""

    best: dict[str, Any]
    value: float
    evaluations: int
    full_evaluations: int
    seconds: float
    history: list[tuple[dict, float, float]] = field(default_factory=list)
    """Every real ``evaluate`` call in order: (config, budget, value)."""
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "best": self.best, "value": self.value,
                "evaluations": self.evaluations, "full_evaluations": self.full_evaluations,
                "seconds": round(self.seconds, 6)}


class _Counter:
    """Memoised, counted access to ``evaluate``; raises :class:`_Budget` when the cap is reached."""

    def __init__(self, space: Space, evaluate: Evaluate, max_evaluations: int | None) -> None:
        self.space, self.evaluate, self.cap = space, evaluate, max_evaluations
        self.memo: dict[tuple, float] = {}
        self.history: list[tuple[dict, float, float]] = []
        self.full = 0
        self.best: tuple[float, dict[str, Any]] | None = None
        self.best_partial: tuple[float, float, dict[str, Any]] | None = None

    @property
    def count(self) -> int:
        return len(self.history)

    def exhausted(self) -> bool:
        return self.cap is not None and self.count >= self.cap

    def __call__(self, config: dict[str, Any], budget: float = 1.0) -> float:
        k = (self.space.key(config), budget)
        if k in self.memo:
            return self.memo[k]
        if self.exhausted():
            raise _Budget
        value = float(self.evaluate(dict(config), budget))
        if math.isnan(value):
            raise SynthError(f"evaluate returned NaN for {config} at budget {budget:.3g}")
        self.memo[k] = value
        self.history.append((dict(config), budget, value))
        if budget >= 1.0:
            self.full += 1
            if self.best is None or value < self.best[0]:
                self.best = (value, dict(config))
        elif self.best_partial is None or (budget, -value) > (self.best_partial[0], -self.best_partial[1]):
            self.best_partial = (budget, value, dict(config))
        return value

    def result(self, method: str, start: float) -> TuneResult:
        if self.best is not None:
            value, best = self.best
        elif self.best_partial is not None:  # the cap allowed no full evaluation
            _, value, best = self.best_partial
        else:
            raise SynthError(f"tuner '{method}' made no evaluation (max_evaluations too small?)")
        return TuneResult(best, value, self.count, self.full, time.perf_counter() - start,
                          self.history, method)


class _Budget(Exception):
    """The evaluation cap was reached."""


# -------------------------------------------------------------------------------------- grid
def _grid(space: Space, ev: _Counter, seed: int) -> None:
    for config in space.grid():
        ev(config, 1.0)


# ---------------------------------------------------------------------------------------- cd
def _cd(space: Space, ev: _Counter, seed: int) -> None:
    """AutoCCL: exhaustive over implementation knobs, coordinate descent over resource knobs.

    From the default (middle) value of every resource knob, each pass visits the knobs in order and
    moves one to its best value with the others fixed (ties keep the current value, so a pass that
    moves nothing ends the descent). Evaluations are memoised across passes and subspaces.
    """
    impl = [k for k in space.knobs if k.kind == "implementation"]
    res = [k for k in space.knobs if k.kind == "resource"]
    for combo in itertools.product(*(k.values for k in impl)):
        current = space.default()
        current.update(zip((k.name for k in impl), combo, strict=True))
        value = ev(current, 1.0)
        improved = True
        while improved:
            improved = False
            for knob in res:
                best_v, best_val = current[knob.name], value
                for v in knob.values:
                    if _key(v) == _key(current[knob.name]):
                        continue
                    trial = {**current, knob.name: v}
                    t = ev(trial, 1.0)
                    if t < best_val:
                        best_v, best_val = v, t
                if best_val < value:
                    current[knob.name], value = best_v, best_val
                    improved = True


# --------------------------------------------------------------------------------------- tpe
def _tpe(space: Space, ev: _Counter, seed: int) -> None:
    """TuCCL: TPE proposes, each proposal climbs the budget ladder, Hyperband prunes the losers.

    Every knob is suggested by value index: ``suggest_int`` for ordered knobs (so TPE's Parzen
    estimators see distances) and ``suggest_categorical`` for implementation knobs. A proposal that
    repeats a configuration replays its memoised values (no evaluation is spent); the search stops
    when every configuration has been visited, after a long run of repeats, or at the cap.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna's ExperimentalWarning for multivariate TPE
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                             n_startup_trials=min(10, max(2, space.size() // 4)))
    rungs = [max(1, round(b * 9)) for b in BUDGETS]  # Hyperband resources 1, 3, 9
    pruner = _pruner(optuna, rungs)
    # a fixed study name: Hyperband assigns brackets by hashing it with the trial number
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner,
                                study_name="synth-tune")
    visited: set[tuple] = set()
    size = space.size()
    repeats = stale = 0
    max_repeats = max(50, 2 * size)
    patience = max(PATIENCE, size // 4)

    def objective(trial: optuna.trial.Trial) -> float:
        config = {}
        for k in space.knobs:
            if k.kind == "resource" and len(k.values) > 1:
                i = trial.suggest_int(k.name, 0, len(k.values) - 1)
            else:
                i = trial.suggest_categorical(k.name, list(range(len(k.values))))
            config[k.name] = k.values[i]
        visited.add(space.key(config))
        value = math.inf
        for budget, rung in zip(BUDGETS, rungs, strict=True):
            value = ev(config, budget)
            if budget < 1.0:
                trial.report(value, rung)
                if trial.should_prune():
                    raise optuna.TrialPruned
        return value

    while (not ev.exhausted() and len(visited) < size and repeats < max_repeats
           and (ev.cap is not None or stale < patience)):
        before, seen, best = ev.count, len(visited), ev.best
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                study.optimize(objective, n_trials=1, catch=())
        except _Budget:
            break
        repeats = repeats + 1 if ev.count == before and len(visited) == seen else 0
        stale = 0 if ev.best is not best else stale + 1


def _pruner(optuna: Any, rungs: list[int]) -> Any:
    return optuna.pruners.HyperbandPruner(min_resource=rungs[0], max_resource=rungs[-1],
                                          reduction_factor=3)


_METHODS: dict[str, Callable[[Space, _Counter, int], None]] = {"grid": _grid, "tpe": _tpe, "cd": _cd}


def tune(space: Space, evaluate: Evaluate, method: str = "cd", *, seed: int = 0,
         max_evaluations: int | None = None) -> TuneResult:
    """Minimise ``evaluate`` over ``space`` with ``method`` (one of :data:`TUNERS`).

    ``max_evaluations`` caps the real calls of ``evaluate`` (any budget); the best full-budget
    configuration found so far is returned when it hits.
    """
    if method not in _METHODS:
        raise unknown_name("tuner", method, TUNERS)
    if max_evaluations is not None and max_evaluations < 1:
        raise SynthError(f"max_evaluations must be at least 1, got {max_evaluations}")
    if not space.knobs:
        raise SynthError("the tuning space has no knobs")
    start = time.perf_counter()
    ev = _Counter(space, evaluate, max_evaluations)
    with contextlib.suppress(_Budget):
        _METHODS[method](space, ev, seed)
    return ev.result(method, start)
