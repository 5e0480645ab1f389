"""One encoding run in a worker process beside the baselines (synth.encodings.ahead): the same
candidates, in the same order, with the same notes and refusals as the inline path."""

from __future__ import annotations

from dataclasses import replace

import pytest

import synth.encodings as encodings
from synth import guards
from synth.collectives import make_collective
from synth.encodings import Options, ahead, run_encoding
from synth.errors import SynthError
from synth.guards import Budget, Sized, TooBig, check_schedule, check_sized, sized
from synth.solve import within_budget
from synth.topology_io import load_topology


@pytest.fixture
def two_encodings(monkeypatch):
    """``auto`` as it runs above 64 ranks (the baselines, then one synthesis encoding), on a
    machine small enough for a test."""
    monkeypatch.setattr(encodings, "_auto_encodings", lambda *_: ["baseline", "trees"])
    return monkeypatch


def _encode(monkeypatch, env: str, topology, coll, budget, chunks=None):
    monkeypatch.setenv(ahead.ENV, env)
    notes: list[str] = []
    found = run_encoding("auto", topology, coll, Options(budget=budget, notes=notes,
                                                         chunks=chunks), notes)
    kept, passed = within_budget(found, budget)
    return found, kept, notes + passed


def test_the_worker_gives_what_the_inline_path_gives(two_encodings):
    topo = load_topology("dgx_a100", 2)
    coll = make_collective("allgather", topo.num_ranks, 1)
    # 4 threadblocks: most candidates need more, so the worker sends them back as Sized
    budget = replace(Budget(64 * guards.GB), max_threadblocks=4)
    found0, kept0, notes0 = _encode(two_encodings, "0", topo, coll, budget)
    found1, kept1, notes1 = _encode(two_encodings, "1", topo, coll, budget)
    assert list(found1) == list(found0)
    assert any(isinstance(s, Sized) for s in found1.values())   # the worker sized them
    assert not any(isinstance(s, Sized) for s in found0.values())
    assert list(kept1) == list(kept0) and kept1 == kept0
    assert notes1 == notes0
    assert any("trees passed over" in n for n in notes0)


def test_without_a_budget_every_schedule_comes_back(two_encodings):
    topo = load_topology("dgx_a100", 2)
    coll = make_collective("allgather", topo.num_ranks, 1)
    two_encodings.setenv(ahead.ENV, "1")
    found = run_encoding("auto", topo, coll, Options())
    two_encodings.setenv(ahead.ENV, "0")
    assert found == run_encoding("auto", topo, coll, Options())
    assert "trees" in found and not any(isinstance(s, Sized) for s in found.values())


def test_a_guard_that_refuses_after_the_baselines_stops_the_worker(two_encodings):
    """The worker starts where the guard passes at held 0; the baselines then hold enough that
    the inline path's guard refuses trees: the same note, and nothing of the worker's."""
    topo = load_topology("dgx_a100", 2)
    coll = make_collective("allgather", topo.num_ranks, 4)
    base = run_encoding("baseline", topo, coll, Options(chunks=4))
    held = encodings._held(base)
    need = guards.encoding_memory("trees", "allgather", topo.num_ranks, len(topo.links), 4)
    budget = Budget(guards.BASE_BYTES + need + held // 2, None)
    encodings._guard("trees", topo, coll, Options(chunks=4, budget=budget), 0)   # starts
    with pytest.raises(TooBig):
        encodings._guard("trees", topo, coll, Options(chunks=4, budget=budget), held)
    found0, _, notes0 = _encode(two_encodings, "0", topo, coll, budget, chunks=4)
    found1, _, notes1 = _encode(two_encodings, "1", topo, coll, budget, chunks=4)
    assert found1 == found0 and notes1 == notes0
    assert any(n.startswith("trees stepped aside") for n in notes0)


def test_an_encoding_that_fails_in_the_worker_fails_inline_the_same(two_encodings):
    topo = load_topology("dgx_a100", 2)
    coll = make_collective("allgather", topo.num_ranks, 1)
    messages = []
    for env in ("0", "1"):
        two_encodings.setenv(ahead.ENV, env)
        with pytest.raises(SynthError) as err:
            run_encoding("auto", topo, coll, Options(extra={"size": "lots"}))
        messages.append(err.value.message)
    assert messages[0] == messages[1]


def test_a_sized_candidate_is_refused_in_the_schedules_words():
    """check_sized of a Sized raises what check_schedule of its schedule raises, at any held and
    under each kind of budget (threadblocks, estimated steps, memory, nodes)."""
    topo = load_topology("dgx_a100", 2)
    coll = make_collective("allgather", topo.num_ranks, 1)
    schedules = run_encoding("baseline", topo, coll, Options())
    budgets = [Budget(64 * guards.GB, max_threadblocks=4), Budget(64 * guards.GB, max_xml_steps=200),
               Budget(guards.BASE_BYTES + 400_000), Budget(guards.BASE_BYTES + 400_000, None),
               Budget(64 * guards.GB, instances=64)]
    refused = 0
    for budget in budgets:
        for schedule in schedules.values():
            for held in (0, 1_000, 10**9):
                words = []
                for candidate in (schedule, sized(schedule, budget)):
                    try:
                        (check_schedule if candidate is schedule else check_sized)(
                            candidate, budget, held)
                        words.append(None)
                    except TooBig as exc:
                        words.append(exc.message)
                assert words[0] == words[1]
                refused += words[0] is not None
    assert refused > 0


def test_the_switch_is_read_strictly(monkeypatch):
    monkeypatch.setenv(ahead.ENV, "yes")
    with pytest.raises(SynthError, match=ahead.ENV):
        ahead.wanted(512)
    monkeypatch.setenv(ahead.ENV, "")
    assert not ahead.wanted(ahead.MIN_RANKS - 1)


# ------------------------------------------------------------------------------- beside the MILP
class _Made:
    """A stand-in candidate: all ``run_encoding`` reads of one is its transfer count."""

    def __init__(self, transfers: int) -> None:
        self.num_transfers = transfers

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Made) and other.num_transfers == self.num_transfers


