"""NCCL as the competitor: what NCCL itself runs at each size, against what synth would write.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NotApplicable
from ..schedule import Schedule
from ..timing.nccl import predict
from ..timing.protocol import PROTOCOLS, predict_times_us
from ..topology import Topology
from .candidates import schedule_time_model


@dataclass(frozen=True)
class NcclComparison:
    """The candidate against NCCL at one size, both with their runtime floors.

    ``runtime_us`` is the candidate as the MSCCL runtime runs it: the written XML under the timed
    program model (:mod:`synth.timing.program`, ``runtime_proto`` = ``program``) where it was timed,
    else the protocol model (:mod:`synth.timing.protocol`: the step model plus the protocol's launch floor
    and per-step synchronisation, best of Simple / LL / LL128, one instance). ``nccl_us`` is NCCL's
    own tuning-model time of what NCCL would run (:mod:`synth.timing.nccl`). ``speedup`` =
    nccl_us / runtime_us (> 1: the candidate is faster).
    """

    bytes: int
    nccl_algo: str
    nccl_proto: str
    nccl_channels: int
    nccl_us: float
    runtime_us: float
    runtime_proto: str

    @property
    def speedup(self) -> float:
        return self.nccl_us / self.runtime_us if self.runtime_us > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "nccl": {"algo": self.nccl_algo, "proto": self.nccl_proto,
                                              "channels": self.nccl_channels,
                                              "time_us": round(self.nccl_us, 6)},
                "runtime_us": round(self.runtime_us, 6), "runtime_proto": self.runtime_proto,
                "speedup_vs_nccl": round(self.speedup, 6)}


def compare_with_nccl(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                      nccl_calibration: Any = None, calibration: Any = None,
                      program_us: Sequence[float] | None = None) -> list[NcclComparison] | None:
    """The candidate's floored runtime time against NCCL's, per size; None where NCCL has no
    such collective (gather, scatter, custom) or does not run (no NVIDIA GPU).

    ``program_us``: the written XML's time per size under the timed program model, used where
    finite (the file runs at that size)."""
    coll = schedule.collective
    if coll.custom is not None:
        return None
    try:
        nccl = predict(topology, coll.kind, sizes, nccl_calibration)
    except NotApplicable:
        return None
    if schedule_time_model(schedule) == "nccl":
        runtime = {"NCCL": [c.time_us for c in nccl]}
    else:
        runtime = {p: predict_times_us(schedule, topology, sizes, p, 1, calibration)
                   for p in PROTOCOLS}
    out = []
    for i, c in enumerate(nccl):
        if program_us is not None and math.isfinite(program_us[i]) \
                and schedule_time_model(schedule) != "nccl":
            out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                      float(program_us[i]), "program"))
            continue
        proto = min(runtime, key=lambda p: (runtime[p][i], p))
        out.append(NcclComparison(c.bytes, c.algo, c.proto, c.channels, c.time_us,
                                  runtime[proto][i], proto))
    return out
