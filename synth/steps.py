"""A step's load on the topology's resources, and the rounds that load needs.

A transfer occupies every resource of its channel (the link, or the switch ports on its send and
receive sides; :meth:`synth.topology.Topology.channel`). Transfers that share a resource in one
step share its lanes, so a step needs as many rounds as its most loaded resource has chunks per
lane. Encodings build steps with :func:`make_step`, the verifier checks their rounds against
:func:`rounds_needed`, and the lock-step model (:mod:`synth.timing.lockstep`) prices the same loads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .errors import SynthError
from .schedule import Step, Transfer
from .topology import Topology


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
