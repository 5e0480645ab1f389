"""What every benchmark script shares: where results go, timing, environment capture, writing.

A benchmark measures and writes ``results/<name>.json`` (the figures) and ``results/<name>.md``
(the table people read), both atomically (:func:`synth.files.atomic_write`), so an interrupted run
never leaves half a result. The environment a figure was measured in (machine, cores, Python,
load average, commit) is captured by the helpers here, under the key names each script has always
written, so republished results keep their shape.

Scripts run as ``python benchmarks/<name>.py`` from anywhere: importing this module puts the
repository root on ``sys.path`` first, so the checkout's ``synth`` is the one measured.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""
RESULTS = ROOT / "results"
"""Where the published results live."""

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from synth.files import atomic_write  # noqa: E402  (after the path is set)


# ------------------------------------------------------------------------------------------ timing
def stopwatch() -> Callable[[], float]:
    """Start a wall-clock stopwatch: the returned function gives the seconds since this call."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


@contextmanager
def timed(record: dict[str, Any], key: str, digits: int | None = None) -> Iterator[None]:
    """Store the wall-clock seconds of the ``with`` body in ``record[key]`` (rounded to ``digits``
    when given), also when the body raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        record[key] = round(elapsed, digits) if digits is not None else elapsed


def timed_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``(fn(*args, **kwargs), wall-clock seconds)``."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


# ------------------------------------------------------------------------------------- environment
def machine(style: str = "processor") -> str:
    """The machine in words: ``"x86_64 x86_64"`` (``style="processor"``: architecture and
    processor), ``"Linux x86_64"`` (``style="system"``) or ``"x86_64"`` (``style="arch"``)."""
    if style == "system":
        return f"{platform.system()} {platform.machine()}"
    if style == "arch":
        return platform.machine()
    return f"{platform.machine()} {platform.processor() or ''}".strip()


def cpus() -> int | None:
    return os.cpu_count()


def python_version() -> str:
    return platform.python_version()


def platform_name() -> str:
    return platform.platform()


def load_average(digits: int | None = None) -> list[float]:
    """The 1/5/15-minute load averages: on a shared machine a wall-clock figure needs them."""
    loads = os.getloadavg()
    return [round(x, digits) for x in loads] if digits is not None else list(loads)


def git(*args: str) -> str:
    """A git command's output in the repository ('' when git or the repository is unavailable)."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    """The short id of the commit measured ('' outside a checkout)."""
    return git("rev-parse", "--short", "HEAD")


def modified(paths: Sequence[str]) -> list[str]:
    """Files under ``paths`` that differ from the commit (``git status --porcelain`` lines)."""
    return git("status", "--porcelain", "--", *paths).splitlines()


def changed_since(since: str, paths: Sequence[str]) -> list[str]:
    """Files under ``paths`` that differ between commit ``since`` and HEAD."""
    if not since:
        return []
    return git("diff", "--name-only", since, "HEAD", "--", *paths).split()


# ------------------------------------------------------------------------------------------ output
def to_json(data: Any, *, indent: int | None = 1, sort_keys: bool = False,
            default: Callable[[Any], Any] | None = None) -> str:
    """The JSON text of a result file: ``json.dumps`` plus a final newline."""
    return json.dumps(data, indent=indent, sort_keys=sort_keys, default=default) + "\n"


def write_results(name: str, data: Any = None, markdown: str | None = None, *,
                  out_dir: Path | str | None = None, indent: int | None = 1, sort_keys: bool = False,
                  default: Callable[[Any], Any] | None = None) -> list[Path]:
    """Write ``<out_dir>/<name>.json`` (when ``data`` is given) and ``<name>.md`` (when
    ``markdown`` is), atomically; ``out_dir`` defaults to :data:`RESULTS`. Returns the paths."""
    out = Path(out_dir) if out_dir is not None else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if data is not None:
        path = out / f"{name}.json"
        atomic_write(path, to_json(data, indent=indent, sort_keys=sort_keys, default=default))
        written.append(path)
    if markdown is not None:
        path = out / f"{name}.md"
        atomic_write(path, markdown)
        written.append(path)
    return written
