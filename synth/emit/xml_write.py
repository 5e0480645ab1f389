"""Write a :class:`~synth.emit.program.Program` as MSCCL-IR XML the runtimes' tokenizer accepts.

Lexical rules (``docs/reference/msccl-xml-spec.md`` §1): no XML declaration, ``<algo>`` first,
one start tag per line indented with spaces only, exactly one space before each attribute,
double-quoted values without ``"`` (nor ``<``, ``>``, ``&``: no entity decoding), self-closing
``<step .../>`` without a space before ``/>``, plain decimal integers, at most 16 attributes with
the required ones first. Per-profile spellings and attributes (§2.1): ``exec`` (msccl-executor-
nccl) and ``rccl`` (ROCm/rccl) spell ``reducescatter`` and need ``outofplace``, ``minBytes`` and
``maxBytes``; ``legacy`` (microsoft/msccl) spells ``reduce_scatter``, has no ``outofplace`` and
reads ``maxBytes=0`` as "never selected", so an unbounded range is written as the int64 maximum.
Hard limits (§6) are checked first: a program that does not fit raises SynthError naming the
limit and by how much.
"""

from __future__ import annotations

import re

from ..errors import SynthError
from .program import PROTOCOLS, Program
from .runtimes import (
    MAX_ATTR_COUNT,
    MAX_DEPID,
    MAX_OFFSET,
    MSCCL_MAX_COUNT,
    MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL,
    get_profile,
)
from .runtimes import MAX_NODES as TOKENIZER_MAX_NODES

MAX_COUNT = MSCCL_MAX_COUNT - 1
"""A step's ``cnt`` at most."""
MAX_NODES = TOKENIZER_MAX_NODES - 1
"""Per rank, 1 + gpus + tbs + steps at most: what the tokenizer stores (MAX_NODES - 1), as
:mod:`.xml_parse` checks on reading."""
INT64_MAX = (1 << 63) - 1
_VALUE_OK = re.compile(r'^[^"<>&\t\n\r]{0,255}$')
ALGO_BOUNDS = re.compile(r' (minBytes|maxBytes)="[^"]*"')
"""A ``minBytes``/``maxBytes`` attribute as :func:`program_to_xml` writes it on the ``<algo>`` tag
(group 1: its name): what a range's file changes in its program's text (:func:`synth.emit.
variants.with_bounds`) and what a timing key leaves out (:func:`synth.timing.program_store.
text_digest`)."""


def coll_name(kind: str, profile: str) -> str:
    """The ``coll`` attribute for ``kind`` in ``profile``; SynthError if the runtime has none."""
    lim = get_profile(profile)
    name = kind
    if kind in ("reducescatter", "reduce_scatter"):
        name = "reduce_scatter" if profile == "legacy" else "reducescatter"
    if name not in lim.colls:
        raise SynthError(f"the {profile} runtime has no collective '{kind}' (it knows "
                         f"{', '.join(lim.colls)})")
    return name


def _over(what: str, value: int, limit: int, const: str, profile: str, where: str = "") -> SynthError:
    at = f" ({where})" if where else ""
    return SynthError(f"{what} is {value}{at}; the {profile} runtime allows at most {limit} "
                      f"({const}): {value - limit} over")


