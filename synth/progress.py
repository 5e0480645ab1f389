"""Progress of long phases on stderr: a rich spinner on a terminal, timestamped lines elsewhere.

Library code marks its long phases and says what it is doing inside them::

    from synth import progress

    with progress.phase("trees: packing"):
        ...
        progress.detail("LP round 12, T=0.81")

and the command line decides how that is shown (:func:`activate`). Three modes:

* ``rich`` (stderr is a terminal): one transient spinner whose text is the open phases, innermost
  last, with the latest detail -- what ``synth solve`` always showed;
* ``plain`` (stderr is not a terminal: CI, log files, ``nohup``): once a run has lasted one
  heartbeat period, a timestamped line when a phase starts, a heartbeat line at least every
  :data:`INTERVAL_S` seconds while any phase is open (a daemon thread: the work itself never has to
  call back), and a line when a phase that lasted a while ends. A run that ends sooner prints
  nothing, so a quick answer or a refusal stays the one line it is;
* ``off``: nothing (the library's default, so tests and programs that import synth stay quiet).

``SYNTH_PROGRESS`` (``rich`` | ``plain`` | ``off``) overrides the choice and
``SYNTH_PROGRESS_INTERVAL`` the heartbeat period in seconds (the tests use a fraction of one).

Solvers that search for a while (the MILP backends) report through a :class:`SolverProgress`:
each solve is a short phase of its own (``routing (highs)``) whose detail is the live incumbent,
bound and gap, and whose result becomes a line. The solver layer asks :func:`solver_progress` for
one, so it needs no display code and the command line no object to pass in.

The same phases are what a measurement counts: inside :func:`ledger`, every phase (whatever the
display mode) adds its wall-clock and CPU seconds to a :class:`Ledger` under its *kind* (the
``kind`` argument, else the ledger's own classification of the label), and :func:`span` marks work
too fine-grained to show (a compile, a parse, one simulation) that a measurement still wants
counted. ``benchmarks/speed.py`` reads per-phase times this way, so there is one account of where
a run's time goes, not a second set of timers.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, TypeVar

MODES = ("rich", "plain", "off")
INTERVAL_S = 10.0
"""The longest a long phase stays silent in plain mode (issue 12: at least every 10 s)."""
HEARTBEAT_S = 5.0
"""Heartbeat period in plain mode: half the promise, so a busy machine still keeps it."""
DONE_AFTER_S = 2.0
"""Plain mode prints a phase's end only when it lasted at least this long (less is noise)."""
SOLVER_REDRAW_S = 0.2
"""A solver's incumbent and bound are passed on at most this often (HiGHS reports many a second)."""


@dataclass(eq=False)
class _Open:
    """One open phase (compared by identity: two phases may share a label)."""

    label: str
    start: float
    detail: str = ""
    announce: bool = True


