"""A chunk-oriented front end in the spirit of MSCCLang that builds the :class:`Schedule` IR.

A program is bound to a topology and a collective; chunk references name the data one rank holds
and operations move it::

    from synth.dsl import chunk, program

    with program(topology, make_collective("allgather", 8), name="ring") as p:
        for r in range(8):
            c = chunk(r, "input", 0)                 # rank r's own chunk
            for _ in range(7):
                c = c.copy((c.rank + 1) % 8, "output", r)
    schedule = p.schedule()                          # verified, encoding="dsl", algorithm="ring"

**Model.** Synth's IR is SCCL's single-slot model: rank r holds at most one copy of each global
chunk. ``chunk(rank, buffer, index, size=1)`` resolves a slot of the collective's buffer layout to
the global chunk(s) it holds (``Collective.inputs`` / ``outputs``; the ``scratch`` buffer maps an
index to whatever chunk was last copied there). A reference carries those global chunks, the rank
and the *value* it saw -- a snapshot: a later write to the slot does not change what an existing
reference sends. ``ref.copy(dst, buffer=None, index=None)`` sends the value to ``dst`` (which then
holds it); ``ref.reduce(dst, ...)`` adds it into ``dst``'s copy of the chunk (combining
collectives). ``buffer``/``index`` are optional on the destination: an ``input``/``output`` slot
must be the one that holds the same global chunk (a chunk has one place per rank), ``scratch`` is
free. Both return a reference to the result at ``dst``. MSCCLang's form ``dst_ref.reduce(src_ref)``
is accepted too (adds ``src_ref`` into the slot ``dst_ref`` names).

**Scheduling.** Statements run in program order with sequential meaning; each operation is placed
at the earliest synchronous step at which that meaning is kept (as-soon-as-possible):

* its source value is readable: from the step after the write that produced it (a chunk received
  in step s is forwarded from step s+1, the verifier's rule) up to the step of the next write to
  that slot (reads happen at the start of a step, writes at its end);
* a write to a slot comes no earlier than the previous write to it and than any read of the value
  it replaces;
* a reduce reads the destination's current value, so it runs after that value was written --
  except that reduces into one slot whose partial result nobody has read yet share one step (an
  all-pairs reduce-scatter is one step, not n-1). A reference returned by such a reduce names an
  intermediate sum that no longer exists once another reduce joined its step; using it is an
  error (use the one returned by the last reduce).

``step=`` on an operation pins it to that step (an error if its data is not ready by then).

**Single writer.** One slot has one writer per step: a copy whose data is ready no later than the
slot's previous write (neither depends on the other, so they would race) raises a
:class:`~synth.errors.VerificationError` (reason ``conflict``) naming both writers, the rank and the
chunk. Other errors use the verifier's reasons too: ``not_held`` (a rank without the chunk),
``no_link`` (ranks the topology does not connect), ``bad_op`` (reduce in a non-combining collective
or into nothing), ``double_count``, ``stale`` (a reference whose value was overwritten before the
operation could run). :meth:`DslProgram.schedule` builds the steps (rounds from
:func:`synth.steps.make_step`) and runs :func:`synth.verify.verify`, so the postcondition is checked.

**Instances.** ``parallelize(n)`` (or ``program(..., instances=n)``) is MSCCLang's instance hint at
whole-program granularity: it is kept in ``schedule.meta["instances"]`` and :func:`xml_options`
turns it into the compiler's ``instances`` (every chunk split n ways over n channel copies).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .collectives import Collective
from .errors import SynthError, VerificationError
from .schedule import Schedule, Transfer
from .steps import make_step
from .topology import Topology

__all__ = ["BUFFERS", "Buffer", "ChunkRef", "DslProgram", "chunk", "current_program", "parallelize",
           "program", "report", "verified_xml", "xml_options"]

BUFFERS = ("input", "output", "scratch")
_NEVER = 1 << 60


class Buffer:
    """Buffer names, MSCCLang style: ``Buffer.input``, ``Buffer.output``, ``Buffer.scratch``."""

    input = "input"
    output = "output"
    scratch = "scratch"


@dataclass(eq=False)
class _Version:
    """One value of one (rank, chunk) slot: who wrote it, when, and who read it."""

    rank: int
    chunk: int
    value: int
    """Contribution bitset over ranks (combining collectives) or 1."""
    step: int
    """Step of the write that made it; -1 for the precondition."""
    op: str
    """'pre', 'copy' or 'reduce'."""
    writers: list[str]
    end: int = _NEVER
    """Last step at which it can be read: the step of the next write to the slot."""
    last_read: int = -1
    gen: int = 0
    """Bumped by every reduce merged into this version's step."""

    @property
    def ready(self) -> int:
        return self.step + 1

    def describe_writer(self) -> str:
        if self.op == "pre":
            return "the precondition"
        return " and ".join(self.writers) + f" in step {self.step}"


