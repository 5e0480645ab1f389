"""Catalog candidates: which solves to run, running one, and turning results into verified schedules.

Candidates come from the encoding registry (:data:`synth.encodings.ENCODINGS`), never from a fixed
list: every registered encoding is asked for every collective with its own chunking, and those
that answer are asked again per chunk count of :data:`CHUNK_GRID` (the "chunks per rank" knob: an
encoding that pipelines, such as a rooted tree or the tree packing, builds a different schedule
for each). An encoding that does not apply says so (:class:`~synth.errors.NotApplicable`) and is
skipped: ``smt`` limits itself to small rank counts and a short automatic time budget, ``flow`` to
collectives without copies, ``trees`` to the tree-shaped ones, ``milp`` to topologies with a
shipped sketch.

A schedule belongs to a *family* (``encoding/name`` with the chunk-dependent suffix of SMT names
dropped, see :func:`family_of`); the chunk knob ranges over the chunk counts a family was built
with. Every schedule is verified (:func:`synth.verify.verify`) against the catalog's topology
before it may compete, cached or not.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..collectives import Collective, make_collective
from ..encodings import ENCODINGS, Options
from ..errors import NotApplicable, SynthError
from ..guards import Budget, TooBig, check_schedule
from ..schedule import Schedule
from ..timing.protocol import StepProfile
from ..topology import Topology
from ..verify import verify
from .cache import solve_key

CHUNK_GRID = (1, 2, 4, 8)
"""Chunks per rank tried besides each encoding's own choice."""


@dataclass(frozen=True)
class SolveJob:
    """One encoding call. Plain data: it travels to worker processes and Ray tasks."""

    kind: str
    encoding: str
    chunks: int | None
    """Chunks per rank asked for; None lets the encoding choose."""
    key: str
    topology: Topology = field(repr=False, compare=False)
    time_limit_s: float | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.encoding} chunks={self.chunks or 'auto'}"


def plan_jobs(topology: Topology, kinds: tuple[str, ...], time_limit_s: float | None,
              chunk_values: tuple[int | None, ...] = (None, *CHUNK_GRID),
              only: set[tuple[str, str]] | None = None) -> list[SolveJob]:
    """The (collective, encoding, chunks) solves, in a fixed order; ``only`` limits the
    (collective, encoding) pairs (see :func:`applicable_pairs`)."""
    jobs = []
    for kind in kinds:
        for encoding in ENCODINGS:
            if only is not None and (kind, encoding) not in only:
                continue
            for chunks in chunk_values:
                coll = make_collective(kind, topology.num_ranks, chunks or 1)
                key = solve_key(topology, coll.to_dict(), encoding, chunks, time_limit_s)
                jobs.append(SolveJob(kind, encoding, chunks, key, topology, time_limit_s))
    return jobs


def applicable_pairs(jobs: list[SolveJob], records: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(collective, encoding) pairs whose own-chunking solve produced schedules.

    An encoding that does not apply to a collective with its own chunking (wrong kind, too many
    ranks, no answer within its automatic time budget) is not asked again with other chunk counts.
    """
    return {(j.kind, j.encoding) for j, r in zip(jobs, records, strict=True) if r["status"] == "ok"}


def run_job(job: SolveJob) -> dict[str, Any]:
    """Run one solve; returns the record the cache stores (schedules as canonical JSON text).

    Deterministic outcomes are marked ``cacheable``: schedules, "not applicable", input errors.
    Anything else that escapes an encoding is a bug: reported, never cached.
    """
    start = time.perf_counter()
    coll = make_collective(job.kind, job.topology.num_ranks, job.chunks or 1)
    options = Options(chunks=job.chunks, time_limit_s=job.time_limit_s)
    record: dict[str, Any] = {"kind": job.kind, "encoding": job.encoding, "chunks": job.chunks,
                              "schedules": {}, "message": ""}
    try:
        found = ENCODINGS[job.encoding](job.topology, coll, options)
        record["status"] = "ok"
        record["schedules"] = {name: found[name].to_json() for name in sorted(found)}
        record["cacheable"] = True
    except NotApplicable as exc:
        record.update(status="not_applicable", message=exc.message, cacheable=True)
    except SynthError as exc:
        record.update(status="error", message=exc.message, cacheable=True)
    except Exception as exc:  # a bug inside an encoding must not take the whole catalog down
        record.update(status="crash", message=f"{type(exc).__name__}: {exc}", cacheable=False)
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


_SMT_SUFFIX = re.compile(r"_s\d+_r\d+_c\d+$")


def family_of(encoding: str, name: str) -> str:
    """``encoding/name`` without the steps/rounds/chunks suffix SMT schedule names carry."""
    base = _SMT_SUFFIX.sub("", name) or encoding
    return f"{encoding}/{base}"


@dataclass
class Candidate:
    """A verified schedule that may compete in the catalog."""

    family: str
    encoding: str
    name: str
    chunks: int
    schedule: Schedule = field(repr=False)
    key: str
    steps: int
    profile: StepProfile = field(repr=False)

    @property
    def is_baseline(self) -> bool:
        return self.encoding == "baseline"

    @property
    def ident(self) -> str:
        return f"{self.family}@c{self.chunks}"


@dataclass
class Rejected:
    """A solve that gave no candidate, and why (shown in catalog.json and catalog.md)."""

    kind: str
    encoding: str
    chunks: int | None
    status: str
    message: str


def candidates_from(jobs: list[SolveJob], records: list[dict[str, Any]], topology: Topology,
                    collective: Collective, budget: Budget | None = None
                    ) -> tuple[list[Candidate], list[Rejected]]:
    """Verified, de-duplicated candidates of one collective, in a fixed order.

    A cached schedule may come from a topology with other α/β (structural keys): it is re-bound to
    this topology's hash — valid because its key proves α/β did not shape it — and verified again.
    Of two schedules of one family with the same chunk count the first job's wins (the encoding's
    own choice first, then the chunk grid in order).
    """
    out: list[Candidate] = []
    rejected: list[Rejected] = []
    seen: dict[tuple[str, int], int] = {}
    for job, rec in zip(jobs, records, strict=True):
        if job.kind != collective.kind:
            continue
        if rec["status"] != "ok":
            rejected.append(Rejected(job.kind, job.encoding, job.chunks, rec["status"], rec["message"]))
            continue
        for name, text in sorted(rec["schedules"].items()):
            sched = Schedule.from_json(text, f"cached solve {job.key[:12]}")
            sched = replace(sched, topology=topology.name, topology_hash=topology.content_hash)
            if sched.collective.kind != collective.kind or sched.collective.custom is not None:
                continue
            if budget is not None:
                try:  # sized before it is verified: memory, and the exec runtime's XML limits
                    check_schedule(sched, Budget(budget.max_memory, "exec"))
                except TooBig as exc:
                    rejected.append(Rejected(job.kind, job.encoding, job.chunks, "too big",
                                             exc.message))
                    continue
            try:
                report = verify(sched, topology)
            except SynthError as exc:
                rejected.append(Rejected(job.kind, job.encoding, job.chunks, "failed verification",
                                         f"{name}: {exc.message}"))
                continue
            fam = family_of(job.encoding, name)
            k = sched.collective.chunks_per_rank
            if (fam, k) in seen:
                continue
            seen[(fam, k)] = len(out)
            out.append(Candidate(fam, job.encoding, name, k, sched, job.key, report.steps,
                                 StepProfile.of(sched, topology)))
    order = {enc: i for i, enc in enumerate(ENCODINGS)}
    out.sort(key=lambda c: (order.get(c.encoding, len(order)), c.family, c.chunks))
    return out, rejected