@dataclass
class Reporter:
    """Where progress goes. Thread-safe: solvers report from their own threads."""

    mode: str = "off"
    stream: IO[str] | None = None
    """Plain mode's output (stderr when None)."""
    console: Any = None
    """Rich mode's console (a stderr console when None)."""
    heartbeat_s: float = HEARTBEAT_S
    _stack: list[_Open] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _wake: threading.Condition | None = None
    _thread: threading.Thread | None = None
    _status: Any = None
    _last_line: float = 0.0
    _born: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"progress mode must be one of {MODES}, got {self.mode!r}")
        self._wake = threading.Condition(self._lock)

    # ---------------------------------------------------------------------------- the interface
    @contextmanager
    def phase(self, label: str, kind: str | None = None) -> Iterator[None]:
        """A long phase: shown while it runs (nested phases show as ``outer › inner``).

        ``kind``: what the phase counts as in a :func:`ledger` (else the ledger classifies the
        label)."""
        _STAGES.append(label)
        try:
            counted = _ledger
            if counted is not None:
                with counted.counting(label, kind), self._shown(label):
                    yield
                return
            with self._shown(label):
                yield
        except MemoryError:
            global _FAILED_IN
            if _FAILED_IN is None:      # the innermost phase sees it first
                _FAILED_IN = " › ".join(_STAGES)
            raise
        finally:
            _STAGES.pop()

    @contextmanager
    def _shown(self, label: str) -> Iterator[None]:
        entry = self.enter(label)
        try:
            yield
        finally:
            self.leave(entry)

    def enter(self, label: str, *, announce: bool = True) -> _Open | None:
        """Open a phase without a ``with`` block (a solver's stage begins in one call and ends in
        another); close it with :meth:`leave`. ``announce=False``: plain mode prints no line when
        it starts or ends (a short stage of many), it shows only in the heartbeat."""
        if self.mode == "off":
            return None
        entry = _Open(label, time.monotonic(), announce=announce)
        with self._lock:
            self._stack.append(entry)
            if self.mode == "plain":
                if announce and self._long():
                    self._line(f"{self._path()} ...")
                self._ensure_heartbeat()
            else:
                self._show()
        return entry

    def leave(self, entry: _Open | None) -> None:
        """Close a phase :meth:`enter` opened (None, what ``off`` mode opens, is ignored)."""
        if entry is None:
            return
        with self._lock:
            if entry in self._stack:
                self._stack.remove(entry)
            took = time.monotonic() - entry.start
            if self.mode == "plain":
                if entry.announce and took >= DONE_AFTER_S and self._long():
                    self._line(f"{self._path(entry)} done in {_secs(took)}")
                assert self._wake is not None
                self._wake.notify_all()
            else:
                self._show()

    def detail(self, text: str) -> None:
        """What the innermost open phase is doing now (shown by the next redraw or heartbeat)."""
        if self.mode == "off":
            return
        with self._lock:
            if self._stack:
                self._stack[-1].detail = text
            if self.mode == "rich":
                self._show()

    def note(self, text: str, *, mark: str = "") -> None:
        """A one-off event worth a line of its own (a stage finished, a candidate set aside).

        ``mark``: rich markup put before the line on a terminal (a coloured ✓ for a solve that
        proved its answer); plain lines carry the text alone."""
        if self.mode == "off":
            return
        with self._lock:
            if self.mode == "plain":
                if self._long():
                    self._line(text)
            elif mark:
                from rich.markup import escape

                self._console().print(f"{mark} {escape(text)}", highlight=False)
            else:
                self._console().print(text, markup=False, highlight=False)

    def close(self) -> None:
        """Stop the heartbeat thread and the spinner (phases still open are abandoned)."""
        with self._lock:
            self._stack.clear()
            if self._wake is not None:
                self._wake.notify_all()
            self._stop_status()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._thread = None

    # ---------------------------------------------------------------------------- plain mode
    def _path(self, upto: _Open | None = None) -> str:
        names = []
        for e in self._stack:
            names.append(e.label)
            if e is upto:
                break
        if upto is not None and upto not in self._stack:
            names.append(upto.label)
        return " › ".join(names)

    def _long(self) -> bool:
        """Whether this run has lasted a heartbeat period (before that plain mode is silent)."""
        return time.monotonic() - self._born >= self.heartbeat_s

    def _line(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._last_line = time.monotonic()
        try:
            stream.write(f"{stamp} synth: {text}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream must not break the work
            pass

    def _ensure_heartbeat(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._beat, name="synth-progress", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        """Heartbeat: a line whenever plain mode has been silent for ``heartbeat_s``."""
        assert self._wake is not None
        with self._lock:
            while self._stack:
                remaining = max(self._last_line, self._born) + self.heartbeat_s - time.monotonic()
                if remaining > 0:
                    self._wake.wait(remaining)
                    continue
                inner, outer = self._stack[-1], self._stack[0]
                now = time.monotonic()
                msg = f"{self._path()}: still running, {_secs(now - inner.start)}"
                if outer is not inner:
                    msg += f" ({_secs(now - outer.start)} in all)"
                if inner.detail:
                    msg += f"; {inner.detail}"
                self._line(msg)
            self._thread = None

    # ---------------------------------------------------------------------------- rich mode
    def _console(self) -> Any:
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)
        return self.console

    def _show(self) -> None:
        if not self._stack:
            self._stop_status()
            return
        from rich.markup import escape

        text = escape(self._path())
        if self._stack[-1].detail:
            text += f" [dim]{escape(self._stack[-1].detail)}[/dim]"
        if self._status is None:
            from rich.errors import LiveError

            status = self._console().status(text, spinner="dots")
            try:
                status.start()
            except LiveError:  # another live display (progress bars) owns the terminal
                return
            self._status = status
        else:
            self._status.update(text)

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


class SolverResult(Protocol):
    """What :meth:`SolverProgress.end` reads of a solve's result (a MILP result, for one)."""

    status: str

    def summary(self) -> str: ...


_MARKS = {"optimal": "[green]✓[/]", "feasible": "[yellow]~[/]"}
"""Terminal marks of a finished solve by its status (anything else is a red ✗)."""


class SolverProgress:
    """A solver's stages on the progress display: which stage runs, its live incumbent, bound and
    gap, and a line with each stage's result.

    The solver calls :meth:`begin` when a stage starts, :meth:`update` whenever its backend reports
    a better incumbent or bound (from the solver's own threads, many times a second: passed on at
    most every :data:`SOLVER_REDRAW_S`), and :meth:`end` with the result (:meth:`abort` when the
    stage raised). Each stage is a phase of the reporter (shown as ``outer › routing (highs)``
    with ``incumbent … bound … gap …`` as its detail); plain mode prints no start or end line for
    it, only the heartbeat and the result's line.

    By default it reports to the :func:`current` reporter, so the command line's ``rich`` |
    ``plain`` | ``off`` choice (``SYNTH_PROGRESS``) holds for the solvers too. Given a terminal
    ``console`` (or ``enabled=True``) it draws on that console with a reporter of its own instead
    (use it as a context manager so the spinner stops). A subclass may override :meth:`begin`,
    :meth:`update` and :meth:`end` to observe solves (benchmarks record every stage's time).
    """

    def __init__(self, console: Any = None, *, enabled: bool | None = None) -> None:
        shown = (console is not None and bool(console.is_terminal)) if enabled is None else enabled
        self._own = Reporter("rich", console=console) if shown else None
        self._open: _Open | None = None
        self._lock = threading.Lock()
        self._last_update = 0.0
        self._incumbent: float | None = None
        self._bound: float | None = None

    def __enter__(self) -> SolverProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop this object's own display, if it has one (lines already printed stay)."""
        if self._own is not None:
            self._own.close()

    def _reporter(self) -> Reporter:
        return self._own if self._own is not None else current()

    def begin(self, stage: str, solver: str) -> None:
        """A solve starts: ``stage`` names it (``routing``), ``solver`` the backend."""
        self.abort()
        self._incumbent = self._bound = None
        self._last_update = 0.0
        self._open = self._reporter().enter(f"{stage or 'solve'} ({solver})", announce=False)

    def update(self, *, incumbent: float | None = None, bound: float | None = None) -> None:
        """The solver reported a new incumbent and/or bound."""
        if incumbent is not None:
            self._incumbent = incumbent
        if bound is not None:
            self._bound = bound
        now = time.monotonic()
        with self._lock:
            if now - self._last_update < SOLVER_REDRAW_S:
                return
            self._last_update = now
        info = solver_info(self._incumbent, self._bound)
        if info:
            self._reporter().detail(info)

    def end(self, result: SolverResult) -> None:
        """The solve finished: its stage closes and its one-line summary is printed."""
        self.abort()
        self._reporter().note(result.summary(), mark=_MARKS.get(result.status, "[red]✗[/]"))

    def abort(self) -> None:
        """Close the running stage without a result (the solve raised)."""
        entry, self._open = self._open, None
        self._reporter().leave(entry)


def solver_progress() -> SolverProgress | None:
    """A :class:`SolverProgress` on the current reporter; None while it is ``off`` (nobody looks,
    so a solver need not even ask its backend for incumbents)."""
    return None if _current.mode == "off" else SolverProgress()


def solver_info(incumbent: float | None, bound: float | None) -> str:
    """``incumbent 8.234  bound 8  gap 2.84%``: what is known of a running search."""
    parts = []
    if incumbent is not None and math.isfinite(incumbent):
        parts.append(f"incumbent {incumbent:.6g}")
    if bound is not None and math.isfinite(bound):
        parts.append(f"bound {bound:.6g}")
    gap = relative_gap(incumbent, bound)
    if gap is not None:
        parts.append(f"gap {100 * gap:.2f}%")
    return "  ".join(parts)


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """``|objective - bound| / max(|objective|, 1e-9)``, 0.0 within rounding, None if either is missing.

    The one definition of a search's gap: the live display shows it and the MILP results report
    it (:class:`synth.encodings.milp.backend.MilpResult`)."""
    if objective is None or bound is None or not math.isfinite(objective) or not math.isfinite(bound):
        return None
    diff = abs(objective - bound)
    if diff <= 1e-9 * max(1.0, abs(objective)):
        return 0.0
    return diff / max(abs(objective), 1e-9)


def _secs(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    return f"{minutes} min {sec:02d} s"


_current = Reporter("off")
_STAGES: list[str] = []
"""The phases open now, outermost first, whatever the display mode (:func:`stage`)."""
_FAILED_IN: str | None = None
"""The phases that were open when a MemoryError first went through one (:func:`stage`)."""


def stage() -> str:
    """Where a MemoryError struck (the phases open then, ``solving … › program model: …``), else
    the phases open now, else ``startup``: what an error that can strike anywhere names."""
    return _FAILED_IN or " › ".join(_STAGES) or "startup"


def current() -> Reporter:
    """The reporter library code reports to (``off`` unless a command line activated one)."""
    return _current


def phase(label: str, kind: str | None = None) -> AbstractContextManager[None]:
    """:meth:`Reporter.phase` of the current reporter."""
    return _current.phase(label, kind)


_NOT_COUNTED: AbstractContextManager[None] = nullcontext()
F = TypeVar("F", bound=Callable[..., Any])


def span(kind: str) -> AbstractContextManager[None]:
    """Work of ``kind`` that is never shown (too short or too frequent: one parse, one simulation)
    but that a :func:`ledger` counts; outside one it costs one global read."""
    counted = _ledger
    if counted is None:
        return _NOT_COUNTED
    return counted.counting(kind, kind)


def spanned(kind: str) -> Callable[[F], F]:
    """Decorator: every call of the function is a :func:`span` of ``kind``."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if _ledger is None:
                return fn(*args, **kwargs)
            with _ledger.counting(kind, kind):
                return fn(*args, **kwargs)
        return counted  # type: ignore[return-value]
    return wrap


class Ledger:
    """Wall-clock and CPU seconds per kind of phase, for measurements (:func:`ledger`).

    Times are *exclusive*: a phase nested in another counts under its own kind only and is taken
    out of the enclosing one, so the kinds partition the time spent inside counted phases (the
    rest of a run is whatever no counted phase covered). A phase with no kind (``kind`` None and
    ``classify`` returning None) is transparent: its time stays with the enclosing counted phase.
    CPU seconds are the process's (:func:`time.process_time`), so a solver's own threads count
    for the phase that waits on them. Each thread nests its own phases.
    """

    def __init__(self, classify: Callable[[str], str | None] | None = None) -> None:
        self.classify = classify
        self.totals: dict[str, list[float]] = {}
        """kind -> [wall seconds, CPU seconds, phases counted]."""
        self._local = threading.local()
        self._lock = threading.Lock()

    @contextmanager
    def counting(self, label: str, kind: str | None = None) -> Iterator[None]:
        """Count the ``with`` body under ``kind`` (else ``classify(label)``; None: not counted)."""
        if kind is None and self.classify is not None:
            kind = self.classify(label)
        if kind is None:
            yield
            return
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        frame = [time.perf_counter(), time.process_time(), 0.0, 0.0]
        stack.append(frame)
        try:
            yield
        finally:
            wall = time.perf_counter() - frame[0]
            cpu = time.process_time() - frame[1]
            stack.pop()
            if stack:
                stack[-1][2] += wall
                stack[-1][3] += cpu
            with self._lock:
                row = self.totals.setdefault(kind, [0.0, 0.0, 0])
                row[0] += wall - frame[2]
                row[1] += cpu - frame[3]
                row[2] += 1

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{kind: {"wall_s", "cpu_s", "count"}}``, kinds sorted by wall time, largest first."""
        with self._lock:
            rows = sorted(self.totals.items(), key=lambda kv: -kv[1][0])
            return {k: {"wall_s": w, "cpu_s": c, "count": int(n)} for k, (w, c, n) in rows}


_ledger: Ledger | None = None


@contextmanager
def ledger(classify: Callable[[str], str | None] | None = None) -> Iterator[Ledger]:
    """Count every phase and :func:`span` of the ``with`` body in a fresh :class:`Ledger`."""
    global _ledger
    previous, _ledger = _ledger, Ledger(classify)
    try:
        yield _ledger
    finally:
        _ledger = previous


def detail(text: str) -> None:
    """:meth:`Reporter.detail` of the current reporter."""
    _current.detail(text)


def note(text: str) -> None:
    """:meth:`Reporter.note` of the current reporter."""
    _current.note(text)


def choose_mode(stream: IO[str] | None = None, *, quiet_on_terminal: bool = False) -> str:
    """``SYNTH_PROGRESS`` if set, else ``rich`` on a terminal and ``plain`` elsewhere.

    ``quiet_on_terminal``: ``off`` instead of ``rich`` (a command whose terminal output is a
    document, such as ``--json``, or that draws its own progress bars).
    """
    forced = os.environ.get("SYNTH_PROGRESS", "").strip().lower()
    if forced in MODES:
        return forced
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return "off" if quiet_on_terminal else "rich"
    return "plain"


def _interval() -> float:
    raw = os.environ.get("SYNTH_PROGRESS_INTERVAL")
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = HEARTBEAT_S
        if 0 < value <= INTERVAL_S:
            return value
    return HEARTBEAT_S


@contextmanager
def activate(mode: str | None = None, *, console: Any = None, stream: IO[str] | None = None,
             quiet_on_terminal: bool = False) -> Iterator[Reporter]:
    """Make a reporter current for the duration of a command (the CLI's job, not the library's)."""
    global _current
    chosen = mode or choose_mode(stream, quiet_on_terminal=quiet_on_terminal)
    reporter = Reporter(chosen, stream=stream, console=console, heartbeat_s=_interval())
    previous, _current = _current, reporter
    try:
        yield reporter
    finally:
        reporter.close()
        _current = previous
