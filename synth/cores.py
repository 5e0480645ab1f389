"""How many cores a solve may put worker processes on: the ones other processes leave idle.

Worker processes (stage 3 of the MILP, compiling XML ahead of the program model) pay only where a
core would otherwise sit idle: on a busy machine they add their start-up and take cycles from the
process that waits for them. So the default counts the cores the 1-minute load average leaves free
besides this process, and nothing runs beside a process that is itself a worker (``synth
catalog``'s pool already shares the cores among its solves). What runs where never changes an
answer: every parallel path here returns exactly what its inline path returns.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time


def in_worker() -> bool:
    """True in a process started by :mod:`multiprocessing` (a pool's worker)."""
    return multiprocessing.parent_process() is not None


_OWN_WORKERS: list[tuple[float, float]] = []
"""(start, end) on :func:`time.monotonic` of the worker processes this process ran
(:func:`worker_ran`), the last few."""
LOAD_WINDOW_S = 60.0
"""The 1-minute load average's time constant: it decays by e every minute (Linux
``kernel/sched/loadavg.c``, ``EXP_1``)."""


def worker_ran(start: float, end: float) -> None:
    """Record that a worker process of this one was busy from ``start`` to ``end``
    (:func:`time.monotonic`), so that :func:`idle_cores` does not count it as another's load."""
    _OWN_WORKERS.append((start, end))
    del _OWN_WORKERS[:-8]


def _own_load(now: float) -> float:
    """What this process's finished workers still add to the 1-minute load average: one that ran
    for T seconds and stopped s seconds ago, (1 - e^(-T/60)) e^(-s/60) (as if always runnable)."""
    return sum((1.0 - math.exp(-(end - start) / LOAD_WINDOW_S))
               * math.exp(-max(0.0, now - end) / LOAD_WINDOW_S) for start, end in _OWN_WORKERS)


def idle_cores() -> int:
    """Cores free for this process and its workers: the machine's, less the runnable processes
    besides this one over the last minute (rounded; at least 1).

    This process's own workers that have stopped are not others: on ``synth solve --topo dgx1
    --nodes 8 --concurrent stride:8 --coll allreduce`` the program model's worker, busy for 46 s,
    still adds about 0.54 (:func:`_own_load`) when the range files are to be made; counted as
    another's, it read as a busy core under py-spy and kept that stage on one."""
    cores = os.cpu_count() or 1
    try:
        others = max(0.0, os.getloadavg()[0] - 1.0 - _own_load(time.monotonic()))
    except (AttributeError, OSError):
        others = 0.0
    return max(1, int(cores - others + 0.5))
