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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from . import progress
from .errors import SynthError
from .schema import field_name, short

try:
    from yaml.cyaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None

MAX_INPUT_BYTES = 256 * 2**20
"""The largest input file synth reads (256 MiB). The biggest real inputs -- schedule JSON and XML of
the largest shipped machines, nccl-tests logs -- are a few MB; a larger file is a mistake (a core
dump, a tensor) that would otherwise be read whole into memory before failing."""

MAX_YAML_BYTES = 2 * 2**20
"""The largest YAML text synth parses (2 MiB). PyYAML builds a few hundred kilobytes of dense YAML
(a list of links, a table of chunks) per second, so a YAML file at :data:`MAX_INPUT_BYTES` would
take many minutes; synth's YAML inputs (topologies, sketches, custom collectives) are kilobytes
(the largest shipped topology, trn2_64, is 23 KB), and a big one can be written as JSON, which is
read at C speed."""

MAX_INT = 2**64 - 1
"""The largest whole number (in magnitude) an input file may hold: the largest a synth input means is
a 64-bit byte count (an MSCCL++ plan's ``max_message_size`` is 2^64 - 1). Bigger numbers are typos or
attacks that overflow every later ``float()`` and, past 4300 digits, Python's own ``int()``."""

MAX_DIGITS = 40
"""Literals longer than this (digits, signs, ``_`` separators, YAML's base-60 ``1:30``) are not
converted at all: the number would be refused anyway, and converting a 100,000-part base-60 literal
is quadratic."""

MAX_DEPTH = 100
"""The deepest nesting an input file may have. synth's formats nest about six levels (an MSCCL++
plan: gpus, threadblocks, ops, buffers); readers and validators recurse, so a deeper document is
refused here rather than as a RecursionError somewhere later."""