class ChunkRef:
    """Chunk(s) held by one rank, with the value seen when the reference was made."""

    __slots__ = ("_held", "_prog", "buffer", "index", "rank")

    def __init__(self, prog: DslProgram, rank: int, buffer: str | None, index: int | None,
                 held: Sequence[tuple[_Version, int]]) -> None:
        self._prog = prog
        self.rank = rank
        self.buffer = buffer
        self.index = index
        self._held = tuple(held)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The global chunk ids this reference carries."""
        return tuple(v.chunk for v, _ in self._held)

    @property
    def chunk(self) -> int:
        """The global chunk id (a reference of size 1)."""
        if len(self._held) != 1:
            raise SynthError(f"this reference carries {len(self._held)} chunks {list(self.chunks)}; "
                             "use .chunks")
        return self._held[0][0].chunk

    @property
    def size(self) -> int:
        return len(self._held)

    @property
    def ready(self) -> int:
        """The first step at which this value can be sent."""
        return max(v.ready for v, _ in self._held)

    def copy(self, dst: int, buffer: str | None = None, index: int | None = None, *,
             step: int | None = None) -> ChunkRef:
        """Send this value to rank ``dst``, which then holds it; returns the reference there."""
        return self._prog._transfer(self, dst, buffer, index, "copy", step)

    def reduce(self, dst: int | ChunkRef, buffer: str | None = None, index: int | None = None, *,
               step: int | None = None) -> ChunkRef:
        """Add this value into rank ``dst``'s copy of the chunk(s); returns the reference there.

        MSCCLang form: ``dst_ref.reduce(src_ref)`` adds ``src_ref`` into the slot ``dst_ref`` names.
        """
        if isinstance(dst, ChunkRef):
            if buffer is not None or index is not None:
                raise SynthError("ref.reduce(other_ref) takes no buffer or index")
            if dst.chunks != self.chunks:
                raise SynthError(f"cannot reduce chunk(s) {list(dst.chunks)} at rank {dst.rank} "
                                 f"into chunk(s) {list(self.chunks)} at rank {self.rank}: the "
                                 "chunk ids differ")
            return self._prog._transfer(dst, self.rank, self.buffer, self.index, "reduce", step)
        return self._prog._transfer(self, dst, buffer, index, "reduce", step)

    def split(self) -> list[ChunkRef]:
        """One reference per chunk."""
        return [ChunkRef(self._prog, self.rank, self.buffer,
                         None if self.index is None else self.index + i, (h,))
                for i, h in enumerate(self._held)]

    def __repr__(self) -> str:
        where = f"{self.buffer}[{self.index}]" if self.buffer else "slot"
        return f"ChunkRef(rank={self.rank}, {where}, chunks={list(self.chunks)}, ready={self.ready})"


@dataclass
class _Planned:
    """One chunk of an operation, checked and ready to apply."""

    src: _Version
    dst: _Version | None
    merge: bool


class DslProgram:
    """A program under construction: one topology, one collective, the operations placed so far."""

    def __init__(self, topology: Topology, collective: Collective, name: str = "dsl", *,
                 instances: int = 1) -> None:
        if collective.num_ranks != topology.num_ranks:
            raise SynthError(f"the collective has {collective.num_ranks} ranks but topology "
                             f"'{topology.name}' has {topology.num_ranks}")
        self.topology = topology
        self.collective = collective
        self.name = name
        self.instances = 1
        self.parallelize(instances)
        n = collective.num_ranks
        self._slots: list[dict[int, _Version]] = [{} for _ in range(n)]
        self._scratch: list[dict[int, int]] = [{} for _ in range(n)]
        self._steps: dict[int, list[Transfer]] = {}
        for c, holders in enumerate(collective.pre):
            for r in holders:
                value = (1 << r) if collective.combining else 1
                self._slots[r][c] = _Version(r, c, value, -1, "pre", [])

    # ------------------------------------------------------------------ context
    def __enter__(self) -> DslProgram:
        _STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _STACK.remove(self)

    def parallelize(self, instances: int) -> DslProgram:
        """Instance hint: compile the program replicated over ``instances`` channels."""
        if not isinstance(instances, int) or instances < 1:
            raise SynthError(f"parallelize needs a positive integer, got {instances!r}")
        self.instances = instances
        return self

    # ------------------------------------------------------------------ references
    def chunk(self, rank: int, buffer: str, index: int, size: int = 1) -> ChunkRef:
        """The chunk(s) in slots ``index .. index+size-1`` of ``rank``'s ``buffer``."""
        self._check_rank(rank)
        chunks = self._resolve(rank, buffer, index, size)
        held = []
        for i, c in enumerate(chunks):
            v = self._slots[rank].get(c)
            if v is None:
                raise VerificationError("not_held", f"rank {rank} does not hold chunk {c} "
                                        f"({buffer}[{index + i}]) at this point of the program",
                                        rank=rank, chunk=c)
            held.append((v, v.gen))
        return ChunkRef(self, rank, buffer, index, held)

    def holds(self, rank: int, chunk: int) -> bool:
        """Whether ``rank`` holds global ``chunk`` after the operations so far."""
        return chunk in self._slots[rank]

    def _check_rank(self, rank: int) -> None:
        n = self.collective.num_ranks
        if not isinstance(rank, int) or not 0 <= rank < n:
            raise SynthError(f"rank {rank!r} is outside 0..{n - 1}")

    def _layout(self, rank: int, buffer: str) -> tuple[int, ...]:
        if buffer == "input":
            return self.collective.inputs[rank]
        if buffer == "output":
            return self.collective.outputs[rank]
        raise SynthError(f"unknown buffer '{buffer}' (known: {', '.join(BUFFERS)})")

    def _resolve(self, rank: int, buffer: str, index: int, size: int) -> list[int]:
        if not isinstance(size, int) or size < 1:
            raise SynthError(f"size must be a positive integer, got {size!r}")
        if not isinstance(index, int) or index < 0:
            raise SynthError(f"index must be a non-negative integer, got {index!r}")
        if buffer == "scratch":
            out = []
            for i in range(index, index + size):
                c = self._scratch[rank].get(i)
                if c is None:
                    raise VerificationError("not_held", f"rank {rank}'s scratch[{i}] holds no chunk "
                                            "(nothing was copied there)", rank=rank)
                out.append(c)
            return out
        layout = self._layout(rank, buffer)
        if index + size > len(layout):
            raise SynthError(f"rank {rank}'s {buffer} buffer has {len(layout)} chunk(s); "
                             f"{buffer}[{index}:{index + size}] is out of range")
        return list(layout[index:index + size])

    # ------------------------------------------------------------------ operations
    def _transfer(self, ref: ChunkRef, dst: int, buffer: str | None, index: int | None, op: str,
                  pin: int | None) -> ChunkRef:
        if ref._prog is not self:
            raise SynthError("this reference belongs to another program")
        self._check_rank(dst)
        src, chunks = ref.rank, ref.chunks
        what = f"chunk {chunks[0]}" if len(chunks) == 1 else f"chunks {list(chunks)}"
        if len(set(chunks)) != len(chunks):
            raise SynthError(f"the reference carries chunk(s) {list(chunks)} with repeats")
        self._check_destination(dst, buffer, index, chunks)
        if dst == src:
            if op == "reduce":
                raise SynthError(f"rank {src} cannot reduce {what} into itself: a reduce moves data "
                                 "between two ranks")
            self._record_scratch(dst, buffer, index, chunks)
            return ChunkRef(self, dst, buffer, index, ref._held)    # the chunk is already there
        if self.topology.channel(src, dst) is None:
            raise VerificationError("no_link", f"no link or switch from rank {src} to rank {dst} in "
                                    f"'{self.topology.name}' for {what}", rank=src, chunk=chunks[0])
        if op == "reduce" and not self.collective.combining:
            raise VerificationError("bad_op", f"reduce of {what} from rank {src} into rank {dst}: "
                                    f"{self.collective.kind} is not a combining collective",
                                    rank=dst, chunk=chunks[0])
        writer = f"{op} from rank {src}"
        plans: list[_Planned] = []
        for v, gen in ref._held:
            if v.gen != gen:
                raise VerificationError(
                    "stale", f"the reference to chunk {v.chunk} at rank {v.rank} names a partial "
                    f"sum that was extended by {v.writers[-1]} in the same step; use the reference "
                    "returned by the last reduce", rank=v.rank, chunk=v.chunk)
            d = self._slots[dst].get(v.chunk)
            if op == "reduce" and d is None:
                raise VerificationError("bad_op", f"rank {src} reduces chunk {v.chunk} into rank "
                                        f"{dst}, which does not hold it (nothing to reduce into)",
                                        rank=dst, chunk=v.chunk)
            plans.append(_Planned(v, d, False))
        s = self._place(plans, op, pin, src, dst)
        for p in plans:                 # every check before any change: an error leaves no trace
            v, d = p.src, p.dst
            if s > v.end:
                raise VerificationError(
                    "stale", f"rank {src}'s value of chunk {v.chunk} was overwritten by "
                    f"{self._slots[src][v.chunk].describe_writer()} and is readable only up to "
                    f"step {v.end}; {op} to rank {dst} cannot run before step {s}",
                    step=s, rank=src, chunk=v.chunk)
            if op == "copy" and d is not None and d.op != "pre" and s == d.step:
                raise VerificationError(
                    "conflict", f"single writer: rank {dst}'s chunk {v.chunk} is written by "
                    f"{d.describe_writer()} and again by copy from rank {src} in the same step",
                    step=s, rank=dst, chunk=v.chunk)
            if op == "reduce" and d is not None and d.value & v.value:
                raise VerificationError(
                    "double_count", f"rank {src} reduces chunk {v.chunk} into rank {dst} and "
                    f"the contribution(s) of rank(s) {_ranks(d.value & v.value)[:4]} would be "
                    "counted twice", step=s, rank=dst, chunk=v.chunk)
        held = []
        for p in plans:
            v, d = p.src, p.dst
            v.last_read = max(v.last_read, s)
            if op == "copy":
                new = _Version(dst, v.chunk, v.value, s, "copy", [writer])
            else:
                assert d is not None
                if p.merge:
                    d.value |= v.value
                    d.gen += 1
                    d.writers.append(writer)
                    held.append((d, d.gen))
                    self._steps.setdefault(s, []).append(Transfer(src, dst, v.chunk, "reduce"))
                    continue
                d.last_read = max(d.last_read, s)
                new = _Version(dst, v.chunk, d.value | v.value, s, "reduce", [writer])
            if d is not None:
                d.end = s
            self._slots[dst][v.chunk] = new
            held.append((new, new.gen))
            self._steps.setdefault(s, []).append(Transfer(src, dst, v.chunk, op))   # type: ignore[arg-type]
        self._record_scratch(dst, buffer, index, chunks)
        return ChunkRef(self, dst, buffer, index, held)

    def _place(self, plans: list[_Planned], op: str, pin: int | None, src: int, dst: int) -> int:
        """The earliest step that keeps the sequential meaning (see the module docstring); marks
        the chunks whose reduce joins an existing step of the same slot (``merge``)."""

        def floor(p: _Planned) -> int:          # earliest step as a new write
            v, d = p.src, p.dst
            if d is None:
                return v.ready
            if op == "copy":
                return max(v.ready, d.last_read, d.step)
            return max(v.ready, d.ready, d.last_read)

        def joins(p: _Planned, s: int) -> bool:  # a reduce merging into the slot's step s
            d = p.dst
            return (op == "reduce" and d is not None and d.op == "reduce" and d.last_read < 0
                    and s == d.step and p.src.ready <= s)

        def fits(s: int) -> bool:
            return all(s >= floor(p) or joins(p, s) for p in plans)

        lo = max(floor(p) for p in plans)
        if pin is None:
            merges = {p.dst.step for p in plans if p.dst is not None and joins(p, p.dst.step)}
            s = min(x for x in (lo, *merges) if fits(x))
        else:
            if not isinstance(pin, int) or pin < 0:
                raise SynthError(f"step must be a non-negative integer, got {pin!r}")
            if not fits(pin):
                c = plans[0].src.chunk
                earliest = self._place(plans, op, None, src, dst)
                raise VerificationError("not_ready", f"{op} of chunk {c} from rank {src} to rank "
                                        f"{dst} cannot run at step {pin}; the earliest step that "
                                        f"keeps the program's meaning is {earliest}", step=pin,
                                        rank=src, chunk=c)
            s = pin
        for p in plans:
            p.merge = joins(p, s)
        return s

    def _check_destination(self, dst: int, buffer: str | None, index: int | None,
                           chunks: Sequence[int]) -> None:
        if buffer is None:
            if index is not None:
                raise SynthError("an index needs a buffer")
            return
        if index is None:
            raise SynthError(f"buffer '{buffer}' needs an index")
        if buffer == "scratch":
            if not isinstance(index, int) or index < 0:
                raise SynthError(f"index must be a non-negative integer, got {index!r}")
            return
        slots = self._resolve(dst, buffer, index, len(chunks))
        for i, (want, have) in enumerate(zip(slots, chunks, strict=True)):
            if want != have:
                raise SynthError(f"rank {dst}'s {buffer}[{index + i}] is chunk {want}, but the "
                                 f"reference carries chunk {have}: a chunk has one place per rank "
                                 "(leave out the buffer, or use the scratch buffer)")

    def _record_scratch(self, dst: int, buffer: str | None, index: int | None,
                        chunks: Sequence[int]) -> None:
        if buffer == "scratch" and index is not None:
            for i, c in enumerate(chunks):
                self._scratch[dst][index + i] = c

    # ------------------------------------------------------------------ result
    @property
    def num_steps(self) -> int:
        return len(self._steps)

    def schedule(self, *, verify: bool = True, meta: dict[str, Any] | None = None) -> Schedule:
        """The Schedule IR (``encoding="dsl"``, ``algorithm=name``); verified unless told not to.

        Steps nothing was placed in (possible only with pinned ``step=``) are left out: they change
        nothing in the synchronous model.
        """
        steps = tuple(make_step(self._steps[s], self.topology) for s in sorted(self._steps))
        info: dict[str, Any] = {"instances": self.instances}
        info.update(meta or {})
        sched = Schedule(collective=self.collective, topology=self.topology.name,
                         topology_hash=self.topology.content_hash, steps=steps,
                         algorithm=self.name, encoding="dsl", meta=info)
        if verify:
            from .verify import verify as run_verify
            run_verify(sched, self.topology)
        return sched


