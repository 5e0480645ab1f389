"""Tuners (synth.tuning) on synthetic cost functions whose optimum is known."""

from __future__ import annotations

import math

import pytest

from synth.errors import SynthError
from synth.tuning import TUNERS, Knob, Space, tune

ALGO = {"ring": 1.0, "tree": 1.3, "direct": 0.9}
PROTO = {"Simple": 1.0, "LL": 1.2, "LL128": 0.95}


def _space() -> Space:
    return Space((Knob("algo", tuple(ALGO), "implementation"),
                  Knob("proto", tuple(PROTO), "implementation"),
                  Knob("chunks", (1, 2, 4, 8, 16), "resource"),
                  Knob("instances", (1, 2, 4, 8), "resource")))


def separable(config: dict, budget: float) -> float:
    """Product of per-knob factors; optimum direct/LL128/4/2 = 0.855. Cheap budgets read 2% high."""
    v = (ALGO[config["algo"]] * PROTO[config["proto"]]
         * (1 + 0.1 * (math.log2(config["chunks"]) - 2) ** 2)
         * (1 + 0.05 * (math.log2(config["instances"]) - 1) ** 2))
    return v * (1 + 0.02 * (1 - budget))


OPT = {"algo": "direct", "proto": "LL128", "chunks": 4, "instances": 2}
OPT_VALUE = 0.9 * 0.95


class Counting:
    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, config, budget):
        self.calls += 1
        return self.f(config, budget)


def test_space_helpers():
    space = _space()
    assert space.size() == 3 * 3 * 5 * 4 == len(list(space.grid()))
    assert space.default() == {"algo": "ring", "proto": "Simple", "chunks": 4, "instances": 2}
    with pytest.raises(SynthError, match="knob kind"):
        Knob("x", (1, 2), "continuous")
    with pytest.raises(SynthError, match="no values"):
        Knob("x", (), "resource")
    with pytest.raises(SynthError, match="repeat"):
        Space((Knob("x", (1,)), Knob("x", (2,))))


def test_grid_finds_the_optimum_with_every_config_at_full_budget():
    f = Counting(separable)
    r = tune(_space(), f, "grid")
    assert r.best == OPT and r.value == pytest.approx(OPT_VALUE)
    assert r.evaluations == r.full_evaluations == f.calls == _space().size()
    assert all(b == 1.0 for _, b, _ in r.history)


def test_cd_finds_the_optimum_of_a_separable_function_with_fewer_evaluations():
    f = Counting(separable)
    r = tune(_space(), f, "cd")
    assert r.best == OPT and r.value == pytest.approx(OPT_VALUE)
    assert r.evaluations == f.calls < _space().size()
    # memoised: no configuration is evaluated twice
    keys = [tuple(sorted(c.items())) for c, _, _ in r.history]
    assert len(keys) == len(set(keys))


def test_cd_descends_every_implementation_choice():
    r = tune(_space(), separable, "cd")
    seen = {(c["algo"], c["proto"]) for c, _, _ in r.history}
    assert seen == {(a, p) for a in ALGO for p in PROTO}


def test_tpe_gets_within_1pct_with_cheap_evaluations_first():
    f = Counting(separable)
    r = tune(_space(), f, "tpe", seed=0)
    assert r.value <= OPT_VALUE * 1.01
    assert r.evaluations == f.calls
    budgets = [b for _, b, _ in r.history]
    assert r.full_evaluations == budgets.count(1.0) < r.evaluations  # pruning saved full evaluations
    # each configuration climbs the ladder: a full evaluation comes after its cheaper ones
    for i, (c, b, _) in enumerate(r.history):
        if b == 1.0:
            earlier = [bb for cc, bb, _ in r.history[:i] if cc == c]
            assert sorted(earlier) == [1 / 9, 1 / 3]


@pytest.mark.parametrize("method", TUNERS)
def test_deterministic_for_a_fixed_seed(method):
    a = tune(_space(), separable, method, seed=3)
    b = tune(_space(), separable, method, seed=3)
    assert a.history == b.history and a.best == b.best


@pytest.mark.parametrize("method", TUNERS)
def test_max_evaluations_caps_real_calls(method):
    f = Counting(separable)
    r = tune(_space(), f, method, seed=1, max_evaluations=7)
    assert f.calls == r.evaluations == 7 == len(r.history)


def test_tpe_stops_when_a_tiny_space_is_exhausted():
    space = Space((Knob("a", (1, 2), "implementation"), Knob("b", (1, 2, 3), "resource")))
    f = Counting(lambda c, b: (c["a"] - 2) ** 2 + (c["b"] - 2) ** 2 + 1)
    r = tune(space, f, "tpe", seed=0)
    assert r.best == {"a": 2, "b": 2} and r.value == 1
    assert f.calls == r.evaluations <= 3 * space.size()


def test_unknown_method_and_bad_cap():
    with pytest.raises(SynthError, match="unknown tuner"):
        tune(_space(), separable, "anneal")
    with pytest.raises(SynthError, match="max_evaluations"):
        tune(_space(), separable, "grid", max_evaluations=0)
