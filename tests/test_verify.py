"""The verifier accepts correct schedules and rejects each kind of corruption, for the right reason."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.builders import fully_connected, ring, switch
from synth.collectives import make_collective
from synth.encodings.baseline.algorithms import baseline
from synth.errors import VerificationError
from synth.schedule import Schedule, Step, Transfer
from synth.steps import make_step
from synth.verify import verify
from tests.strategies import connected_topologies

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_steps(schedule: Schedule, steps: list[Step]) -> Schedule:
    return dataclasses.replace(schedule, steps=tuple(steps))


def rejects(schedule, topology, reason):
    with pytest.raises(VerificationError) as info:
        verify(schedule, topology)
    assert info.value.reason == reason, info.value.message
    return info.value


@SETTINGS
@given(connected_topologies(), st.sampled_from(["allgather", "broadcast", "alltoall", "allreduce",
                                                "reducescatter", "reduce", "gather", "scatter"]))
def test_missing_transfer_is_rejected(topo, kind):
    sched = baseline(topo, make_collective(kind, topo.num_ranks), "direct")
    verify(sched, topo)
    steps = list(sched.steps)
    last = steps[-1]
    coll = sched.collective
    victims = [t for t in last.transfers if t.dst in coll.post[t.chunk]]
    assume(victims)
    victim = victims[0]
    steps[-1] = Step(tuple(t for t in last.transfers if t != victim), last.rounds)
    err = rejects(with_steps(sched, steps), topo, "missing")
    assert err.chunk == victim.chunk and err.rank == victim.dst


@SETTINGS
@given(connected_topologies(), st.sampled_from(["allgather", "broadcast", "alltoall", "gather"]))
def test_send_before_arrival_is_rejected(topo, kind):
    sched = baseline(topo, make_collective(kind, topo.num_ranks), "direct")
    coll = sched.collective
    relays = [(s, t) for s, step in enumerate(sched.steps) if s > 0 for t in step.transfers
              if t.src not in coll.pre[t.chunk]]
    assume(relays)
    s, moved = relays[0]
    steps = list(sched.steps)
    steps[s] = Step(tuple(t for t in steps[s].transfers if t != moved), steps[s].rounds)
    steps[0] = Step((*steps[0].transfers, moved), steps[0].rounds + 1)
    err = rejects(with_steps(sched, steps), topo, "not_held")
    assert err.step == 0 and err.rank == moved.src and err.chunk == moved.chunk


@SETTINGS
@given(connected_topologies(), st.sampled_from(["allgather", "allreduce", "alltoall", "broadcast"]))
def test_nonexistent_link_is_rejected(topo, kind):
    sched = baseline(topo, make_collective(kind, topo.num_ranks), "direct")
    t = sched.steps[0].transfers[0]
    strangers = [r for r in topo.ranks if r != t.src and not topo.has_channel(t.src, r)]
    bad_dst = strangers[0] if strangers else t.src
    steps = list(sched.steps)
    rest = tuple(x for x in steps[0].transfers if x != t)
    steps[0] = Step((*rest, Transfer(t.src, bad_dst, t.chunk, t.op)), steps[0].rounds)
    err = rejects(with_steps(sched, steps), topo, "no_link")
    assert err.step == 0 and err.rank == t.src


@SETTINGS
@given(connected_topologies(), st.sampled_from(["allreduce", "reducescatter", "reduce"]))
def test_double_reduction_is_rejected(topo, kind):
    sched = baseline(topo, make_collective(kind, topo.num_ranks), "direct")
    first = next(t for step in sched.steps for t in step.transfers if t.op == "reduce")
    steps = [*sched.steps, make_step([first], topo)]
    err = rejects(with_steps(sched, steps), topo, "double_count")
    assert err.step == len(steps) - 1 and err.chunk == first.chunk


@SETTINGS
@given(connected_topologies(), st.sampled_from(["allgather", "reducescatter", "alltoall"]),
       st.integers(0, 1000))
def test_bandwidth_overrun_is_rejected(topo, kind, pick):
    sched = baseline(topo, make_collective(kind, topo.num_ranks), "direct")
    s = pick % len(sched.steps)
    step = sched.steps[s]
    t = step.transfers[pick % len(step.transfers)]
    channel = topo.channel(t.src, t.dst)
    capacity = min(lanes for _, _, lanes in channel.resources) * step.rounds
    extra = (t,) * (capacity + 1)
    steps = list(sched.steps)
    steps[s] = Step(step.transfers + extra, step.rounds)
    err = rejects(with_steps(sched, steps), topo, "bandwidth")
    assert err.step == s


def test_reduce_in_noncombining_collective_is_rejected():
    topo = fully_connected(3)
    sched = baseline(topo, make_collective("allgather", 3), "direct")
    steps = [Step(tuple(dataclasses.replace(t, op="reduce") for t in sched.steps[0].transfers), 2)]
    rejects(with_steps(sched, steps), topo, "bad_op")


def test_copy_conflict_is_rejected():
    topo = switch(4)
    coll = make_collective("reduce", 4, root=0)
    sched = Schedule(coll, topo.name, topo.content_hash,
                     (Step((Transfer(1, 0, 0, "copy"), Transfer(2, 0, 0, "reduce")), 2),),
                     "hand", "test")
    rejects(sched, topo, "conflict")


def test_partial_result_is_missing():
    topo = ring(3)
    coll = make_collective("reduce", 3, root=0)
    sched = Schedule(coll, topo.name, topo.content_hash, (Step((Transfer(1, 0, 0, "reduce"),), 1),),
                     "hand", "test")
    err = rejects(sched, topo, "missing")
    assert "partial" in err.message and err.rank == 0


def test_schedule_for_another_topology_is_refused():
    sched = baseline(ring(4), make_collective("allgather", 4), "direct")
    with pytest.raises(Exception, match="made for topology"):
        verify(sched, fully_connected(4))


def test_json_round_trip_is_byte_identical():
    topo = switch(5)
    for kind in ("allgather", "allreduce", "alltoall", "broadcast"):
        sched = baseline(topo, make_collective(kind, 5, 2), "direct")
        text = sched.to_json()
        again = Schedule.from_json(text)
        assert again.to_json() == text
        assert again.steps == sched.steps and again.collective == sched.collective
        verify(again, topo)
