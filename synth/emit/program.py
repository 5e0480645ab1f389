"""The MSCCL-IR program model: the in-memory form of an algorithm XML file.

Both directions go through it: the compiler lowers a Schedule to a :class:`Program` and writes it
as XML; the interpreter parses XML into a :class:`Program` and executes it. Field names follow the
XML attributes (see ``docs/reference/msccl-xml-spec.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

Buffer = str
"""``"i"`` (input), ``"o"`` (output) or ``"s"`` (scratch)."""

INSTRUCTIONS = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")


PROTOCOLS = ("Simple", "LL", "LL128")
"""The runtimes' protocols (spec §3.5): the one list every layer takes them from."""

@dataclass(frozen=True)
class Instr:
    """One ``<step>``: ``s`` is its position in the threadblock."""

    s: int
    type: str
    srcbuf: Buffer
    srcoff: int
    dstbuf: Buffer
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0


@dataclass(frozen=True)
class Threadblock:
    """One ``<tb>``: at most one send peer and one receive peer on one channel."""

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Instr, ...]


@dataclass(frozen=True)
class Gpu:
    """One ``<gpu>``: a rank's buffer sizes (in chunks) and its threadblocks."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[Threadblock, ...]


@dataclass(frozen=True)
class Program:
    """One ``<algo>``: the whole file."""

    name: str
    coll: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    inplace: int
    outofplace: int
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    extra: tuple[tuple[str, str], ...] = ()
    """Attributes of ``<algo>`` the runtimes ignore (``redop``, ``nthreads``...), kept as read."""
