"""The Schedule IR: what every encoding produces and every emitter consumes.

A schedule is a list of synchronous steps. In a step every transfer reads its chunk from the state
at the start of the step and writes at the end, so a chunk received in step s can be forwarded from
step s+1 on. ``rounds`` is SCCL's per-step bandwidth budget: a link of ``count`` parallel links (a
switch port of ``lanes`` lanes) may carry ``count * rounds`` chunks in the step.

The JSON form is canonical (sorted keys, transfers sorted, one step per line), so the same schedule
always serialises to the same bytes and ``to_json(from_json(text)) == text``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .collectives import Collective, collective_from_dict
from .errors import SynthError
from .schema import short

FORMAT = "synth-schedule/1"
Op = Literal["copy", "reduce"]


@dataclass(frozen=True, order=True)
class Transfer:
    """Send ``chunk`` from ``src`` to ``dst``; ``reduce`` adds it into dst's copy of the chunk."""

    src: int
    dst: int
    chunk: int
    op: Op = "copy"


@dataclass(frozen=True)
class Step:
    transfers: tuple[Transfer, ...]
    rounds: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "transfers", tuple(sorted(self.transfers)))


@dataclass(frozen=True)
class Schedule:
    """A collective's steps on one topology (named and content-hashed, not embedded)."""

    collective: Collective
    topology: str
    topology_hash: str
    steps: tuple[Step, ...]
    algorithm: str
    encoding: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def total_rounds(self) -> int:
        return sum(s.rounds for s in self.steps)

    @property
    def num_transfers(self) -> int:
        return sum(len(s.transfers) for s in self.steps)

    def to_json(self) -> str:
        head = {
            "format": FORMAT,
            "algorithm": self.algorithm,
            "encoding": self.encoding,
            "topology": {"name": self.topology, "hash": self.topology_hash},
            "collective": self.collective.to_dict(),
            "meta": self.meta,
        }
        lines = json.dumps(head, indent=1, sort_keys=True).splitlines()
        assert lines[-1] == "}"
        step_lines = [
            json.dumps({"rounds": s.rounds,
                        "transfers": [[t.src, t.dst, t.chunk, t.op] for t in s.transfers]},
                       separators=(",", ":"), sort_keys=True)
            for s in self.steps
        ]
        body = ",\n  ".join(step_lines)
        steps = ' "steps": [\n  ' + body + "\n ]" if step_lines else ' "steps": []'
        return "\n".join(lines[:-1]) + ",\n" + steps + "\n}\n"

    @staticmethod
    def from_json(text: str, source: str = "schedule") -> Schedule:
        from .files import parse_data

        data = parse_data(text, source, "json", finite=False)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SynthError(f"{source}: not a synth schedule (expected \"format\": \"{FORMAT}\")")
        header = {"algorithm": str, "encoding": str, "topology": dict, "collective": dict,
                  "steps": list, "meta": dict}
        for key, kind in header.items():
            if not isinstance(data.get(key, {}), kind) or (key != "meta" and key not in data):
                raise SynthError(f"{source}: field '{key}' must be a JSON "
                                 f"{'object' if kind is dict else kind.__name__.replace('str', 'string')}")
        if not all(isinstance(data["topology"].get(k), str) for k in ("name", "hash")):
            raise SynthError(f"{source}: field 'topology' must give its 'name' and 'hash' as strings")
        collective = collective_from_dict(data["collective"], source)
        steps = tuple(_step(s, i, collective, source) for i, s in enumerate(data["steps"]))
        return Schedule(collective=collective, topology=data["topology"]["name"],
                        topology_hash=data["topology"]["hash"], steps=steps,
                        algorithm=data["algorithm"], encoding=data["encoding"],
                        meta=data.get("meta", {}))


def _step(data: Any, i: int, collective: Collective, source: str) -> Step:
    """Step ``i`` of a schedule file: ``{"rounds": R, "transfers": [[src, dst, chunk, op], ...]}``.

    Ranks and chunks must be whole numbers naming ranks and chunks of the schedule's own collective
    (a rank 7 of a 4-rank allgather, a rank ``1.5`` or ``"1"`` is a broken file, not a schedule the
    verifier should judge); rounds are at least 1.
    """
    where = f"{source}: field 'steps.{i}"
    if not isinstance(data, dict) or not isinstance(data.get("transfers"), list):
        raise SynthError(f"{where}': a step is an object with 'rounds' and a 'transfers' list")
    rounds = data.get("rounds")
    if not _whole(rounds) or rounds < 1:
        raise SynthError(f"{where}.rounds': must be a whole number of at least 1, got {rounds!r}")
    n, chunks = collective.num_ranks, collective.num_chunks
    transfers = []
    for j, t in enumerate(data["transfers"]):
        if not isinstance(t, list) or len(t) != 4:
            raise SynthError(f"{where}.transfers.{j}': a transfer is [src, dst, chunk, op], got "
                             f"{short(t)}")
        src, dst, chunk, op = t
        for what, value, limit in (("src", src, n), ("dst", dst, n), ("chunk", chunk, chunks)):
            if not _whole(value) or not 0 <= value < limit:
                kind = "rank" if what != "chunk" else "chunk"
                raise SynthError(f"{where}.transfers.{j}': {what} must be a {kind} of the "
                                 f"schedule's {collective.name} (0..{limit - 1}), got {short(value)}")
        if op not in ("copy", "reduce"):
            raise SynthError(f"{where}.transfers.{j}': op must be 'copy' or 'reduce', got "
                             f"{short(op)}")
        transfers.append(Transfer(src, dst, chunk, op))
    return Step(tuple(transfers), rounds)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
