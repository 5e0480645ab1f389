"""One encoding run in a spawned process while this one runs the baselines.

``--encoding auto`` runs its encodings one after another (:func:`synth.encodings.run_encoding`),
on one core, though they are independent: above
:data:`~synth.encodings.AUTO_ALL_MAX_RANKS` ranks it runs the baselines and one synthesis
encoding. Measured on ``synth solve --topo dgx_h100 --nodes 64 --coll allgather``: baselines
about 32 s, trees about 42 s, while the second core sat idle (``results/speed.md`` has the
encode phase before and after). :func:`start` runs that encoding on the idle core from the start,
and :meth:`Ahead.take` hands its result over in its turn.

Up to 64 ranks, where a shipped sketch lets the MILP run after it (the main job, trn1_32
allgather: trees about 8 s, then the MILP about 35 s), the solving process runs the encodings
after the worker's before it takes the worker's result (:func:`synth.encodings._run_early`), so
the trees are built while the MILP solves. There the worker is off the critical path, and the
MILP's own stage-3 workers want the second core: the worker lowers its priority and its CPU
counts as idle to them (:func:`synth.cores.yield_to_foreground`).

Same answers: the worker runs the encoding (:data:`AHEAD`: one that does not read
:attr:`Options.held <synth.encodings.options.Options.held>`, which only the baselines size
themselves against) with the options the inline path gives it, and the caller takes the result
at the point of the loop where the inline path would have run it, after the encoding's guard with
the ``held`` the inline path has there (a guard that refuses it then stops the worker). The notes
it appends come back and are appended then, so ``found``, its order and the notes are the inline
path's. What comes back is every schedule, except those the size guards refuse whatever the
other candidates hold (:func:`synth.guards.check_sized` at ``held`` 0; every check is monotone in
it): those come as a :class:`synth.guards.Sized`, which :func:`synth.solve.within_budget` refuses
in their place with the same words. At 512 ranks that is every trees candidate (millions of
transfers that need not be sent back). A worker that fails in any way but
:class:`~synth.errors.NotApplicable` leaves the encoding to run inline in its turn, which meets
the failure where it belongs.

When: only under ``auto``, with a core idle besides this process (:func:`synth.cores.idle_cores`),
never in a worker, and only from :data:`MIN_RANKS` ranks or beside the MILP (below, without it,
encodings take seconds and a spawned process about one to start). ``SYNTH_ENCODE_AHEAD=0`` or
``1`` forces it off or on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from ..collectives import Collective
from ..errors import NotApplicable
from ..schedule import Schedule
from ..topology import Topology
from .options import Options

ENV = "SYNTH_ENCODE_AHEAD"
"""Environment variable: ``1`` runs an encoding ahead whatever the load and size, ``0`` never."""
AHEAD = frozenset({"trees", "flow"})
"""Encodings that may run in the worker: those that do not read ``Options.held``."""
MIN_RANKS = 65
"""Run ahead only from this many ranks: above :data:`~synth.encodings.AUTO_ALL_MAX_RANKS` (64)
``auto`` runs the baselines and one synthesis encoding, both long at scale; at 64 ranks
(dgx_a100 x 8 allgather) the two took about 1.5 and 5 s, and a spawned worker about a second to
start."""


def wanted(num_ranks: int, beside_milp: bool = False) -> bool:
    """Whether ``auto`` should run an encoding ahead on a machine of ``num_ranks`` ranks;
    ``beside_milp``: the MILP runs after it (it keeps the solving process busy for its work
    budget, so the worker's start is paid for at any size)."""
    from ..cores import spare_core_wanted

    return spare_core_wanted(ENV, num_ranks >= MIN_RANKS or beside_milp)


def _run(conn: Any, encoding: Any, topology: Topology, collective: Collective,
         options: Options, yielding: bool) -> None:
    """The worker: run ``encoding`` (an :class:`~synth.encodings.Encoding`) and send back
    ``("done", schedules, notes)`` (each schedule the guards refuse at any ``held`` as its
    :class:`~synth.guards.Sized`), ``("not applicable",)``, or ``("failed",)`` where anything
    else went wrong. ``yielding``: at a lower priority (:func:`synth.cores.yield_to_foreground`)."""
    from ..cores import yield_to_foreground
    from ..guards import TooBig, check_sized, sized

    if yielding:
        yield_to_foreground()
    try:    # progress is off here: the library's default (only a command activates it)
        before = len(options.notes) if options.notes is not None else 0
        try:
            found = encoding(topology, collective, options)
        except NotApplicable:
            conn.send(("not applicable",))
            return
        out: dict[str, Any] = {}
        for key, schedule in found.items():
            out[key] = schedule
            if options.budget is not None:
                size = sized(schedule, options.budget)
                try:
                    check_sized(size, options.budget, 0)
                except TooBig:
                    out[key] = size
        notes = options.notes[before:] if options.notes is not None else []
        conn.send(("done", out, notes))
    except Exception:   # anything else: the caller runs it inline
        with contextlib.suppress(Exception):   # else the caller sees the pipe close
            conn.send(("failed",))
    finally:
        conn.close()


class Ahead:
    """A worker running encoding :attr:`name`; :meth:`take` waits for it, :meth:`close` stops it."""

    def __init__(self, encoding: Any, topology: Topology, collective: Collective,
                 options: Options, yielding: bool = False) -> None:
        import multiprocessing

        from ..cores import count_as_idle

        self.name = encoding.name
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_run, args=(child, encoding, topology, collective, options,
                                                    yielding),
                                 daemon=True, name=f"synth-encode-{self.name}")
        self._proc.start()
        child.close()
        self._yielding = yielding
        if yielding:
            count_as_idle(self._proc.pid)

    def take(self) -> tuple[dict[str, Schedule | Any], list[str]] | None:
        """The encoding's candidates by name and the notes it appended, once the worker is done;
        None where it failed (run it inline). Raises :class:`NotApplicable` where the encoding
        did."""
        try:
            got = self._conn.recv()
        except (EOFError, OSError):
            got = ("failed",)
        finally:
            self.close()
        if got[0] == "not applicable":
            raise NotApplicable(f"{self.name} does not apply")
        return (got[1], got[2]) if got[0] == "done" else None

    def close(self) -> None:
        """Stop the worker (a result it has not sent is dropped)."""
        from ..cores import count_as_idle

        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()
        if self._yielding:
            count_as_idle(self._proc.pid, False)


def pick(encodings: Sequence[str]) -> str | None:
    """The encoding of the ``auto`` list ``encodings`` that may run ahead: the first of
    :data:`AHEAD` after the baselines (which come first); None where there is none."""
    if len(encodings) < 2 or encodings[0] != "baseline":
        return None
    return next((e for e in encodings[1:] if e in AHEAD), None)


def start(encoding: Any, topology: Topology, collective: Collective,
          options: Options, beside_milp: bool = False) -> Ahead | None:
    """A worker running ``encoding`` (an :class:`~synth.encodings.Encoding`, the one
    :func:`pick` names) with ``options`` (its own, as ``auto`` gives them, ``held`` and
    ``refine_gate`` aside: it reads neither), where :func:`wanted` says so; else None. The caller
    has checked its guard at ``held`` 0 (one that refuses it there refuses it at any ``held``)."""
    if not wanted(topology.num_ranks, beside_milp):
        return None
    try:   # beside the MILP the worker is off the critical path: it yields to the MILP's workers
        return Ahead(encoding, topology, collective, options, yielding=beside_milp)
    except Exception:   # no process: everything inline
        return None
