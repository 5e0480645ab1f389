"""Files at the boundary: inputs read with one clear error, outputs written atomically (a reader, or
a crash, never sees a half-written file)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import SynthError


def ensure_writable_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it is writable, before any work is done."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SynthError(f"cannot create output folder '{path}': {exc.strerror or exc}") from None
    if not path.is_dir():
        raise SynthError(f"output path '{path}' exists and is not a folder")
    if not os.access(path, os.W_OK | os.X_OK):
        raise SynthError(f"output folder '{path}' is not writable")
    return path


def atomic_write(path: Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        mask = os.umask(0)   # mkstemp creates 0600; the written file follows the umask
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SynthError(f"cannot write '{path}': {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_input(path: str | Path, what: str = "file") -> str:
    """The text of an input file, or a SynthError naming it (missing, unreadable, not text)."""
    p = Path(path)
    if not p.exists():
        raise SynthError(f"{what} '{p}' does not exist")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SynthError(f"cannot read '{p}': {exc}") from None
