"""Size buckets: the message sizes a selection is decided at, and the byte ranges they stand for.

**Buckets.** The requested sizes ``s_0 < s_1 < ... < s_m`` (powers of two for ``1KB:4GB``) are the
buckets' representatives; the boundary between ``s_i`` and ``s_{i+1}`` is just above their
geometric mean, so bucket ``i`` covers ``[e_{i-1}, e_i - 1]`` with ``e_i = isqrt(s_i·s_{i+1}) + 1``,
``e_{-1} = s_0`` and the last bucket ending at ``s_m``. The buckets tile ``[s_0, s_m]`` with no gap
and no overlap, inclusive at both ends (the ``minBytes``/``maxBytes`` semantics of the executor
runtimes, spec §2.1), and every byte count is decided by the representative nearest to it on a
log scale.

A file competes at a size only where the runtime would select it: the runtimes skip a file unless
the call's element count is a multiple of ``nchunksperloop`` (spec §3.1; :func:`runs_at`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import SynthError

ELEMENT_BYTES = 4
"""The element size eligibility is judged for (fp32, nccl-tests' default): a file runs a call only
when its element count divides into ``nchunksperloop`` chunks (spec §3.1). A file eligible for
4-byte elements at a byte count is eligible for 2- and 1-byte ones too."""


@dataclass(frozen=True)
class Bucket:
    index: int
    size: int
    """The representative: the size the bucket's choice is made at."""
    lo: int
    hi: int


def runs_at(sizes: np.ndarray, buffer_chunks: int, instances: int) -> np.ndarray:
    """Where the runtime would select a file of ``buffer_chunks * instances`` chunks per loop: its
    ``nchunksperloop`` must divide the call's element count (spec §3.1, :data:`ELEMENT_BYTES`)."""
    return np.asarray(sizes, dtype=np.int64) % (ELEMENT_BYTES * buffer_chunks * instances) == 0


def make_buckets(sizes: Sequence[int]) -> list[Bucket]:
    """Buckets tiling ``[min(sizes), max(sizes)]`` exactly (module docstring)."""
    s = sorted(set(int(x) for x in sizes))
    if not s:
        raise SynthError("the size range is empty")
    if s[0] < 1:
        raise SynthError(f"message sizes must be at least 1 byte, got {s[0]}")
    edges = [s[0]] + [math.isqrt(a * b) + 1 for a, b in itertools.pairwise(s)] + [s[-1] + 1]
    return [Bucket(i, size, edges[i], edges[i + 1] - 1) for i, size in enumerate(s)]
