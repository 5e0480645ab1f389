"""Where solves run: in this process, in local worker processes, or as Ray tasks.

The catalog's solves are independent and deterministic, so they can run anywhere and in any order;
results are put back in job order, so the output never depends on the executor or the number of
workers. ``local`` with one worker runs in this process; with K > 1 it uses a
``concurrent.futures.ProcessPoolExecutor`` whose workers are *spawned* (not forked: the solver
libraries start threads, and a fork of a threaded process can deadlock). ``ray`` submits one Ray
task per solve to the cluster ``ray.init()`` finds (``RAY_ADDRESS``), or to a local instance with
K CPUs when there is none; it needs the optional extra ``synth[ray]``.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from ..errors import SynthError, unknown_name

if TYPE_CHECKING:  # the solving code loads when jobs run, not when options are checked
    from .candidates import SolveJob

EXECUTORS = ("local", "ray")
Done = Callable[[int, dict[str, Any]], None]
"""Called in this process as each job finishes: (job index, record)."""


def check_executor(name: str, workers: int) -> None:
    """Reject a bad executor or worker count before any work starts."""
    if name not in EXECUTORS:
        raise unknown_name("executor", name, EXECUTORS)
    if workers < 1:
        raise SynthError(f"--workers must be at least 1, got {workers}")
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            # synth is installed from its source folder, not an index: 'synth[ray]' would fetch
            # an unrelated package of that name
            raise SynthError("--executor ray needs Ray, which is not installed: pip install "
                             "'ray>=2.9' (or '.[ray]' in synth's source folder), or use "
                             "--executor local") from None


def run_jobs(jobs: Sequence[SolveJob], *, executor: str = "local", workers: int = 1,
             on_done: Done | None = None) -> list[dict[str, Any]]:
    """Run every job; the records come back in job order."""
    check_executor(executor, workers)
    results: list[dict[str, Any] | None] = [None] * len(jobs)

    def done(i: int, rec: dict[str, Any]) -> None:
        results[i] = rec
        if on_done is not None:
            on_done(i, rec)

    if not jobs:
        return []
    if executor == "ray":
        _run_ray(jobs, workers, done)
    elif workers == 1 or len(jobs) == 1:
        for i, job in enumerate(jobs):
            done(i, _run_job(job))
    else:
        _run_pool(jobs, workers, done)
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


def _run_pool(jobs: Sequence[SolveJob], workers: int, done: Done) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        pending = {pool.submit(_run_job, job): i for i, job in enumerate(jobs)}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in sorted(finished, key=lambda f: pending[f]):
                    done(pending.pop(fut), fut.result())
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise


def _run_ray(jobs: Sequence[SolveJob], workers: int, done: Done) -> None:
    import logging
    import os

    import ray

    started = False
    if not ray.is_initialized():
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        if os.environ.get("RAY_ADDRESS"):
            ray.init(**quiet)  # an existing cluster: its resources, not ours
        else:
            ray.init(num_cpus=workers, include_dashboard=False, **quiet)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_run_job)
        refs = {task.remote(job): i for i, job in enumerate(jobs)}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                done(refs.pop(ref), ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def _run_job(job: SolveJob) -> dict[str, Any]:
    """:func:`synth.catalog.candidates.run_job` (imported here, in the process that runs it)."""
    from .candidates import run_job

    return run_job(job)