class _Worker:
    """A stand-in for the ahead worker: hands over what the inline ``trees`` returns."""

    def __init__(self, events: list[str]) -> None:
        self.name, self.events = "trees", events

    def take(self):
        self.events.append("take")
        return {"trees": _Made(100)}, ["trees note"]

    def close(self) -> None:
        pass


def _five_encodings(monkeypatch, events: list[str], fail: str | None = None):
    """``auto`` over five stand-in encodings, whose guard refuses ``flow`` once 50 transfers are
    held (as the trees' 100 are by its turn) and the rest never."""
    def runner(name: str, transfers: int):
        def run(topology, collective, options):
            events.append(name)
            options.notes.append(f"{name} note")
            if name == fail:
                raise SynthError(f"{name} failed")
            if name == "smt":
                raise encodings.NotApplicable("smt does not apply")
            return {name: _Made(transfers)}
        return run

    made = {"baseline": 1, "trees": 100, "flow": 10, "smt": 0, "milp": 5}
    monkeypatch.setattr(encodings, "ENCODINGS", {
        name: encodings.Encoding(name, encodings.BaselineOptions, runner(name, n), name)
        for name, n in made.items()})
    monkeypatch.setattr(encodings, "_auto_encodings", lambda *_: list(made))

    def guard(name, topology, collective, options, held):
        if name == "flow" and held >= 50 * guards.SCHEDULE_BYTES_PER_TRANSFER:
            raise TooBig("flow: too much held")
    monkeypatch.setattr(encodings, "_guard", guard)


@pytest.mark.parametrize("fail", [None, "flow", "milp"])
def test_what_runs_while_the_worker_works_is_replayed_in_the_inline_order(monkeypatch, fail):
    """The encodings after the worker's run before its result is taken: their candidates, notes,
    refusals and errors come out as running everything in turn gives. ``flow`` runs early (the
    trees' transfers are not yet held) and its turn refuses it; an error in ``flow`` is dropped
    with it, one in ``milp`` is raised in its turn."""
    topo = load_topology("dgx1", 1)
    coll = make_collective("allgather", topo.num_ranks, 1)
    outcomes = []
    for worker in (False, True):
        events: list[str] = []
        _five_encodings(monkeypatch, events, fail)
        monkeypatch.setattr(encodings, "_start_ahead",
                            lambda *_, e=events, w=worker: _Worker(e) if w else None)
        notes: list[str] = []
        try:
            found = run_encoding("auto", topo, coll, Options(notes=notes), notes)
            outcomes.append((found, list(found), notes, None))
        except SynthError as exc:
            outcomes.append((None, None, notes, exc.message))
        if worker:   # flow, smt and milp ran before the trees were taken (an error stops them)
            assert events[:events.index("take")] == (
                ["baseline", "flow"] + ([] if fail == "flow" else ["smt", "milp"]))
        else:        # the trees ran in turn, and flow's guard refused it
            assert events == ["baseline", "trees", "smt", "milp"]
    assert outcomes[1] == outcomes[0]
    found, _, notes, error = outcomes[0]
    assert ("flow stepped aside: flow: too much held" in notes) and "flow note" not in notes
    assert error == ("milp failed" if fail == "milp" else None)
    if error is None:
        assert list(found) == ["baseline", "trees", "milp"]
        assert notes == ["baseline note", "trees note", "flow stepped aside: flow: too much held",
                         "smt note", "milp note"]


def test_a_yielding_worker_counts_as_idle_cpu():
    """A worker that yields its core (cores.count_as_idle) is counted with this process, not as
    another process's load; once forgotten, it counts nothing."""
    import os
    import subprocess
    import sys
    import time

    from synth import cores

    spin = subprocess.Popen([sys.executable, "-c", "from synth.cores import yield_to_foreground\n"
                             "yield_to_foreground()\nwhile True: pass"])
    def nice() -> int:   # field 19 of /proc/PID/stat (the 17th after the command's ")")
        with open(f"/proc/{spin.pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[16])

    try:
        cores.count_as_idle(spin.pid)
        deadline = time.monotonic() + 60
        while nice() < os.nice(0) + cores.YIELD_NICE and time.monotonic() < deadline:
            time.sleep(0.05)   # the child imports synth first
        assert nice() >= os.nice(0) + cores.YIELD_NICE
        first = cores._yielding_seconds()
        while cores._yielding_seconds() <= first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cores._yielding_seconds() > first
    finally:
        cores.count_as_idle(spin.pid, False)
        spin.kill()
        spin.wait()
    assert cores._yielding_seconds() == 0