MAX_ALIAS_VALUES = 100_000
"""How many values YAML aliases (``*name``) may add to a document beyond what the file spells out.
Shared link classes or merge keys add a few dozen; nine nested aliases of nine ("billion laughs")
add 3.9 * 10^8 and would hang every reader that walks the data."""


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
    ``meta``), whose figures were never user input. Whole numbers beyond :data:`MAX_INT` and nesting
    deeper than :data:`MAX_DEPTH` are refused either way.
    """
    if fmt != "json" and len(text) > MAX_YAML_BYTES:
        raise SynthError(f"{source}: {len(text) / 2**20:.1f} MiB of YAML; synth parses YAML files "
                         f"up to {MAX_YAML_BYTES // 2**20} MiB (its parser is slow): write a file "
                         "this large as JSON (a .json suffix)")
    try:
        data = _load_json(text, source) if fmt == "json" else load_yaml(text, source)
    except yaml.YAMLError as exc:
        raise SynthError(_yaml_error(exc, source)) from None
    except json.JSONDecodeError as exc:
        raise SynthError(f"{source}:{exc.lineno}: not valid JSON: {exc.msg} (line {exc.lineno}, "
                         f"column {exc.colno})") from None
    except RecursionError:
        raise SynthError(f"{source}: nested more than {MAX_DEPTH} levels deep; synth's input "
                         "formats nest a few levels") from None
    except MemoryError:
        raise SynthError(f"{source}: too large to hold in memory as {fmt.upper()} data") from None
    check_values(data, source, finite=finite)
    return data


def check_values(data: Any, source: str, where: str = "", *, finite: bool = True) -> None:
    """Raise a SynthError naming the first value (in document order) no synth input may hold,
    anywhere in ``data``, mapping keys included: a non-finite float (unless ``finite=False``), a
    whole number beyond :data:`MAX_INT`, or nesting deeper than :data:`MAX_DEPTH`.

    The walk is iterative and visits each value once per place it appears; YAML aliases are bounded
    while parsing (:data:`MAX_ALIAS_VALUES`) and can form no cycle, so it always ends.
    """
    base = [where] if where else []
    problem = _value_problem(data, finite)
    if problem is not None:
        raise SynthError(f"{source}: field '{_field(base)}': {problem}")
    if not isinstance(data, (dict, list)):
        return
    stack: list[Iterator[tuple[Any, Any]]] = [_entries(data)]
    keys: list[Any] = []  # keys[i]: where stack[i + 1]'s container sits in stack[i]'s
    while stack:
        for key, value in stack[-1]:
            if type(key) is not int and type(key) is not str:
                key_problem = _value_problem(key, finite)
                if key_problem is not None:
                    raise SynthError(f"{source}: field '{_field([*base, *keys, key])}': the key "
                                     f"{key_problem}")
            kind = type(value)
            if kind is str or (kind is int and -MAX_INT <= value <= MAX_INT):
                continue
            if kind is dict or kind is list or isinstance(value, (dict, list)):
                if len(keys) + 1 >= MAX_DEPTH:
                    raise SynthError(f"{source}: field '{_field([*base, *keys, key])}': nested "
                                     f"more than {MAX_DEPTH} levels deep; synth's input formats "
                                     "nest a few levels")
                keys.append(key)
                stack.append(_entries(value))
                break
            problem = _value_problem(value, finite)
            if problem is not None:
                raise SynthError(f"{source}: field '{_field([*base, *keys, key])}': {problem}")
        else:
            stack.pop()
            if keys:
                keys.pop()


def _entries(container: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def _value_problem(value: Any, finite: bool) -> str | None:
    """What is wrong with one scalar (None when nothing is)."""
    if isinstance(value, float):
        if finite and not math.isfinite(value):
            return f"{value} is not a finite number"
    elif isinstance(value, _HugeNumber):
        return (f"{value.text[:12]}... ({len(value.text)} characters) is too large a number; synth "
                f"reads whole numbers up to 2^64 - 1")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        text = str(value)
        shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"
        return f"{shown} is too large a number; synth reads whole numbers up to 2^64 - 1"
    return None


def _field(at: list[Any]) -> str:
    return field_name(at)


class _HugeNumber:
    """A numeric literal too long to convert (over :data:`MAX_DIGITS` characters), kept as text
    until :func:`check_values` names the field that holds it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __hash__(self) -> int:
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _HugeNumber) and other.text == self.text

    def __repr__(self) -> str:
        return f"{self.text[:12]}...({len(self.text)} characters)"


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _yaml_error(exc: yaml.YAMLError, source: str) -> str:
    """``file:line: not valid YAML: <problem> (line L, column C; <context> on line K)``.

    PyYAML's own text spans lines, names the stream ``"<unicode string>"`` and quotes the source
    line with a caret; the marks hold what a person needs.
    """
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return f"{source}: not valid YAML: {_one_line(exc)}"
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        where += f"; {context} begun on line {context_mark.line + 1}"
    elif context:
        where += f"; {context}"
    return f"{source}:{mark.line + 1}: not valid YAML: {' '.join(problem.split())} ({where})"


