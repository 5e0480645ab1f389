"""The one error type a user can cause.

Everything the user controls (files, names, numbers, solver limits) is checked at the boundary and
reported as a :class:`SynthError` whose message says what was wrong and what to do about it. The CLI
prints the message on one line and exits with :attr:`SynthError.exit_code`; library callers catch
one type. Internal invariants use plain ``assert``/exceptions: those are bugs, not user errors.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable

INPUT_ERROR = 2
"""Exit code for bad input: unknown names, malformed files, impossible parameters."""

VERIFY_FAILED = 1
"""Exit code when a schedule or program was read correctly but is wrong."""

LIMIT_REACHED = 3
"""Exit code when a solver hit its time limit before proving its answer."""


class SynthError(Exception):
    """A user-facing error: a one-line message and the exit code the CLI returns."""

    exit_code: int = INPUT_ERROR

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0])


class NotApplicable(SynthError):
    """An algorithm that does not apply to this topology/collective (e.g. ring without a cycle)."""


class VerificationError(SynthError):
    """A schedule (or XML program) that breaks the collective's semantics or the topology's limits.

    ``reason`` is a stable machine-readable tag (``missing``, ``not_held``, ``no_link``,
    ``double_count``, ``bandwidth``, ...) so tests and callers can tell the kinds apart. Its exit
    code is 1: the input was well formed, the verdict is negative.
    """

    exit_code = VERIFY_FAILED

    def __init__(self, reason: str, message: str, *, step: int | None = None,
                 rank: int | None = None, chunk: int | None = None) -> None:
        where = ", ".join(
            f"{k} {v}" for k, v in (("step", step), ("rank", rank), ("chunk", chunk)) if v is not None
        )
        super().__init__(f"{reason}: {message}" + (f" ({where})" if where else ""))
        self.reason = reason
        self.step = step
        self.rank = rank
        self.chunk = chunk


def unknown_name(kind: str, name: str, known: Iterable[str]) -> SynthError:
    """An 'unknown X' error that suggests the closest known names."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return SynthError(f"unknown {kind} '{name}'{hint} (known: {', '.join(known)})")


def number_field(value: object, what: str, *, allow_zero: bool) -> float:
    """A calibration or model figure as a float: finite, non-negative, and positive unless
    ``allow_zero``; anything else is an input error naming ``what`` (shared by every reader of
    such figures, so they refuse the same values with the same words)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SynthError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise SynthError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v
