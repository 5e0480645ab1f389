"""Files at the boundary: inputs read with one clear error, outputs written atomically (a reader, or
a crash, never sees a half-written file).

Every command that reads a user's file goes through :func:`read_input` (text) or :func:`read_data`
(YAML/JSON), so whatever the bytes -- a folder, a device, a pipe, a huge or empty file, Latin-1 or
random bytes, a duplicate key, ``.inf`` -- the user gets one line and exit code 2, never a traceback
or a hang. Outputs go through :func:`atomic_write`, which respects the umask like ``open`` does.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from . import progress
from .errors import SynthError

MAX_INPUT_BYTES = 256 * 2**20
"""The largest input file synth reads (256 MiB). The biggest real inputs -- schedule JSON and XML of
the largest shipped machines, nccl-tests logs -- are a few MB; a larger file is a mistake (a core
dump, a tensor) that would otherwise be read whole into memory before failing."""


# ------------------------------------------------------------------------------------ outputs
def ensure_writable_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it is writable; call it only right before writing."""
    check_writable_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SynthError(f"cannot create output folder '{path}': {exc.strerror or exc}") from None
    if not path.is_dir():
        raise SynthError(f"output path '{path}' exists and is not a folder")
    if not os.access(path, os.W_OK | os.X_OK):
        raise SynthError(f"output folder '{path}' is not writable")
    return path


def check_writable_dir(path: Path) -> Path:
    """Prove that ``path`` is, or could be created as, a writable folder -- without creating it.

    Commands call this before any work, so a bad ``--out`` fails in a second, and create the folder
    only when they write into it (:func:`ensure_writable_dir`): a failed run leaves nothing behind.
    """
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise SynthError(f"output path '{path}': '{probe}' is a dangling link")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if not probe.is_dir():
        if probe == path:
            raise SynthError(f"output path '{path}' exists and is not a folder")
        raise SynthError(f"cannot create output folder '{path}': '{probe}' is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SynthError(f"output folder '{probe}' is not writable" if probe == path else
                         f"cannot create output folder '{path}': '{probe}' is not writable")
    if _pseudo_filesystem(probe):
        raise SynthError(f"output folder '{path}' is on a kernel pseudo-filesystem ('{probe}'); "
                         "pick a real folder")
    return path


def check_output_file(path: Path, option: str) -> Path:
    """Prove a single output file (``--plot``, ``--trace``) can be written, before any work.

    Its folder must already exist: a file option names a file, and a typo in its folder should not
    quietly create a tree of folders (``--plot /nonexistent/x.png``).
    """
    path = Path(path)
    if path.is_dir():
        raise SynthError(f"{option} '{path}' is a folder; give a file name")
    if not path.parent.is_dir():
        raise SynthError(f"{option} '{path}': folder '{path.parent}' does not exist")
    check_writable_dir(path.parent)
    return path


def _pseudo_filesystem(path: Path) -> bool:
    """Whether ``path`` lies in /proc or /sys, which accept no new files (even from root)."""
    resolved = path.resolve()
    return any(resolved == Path(root) or Path(root) in resolved.parents for root in ("/proc", "/sys"))


def _umask() -> int:
    """The process umask (read by setting it, then restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, text: str | bytes) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    The temporary file is private while it is written (``mkstemp`` makes it 0600); before the rename
    it gets the mode ``open`` would have given a new file, ``0666 & ~umask``, so another user's job
    can read the result whenever the umask allows it.
    """
    with progress.span("write"):
        return _atomic_write(Path(path), text)


