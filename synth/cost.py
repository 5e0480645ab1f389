"""The α-β cost model for step schedules, and message-size helpers.

A transfer of S bytes over a resource costs α + S·β. Transfers that share a resource (a link, or a
switch port on the send or receive side) in one step share its bandwidth: a resource carrying L
chunks of S bytes with ``lanes`` parallel lanes takes α + L·S·β / lanes. Steps are synchronous, so a
step costs the maximum over its resources and a schedule the sum over its steps. Rounds are the
verifier's budget, not a cost: the cost is computed from the actual load.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

from .errors import SynthError
from .schedule import Schedule, Step, Transfer
from .topology import MB, Topology

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


def step_loads(step_transfers: Iterable[Transfer], topology: Topology
               ) -> dict[tuple, tuple[int, float, float, int]]:
    """resource -> (chunks, alpha µs, beta µs/MB, lanes) for one step's transfers."""
    loads: dict[tuple, list] = {}
    for t in step_transfers:
        channel = topology.channel(t.src, t.dst)
        if channel is None:
            raise SynthError(f"no link from rank {t.src} to rank {t.dst} in '{topology.name}'")
        for res, beta, lanes in channel.resources:
            entry = loads.get(res)
            if entry is None:
                loads[res] = [1, channel.alpha_us, beta, lanes]
            else:
                entry[0] += 1
                entry[1] = max(entry[1], channel.alpha_us)
    return {k: tuple(v) for k, v in loads.items()}  # type: ignore[misc]


def rounds_needed(transfers: Iterable[Transfer], topology: Topology) -> int:
    """The fewest rounds in which a step with these transfers fits every capacity."""
    loads = step_loads(transfers, topology)
    return max((math.ceil(n / lanes) for n, _, _, lanes in loads.values()), default=1)


def make_step(transfers: Iterable[Transfer], topology: Topology) -> Step:
    """A step with exactly the rounds its load needs."""
    transfers = tuple(transfers)
    return Step(transfers, rounds_needed(transfers, topology))


def step_from_arrays(src: np.ndarray, dst: np.ndarray, chunk: np.ndarray, topology: Topology,
                     op: str = "copy") -> Step:
    """A step from parallel arrays of transfers (how the symmetric encodings replicate a plan)."""
    order = np.lexsort((chunk, dst, src))
    transfers = [Transfer(a, b, c, op) for a, b, c in  # type: ignore[arg-type]
                 zip(src[order].tolist(), dst[order].tolist(), chunk[order].tolist(), strict=True)]
    return make_step(transfers, topology)


def schedule_times_us(schedule: Schedule, topology: Topology, sizes: Sequence[int]) -> np.ndarray:
    """Predicted time (µs) of ``schedule`` for each message size in ``sizes``."""
    chunk_mb = np.asarray(sizes, dtype=float) / schedule.collective.buffer_chunks / MB
    total = np.zeros_like(chunk_mb)
    for step in schedule.steps:
        if not step.transfers:
            continue
        loads = step_loads(step.transfers, topology)
        alpha = np.array([a for _, a, _, _ in loads.values()])
        coef = np.array([n * b / lanes for n, _, b, lanes in loads.values()])
        # max over resources of alpha + coef * chunk; group identical alphas for speed
        by_alpha: dict[float, float] = defaultdict(float)
        for a, c in zip(alpha, coef, strict=True):
            by_alpha[a] = max(by_alpha[a], c)
        step_time = np.max([a + c * chunk_mb for a, c in by_alpha.items()], axis=0)
        total += step_time
    return total


def algbw_GBps(sizes: Sequence[int], times_us: np.ndarray) -> np.ndarray:
    """Algorithm bandwidth in GB/s (10^9 bytes/s): message bytes / time."""
    return np.asarray(sizes, dtype=float) / (times_us * 1e3)
