"""LL and LL128 twins: where the compiler makes one program for both protocols, compile it once.

Why they are one program. The passes see the protocol only through
:func:`synth.emit.passes.units_params`: the chunks a message holds (``M``, from ``max_bytes``) and
the FIFO's capacity in messages. A file without an upper size bound (``max_bytes`` 0, how a
solve's scorer compiles every candidate, :class:`synth.select.program_scorer.ProgramScorer`) has
``M`` = 1 whatever the protocol, and LL and LL128 both have 8 FIFO slots; the choice between two
placements (:func:`synth.emit.compile._lighter`) then weighs chunks per block, not messages. So
the LL128 file is the LL file with ``proto`` changed in its ``<algo>`` tag, byte for byte, and
the other way round (``tests/test_proto_twins.py`` compares both against fresh compiles).

A Simple file is their twin too where its compile never found an op blocked by the FIFO's
capacity (:func:`synth.emit.compile.emit_xml` says why: at the larger capacity every check
passes again, so the build is the same), and a refusal of such a compile is theirs as well (the
same program breaks the same limit). Not the other way: an LL build that passed at 8 slots may
not at 2. Measured on ``synth solve --topo dgx_a100 --nodes 8 --coll allgather`` before: the LL
compiles of forms whose Simple compile had been made took 146 s of the scorer's process (rail_blocks
at x1 alone 52 s).

Why it pays: a solve without ``--proto`` times every candidate in Simple, LL and LL128; on
``synth solve --topo dgx_a100 --nodes 2 --coll allgather`` LL128 compiles that had an LL twin
took a third of the compile time.

The texts are kept per process, by the schedule object and the options, up to
:data:`TWIN_CHARS_KEPT` characters (then no more are kept; none is dropped: the scorer compiles
every LL form before any LL128 one, in the same order, so the earliest are the first wanted).
"""

from __future__ import annotations

from typing import Any

from ..schedule import Schedule

TWINS = ("LL", "LL128")
"""The protocols whose unbounded files are one program."""
TWIN_CHARS_KEPT = 256 * 2**20
"""Characters of text kept for twins at most (about 256 MB): two 512-rank files."""

SOURCES = ("Simple",)
"""Protocols whose unbounded file is the twins' where its compile says so (``shared``)."""

_KEPT: dict[tuple[Any, ...], tuple[Schedule, str, str]] = {}
_REFUSED: dict[tuple[Any, ...], tuple[Schedule, str, str]] = {}
_chars = 0


def twin_protocol(proto: str, max_bytes: int) -> str | None:
    """The protocol whose file compiled with the same options is this one's twin, or None."""
    if proto not in TWINS or max_bytes != 0:
        return None
    return TWINS[1 - TWINS.index(proto)]


def _key(schedule: Schedule, options: dict[str, Any], shared: bool = False
         ) -> tuple[Any, ...] | None:
    """The twin key of a compile (None: the protocol shapes this program, no twin); ``shared``:
    the compile of a :data:`SOURCES` protocol says its program is the twins' too."""
    proto = options.get("proto", "")
    if twin_protocol(proto, options.get("max_bytes", 0)) is None and not (
            shared and proto in SOURCES and options.get("max_bytes", 0) == 0):
        return None
    return (id(schedule), tuple(sorted((k, v) for k, v in options.items() if k != "proto")))


def twin_text(schedule: Schedule, options: dict[str, Any]) -> str | None:
    """The file for ``options`` (:func:`synth.emit.compile.emit_xml`'s keywords) made from its
    twin's text already compiled in this process, or None."""
    key = _key(schedule, options)
    hit = _KEPT.get(key) if key is not None else None
    if hit is None or hit[0] is not schedule:
        return None
    _, text, proto = hit
    return text if proto == options["proto"] else with_proto(text, proto, options["proto"])


def twin_refusal(schedule: Schedule, options: dict[str, Any]) -> str | None:
    """The compiler's message refusing this compile, where its twin's compile was refused in
    this process (:func:`keep_refusal`), else None."""
    key = _key(schedule, options)
    hit = _REFUSED.get(key) if key is not None else None
    return None if hit is None or hit[0] is not schedule else hit[1]


def keep(schedule: Schedule, options: dict[str, Any], text: str, shared: bool = False) -> None:
    """Remember ``text``, compiled with ``options``, for its twin (where there is room);
    ``shared``: a :data:`SOURCES` compile whose program is its twins' too."""
    global _chars
    key = _key(schedule, options, shared)
    if key is None or key in _KEPT or _chars + len(text) > TWIN_CHARS_KEPT:
        return
    _KEPT[key] = (schedule, text, options["proto"])   # the schedule held: its id stays its own
    _chars += len(text)


def keep_refusal(schedule: Schedule, options: dict[str, Any], message: str,
                 shared: bool = False) -> None:
    """Remember the compiler's refusal of a compile with ``options`` for its twins (``shared``
    as in :func:`keep`)."""
    key = _key(schedule, options, shared)
    if key is not None and key not in _REFUSED:
        _REFUSED[key] = (schedule, message, options["proto"])


def serves_twins(schedule: Schedule, options: dict[str, Any]) -> bool:
    """Whether this process holds a text or a refusal compiled with ``options`` (its protocol
    included) that its twins can take."""
    key = _key(schedule, options, True)
    return key is not None and any(
        hit is not None and hit[0] is schedule and hit[2] == options["proto"]
        for hit in (_KEPT.get(key), _REFUSED.get(key)))


def with_proto(text: str, old: str, new: str) -> str | None:
    """``text`` with its ``<algo>`` tag's ``proto="old"`` set to ``new`` (None where the tag does
    not hold exactly one such attribute: then compile instead)."""
    end = text.find(">")
    if end < 0:
        return None
    head, needle = text[:end], f' proto="{old}"'
    if head.count(needle) != 1:
        return None
    return head.replace(needle, f' proto="{new}"') + text[end:]


def forget() -> None:
    """Drop every kept text (tests; a long-lived process between unrelated solves)."""
    global _chars
    _KEPT.clear()
    _REFUSED.clear()
    _chars = 0
