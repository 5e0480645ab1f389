"""The compiled forms of one schedule worth timing: protocol, instances, channels, reductions.

One verified schedule runs at very different speeds depending on how it is compiled, and no one
form is fastest at every size. On 8 x H100 (``dgx_h100``, the timed program model,
``docs/notes/msccl-production-files.md``): LL's launch is 6.6 µs against Simple's 8.4 µs plus
2.8 µs a hop, but an LL block copies at 12.9 GB/s against Simple's 38.7 GB/s and half of every LL
line is flags, so small messages want LL and large ones Simple; more instances put more blocks on a
link (bandwidth) but more messages on the path; spreading a ring's chunks over channels gives each
block fewer steps, hence fewer per-message costs (MSCCL's ``r48ll128`` against the same ring on
one channel per instance: 101.1 against 117.4 µs at 16 MB); gathering an all-pairs reduction into
scratch lets its receives run at once (``ap4ll``'s shape). :func:`xml_variants` compiles each
combination through :func:`synth.emit.emit_verified_program` -- every variant is an
interpreter-verified XML text -- and drops the ones that fail a limit (with the reason) or
duplicate an earlier variant's text. Choosing among them per size is the caller's (it times each
with :mod:`synth.timing.program`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import SynthError, VerificationError
from ..schedule import Schedule
from ..topology import Topology
from . import XmlOptions, emit_verified_program, verify_text, xml_unsupported_reason
from .program import PROTOCOLS, Program
from .runtimes import get_profile
from .xml_parse import remember_parsed
from .xml_write import ALGO_BOUNDS, program_to_xml

INSTANCES = (1, 2, 4, 8, 16, 32)
"""Instance counts tried by default: powers of two up to the runtime's 32 channels (MAXCHANNELS);
those whose product with the channels exceeds it are skipped."""


@dataclass(frozen=True)
class XmlVariant:
    """One compiled form of a schedule: the options, the verified text and its parsed program."""

    algorithm: str
    options: XmlOptions
    xml: str
    program: Program
    reports: tuple

    @property
    def name(self) -> str:
        return variant_name(self.algorithm, self.options)

    def for_sizes(self, schedule: Schedule, min_bytes: int, max_bytes: int) -> str:
        """This variant's program as the file for ``min_bytes..max_bytes`` (0: unbounded): the
        same steps that were timed with only the size range set, verified again. Compiling the
        schedule anew with those bounds could give another program (the deadlock check and the
        compiler's choice of form use ``max_bytes``); a program compiled for sizes up to
        ``options.max_bytes`` (0: every size) runs at any size up to it, so the range must stay
        within that."""
        return program_for_sizes(self.program, schedule, self.options, min_bytes, max_bytes,
                                 self.name, self.xml)[0]

    @property
    def threadblocks(self) -> int:
        """Blocks of the busiest rank (each is an SM the collective holds while it runs)."""
        return max(len(g.tbs) for g in self.program.gpus)


def program_for_sizes(program: Program, schedule: Schedule, options: XmlOptions, min_bytes: int,
                      max_bytes: int, name: str = "the program", text: str | None = None
                      ) -> tuple[str, list]:
    """``program`` (compiled from ``schedule`` with ``options``) as the file for
    ``min_bytes..max_bytes`` (0: unbounded; the profile's own convention): the same steps with
    only ``minBytes``/``maxBytes`` set, verified again. Returns the text and the interpreter's
    reports. See :meth:`XmlVariant.for_sizes` for why the program is not compiled anew.

    ``text``: the text ``program`` was parsed from, where the caller has it. Where the new file is
    that text with only its ``<algo>`` tag's bounds changed (:func:`with_bounds`, compared byte
    for byte), its parse is ``program`` with only ``min_bytes``/``max_bytes`` changed -- the parser
    reads those two attributes into those two fields and nothing else from them, and digits
    inside an attribute's quotes change none of the lexical rules -- so that is what the proof
    takes (:func:`synth.emit.xml_parse.remember_parsed`) instead of parsing the file again: the
    interpreter still runs on it, its ``M`` depends on ``maxBytes``. Measured on ``synth solve
    --topo dgx_h100 --nodes 64 --coll allgather``: five such parses of 62-117 MB files, 34.5 s of
    the solving process."""
    if min_bytes < 0 or max_bytes < 0 or (max_bytes and min_bytes > max_bytes):
        raise SynthError(f"bad size range {min_bytes}..{max_bytes} (0 = unbounded)")
    bound = options.max_bytes
    if bound and (max_bytes == 0 or max_bytes > bound):
        raise SynthError(f"{name} was compiled for sizes up to {bound} bytes; it cannot "
                         f"serve up to {max_bytes or 'any size'}")
    ranged = replace(program, min_bytes=min_bytes, max_bytes=max_bytes)
    out = program_to_xml(ranged, options.profile)
    if text is not None and with_bounds(text, min_bytes, max_bytes) == out:
        remember_parsed(out, options.profile, ranged)
    _, reports = verify_text(out, schedule, options)
    return out, reports


def with_bounds(text: str, min_bytes: int, max_bytes: int) -> str | None:
    """``text`` with its ``<algo>`` tag's ``minBytes`` and ``maxBytes`` set to these values (None
    where the tag does not hold exactly one of each)."""
    end = text.find(">")
    if end < 0:
        return None
    head = text[:end]
    found = [m[1] for m in ALGO_BOUNDS.finditer(head)]
    if sorted(found) != ["maxBytes", "minBytes"]:
        return None
    values = {"minBytes": min_bytes, "maxBytes": max_bytes}
    return ALGO_BOUNDS.sub(lambda m: f' {m[1]}="{values[m[1]]}"', head) + text[end:]


@dataclass(frozen=True)
class VariantSet:
    """What :func:`xml_variants` compiled, and why the other combinations are absent."""

    variants: tuple[XmlVariant, ...]
    skipped: tuple[str, ...]
    """One line per combination that broke a limit or duplicated a variant already kept."""


def variant_name(algorithm: str, options: XmlOptions) -> str:
    """``algorithm proto xI[ chC][ gather][ bundled|per-chunk]``, e.g. ``ring LL128 x4 ch8``."""
    parts = [algorithm, options.proto, f"x{options.instances}"]
    if options.channels:
        parts.append(f"ch{options.channels}")
    if options.gather:
        parts.append("gather")
    if options.aggregate is not None:
        parts.append("bundled" if options.aggregate else "per-chunk")
    return " ".join(parts)


def has_gathered_reductions(schedule: Schedule) -> bool:
    """Whether some step has several ranks reducing into one chunk of one rank (only then does
    ``gather`` change the program)."""
    for step in schedule.steps:
        seen: set[tuple[int, int]] = set()
        for tr in step.transfers:
            if tr.op != "reduce":
                continue
            key = (tr.dst, tr.chunk)
            if key in seen:
                return True
            seen.add(key)
    return False


def channel_spreads(schedule: Schedule, limit: int) -> tuple[int, ...]:
    """Channel spreads worth trying: 0 (as few as the limits need) and the powers of two from 2 up
    to the most distinct chunks one connection carries (at most one chunk's routes per channel
    there), within ``limit``. A ring of 8 ranks with one chunk each carries 8 chunks on every
    connection: 0, 2, 4, 8."""
    carried: dict[tuple[int, int], set[int]] = {}
    for step in schedule.steps:
        for tr in step.transfers:
            carried.setdefault((tr.src, tr.dst), set()).add(tr.chunk)
    most = max((len(c) for c in carried.values()), default=0)
    out = [0]
    c = 2
    while c <= min(most, limit):
        out.append(c)
        c *= 2
    return tuple(out)


def xml_variants(schedule: Schedule, topology: Topology, *,
                 protocols: Sequence[str] = PROTOCOLS,
                 instances: Sequence[int] = INSTANCES,
                 channels: Sequence[int] | None = None,
                 gather: Sequence[bool] | None = None,
                 aggregate: Sequence[bool | None] = (True, False),
                 base: XmlOptions | None = None) -> VariantSet:
    """Every (protocol, instances, channels, gather, aggregate) compile of ``schedule`` that fits,
    verified.

    ``channels`` defaults to :func:`channel_spreads`, ``gather`` to both settings where the
    schedule has gathered reductions (:func:`has_gathered_reductions`) and off elsewhere;
    ``aggregate`` to both forms the compiler otherwise weighs by block loads (chunks bundled, one
    op per chunk: which is faster depends on the size, which only the caller's timing sees), and
    where one op per chunk breaks a limit, the compiler's own choice (None) besides; ``base``
    (default ``XmlOptions()``) carries the rest (profile, in-place mode, size range, block
    budget). A combination needing more blocks than ``base.max_threadblocks`` is skipped with
    the compiler's reason (one over the runtime's channels is not tried); so is one whose text
    equals a variant already kept (e.g. a spread that changes nothing). Order: protocol, then
    instances, channels, gather, aggregate, as given.
    """
    base = base if base is not None else XmlOptions()
    coll = schedule.collective
    if coll.num_ranks != topology.num_ranks:
        raise SynthError(f"the schedule has {coll.num_ranks} ranks but topology "
                         f"'{topology.name}' has {topology.num_ranks}")
    if schedule.topology_hash and schedule.topology_hash != topology.content_hash:
        raise SynthError(f"the schedule was made for topology '{schedule.topology}', not for "
                         f"'{topology.name}'")
    reason = xml_unsupported_reason(schedule, base)
    if reason:
        raise SynthError(f"cannot emit XML: {reason}")
    for p in protocols:
        if p not in PROTOCOLS:
            raise SynthError(f"unknown protocol '{p}' (known: {', '.join(PROTOCOLS)})")
    max_channels = get_profile(base.profile).max_channels
    spreads = tuple(channels) if channels is not None else channel_spreads(schedule, max_channels)
    gathers = tuple(gather) if gather is not None else (
        (False, True) if has_gathered_reductions(schedule) else (False,))
    kept: list[XmlVariant] = []
    skipped: list[str] = []
    texts: dict[str, str] = {}
    for proto in protocols:
        for inst in instances:
            for spread in spreads:
                if max(spread, 1) * inst > max_channels:
                    continue        # over MAXCHANNELS by construction: not a variant at all
                for g in gathers:
                    forms = list(aggregate)
                    for agg in forms:
                        options = replace(base, proto=proto, instances=inst, channels=spread,
                                          gather=g, aggregate=agg)
                        label = variant_name(schedule.algorithm, options)
                        try:
                            text, program, reports = emit_verified_program(schedule, options)
                        except VerificationError:
                            raise   # the compiler made a wrong program: a bug, never a skip
                        except SynthError as exc:
                            skipped.append(f"{label}: {exc.message}")
                            if agg is False and None not in forms:
                                forms.append(None)  # the compiler's fallback placements
                            continue
                        same = texts.get(text)
                        if same is not None:
                            skipped.append(f"{label}: the same file as {same}")
                            continue
                        texts[text] = label
                        kept.append(XmlVariant(schedule.algorithm, options, text, program,
                                               tuple(reports)))
    return VariantSet(tuple(kept), tuple(skipped))