def _atomic_write(path: Path, text: str | bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if isinstance(text, bytes):
            with os.fdopen(fd, "wb") as handle:
                handle.write(text)
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SynthError(f"cannot write '{path}': {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_all(out_dir: Path, outputs: Sequence[tuple[Path, str | bytes]]) -> list[Path]:
    """Write several files as one unit: all of them, or none (issue 12, "nothing half-written").

    ``out_dir`` is created only now (:func:`ensure_writable_dir`). Every file is first written to a
    temporary file beside its target; only when all of them are written are they renamed into
    place. A failure while writing (disk full, a permission) removes the temporary files and any
    folder this call created, so the disk is as it was; a failure while renaming (rare: renames
    within a folder do not need space) also removes the files already renamed into place.
    Modes respect the umask, as in :func:`atomic_write`.
    """
    with progress.span("write"):
        return _write_all(Path(out_dir), outputs)


def _write_all(out_dir: Path, outputs: Sequence[tuple[Path, str | bytes]]) -> list[Path]:
    created = _missing_ancestors(out_dir)
    ensure_writable_dir(out_dir)
    temps: list[tuple[str, Path]] = []
    placed: list[Path] = []
    mode = 0o666 & ~_umask()
    current = out_dir
    try:
        for path, text in outputs:
            path = current = Path(path)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append((tmp, path))
            data = text if isinstance(text, bytes) else text.encode("utf-8")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode)
        for tmp, path in temps:
            current = path
            os.replace(tmp, path)
            placed.append(path)
    except BaseException as exc:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        for path in placed:
            path.unlink(missing_ok=True)
        for folder in created:       # deepest first; only folders this call made, and only empty
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(exc, OSError):
            raise SynthError(f"cannot write '{current}': {exc.strerror or exc}; none of this "
                             "run's files were kept") from None
        raise
    return placed


def _missing_ancestors(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    probe = Path(path)
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    return missing


# ------------------------------------------------------------------------------------ inputs
def read_input(path: str | Path, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of an input file, or a SynthError naming it and saying what is wrong.

    The file is checked with ``stat`` before it is opened, so a folder, a device (``/dev/zero``) or
    a pipe is refused without reading (a pipe would block); at most ``max_bytes + 1`` bytes are ever
    read (``/proc`` files report size 0). Text is UTF-8 (a BOM is allowed); newlines are normalized
    as ``open`` does in text mode.
    """
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise SynthError(f"{what} '{p}' does not exist") from None
    except OSError as exc:
        raise SynthError(f"cannot read {what} '{p}': {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise SynthError(f"{what} '{p}' is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise SynthError(f"{what} '{p}' is not a regular file (a device, pipe or socket)")
    too_big = SynthError(f"{what} '{p}' is larger than {max_bytes // 2**20} MiB, the most synth "
                         "reads from one input file")
    if info.st_size > max_bytes:
        raise too_big
    try:
        with open(p, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise SynthError(f"cannot read {what} '{p}': {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise too_big
    if not data.strip():
        raise SynthError(f"{what} '{p}' is empty")
    if b"\0" in data:
        raise SynthError(f"{what} '{p}' is a binary file, not text (it contains NUL bytes)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SynthError(f"{what} '{p}' is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_data(path: str | Path, what: str = "file", fmt: str | None = None) -> Any:
    """Parse a YAML or JSON input file into plain data (``fmt``: 'json', 'yaml' or by suffix).

    Duplicate keys and non-finite numbers (``.inf``, ``NaN``, ``1e999``) are errors: a duplicate
    would silently keep its last value, and a non-finite figure turns every predicted time into
    ``inf``/``nan`` (and ``--json`` output into invalid JSON).
    """
    p = Path(path)
    text = read_input(p, what)
    if fmt is None:
        fmt = "json" if p.suffix == ".json" else "yaml"
    return parse_data(text, str(p), fmt)


def parse_data(text: str, source: str, fmt: str = "yaml", *, finite: bool = True) -> Any:
    """:func:`read_data` for text already in hand; ``source`` names it in errors.

    ``finite=False`` skips the non-finite check, for files synth wrote itself (a schedule's free-form
    ``meta``), whose figures were never user input.
    """
    try:
        data = _load_json(text, source) if fmt == "json" else load_yaml(text, source)
    except yaml.YAMLError as exc:
        raise SynthError(f"{source}: not valid YAML: {_one_line(exc)}") from None
    except json.JSONDecodeError as exc:
        raise SynthError(f"{source}: not valid JSON: {exc}") from None
    except RecursionError:
        raise SynthError(f"{source}: nested too deeply to be a synth input") from None
    if finite:
        check_finite(data, source)
    return data


def check_finite(data: Any, source: str, where: str = "") -> None:
    """Raise a SynthError naming the first non-finite float anywhere in ``data``."""
    stack = [(where, data)]
    while stack:
        at, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            field = at or "(top level)"
            raise SynthError(f"{source}: field '{field}': {value} is not a finite number")
        if isinstance(value, dict):
            stack.extend((f"{at}.{k}" if at else str(k), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{at}.{i}" if at else str(i), v) for i, v in reversed(list(enumerate(value))))


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error."""

    source = "input"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<' merges may be overridden by explicit keys, as YAML intends
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first_line.get(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            line = key_node.start_mark.line + 1
            if seen is not None:
                raise SynthError(f"{self.source}: duplicate key '{key}' on line {line} (first on "
                                 f"line {seen}); a repeated key would silently keep its last value")
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads '1e3' and '2.5e-3' without a dot before the exponent as strings; people
# (and JSON, and YAML 1.2) write floats that way, so the loader also resolves them as floats. Ints
# and dotted floats keep PyYAML's own resolvers, which are tried first.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str, source: str) -> Any:
    """YAML text to plain data with the safe loader; a duplicate key is a SynthError."""
    loader = _StrictLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _load_json(text: str, source: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise SynthError(f"{source}: duplicate key '{key}'; a repeated key would silently "
                                 "keep its last value")
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=pairs)


def dumps_json(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` that always writes valid JSON: a non-finite float becomes ``null``.

    Inputs are checked to be finite, but a derived figure can still be infinite (an ``algbw`` of a
    zero-time schedule); JSON has no spelling for it, and ``Infinity`` breaks every strict reader.
    """
    return json.dumps(_finite_or_null(data), allow_nan=False, **kwargs)


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value