def check_limits(program: Program, profile: str = "exec") -> None:
    """Raise SynthError naming the first hard limit of ``profile`` the program exceeds."""
    lim = get_profile(profile)
    p = program
    if p.proto not in PROTOCOLS:
        raise SynthError(f"proto '{p.proto}' is not one of {', '.join(PROTOCOLS)}")
    coll_name(p.coll, profile)
    if p.nchannels > lim.max_channels:
        raise _over("nchannels", p.nchannels, lim.max_channels, "MAXCHANNELS", profile)
    if p.min_bytes < 0 or p.max_bytes < 0 or (p.max_bytes and p.min_bytes > p.max_bytes):
        raise SynthError(f"byte range minBytes={p.min_bytes} maxBytes={p.max_bytes} is invalid: "
                         "need 0 <= minBytes <= maxBytes (maxBytes 0 = unbounded)")
    for g in p.gpus:
        if len(g.tbs) > lim.max_tbs:
            raise _over("threadblocks per rank", len(g.tbs), lim.max_tbs,
                        "MSCCL_MAX_NUM_THREAD_BLOCKS", profile, f"rank {g.id}")
        if len(g.tbs) - 1 > MAX_DEPID:
            worst = max((st.depid for tb in g.tbs for st in tb.steps), default=-1)
            if worst > MAX_DEPID:
                raise _over("a dependency's depid", worst, MAX_DEPID, "int8 depid", profile,
                            f"rank {g.id}")
        nodes = 1 + len(p.gpus) + len(g.tbs) + sum(len(tb.steps) for tb in g.tbs)
        if nodes > MAX_NODES:
            raise _over("the tokenizer node count (1 + gpus + tbs + steps)", nodes, MAX_NODES,
                        "MAX_NODES - 1", profile, f"rank {g.id}")
        per_chan: dict[tuple[int, str], int] = {}
        for tb in g.tbs:
            if tb.chan >= p.nchannels:
                raise SynthError(f"rank {g.id} threadblock {tb.id} uses channel {tb.chan} but "
                                 f"nchannels is {p.nchannels}")
            for side, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer >= 0:
                    per_chan[(tb.chan, side)] = per_chan.get((tb.chan, side), 0) + 1
            if len(tb.steps) > lim.max_steps:
                raise _over("steps in one threadblock", len(tb.steps), lim.max_steps,
                            "MSCCL_MAX_NUM_STEPS", profile, f"rank {g.id} tb {tb.id}")
            for st in tb.steps:
                if st.type != "nop" and not 1 <= st.cnt <= MAX_COUNT:
                    raise _over("a step's cnt", st.cnt, MAX_COUNT, "MSCCL_MAX_COUNT - 1", profile,
                                f"rank {g.id} tb {tb.id} step {st.s}")
                for off in (st.srcoff, st.dstoff):
                    if off + max(st.cnt, 1) - 1 > MAX_OFFSET:
                        raise _over("a chunk offset", off + st.cnt - 1, MAX_OFFSET, "int16 offsets",
                                    profile, f"rank {g.id} tb {tb.id} step {st.s}")
        for (chan, side), count in sorted(per_chan.items()):
            if count > MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL:
                raise _over(f"{side}-side threadblocks on channel {chan}", count,
                            MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL,
                            "MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL", profile, f"rank {g.id}")


def _attrs(pairs: list[tuple[str, object]], element: str) -> str:
    if len(pairs) > MAX_ATTR_COUNT:
        raise SynthError(f"<{element}> would have {len(pairs)} attributes; the runtimes' tokenizer "
                         f"keeps {MAX_ATTR_COUNT} (MAX_ATTR_COUNT)")
    out = []
    for key, value in pairs:
        text = str(value)
        if not _VALUE_OK.match(text):
            raise SynthError(f"attribute {key} of <{element}> = {text!r} cannot be written: values "
                             'must be at most 255 characters without ", <, >, & or control characters')
        out.append(f' {key}="{text}"')
    return "".join(out)


def program_to_xml(program: Program, profile: str = "exec") -> str:
    """The program as MSCCL-IR XML for ``profile`` (``exec``, ``rccl`` or ``legacy``)."""
    lim = get_profile(profile)
    check_limits(program, profile)
    p = program
    max_bytes = p.max_bytes
    if profile == "legacy" and max_bytes == 0:
        max_bytes = INT64_MAX
    head: list[tuple[str, object]] = [
        ("name", p.name), ("proto", p.proto), ("nchannels", p.nchannels),
        ("nchunksperloop", p.nchunksperloop), ("ngpus", p.ngpus), ("coll", coll_name(p.coll, profile)),
        ("inplace", p.inplace)]
    if lim.outofplace_attr:
        head.append(("outofplace", p.outofplace))
    head += [("minBytes", p.min_bytes), ("maxBytes", max_bytes)]
    known = {k for k, _ in head}
    head += [(k, v) for k, v in p.extra if k not in known]
    lines = [f"<algo{_attrs(head, 'algo')}>"]
    for g in p.gpus:
        lines.append(f'  <gpu id="{g.id}" i_chunks="{g.i_chunks}" o_chunks="{g.o_chunks}" '
                     f's_chunks="{g.s_chunks}">')
        for tb in g.tbs:
            lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            lines.extend(
                f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                f'deps="{st.deps}" hasdep="{st.hasdep}"/>'
                for st in tb.steps)
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"
