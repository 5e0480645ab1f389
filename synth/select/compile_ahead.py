"""Compiling and timing the program model's next candidates on a spare core while it simulates
this one.

:class:`synth.select.program_scorer.ProgramScorer` compiles each (candidate, protocol, instance
count) it times, then simulates it at size after size. Both are pure Python, so one core does all
of it: on ``synth solve --topo dgx_a100 --nodes 8 --coll allgather`` the compiles were about a
third of the samples and the simulations half. :class:`CompileAhead` runs jobs on one spawned
worker process, one at a time, and a thread of the scorer's process hands the worker its next job
the moment it answers one (the scorer only marks what it has done itself):

* **timings** of programs the worker has or can be sent: the simulations the scorer may ask for
  next (:meth:`CompileAhead.plan_times`, set batch by batch: the candidates it has still to try
  at this size and form, in its order, minus those its prunes already rule out, then what the
  next batches would try by the times found so far). The first one the scorer has not done is
  left to it (it does that one next; one the worker started would be waited for, not
  overlapped), so the two alternate down the list; and when the scorer does reach one the
  worker is still timing, it times the next ones nobody has started while it waits
  (:meth:`CompileAhead.take_time`);
* else **compiles**: the forms the scorer will most likely want, in that order
  (:meth:`ProgramScorer.planned_forms`), less those it says, when one comes up, it will never
  ask for (:attr:`CompileAhead.wanted`): a higher instance count of a candidate whose lower count
  the compiler refused, another protocol's form of a candidate its prune rules out at every size.
  Measured on ``synth solve --topo dgx_a100 --nodes 8 --coll allgather`` before they were passed
  over: of the worker's 273 s of compiles, 187 s made files the scorer never asked for, 118 s
  of them counts above one the compiler had refused (trees, rail_blocks and nccl_rings at x4
  and x8, over the node limit);
* else timings the worker must compile for;
* else **range files** (:meth:`CompileAhead.plan_files`, for
  :func:`synth.select.ranking.choose_ranges` once the winners are ranked): each compiled or
  proven, cut to its range and proven again, and timed at the range's sizes, from the last one
  back while the caller works from the first.

Measured on ``synth solve --topo dgx1 --nodes 8 --concurrent stride:8 --coll allreduce``
(``results/speed.md``): the worker made about 700 of the 1,216 simulations and the program
model's share of the main process fell by about a third; the whole command's ratio is in the
table there.

Same answers: the worker runs the very compile (:func:`synth.emit.emit_xml_text`) and simulation
(:func:`synth.timing.program.program_times_us`, the text parsed under the scorer's name and
profile, the model built from the scorer's topology and calibration) the scorer would; all are
deterministic. Only texts and times come back: the scorer parses a text and caches it under the
same key as its own compile, and takes a time where it would have simulated, after the same
prunes, bounds and budget accounting, so every program, time, note and file is what the inline
path makes. A job the worker has not started when the scorer needs it is done inline (the worker
is never waited on for work it has not begun), and a worker that dies or raises anything but the
compiler's own refusal (:class:`synth.errors.SynthError`) only sends its job back inline.

Parsing: the worker parses each text it compiles (once: the scorer keeps every program it times
too, and a worker that parsed again for each size would be slower than the scorer it is to help)
and sends the program with the text, which the scorer's process takes as its own parse
(:func:`synth.emit.xml_parse.remember_parsed`) instead of parsing the text again.

Memory: the worker holds the schedules it was sent, the programs it compiled or timed, and one
job at a time, under the address space cap it inherits from the solve
(:func:`synth.guards.memory_backstop`): each process is bounded as the
solving process is, so the two together may hold up to twice that cap (the MILP's stage-3
workers are bounded the same way). Of the texts the worker compiled for timings, the scorer's
process keeps the last :data:`TEXTS_KEPT` until it takes them.

When: only where a core is idle besides this process (:func:`synth.cores.idle_cores`), never in a
worker process, and only for requests whose compiles are worth a process start (about a second):
:data:`MIN_TRANSFERS`. ``SYNTH_COMPILE_AHEAD=0`` or ``1`` forces it off or on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from typing import Any

from ..emit import XmlOptions, compile_keywords
from ..emit.proto_twins import keep, keep_refusal
from ..errors import SynthError
from ..schedule import Schedule

ENV = "SYNTH_COMPILE_AHEAD"
"""Environment variable: ``1`` compiles ahead whatever the load and size, ``0`` never."""
MIN_TRANSFERS = 200_000
"""Compile ahead only when the candidates' transfers times the forms each may be compiled in
reach this: the compiler takes about 5 s per 100,000 transfers (dgx_a100 x 8 trees: 516,096
transfers, 25 s), a spawned worker about a second to start. One group of ``--topo dgx1 --nodes 8
--concurrent stride:8 --coll allreduce`` has 53,536 transfers over 15 candidates and 12 forms."""

TEXTS_KEPT = 4
"""Texts (and programs) the worker compiled for timings that the scorer's process keeps until it
takes them (the most recent ones)."""


def _serve(conn: Any) -> None:
    """The worker: run each job it is sent until it is sent None.

    The first message is the setup, (topology, calibration, profile), for timing and file jobs.
    A job is (kind, name, schedule or None, options, text or None, argument, source): the
    schedule comes with a name's first job only; the text where the scorer has it.

    * ``compile``: the answer is ``[text, program, twins]`` (the text parsed as the scorer parses
      it, None where that failed: the scorer then parses it and meets the error itself),
      ``(message, twins)`` where the compiler refused; ``twins``: whether the text or refusal is
      its protocol twins' too (:func:`synth.emit.proto_twins.serves_twins`);
    * ``time`` (argument: a size): ``[text, µs, program]`` where the worker compiled the text for
      the job, else ``[None, µs, None]``;
    * ``file`` (argument: (min bytes, max bytes, sizes)): :func:`_range_file`.

    ``None`` answers a job where anything else went wrong (the caller then does it inline, which
    raises that error where it belongs)."""
    from ..emit import emit_xml_text
    from ..emit.proto_twins import serves_twins
    from ..emit.xml_parse import parse_program
    from ..timing.program import program_model, program_times_us

    topology, calibration, profile = conn.recv()
    schedules: dict[str, Schedule] = {}
    programs: dict[tuple[str, XmlOptions], Any] = {}
    models: dict[str, Any] = {}
    proven: dict[tuple[str, XmlOptions], tuple[str, tuple[Any, ...]] | str] = {}

    def parsed(key: tuple[str, XmlOptions], text: str, source: str) -> Any:
        if key not in programs:
            try:
                programs[key] = parse_program(text, source, profile)
            except SynthError:
                return None
        return programs[key]

    def model(proto: str) -> Any:
        if proto not in models:
            models[proto] = program_model(topology, proto, calibration)
        return models[proto]

    while True:
        job = conn.recv()
        if job is None:
            return
        kind, name, schedule, options, text, arg, source = job
        if schedule is not None:
            schedules[name] = schedule
        key = (name, options)
        try:
            if kind == "file":
                conn.send(_range_file(schedules[name], name, options, text, *arg, proven,
                                      topology, model, profile))
                continue
            made = None
            if kind == "compile" or key not in programs:
                if text is None:
                    text = made = emit_xml_text(schedules[name], options)
                if kind == "compile":
                    conn.send([text, parsed(key, text, source),
                               serves_twins(schedules[name], compile_keywords(options))])
                    continue
            program = parsed(key, text, source)
            if program is None:     # the scorer parses it and meets the error itself
                conn.send(None)
                continue
            conn.send([made, program_times_us(program, topology, [arg],
                                              model=model(options.proto), profile=profile)[0],
                       None if made is None else program])
        except SynthError as exc:
            conn.send((exc.message, serves_twins(schedules[name], compile_keywords(options)))
                      if kind == "compile" else None)
        except Exception:
            conn.send(None)


def _range_file(schedule: Schedule, name: str, options: XmlOptions, text: str | None,
                min_bytes: int, max_bytes: int, sizes: tuple[int, ...],
                proven: dict[tuple[str, XmlOptions], Any], topology: Any,
                model: Callable[[str], Any], profile: str) -> tuple[Any, Any, list[float] | None]:
    """A file job: what :func:`synth.select.ranking.ranged_xml` makes of a candidate's full-range
    compile under ``options`` for ``min_bytes..max_bytes`` (the range's own bounds, as
    :func:`~synth.select.ranking.range_options` sets them), by the very calls it makes.

    Returns (the full-range entry: (text, reports), ``text`` when given else compiled, proven
    by the interpreter where it is the range's file (the bounds are the full range's), else
    (text, None): not proven, as the caller leaves it
    (:func:`~synth.select.program_scorer.full_range_text`); or the message why there is none;
    the range's entry, proven, None where the bounds are the full range's or there is no
    full-range file; the program model's times of the range's file at ``sizes``, None where
    there is no file or no sizes). ``proven``: the full-range entries made so far (several
    ranges share one)."""
    from ..emit import emit_xml_text, verify_text, xml_unsupported_reason
    from ..emit.variants import program_for_sizes
    from ..emit.xml_parse import parse_program
    from ..timing.program import program_times_us

    key = (name, options)
    same = (min_bytes, max_bytes) == (options.min_bytes, options.max_bytes)
    if key not in proven:
        reason = xml_unsupported_reason(schedule, options)
        if reason:
            proven[key] = f"cannot emit XML: {reason}"
        else:
            try:
                proven[key] = (text if text is not None else emit_xml_text(schedule, options),
                               None)
            except SynthError as exc:
                proven[key] = exc.message
    whole = proven[key]
    if same and isinstance(whole, tuple) and whole[1] is None:
        try:
            whole = proven[key] = (whole[0], tuple(verify_text(whole[0], schedule, options)[1]))
        except SynthError as exc:
            whole = proven[key] = exc.message
    if isinstance(whole, str):
        return whole, None, None
    part = None
    if not same:
        try:
            program = parse_program(whole[0], f"{name}.xml", options.profile)
            ranged, reports = program_for_sizes(program, schedule, options, min_bytes, max_bytes,
                                                name, whole[0])
            part = (ranged, tuple(reports))
        except SynthError as exc:
            part = exc.message
    file = whole if part is None else part
    times = None
    if sizes and not isinstance(file, str):
        times = program_times_us(parse_program(file[0], f"{name}.xml", profile), topology,
                                 list(sizes), model=model(options.proto), profile=profile)
    return whole, part, times


def wanted(total_transfers: int, minimum: int = MIN_TRANSFERS) -> bool:
    """Whether a scorer should compile ahead; ``total_transfers``: its candidates' transfers
    times the forms (protocol, instances) it may compile each in (or the transfers of the jobs
    planned, against their own ``minimum``)."""
    from ..cores import spare_core_wanted

    return spare_core_wanted(ENV, total_transfers >= minimum)


class CompileAhead:
    """One worker process compiling (and timing) a queue of jobs, one at a time.

    :meth:`plan` sets the queue of compiles, :meth:`plan_times` that of timings (each a program
    the scorer may simulate next, at one size); a thread of this process hands the worker its
    next job the moment it finishes one (:meth:`_dispatch`: a timing of a program the worker has
    or can be sent, else a compile, else a timing it must compile for), so the worker does not
    idle while the scorer compiles. :meth:`take` gives a job's text and :meth:`take_time` a
    timing when the worker has made it or is making it, and None otherwise (the caller does it
    inline). ``topology``, ``calibration``, ``profile``: what timings are made with (the
    scorer's own); ``text_of``: the scorer's text of a (name, options) where it has one, sent
    with a timing job so the worker does not compile it again (read from the thread: a lookup
    in the scorer's cache)."""

    def __init__(self, topology: Any = None, calibration: Any = None, profile: str = "exec",
                 text_of: Callable[[str, XmlOptions], str | None] | None = None) -> None:
        import threading

        self._setup = (topology, calibration, profile)
        self._text_of = text_of
        self._proc: Any = None
        self._conn: Any = None
        self._thread: Any = None
        self._lock = threading.Condition()
        """Guards everything below: the thread and the scorer both read and write it."""
        self._queue: list[tuple[str, Schedule, XmlOptions]] = []
        self._next = 0
        self._timings: list[tuple[str, Schedule, XmlOptions, int, str]] = []
        self._next_timing = 0
        self._sent: set[str] = set()
        self._current: tuple[str, Any] | None = None
        """The job on the worker: ("compile", (name, options)) or ("time", (name, options, size))."""
        self._results: dict[tuple[str, XmlOptions], str | tuple[str] | None] = {}
        self._programs: dict[tuple[str, XmlOptions], Any] = {}
        """The worker's parse of a text in ``_results``, where it sent one."""
        self._times: dict[tuple[str, XmlOptions, int], float] = {}
        self._spared: dict[tuple[str, XmlOptions, int], float] = {}
        """Times the caller made itself while it waited for the worker (:meth:`take_time`)."""
        self._seen: set[tuple[str, XmlOptions]] = set()
        self._seen_times: set[tuple[str, XmlOptions, int]] = set()
        self._parsed: set[tuple[str, XmlOptions]] = set()
        """What the worker was sent a timing of: it keeps those programs, so no text is sent again."""
        self._made: list[tuple[str, XmlOptions]] = []
        """The texts the worker compiled for timings, oldest first (at most TEXTS_KEPT kept)."""
        self._files: dict[tuple[str, XmlOptions, int, int],
                          tuple[Schedule, str | None, tuple[int, ...]]] = {}
        """The planned file jobs by (name, options, min bytes, max bytes), in the caller's order."""
        self._seen_files: set[tuple[str, XmlOptions, int, int]] = set()
        self._file_results: dict[tuple[str, XmlOptions, int, int], Any] = {}
        self._models: dict[str, Any] = {}
        self._twins: set[tuple[str, XmlOptions]] = set()
        """Compiles the worker made whose text or refusal serves their protocol twins."""
        self._schedules: dict[str, Schedule] = {}
        self._refused: set[tuple[str, XmlOptions]] = set()
        """The compiles the worker made that the compiler refused."""
        self.wanted: Callable[[str, XmlOptions, Set[tuple[str, XmlOptions]]], bool] | None = None
        """The caller's word on a planned compile, asked just before it would be sent: False
        where the caller will never ask for it (it is passed over), given the compiles the
        worker saw refused. Called from the thread, with the lock held."""
        self.passed_over = 0
        """Planned compiles passed over on the caller's word (:attr:`wanted`)."""
        self.broken = False
        self.compiled = 0
        """Jobs whose text the scorer took from the worker."""
        self.timed = 0
        """Timings the scorer took from the worker."""
        self.made_files = 0
        """File jobs the caller took from the worker."""
        self.shared_compiles = 0
        """Files asked for that no job planned, whose compile a job for another range made."""

    def plan(self, jobs: Iterable[tuple[str, Schedule, XmlOptions]]) -> None:
        """The compiles to run, most wanted first (jobs already made or taken are skipped)."""
        with self._lock:
            self._queue = list(jobs)
            self._next = 0

    def plan_times(self, jobs: Iterable[tuple[str, Schedule, XmlOptions, int, str]]) -> None:
        """The timings to run, most wanted first: (name, schedule, options, size in bytes, the
        source name the program is parsed under). Replaces the last plan."""
        with self._lock:
            self._timings = list(jobs)
            self._next_timing = 0

    def plan_files(self, jobs: Iterable[tuple[str, Schedule, XmlOptions, str | None, int, int,
                                              tuple[int, ...]]]) -> None:
        """The range files to make, in the order the caller will ask for them: (name, schedule,
        full-range options, the full-range text or None to compile it, the range's min and max
        bytes, the sizes to time its file at). The worker takes them from the last one back
        while the caller works from the first, so the two meet once, in the middle, and neither
        waits for the other before then (:func:`_range_file`). Replaces the last plan."""
        with self._lock:
            self._files = {(name, options, lo, hi): (schedule, text, sizes)
                           for name, schedule, options, text, lo, hi, sizes in jobs}

    def done_inline(self, name: str, options: XmlOptions) -> None:
        """The caller made this one itself: the worker need not."""
        with self._lock:
            self._seen.add((name, options))

    def pump(self) -> None:
        """Start the worker on the next planned job if it is idle (it is kept busy from then on)."""
        with self._lock:
            if not self.broken and self._current is None:
                self._dispatch()

    def _dispatch(self) -> None:
        """Send the worker its next job, if there is one (the lock held, the worker idle).

        The first timing the scorer has not taken is the one it does next, itself: one the
        worker started would be waited for, not overlapped. So the worker starts the one after
        it, and the two alternate."""
        todo = [k for k in range(self._next_timing, len(self._timings))
                if self._timing_key(k) not in self._seen_times]
        if todo:
            self._next_timing = todo[0]
        later = todo[1:]
        for k in later:
            if self._timing_key(k)[:2] in self._parsed or (
                    self._text_of is not None and self._text_of(*self._timing_key(k)[:2])):
                self._start_timing(k)
                return
        while self._next < len(self._queue):
            name, schedule, options = self._queue[self._next]
            self._next += 1
            key = (name, options)
            if key in self._seen:
                continue
            if not self._asked_for(name, options):
                self.passed_over += 1
                continue
            self._send(("compile", key), ("compile", name, schedule, options, None, None, name))
            self._seen.add(key)
            return
        if later:
            self._start_timing(later[0])
            return
        for key in reversed(self._files):
            if key not in self._seen_files:
                name, options, lo, hi = key
                schedule, text, sizes = self._files[key]
                self._send(("file", key), ("file", name, schedule, options, text, (lo, hi, sizes),
                                           name))
                self._seen_files.add(key)
                return

    def _asked_for(self, name: str, options: XmlOptions) -> bool:
        """The caller's word on a planned compile (:attr:`wanted`; True without one). Anything
        it raises counts as True: the thread must go on feeding the worker, and a compile made
        that was not needed costs only time."""
        if self.wanted is None:
            return True
        try:
            return bool(self.wanted(name, options, self._refused))
        except Exception:
            return True

    def _timing_key(self, k: int) -> tuple[str, XmlOptions, int]:
        name, _, options, size, _ = self._timings[k]
        return (name, options, size)

    def _start_timing(self, k: int) -> None:
        name, schedule, options, size, source = self._timings[k]
        key = (name, options, size)
        text = None
        if (name, options) not in self._parsed and self._text_of is not None:
            text = self._text_of(name, options)
        self._send(("time", key), ("time", name, schedule, options, text, size, source))
        self._seen_times.add(key)
        self._parsed.add((name, options))

    def _send(self, current: tuple[str, Any], job: tuple) -> None:
        kind, name, schedule = job[:3]
        self._schedules.setdefault(name, schedule)
        try:
            self._start()
            self._conn.send((kind, name, None if name in self._sent else schedule, *job[3:]))
        except Exception:   # no process, or it died: everything inline from here
            self._fail()
            return
        self._sent.add(name)
        self._current = current

    def take(self, name: str, options: XmlOptions) -> str | tuple[str] | None:
        """The worker's text for the job (``(message,)``: the compiler refused), waiting for it
        only if the worker is making it now (a compile, or a timing of it that compiles it);
        None: compile it inline."""
        key = (name, options)
        with self._lock:
            self._seen.add(key)
            while self._current is not None and self._current[1][:2] == key:
                self._lock.wait()
            got = self._results.pop(key, None)
            program = self._programs.pop(key, None)
            if got is not None:
                self.compiled += 1
            twins = key in self._twins
        if got is not None and twins:
            # the worker's compile serves its protocol twins: so it does in this process
            if isinstance(got, str):
                keep(self._schedules[name], compile_keywords(options), got, True)
            else:
                keep_refusal(self._schedules[name], compile_keywords(options), got[0], True)
        if isinstance(got, str) and program is not None and options.profile == self._setup[2]:
            from ..emit.xml_parse import remember_parsed

            remember_parsed(got, options.profile, program)
        return got

    def take_time(self, name: str, options: XmlOptions, size: int,
                  inline: Callable[[str, XmlOptions, int], float | None] | None = None
                  ) -> float | None:
        """The time of the program at ``size`` made ahead -- by the worker, or by ``inline``
        while waiting for one -- waiting only if the worker is timing it now; None: simulate it
        inline (the worker will not start it after this).

        ``inline``: the caller's own simulation of a planned timing, None where it does not have
        the program at hand. While the worker times this one, the caller runs the next planned
        timings nobody has started through it instead of idling (measured on one group of
        ``solve --topo dgx1 --nodes 8 --concurrent stride:8 --coll allreduce``: 87 such waits,
        5.3 s, before); their times are kept for when it asks, and dropped if a prune means it
        never does."""
        key = (name, options, size)
        with self._lock:
            self._seen_times.add(key)
            tried: set[tuple[str, XmlOptions, int]] = set()
            while self._current == ("time", key):
                job = self._spare_timing(tried) if inline is not None else None
                if job is None:
                    self._lock.wait()
                    continue
                tried.add(job)
                self._seen_times.add(job)
                self._lock.release()
                try:
                    t = inline(*job)    # type: ignore[misc]
                finally:
                    self._lock.acquire()
                if t is None:
                    self._seen_times.discard(job)
                else:
                    self._spared[job] = t
            got = self._spared.pop(key, None)
            if got is not None:
                return got
            got = self._times.pop(key, None)
            if got is not None:
                self.timed += 1
            return got

    def _spare_timing(self, tried: set[tuple[str, XmlOptions, int]]
                      ) -> tuple[str, XmlOptions, int] | None:
        """The first planned timing nobody has started (the lock held), or None."""
        for k in range(self._next_timing, len(self._timings)):
            job = self._timing_key(k)
            if job not in self._seen_times and job not in tried:
                return job
        return None

    def take_file(self, name: str, options: XmlOptions, min_bytes: int, max_bytes: int
                  ) -> tuple[Any, Any] | None:
        """A planned file job's (full-range entry, range entry) (:func:`_range_file`), waiting
        for it only if the worker is making it now; None: make it inline (the worker will not
        start it after this). Where it was not made, but a job for another range of the same
        compile was (:meth:`_other_range`): (that job's full-range entry, None). The times the
        worker found for the range's file are remembered where
        :func:`synth.timing.program.cached_times` looks (the same text, topology, model and
        profile: the same times)."""
        key = (name, options, min_bytes, max_bytes)
        with self._lock:
            self._seen_files.add(key)
            while self._current == ("file", key):
                self._lock.wait()
            got = self._file_results.pop(key, None)
            if got is None:
                return self._other_range(name, options)
        whole, part, times = got
        if times is not None:
            from ..timing.program import program_model, remember_times

            topology, calibration, profile = self._setup
            if options.proto not in self._models:
                self._models[options.proto] = program_model(topology, options.proto, calibration)
            text = (whole if part is None else part)[0]
            remember_times(text, topology, self._files[key][2], times,
                           model=self._models[options.proto], profile=profile)
        self.made_files += 1
        return whole, part

    def _other_range(self, name: str, options: XmlOptions) -> tuple[Any, None] | None:
        """(the full-range entry, None) of a file job of the same compile for another range, the
        lock held: waiting for one the worker is making; None where there is none.

        The ranges the worker is given are the selection's first pass; the program model's veto
        of sizes slower than NCCL can then move a range's bounds, and the caller asks for a
        range nobody planned. Its file is the same compile with other bounds, and the compile
        is the costly part (a 512-rank out-of-place compile took 62 s on
        ``synth solve --topo dgx_h100 --nodes 64 --coll allgather``): the caller proves the
        range's file from it (:func:`synth.select.ranking.ranged_xml`)."""
        def same_compile(job: tuple[str, XmlOptions, int, int]) -> bool:
            return job[:2] == (name, options)

        while (self._current is not None and self._current[0] == "file"
               and same_compile(self._current[1])):
            self._lock.wait()
        whole = next((got[0] for job, got in self._file_results.items() if same_compile(job)),
                     None)
        if whole is None:
            return None
        self.shared_compiles += 1
        return whole, None

    def _feed(self) -> None:
        """The thread: each answer the worker sends is filed, and the worker given its next job."""
        conn = self._conn
        while True:
            try:
                got = conn.recv()
            except Exception:   # the worker died or was closed: its job and the rest inline
                with self._lock:
                    if self._conn is conn:
                        self._fail()
                    self._lock.notify_all()
                return
            with self._lock:
                self._file(got)
                if not self.broken:
                    self._dispatch()
                self._lock.notify_all()

    def _file(self, got: Any) -> None:
        if self._current is None:
            return
        (kind, key), self._current = self._current, None
        if kind == "compile":
            if isinstance(got, list):
                got, program, twins = got
                if program is not None:
                    self._programs[key] = program
            elif isinstance(got, tuple):
                self._refused.add(key)
                twins = got[1]
            if got is not None and twins:
                self._twins.add(key)
            self._results[key] = got
        elif kind == "file":
            if got is not None:
                self._file_results[key] = got
        elif got is not None:
            made, time_us, program = got
            if made is not None and key[:2] not in self._results:
                self._results[key[:2]] = made
                self._programs[key[:2]] = program
                self._made.append(key[:2])
                while len(self._made) > TEXTS_KEPT:     # not taken: the scorer compiles it
                    old = self._made.pop(0)
                    self._results.pop(old, None)
                    self._programs.pop(old, None)
            self._times[key] = time_us

    def _start(self) -> None:
        if self._proc is None:
            import multiprocessing
            import threading

            ctx = multiprocessing.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(child,), daemon=True,
                                     name="synth-compile-ahead")
            self._proc.start()
            child.close()
            self._conn.send(self._setup)
            self._thread = threading.Thread(target=self._feed, daemon=True,
                                            name="synth-compile-ahead-feed")
            self._thread.start()

    def _fail(self) -> None:
        """The worker is gone (the lock held): nothing more is sent to it."""
        self.broken = True
        self._current = None
        self._stop()

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.join()
            self._conn.close()
            self._proc = self._conn = None

    def close(self) -> None:
        """Stop the worker at once (a job it is doing is dropped)."""
        with self._lock:
            self.broken = True
            self._stop()
            thread, self._thread = self._thread, None
            self._lock.notify_all()
        if thread is not None:
            thread.join()
