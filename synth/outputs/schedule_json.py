"""Schedule JSON: the verified schedule itself, the one output every run writes.

Its name carries every input that changes the schedule (:func:`schedule_stem`); the other formats'
names start with the same stem. :meth:`synth.schedule.Schedule.from_json` reads it back
(``synth verify``, ``synth simulate``).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..files import atomic_write, ensure_writable_dir, read_input
from ..schedule import Schedule


def _name_part(text: str) -> str:
    """A file-name-safe rendering of an option value."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(text)).strip("-") or "x"


def _exact_size(nbytes: int) -> str:
    """1048576 -> 1MB, 1536 -> 1536B: exact, so two byte ranges never share a name."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def schedule_stem(schedule: Schedule, tag: str = "") -> str:
    """The name every output of ``schedule`` starts with: each input that changes the schedule.

    Topology (with its node count), collective and root, chunks per rank, ``inplace`` when the
    collective was solved in place, the algorithm (which names the encoding and its own knobs:
    SMT steps/rounds, the size trees were planned for), a MILP's sketch and solver, and ``tag``
    (the CLI's ``cal-<digest>`` for a calibrated topology).
    """
    coll = schedule.collective
    parts = [f"{_name_part(schedule.topology)}_{coll.kind}"
             + (f"_root{coll.root}" if coll.root is not None else ""),
             f"c{coll.chunks_per_rank}"]
    if coll.inplace:
        parts.append("inplace")
    parts.append(_name_part(schedule.algorithm))
    for key in ("sketch", "solver"):
        if schedule.meta.get(key):
            parts.append(_name_part(schedule.meta[key]))
    if tag:
        parts.append(_name_part(tag))
    return "_".join(parts)


def schedule_file_name(schedule: Schedule, tag: str = "") -> str:
    return f"{schedule_stem(schedule, tag)}.schedule.json"


def write_schedule(schedule: Schedule, out_dir: Path, tag: str = "") -> Path:
    """Write the (already verified) schedule's canonical JSON atomically."""
    ensure_writable_dir(out_dir)
    return atomic_write(out_dir / schedule_file_name(schedule, tag), schedule.to_json())


def read_schedule(path: str | Path) -> Schedule:
    """A schedule file as ``synth verify`` and ``synth simulate`` read it."""
    return Schedule.from_json(read_input(path, "schedule file"), str(path))


def calibration_tag(calibration: str | None) -> str:
    """``cal-<digest>`` for output names: a calibrated topology gives other schedules."""
    if calibration is None:
        return ""
    return "cal-" + hashlib.sha256(Path(calibration).read_bytes()).hexdigest()[:8]
