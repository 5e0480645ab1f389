"""Compiling the program model's next candidates on a spare core while it simulates this one.

:class:`synth.select.program_scorer.ProgramScorer` compiles each (candidate, protocol, instance
count) it times, then simulates it. Both are pure Python, so one core does all of it: on
``synth solve --topo dgx_a100 --nodes 8 --coll allgather`` the compiles were about a third of the
samples and the simulations half. :class:`CompileAhead` runs the compiles that the scorer is
about to ask for on one spawned worker process, one at a time, in the order the scorer will most
likely want them (:meth:`ProgramScorer.planned_forms`), while the scorer simulates.

Same answers: the worker runs the very compile the scorer would (:func:`synth.emit.emit_xml_text`,
deterministic), and only the text comes back; the scorer parses it and caches it under the same
key as its own compile, so every program, time, note and file is what the inline path makes. A
compile the worker has not started when the scorer needs it is made inline (the worker is never
waited on for work it has not begun), and a worker that dies or raises anything but the compiler's
own refusal (:class:`synth.errors.SynthError`) only sends its job back inline.

Memory: the worker holds the schedules it was sent and one compile at a time, under the address
space cap it inherits from the solve (:func:`synth.guards.memory_backstop`): each process is
bounded as the solving process is, so the two together may hold up to twice that cap (the MILP's
stage-3 workers are bounded the same way).

When: only where a core is idle besides this process (:func:`synth.cores.idle_cores`), never in a
worker process, and only for requests whose compiles are worth a process start (about a second):
:data:`MIN_TRANSFERS`. ``SYNTH_COMPILE_AHEAD=0`` or ``1`` forces it off or on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..emit import XmlOptions
from ..errors import SynthError
from ..schedule import Schedule

ENV = "SYNTH_COMPILE_AHEAD"
"""Environment variable: ``1`` compiles ahead whatever the load and size, ``0`` never."""
MIN_TRANSFERS = 200_000
"""Compile ahead only when the candidates' transfers times the forms each may be compiled in
reach this: the compiler takes about 5 s per 100,000 transfers (dgx_a100 x 8 trees: 516,096
transfers, 25 s), a spawned worker about a second to start. One group of ``--topo dgx1 --nodes 8
--concurrent stride:8 --coll allreduce`` has 53,536 transfers over 15 candidates and 12 forms."""

def _serve(conn: Any) -> None:
    """The worker: compile each job it is sent until it is sent None. A job is (name, schedule
    or None, options); the schedule comes with a name's first job only. The answer is the text,
    ``(message,)`` where the compiler refused, or ``None`` where anything else went wrong (the
    caller then compiles inline, which raises that error where it belongs)."""
    from ..emit import emit_xml_text

    schedules: dict[str, Schedule] = {}
    while True:
        job = conn.recv()
        if job is None:
            return
        name, schedule, options = job
        if schedule is not None:
            schedules[name] = schedule
        try:
            conn.send(emit_xml_text(schedules[name], options))
        except SynthError as exc:
            conn.send((exc.message,))
        except Exception:
            conn.send(None)


def wanted(total_transfers: int) -> bool:
    """Whether a scorer should compile ahead; ``total_transfers``: its candidates' transfers
    times the forms (protocol, instances) it may compile each in."""
    raw = os.environ.get(ENV, "").strip()
    if raw in ("0", "1"):
        return raw == "1"
    if raw:
        raise SynthError(f"{ENV} must be 0 or 1, got {raw!r}")
    if total_transfers < MIN_TRANSFERS:
        return False
    from ..cores import idle_cores, in_worker

    return not in_worker() and idle_cores() >= 2


class CompileAhead:
    """One worker process compiling a queue of (name, schedule, options) jobs, one at a time.

    :meth:`plan` sets the queue; :meth:`pump` keeps one job on the worker (call it often: the
    scorer does between simulations); :meth:`take` gives a job's text when the worker has made it
    or is making it, and None otherwise (the caller compiles inline)."""

    def __init__(self) -> None:
        self._proc: Any = None
        self._conn: Any = None
        self._queue: list[tuple[str, Schedule, XmlOptions]] = []
        self._next = 0
        self._sent: set[str] = set()
        self._current: tuple[str, XmlOptions] | None = None
        self._results: dict[tuple[str, XmlOptions], str | tuple[str] | None] = {}
        self._seen: set[tuple[str, XmlOptions]] = set()
        self.broken = False
        self.compiled = 0
        """Jobs whose text the scorer took from the worker."""

    def plan(self, jobs: Iterable[tuple[str, Schedule, XmlOptions]]) -> None:
        """The jobs to run, most wanted first (jobs already made or taken are skipped)."""
        self._queue = list(jobs)
        self._next = 0

    def done_inline(self, name: str, options: XmlOptions) -> None:
        """The caller made this one itself: the worker need not."""
        self._seen.add((name, options))

    def pump(self) -> None:
        """Collect the worker's finished job and start the next planned one."""
        if self.broken:
            return
        if self._current is not None:
            if not self._conn.poll():
                return
            self._receive()
        while self._next < len(self._queue):
            name, schedule, options = self._queue[self._next]
            self._next += 1
            key = (name, options)
            if key in self._seen:
                continue
            try:
                self._start()
                self._conn.send((name, None if name in self._sent else schedule, options))
            except Exception:   # no process, or it died: everything inline from here
                self._fail()
                return
            self._sent.add(name)
            self._seen.add(key)
            self._current = key
            return

    def take(self, name: str, options: XmlOptions) -> str | tuple[str] | None:
        """The worker's text for the job (``(message,)``: the compiler refused), waiting for it
        only if the worker is making it now; None: compile it inline."""
        key = (name, options)
        self._seen.add(key)
        if key == self._current:
            self._receive()
        got = self._results.pop(key, None)
        if got is not None:
            self.compiled += 1
        return got

    def _receive(self) -> None:
        key, self._current = self._current, None
        try:
            self._results[key] = self._conn.recv()
        except Exception:   # the worker died: its job and the rest are made inline
            self._fail()

    def _start(self) -> None:
        if self._proc is None:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(child,), daemon=True,
                                     name="synth-compile-ahead")
            self._proc.start()
            child.close()

    def _fail(self) -> None:
        self.broken = True
        self._current = None
        self.close()

    def close(self) -> None:
        """Stop the worker at once (a compile it is making is dropped)."""
        if self._proc is not None:
            self._proc.terminate()
            self._proc.join()
            self._conn.close()
            self._proc = self._conn = None