class _Strict:
    """PyYAML's safe loading, made safe for input from anyone (mixed into :class:`_StrictLoader`).

    * A key repeated in one mapping is an error.
    * An alias inside the node it names (``&a [*a]``, a recursive document) is an error: every
      later walk of the data would never end.
    * Aliases may add at most :data:`MAX_ALIAS_VALUES` values to the document (billion laughs).
    * Integer literals over :data:`MAX_DIGITS` characters are not converted (see
      :class:`_HugeNumber`).
    * Only JSON's kinds of value come out: an unquoted date stays a string (as in YAML 1.2 and
      JSON), and ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs``, ``!!timestamp`` are refused;
      those values would reach a schema, ``json.dumps`` or a file name as bytes, dates or sets.
    """

    source = "input"
    _open_anchors: set[str]
    _aliases: int

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise SynthError(f"{self.source}: line {event.start_mark.line + 1}: alias "
                                 f"'*{event.anchor}' is inside the node '&{event.anchor}' it names "
                                 "(a recursive YAML document); synth inputs are trees")
            self._aliases += 1
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.discard(anchor)

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None and self._aliases:
            _check_alias_expansion(node, self.source)
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        if len(node.value) > MAX_DIGITS:
            return _HugeNumber(node.value)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> Any:
        if ":" in node.value and len(node.value) > MAX_DIGITS:  # base 60: one multiply per part
            return _HugeNumber(node.value)
        return super().construct_yaml_float(node)

    def refuse_tag(self, node: yaml.Node) -> Any:
        raise SynthError(f"{self.source}: line {node.start_mark.line + 1}: YAML tag '{node.tag}' "
                         "is not allowed; synth inputs hold numbers, strings, true/false, null, "
                         "lists and mappings")

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
                shown = key if len(str(key)) <= 60 else short(key)
                raise SynthError(f"{self.source}: duplicate key '{shown}' on line {line} (first on "
                                 f"line {seen}); a repeated key would silently keep its last value")
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


if _CParser is not None:
    class _StrictLoader(_Strict, Composer, _CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        """libyaml scans and parses (in C, iteratively: about 3 times faster than PyYAML's Python
        parser, and deep nesting costs no C stack); PyYAML's Python composer builds the nodes, so
        :class:`_Strict` sees every alias and deep nesting ends in a RecursionError."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)
            self._open_anchors = set()
            self._aliases = 0
else:  # pragma: no cover - PyYAML built without libyaml
    class _StrictLoader(_Strict, yaml.SafeLoader):  # type: ignore[no-redef]
        """PyYAML's safe loader in pure Python."""

        def __init__(self, stream: str) -> None:
            yaml.SafeLoader.__init__(self, stream)
            self._open_anchors = set()
            self._aliases = 0


for _tag in ("binary", "set", "omap", "pairs", "timestamp"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _StrictLoader.refuse_tag)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
# an unquoted 2024-01-01 is the string it looks like (YAML 1.2, JSON), not a datetime.date
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _check_alias_expansion(root: yaml.Node, source: str) -> None:
    """Refuse a document whose aliases add more than :data:`MAX_ALIAS_VALUES` values.

    Counts, for every node, the values it stands for once every alias is expanded (memoised per
    node, so the count costs one visit of each distinct node, however large the expansion).
    """
    expanded: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in expanded:
            continue
        children = _children(node)
        if done or not children:
            expanded[id(node)] = 1 + sum(expanded[id(c)] for c in children)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in expanded)
    total, distinct = expanded[id(root)], len(expanded)
    if total - distinct > MAX_ALIAS_VALUES:
        raise SynthError(f"{source}: YAML aliases expand the document to {total} values (the file "
                         f"spells out {distinct}); synth allows at most {MAX_ALIAS_VALUES} more "
                         "through aliases (is this a 'billion laughs' file?)")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


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

    def number(text: str) -> Any:
        return _HugeNumber(text) if len(text) > MAX_DIGITS else int(text)

    # the hook costs a call per integer: only a text with a long run of digits needs it
    long_digits = _LONG_DIGITS.search(text) is not None
    return json.loads(text, object_pairs_hook=pairs, parse_int=number if long_digits else None)


_LONG_DIGITS = re.compile(f"[0-9]{{{MAX_DIGITS + 1}}}")


def dumps_json(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` that always writes valid JSON: a non-finite float becomes ``null``.

    Inputs are checked to be finite, but a derived figure can still be infinite (an ``algbw`` of a
    zero-time schedule); JSON has no spelling for it, and ``Infinity`` breaks every strict reader.
    """
    return json.dumps(finite_or_null(data), allow_nan=False, **kwargs)


def finite_or_null(value: Any) -> Any:
    """``value`` with every non-finite float (in lists, tuples and dicts) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value