_STACK: list[DslProgram] = []


def program(topology: Topology, collective: Collective, name: str = "dsl", *,
            instances: int = 1) -> DslProgram:
    """A new program; use it as ``with program(...) as p:`` to make :func:`chunk` refer to it."""
    return DslProgram(topology, collective, name, instances=instances)


def current_program() -> DslProgram:
    if not _STACK:
        raise SynthError("no current program: use 'with program(topology, collective) as p:'")
    return _STACK[-1]


def chunk(rank: int, buffer: str, index: int, size: int = 1) -> ChunkRef:
    """MSCCLang's ``chunk(rank, buffer, index, size)`` in the current program."""
    return current_program().chunk(rank, buffer, index, size)


@contextlib.contextmanager
def parallelize(instances: int) -> Iterator[DslProgram]:
    """``with parallelize(n):`` -- the instance hint for the current (whole) program."""
    yield current_program().parallelize(instances)


def xml_options(schedule: Schedule, **overrides: Any):
    """:class:`~synth.emit.XmlOptions` with the program's instance hint (``legacy`` profile for a
    custom collective, the only one that has them)."""
    from .emit import XmlOptions
    kw: dict[str, Any] = {"instances": int(schedule.meta.get("instances", 1))}
    if schedule.collective.custom is not None:
        kw["profile"] = "legacy"
    kw.update(overrides)
    return XmlOptions(**kw)


