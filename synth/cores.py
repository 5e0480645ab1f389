"""How many cores a solve may put worker processes on: the ones other processes leave idle.

Worker processes (stage 3 of the MILP, compiling XML ahead of the program model) pay only where a
core would otherwise sit idle: on a busy machine they add their start-up and take cycles from the
process that waits for them. So the default counts the cores the 1-minute load average leaves free
besides this process, and nothing runs beside a process that is itself a worker (``synth
catalog``'s pool already shares the cores among its solves). What runs where never changes an
answer: every parallel path here returns exactly what its inline path returns.
"""

from __future__ import annotations

import multiprocessing
import os


def in_worker() -> bool:
    """True in a process started by :mod:`multiprocessing` (a pool's worker)."""
    return multiprocessing.parent_process() is not None


def idle_cores() -> int:
    """Cores free for this process and its workers: the machine's, less the runnable processes
    besides this one over the last minute (rounded; at least 1)."""
    cores = os.cpu_count() or 1
    try:
        others = max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):
        others = 0.0
    return max(1, int(cores - others + 0.5))
