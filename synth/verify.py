"""Semantic verification of a Schedule: symbolic execution with contribution sets.

Each (rank, chunk) slot holds the set of original contributions it contains (a bitset over the
contributing ranks, as a Python int, so unions and overlap tests stay cheap at 1024 ranks). A copy
overwrites the destination with the sender's set; a reduce unions two *disjoint* sets (an overlap
would count a contribution twice). All transfers of a step read the state at its start and write
at its end. At the end every postcondition slot must hold exactly the full set of its chunk's
contributions.

Every failure raises :class:`~synth.errors.VerificationError` with a reason tag and the step, rank
and chunk involved:

``range``        a rank or chunk index outside the collective
``no_link``      a transfer between ranks the topology does not connect
``not_held``     a send of a chunk the sender does not hold at the start of the step
``bad_op``       a reduce in a non-combining collective, or into a slot that holds nothing
``double_count`` a reduce whose two sides share a contribution
``conflict``     two writes to one slot in one step where one of them is a copy
``bandwidth``    a link or switch port carrying more than its capacity times the step's rounds
``rounds``       a step with fewer than one round
``missing``      a postcondition slot that is empty or holds a partial result
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .errors import SynthError, VerificationError
from .schedule import Schedule
from .topology import Topology


@dataclass(frozen=True)
class VerifyReport:
    """What a successful verification saw."""

    steps: int
    rounds: int
    transfers: int
    max_link_load: int
    """Most chunks any single resource carried in one step."""


def verify(schedule: Schedule, topology: Topology, *, check_bandwidth: bool = True) -> VerifyReport:
    """Execute ``schedule`` on ``topology``; raise VerificationError on the first violation."""
    coll = schedule.collective
    if schedule.topology_hash and schedule.topology_hash != topology.content_hash:
        raise SynthError(f"the schedule was made for topology '{schedule.topology}' "
                         f"({schedule.topology_hash[:12]}), not for '{topology.name}' "
                         f"({topology.content_hash[:12]})")
    if coll.num_ranks != topology.num_ranks:
        raise SynthError(f"the collective has {coll.num_ranks} ranks but topology "
                         f"'{topology.name}' has {topology.num_ranks}")
    n, num = coll.num_ranks, coll.num_chunks
    # state[r]: chunk -> bitset of contributing ranks; a non-combining value is the marker 1
    full = [sum(1 << r for r in set(p)) for p in coll.pre] if coll.combining else [1] * num
    state: list[dict[int, int]] = [{} for _ in range(n)]
    for c, holders in enumerate(coll.pre):
        for r in holders:
            state[r][c] = (1 << r) if coll.combining else 1
    max_load = 0
    for s, step in enumerate(schedule.steps):
        if step.rounds < 1:
            raise VerificationError("rounds", f"a step needs at least 1 round, got {step.rounds}",
                                    step=s)
        load: Counter = Counter()
        capacity: dict[tuple, int] = {}
        writes: dict[tuple[int, int], list] = {}
        for t in step.transfers:
            if not (0 <= t.src < n and 0 <= t.dst < n):
                raise VerificationError("range", f"transfer {t.src}->{t.dst} names a rank outside "
                                        f"0..{n - 1}", step=s, chunk=t.chunk)
            if not 0 <= t.chunk < num:
                raise VerificationError("range", f"chunk outside 0..{num - 1}", step=s,
                                        rank=t.src, chunk=t.chunk)
            channel = topology.channel(t.src, t.dst)
            if channel is None:
                raise VerificationError("no_link", f"no link or switch from rank {t.src} to rank "
                                        f"{t.dst}", step=s, rank=t.src, chunk=t.chunk)
            value = state[t.src].get(t.chunk)
            if value is None:
                raise VerificationError("not_held", f"rank {t.src} sends chunk {t.chunk} to rank "
                                        f"{t.dst} before it holds it", step=s, rank=t.src,
                                        chunk=t.chunk)
            if t.op == "reduce" and not coll.combining:
                raise VerificationError("bad_op", f"reduce in non-combining collective {coll.kind}",
                                        step=s, rank=t.dst, chunk=t.chunk)
            for res, _beta, lanes in channel.resources:
                load[res] += 1
                capacity[res] = lanes
            writes.setdefault((t.dst, t.chunk), []).append((t, value))
        if check_bandwidth:
            for res, used in sorted(load.items()):
                if used > capacity[res] * step.rounds:
                    raise VerificationError(
                        "bandwidth", f"{_describe(res)} carries {used} chunks but its capacity is "
                        f"{capacity[res]} per round x {step.rounds} rounds", step=s)
        if load:
            max_load = max(max_load, max(load.values()))
        for (dst, c), incoming in sorted(writes.items(), key=lambda kv: kv[0]):
            ops = [t.op for t, _ in incoming]
            if len(incoming) > 1 and "copy" in ops:
                srcs = ", ".join(str(t.src) for t, _ in incoming)
                raise VerificationError("conflict", f"ranks {srcs} all write rank {dst}'s chunk {c} "
                                        "in one step and at least one of them is a copy", step=s,
                                        rank=dst, chunk=c)
            if ops[0] == "copy":
                state[dst][c] = incoming[0][1]
                continue
            current = state[dst].get(c)
            if current is None:
                raise VerificationError("bad_op", f"rank {dst} reduces chunk {c} into a slot that "
                                        "holds nothing", step=s, rank=dst, chunk=c)
            for t, value in incoming:
                overlap = current & value
                if overlap:
                    raise VerificationError(
                        "double_count", f"rank {t.src} reduces chunk {c} into rank {dst} and the "
                        f"contribution(s) of rank(s) {_ranks(overlap)[:4]} would be counted twice",
                        step=s, rank=dst, chunk=c)
                current = current | value
            state[dst][c] = current
    for c, needed in enumerate(coll.post):
        for r in needed:
            have = state[r].get(c)
            if have is None:
                raise VerificationError("missing", f"rank {r} never receives chunk {c}",
                                        rank=r, chunk=c)
            if have != full[c]:
                lacking = _ranks(full[c] & ~have)
                raise VerificationError("missing", f"rank {r} ends with a partial chunk {c}: "
                                        f"contributions of rank(s) {lacking[:4]} are missing",
                                        rank=r, chunk=c)
    return VerifyReport(steps=len(schedule.steps), rounds=schedule.total_rounds,
                        transfers=schedule.num_transfers, max_link_load=max_load)


def _ranks(bits: int) -> list[int]:
    """The ranks whose bits are set, in order."""
    return [r for r in range(bits.bit_length()) if bits >> r & 1]


def _describe(res: tuple) -> str:
    if res[0] == "link":
        return f"link {res[1]}->{res[2]}"
    return f"switch {res[1]} port {res[2]} ({'send' if res[0] == 'out' else 'receive'} side)"