def verified_xml(schedule: Schedule, options=None) -> tuple[str, list]:
    """MSCCL-IR text proven by the interpreter in every declared mode, with the program's own
    instance hint (:func:`xml_options`) unless ``options`` are given."""
    from .emit import emit_verified_xml
    return emit_verified_xml(schedule, options or xml_options(schedule))


def report(topology: Topology, schedule: Schedule, options=None) -> str:
    """Verify ``schedule``, compile it to XML proven by the interpreter, and summarise both (what
    the examples print)."""
    from .verify import verify as run_verify
    rep = run_verify(schedule, topology)
    options = options or xml_options(schedule)
    text, reports = verified_xml(schedule, options)
    coll = schedule.collective
    lines = [f"{schedule.algorithm}: {coll.name} on {topology.name} ({coll.num_ranks} ranks, "
             f"{coll.num_chunks} chunks)",
             f"  schedule: {rep.steps} steps, {rep.rounds} rounds, {rep.transfers} transfers -- "
             "verified",
             f"  XML ({options.profile}, {options.proto}, instances={options.instances}): "
             f"{len(text.encode())} bytes, {text.count('<tb ')} threadblocks, "
             f"{text.count('<step ')} steps"]
    lines += [f"  interpreter: {r.mode} ok ({r.operations} operations, {r.messages} messages)"
              for r in reports]
    return "\n".join(lines)


def _ranks(bits: int) -> list[int]:
    return [r for r in range(bits.bit_length()) if bits >> r & 1]

