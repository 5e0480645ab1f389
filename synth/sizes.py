"""Message sizes: the default sweep, parsing sizes as users write them, printing them back.

Sizes are binary (1KB = 1024 bytes) and follow nccl-tests: the size of the allgather output, the
reducescatter input, the allreduce buffer, the per-rank alltoall buffer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .errors import SynthError

DEFAULT_SIZES = tuple(2**e for e in range(10, 31))
"""1 KB .. 1 GB in powers of two (nccl-tests' sweep); KB = 1024 bytes."""

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20,
          "MIB": 2**20, "G": 2**30, "GB": 2**30, "GIB": 2**30}


MAX_SIZE_BYTES = 2**40
"""The largest message size synth accepts (1 TiB): a collective's buffer lives in one accelerator's
memory, and the largest that synth ships holds 192 GB (AMD Instinct MI300X data sheet: 192 GB
HBM3). A bigger size is a typo; past 2^63 it no longer fits the runtimes' 64-bit byte ranges and
the timed program model would walk billions of slices."""


def parse_size(text: str, most: int | None = MAX_SIZE_BYTES) -> int:
    """'64KB' -> 65536. Sizes are binary, as nccl-tests prints them; read exactly (a float would
    turn 99999999999999999999999 into 99999999999999991611392). ``most``: the largest accepted
    (None: no limit, for amounts that are not message sizes such as host memory)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise SynthError(f"cannot read size '{text}' (examples: 1024, 64KB, 1MB, 4GB)")
    value = int(Fraction(m.group(1)) * _UNITS[m.group(2).upper()])
    if value < 1:
        raise SynthError(f"size '{text}' must be at least 1 byte")
    if most is not None and value > most:
        raise SynthError(f"size '{text}' is {value:,} bytes; synth handles at most {most:,} "
                         "(MAX_SIZE_BYTES, 1 TiB: more than any accelerator's memory)")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1KB:1GB' (powers of two between) or '1KB,1MB,1GB'."""
    if ":" in text:
        lo_text, _, hi_text = text.partition(":")
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if lo > hi:
            raise SynthError(f"size range '{text}' is empty: {lo_text} > {hi_text}")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= 2
        return tuple(sizes)
    return tuple(sorted({parse_size(p) for p in text.split(",") if p.strip()}))


def format_size(nbytes: float) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:g}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{int(nbytes)}B"


def algbw_GBps(sizes: Sequence[int], times_us: np.ndarray) -> np.ndarray:
    """Algorithm bandwidth in GB/s (10^9 bytes/s): message bytes / time."""
    return np.asarray(sizes, dtype=float) / (times_us * 1e3)
