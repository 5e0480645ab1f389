"""How many cores a solve may put worker processes on: the ones other processes leave idle.

Worker processes (stage 3 of the MILP, compiling XML ahead of the program model) pay only where a
core would otherwise sit idle: on a busy machine they add their start-up and take cycles from the
process that waits for them. So the default counts the cores other processes leave idle now
(:func:`idle_cores`), and nothing runs beside a process that is itself a worker (``synth
catalog``'s pool already shares the cores among its solves). What runs where never changes an
answer: every parallel path here returns exactly what its inline path returns.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time


def in_worker() -> bool:
    """True in a process started by :mod:`multiprocessing` (a pool's worker)."""
    return multiprocessing.parent_process() is not None


SAMPLE_S = 0.2
"""How long :func:`busy_elsewhere` watches the CPUs (at the kernel's 100 ticks a second on 2 cores,
40 ticks: a quarter of a core's resolution is enough to tell a busy core from an idle one)."""


def _cpu_ticks() -> tuple[int, int]:
    """(all, idle) CPU time of the whole machine so far, in kernel ticks (``/proc/stat``: user,
    nice, system, idle, iowait, irq, softirq, steal; idle counts idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return sum(ticks), ticks[3] + ticks[4]


YIELD_NICE = 10
"""How much a yielding worker lowers its priority (:func:`yield_to_foreground`): at 10 the kernel
gives a process of default priority about ten times its share of a contended core."""
_yielding: set[int] = set()
"""Process ids of this process's workers that yield (:func:`count_as_idle`)."""


def yield_to_foreground() -> None:
    """Lower this process's priority (:data:`YIELD_NICE`): called first in a worker whose work is
    off its parent's critical path, so that whatever the parent then starts runs first."""
    with contextlib.suppress(OSError):   # not permitted: it runs at the parent's priority
        os.nice(YIELD_NICE)


def count_as_idle(pid: int, yielding: bool = True) -> None:
    """Count worker ``pid``, which called :func:`yield_to_foreground`, as idle CPU for this
    process's later workers (``yielding`` False: stop, once it has ended). A yielding worker
    gives its core up to them, so a core it keeps busy is theirs to take."""
    (_yielding.add if yielding else _yielding.discard)(pid)


def _yielding_seconds() -> float:
    """CPU seconds the yielding workers (:func:`count_as_idle`) have used so far (from
    ``/proc/PID/stat``; a worker that has ended counts nothing)."""
    if not _yielding:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in _yielding:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])   # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


def busy_elsewhere(window_s: float = SAMPLE_S) -> float | None:
    """Cores that processes other than this one (and its yielding workers: :func:`count_as_idle`)
    keep busy now: the machine's busy CPU time over ``window_s`` less this process's own, in
    cores; None where the kernel does not say (no ``/proc/stat``)."""
    try:
        all0, idle0 = _cpu_ticks()
        own0, t0 = sum(os.times()[:2]) + _yielding_seconds(), time.monotonic()
        time.sleep(window_s)
        all1, idle1 = _cpu_ticks()
        own1, t1 = sum(os.times()[:2]) + _yielding_seconds(), time.monotonic()
    except (OSError, ValueError, IndexError):
        return None
    ticks = all1 - all0
    if ticks <= 0 or t1 <= t0:
        return None
    cores = os.cpu_count() or 1
    busy = cores * (ticks - (idle1 - idle0)) / ticks
    return max(0.0, busy - (own1 - own0) / (t1 - t0))


def idle_cores() -> int:
    """Cores free for this process and its workers: the machine's, less those other processes keep
    busy (rounded; at least 1).

    Measured now (:func:`busy_elsewhere`), not by the 1-minute load average: that average still
    counts, for a minute or more, what this process's own finished workers and the commands run
    just before it did. Run right after another solve, ``synth solve --topo dgx1 --nodes 8
    --concurrent stride:8 --coll allreduce`` started at load 1.5-1.7 on the 2-core machine and so
    ran without its program model's worker (78-84 s where it takes 58-69 s with it). The load
    average stands in where the kernel gives no CPU times (less this process: one)."""
    cores = os.cpu_count() or 1
    others = busy_elsewhere()
    if others is None:
        try:
            others = max(0.0, os.getloadavg()[0] - 1.0)
        except (AttributeError, OSError):
            others = 0.0
    return max(1, int(cores - others + 0.5))


def spare_core_wanted(switch: str, pays: bool) -> bool:
    """Whether to start one worker process beside this one: the environment variable ``switch``
    (``0`` or ``1``) forces the answer; else only where it ``pays`` (the caller's measure of the
    work against a process start), a core is idle besides this process (:func:`idle_cores`), and
    this process is not a worker itself."""
    from .errors import SynthError

    raw = os.environ.get(switch, "").strip()
    if raw in ("0", "1"):
        return raw == "1"
    if raw:
        raise SynthError(f"{switch} must be 0 or 1, got {raw!r}")
    return pays and not in_worker() and idle_cores() >= 2
