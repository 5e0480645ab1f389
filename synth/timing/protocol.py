"""Protocol cost model: a verified schedule's α-β steps -> predicted time for Simple / LL / LL128.

:mod:`synth.timing.lockstep` prices a step as ``max over resources (α + load·chunk·β)``: the wire alone. The
MSCCL runtime adds what the protocol costs on top of the wire, and a file may replicate its program
over ``instances`` channel sets (``nchannels``; spec §2.1, compiler ``instances``), each moving
``1/instances`` of every chunk. This module turns the step model into a predicted time for one
(protocol, instances) pair, so a catalog can pick them per message size.

Per call, for a message of ``S`` bytes and chunk bytes ``c = S / buffer_chunks``::

    T = launch_p + Σ_steps [ hop_p(step) + (I-1)·δ
                             + max( max_r (α_r + L_r·c·β_r / (lanes_r·eff_p)),
                                    α_max + pairmax·c / (I · channel_p) ) ]

* ``eff_p`` — data bytes per wire byte. **LL** sends 8-byte lines of 4 data bytes + a 4-byte flag:
  0.5 (spec §3.5: LL's bytesPerStep is buffSize/8/2, "half of each line is flags"). **LL128** sends
  128-byte lines with 8 flag bytes: 120/128 (spec §3.5: buffSize/8 × 15/16; NCCL's tuning model
  writes the same ratio, ``0.92 /*120.0/128.0*/``). **Simple**: 1.0 (bulk copies, fenced).
* ``hop_p`` — the protocol's synchronisation cost per step beyond the link's α. NCCL's ring
  latency table ``hwLat`` (NVIDIA/nccl ``src/graph/tuning.cc`` @ b6475625) gives per hop, LL / LL128
  / Simple: NVLink 0.6 / 1.9 / 3.4 µs, network 2.7 / 4.0 / 14.0 µs. LL's figure is the bare link
  (it matches the shipped topologies' α: 0.7 µs NVSwitch, 2.6 µs InfiniBand), so the topology's α is
  read as the LL latency and the others add the difference: +1.3 µs for LL128 on either kind of
  hop, +2.8 µs (intra-node) and +11.3 µs (inter-node) for Simple, whose memory fences and flushes
  cost most. A step that crosses nodes pays the network figure.
* ``launch_p`` — once per call, NCCL's ``baseLat`` for rings (same file): LL 6.6, LL128 14.0,
  Simple 8.4 µs.
* ``channel_p`` — one channel (one threadblock per peer) moves at most this many GB/s, whatever the
  link could carry: NCCL caps a channel at ``perChMaxTreeBws`` for Simple (Volta 26.5, Ampere 24.0,
  Hopper 38.7 GB/s, single node), ``perChMaxRingLL128Bws`` for LL128 (20.0, 20.0, 36.7 GB/s), and
  rates LL at 1/3 of the channel's Simple bandwidth on one node, 1/4 across nodes (its
  ``busBw * 1.0/3.0`` resp. ``1.0/4.0`` for ring LL). ``pairmax`` is the most chunks one (src, dst)
  pair moves in the step: that pair's threadblock is the slowest. With ``I`` instances the pair's
  data is split over ``I`` threadblocks, so more instances help large messages until the links'
  own bandwidth term dominates.
* ``δ`` — each extra instance adds threadblocks whose flags and FIFO handshakes are synchronised
  every step: 0.1 µs per step per extra instance. This figure is **assumed** (no published
  per-channel latency exists; NCCL reflects the same effect by dropping channels for small messages,
  ``NCCL_*_THREAD_THRESHOLD``); a calibration file can replace it.

Size limit (spec §3.5/§6): a call runs at most ``MSCCL_MAX_ITER`` = 65 536 grid iterations, each
moving one protocol chunk of every (chunk, instance) slice: 2 MiB (Simple), 32 KiB (LL), 576 000 B
(LL128) with NCCL's default buffers. So ``S <= 65535 · chunk_p · nchunksperloop``; above that the
predicted time is ``inf`` (the file would not run).

GPU generations are read from the topology's ``meta.gpu`` (V100 -> Volta, A100 -> Ampere,
H100/H200 -> Hopper); anything else (MI300X, Trainium) uses the Ampere figures, which is stated in
:attr:`ProtocolModel.source`. LL128 is modelled everywhere, although NCCL enables it by default only
with NVLink inside the node and a PCIe-switch-close NIC (same file).

Calibration (``calibration["protocols"]``): per protocol any of ``efficiency``, ``launch_us``,
``hop_intra_us``, ``hop_inter_us``, ``channel_GBps``; at the top level ``instance_overhead_us``
(:func:`synth.calibration.load_calibration` reads the file; a
:class:`~synth.calibration.Calibration` or a plain mapping both work).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..calibration import PROTOCOL_FIGURES, load_calibration
from ..emit.program import PROTOCOLS
from ..errors import SynthError, number_field, unknown_name
from ..schedule import Schedule
from ..steps import step_loads
from ..topology import MB, Topology

"""MSCCL-IR ``proto`` values (spec §2.1), in this order everywhere (catalog tables, knobs)."""

MAX_ITER = 65536
"""``MSCCL_MAX_ITER``: grid iterations per call (spec §3.5, §6)."""

PROTOCOL_CHUNK_BYTES = {"Simple": 2 * 2**20, "LL": 32 * 2**10, "LL128": 576_000}
"""Bytes one grid iteration moves per chunk slice with NCCL's default buffers (spec §3.5)."""

BYTES_PER_US_PER_GBPS = 1e3
"""1 GB/s = 10^9 B/s = 10^3 bytes per µs."""

# NCCL src/graph/tuning.cc @ b6475625: ring rows of hwLat (µs) and baseLat (µs).
_HW_LAT = {"nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
           "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}}
_BASE_LAT = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
# same file: per-channel caps (GB/s), single-node column, by compute generation
_CH_SIMPLE = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7}      # perChMaxTreeBws
_CH_LL128 = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7}       # perChMaxRingLL128Bws
_EFFICIENCY = {"Simple": 1.0, "LL": 0.5, "LL128": 120.0 / 128.0}
INSTANCE_OVERHEAD_US = 0.1
"""Assumed per-step cost of each instance beyond the first (see the module docstring)."""


@dataclass(frozen=True)
class ProtocolParams:
    """What one protocol adds to the wire model (units: µs, GB/s)."""

    name: str
    efficiency: float
    launch_us: float
    hop_intra_us: float
    hop_inter_us: float
    channel_GBps: float
    chunk_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"efficiency": round(self.efficiency, 6), "launch_us": self.launch_us,
                "hop_intra_us": round(self.hop_intra_us, 6), "hop_inter_us": round(self.hop_inter_us, 6),
                "channel_GBps": round(self.channel_GBps, 6), "chunk_bytes": self.chunk_bytes}


@dataclass(frozen=True)
class ProtocolModel:
    """The three protocols' parameters for one machine, and where they came from."""

    generation: str
    params: tuple[ProtocolParams, ...]
    instance_overhead_us: float = INSTANCE_OVERHEAD_US
    source: str = "NCCL tuning model (src/graph/tuning.cc) + MSCCL-IR spec §3.5"

    def get(self, proto: str) -> ProtocolParams:
        for p in self.params:
            if p.name == proto:
                return p
        raise unknown_name("protocol", proto, PROTOCOLS)

    def to_dict(self) -> dict[str, Any]:
        return {"generation": self.generation, "source": self.source,
                "instance_overhead_us": self.instance_overhead_us,
                "protocols": {p.name: p.to_dict() for p in self.params}}


def gpu_generation(topology: Topology) -> tuple[str, str]:
    """(generation, note) from ``meta.gpu``; unknown GPUs get the Ampere figures, said in the note."""
    gpu = str(dict(topology.meta).get("gpu", "")).upper()
    if "V100" in gpu:
        return "volta", ""
    if any(tag in gpu for tag in ("H100", "H200", "H800", "GH200")):
        return "hopper", ""
    if any(tag in gpu for tag in ("A100", "A800", "A30")):
        return "ampere", ""
    what = gpu or "no meta.gpu"
    return "ampere", f"{what}: NCCL publishes no figures for it; Ampere's are used"


def default_model(topology: Topology) -> ProtocolModel:
    """NCCL's figures for the topology's GPU generation (module docstring for every number)."""
    gen, note = gpu_generation(topology)
    multi_node = topology.num_nodes > 1
    simple_ch = _CH_SIMPLE[gen]
    channel = {"Simple": simple_ch, "LL128": _CH_LL128[gen],
               "LL": simple_ch * (0.25 if multi_node else 1.0 / 3.0)}
    params = tuple(
        ProtocolParams(
            name=p, efficiency=_EFFICIENCY[p], launch_us=_BASE_LAT[p],
            hop_intra_us=_HW_LAT["nvlink"][p] - _HW_LAT["nvlink"]["LL"],
            hop_inter_us=_HW_LAT["net"][p] - _HW_LAT["net"]["LL"],
            channel_GBps=channel[p], chunk_bytes=PROTOCOL_CHUNK_BYTES[p])
        for p in PROTOCOLS)
    source = ProtocolModel.source + f"; {gen} figures" + (f" ({note})" if note else "")
    return ProtocolModel(gen, params, INSTANCE_OVERHEAD_US, source)


def model_with_calibration(model: ProtocolModel, calibration: Any,
                           where: str = "calibration") -> ProtocolModel:
    """``model`` with the protocol overrides of a calibration's ``protocols`` section applied."""
    if not calibration:
        return model
    protos = calibration.get("protocols") or {}
    if not isinstance(protos, Mapping):
        raise SynthError(f"{where}: 'protocols' must map a protocol name to its parameters")
    params = []
    changed = False
    for p in model.params:
        over = protos.get(p.name) or {}
        if not isinstance(over, Mapping):
            raise SynthError(f"{where}: protocols.{p.name} must be an object")
        updates: dict[str, float] = {}
        for key, value in over.items():
            if key not in PROTOCOL_FIGURES:
                continue  # fit statistics and notes travel in the same object
            updates[key] = number_field(value, f"{where}: protocols.{p.name}.{key}",
                                        allow_zero=key != "channel_GBps" and key != "efficiency")
        if "efficiency" in updates and updates["efficiency"] > 1:
            raise SynthError(f"{where}: protocols.{p.name}.efficiency must be at most 1")
        changed |= bool(updates)
        params.append(replace(p, **updates))
    unknown = sorted(set(protos) - set(PROTOCOLS))
    if unknown:
        raise SynthError(f"{where}: unknown protocol(s) {', '.join(unknown)} (known: "
                         f"{', '.join(PROTOCOLS)})")
    overhead = model.instance_overhead_us
    if calibration.get("instance_overhead_us") is not None:
        overhead = number_field(calibration["instance_overhead_us"],
                                f"{where}: instance_overhead_us", allow_zero=True)
        changed = True
    if not changed:
        return model
    return ProtocolModel(model.generation, tuple(params), overhead, f"{model.source}; {where}")


# ---------------------------------------------------------------------------------- step profile
@dataclass(frozen=True)
class StepProfile:
    """A schedule's steps reduced to what the protocol model needs, computed once.

    Per step ``k``: the distinct (α, β·load/lanes) pairs of its resources (padded with -inf),
    the largest α, the most chunks one (src, dst) pair moves, and whether it crosses nodes.
    """

    buffer_chunks: int
    alpha: np.ndarray = field(repr=False)      # (K, G) µs, -inf padding
    coef: np.ndarray = field(repr=False)       # (K, G) µs per MB of chunk, 0 padding
    alpha_max: np.ndarray = field(repr=False)  # (K,)
    pair_max: np.ndarray = field(repr=False)   # (K,) chunks
    inter: np.ndarray = field(repr=False)      # (K,) bool

    @property
    def num_steps(self) -> int:
        return int(self.alpha.shape[0])

    @staticmethod
    def of(schedule: Schedule, topology: Topology) -> StepProfile:
        node_of = topology.node_of
        rows: list[list[tuple[float, float]]] = []
        a_max, p_max, inter = [], [], []
        for step in schedule.steps:
            if not step.transfers:
                continue
            loads = step_loads(step.transfers, topology)
            best: dict[float, float] = {}
            for n, a, b, lanes in loads.values():
                best[a] = max(best.get(a, 0.0), n * b / lanes)
            rows.append(sorted(best.items()))
            pairs: dict[tuple[int, int], int] = {}
            crosses = False
            for t in step.transfers:
                pairs[(t.src, t.dst)] = pairs.get((t.src, t.dst), 0) + 1
                crosses |= node_of[t.src] != node_of[t.dst]
            a_max.append(max(best))
            p_max.append(max(pairs.values()))
            inter.append(crosses)
        width = max((len(r) for r in rows), default=1)
        alpha = np.full((len(rows), width), -np.inf)
        coef = np.zeros((len(rows), width))
        for k, row in enumerate(rows):
            for g, (a, c) in enumerate(row):
                alpha[k, g] = a
                coef[k, g] = c
        return StepProfile(schedule.collective.buffer_chunks, alpha, coef,
                           np.asarray(a_max, dtype=float), np.asarray(p_max, dtype=float),
                           np.asarray(inter, dtype=bool))

    def times_us(self, sizes: Sequence[int] | np.ndarray, proto: ProtocolParams, instances: int,
                 instance_overhead_us: float = INSTANCE_OVERHEAD_US) -> np.ndarray:
        """Predicted µs per message size (``inf`` beyond the protocol's size limit)."""
        if instances < 1:
            raise SynthError(f"instances must be at least 1, got {instances}")
        sizes = np.asarray(sizes, dtype=float)
        chunk_mb = sizes / self.buffer_chunks / MB                          # (m,)
        if self.num_steps == 0:
            total = np.full_like(sizes, proto.launch_us)
        else:
            wire = np.max(self.alpha[:, :, None] + self.coef[:, :, None] * chunk_mb[None, None, :]
                          / proto.efficiency, axis=1)                      # (K, m)
            per_channel_us_per_mb = MB / (instances * proto.channel_GBps * BYTES_PER_US_PER_GBPS)
            chan = self.alpha_max[:, None] + self.pair_max[:, None] * chunk_mb[None, :] \
                * per_channel_us_per_mb                                    # (K, m)
            hop = np.where(self.inter, proto.hop_inter_us, proto.hop_intra_us) \
                + (instances - 1) * instance_overhead_us                   # (K,)
            total = proto.launch_us + np.sum(np.maximum(wire, chan) + hop[:, None], axis=0)
        limit = max_message_bytes(self.buffer_chunks, proto, instances)
        return np.where(sizes > limit, np.inf, total)


def max_message_bytes(buffer_chunks: int, proto: ProtocolParams, instances: int) -> int:
    """Largest nBytes a file with this chunking runs within ``MSCCL_MAX_ITER`` (spec §3.5)."""
    return (MAX_ITER - 1) * proto.chunk_bytes * buffer_chunks * instances


# ---------------------------------------------------------------------------------- public API
def predict_times_us(schedule: Schedule, topology: Topology, sizes: Sequence[int], proto: str,
                     instances: int = 1, calibration: Any = None
                     ) -> list[float]:
    """Predicted time (µs) of ``schedule`` run with ``proto`` over ``instances`` channel sets.

    ``calibration`` (a parsed calibration or a path to one) replaces link-class α/β on the topology
    (:mod:`synth.calibrated`) and protocol parameters. ``inf`` marks sizes the file cannot run.
    """
    from ..calibrated import apply_calibration  # the closed-stack model, loaded only when used

    if proto not in PROTOCOLS:
        raise unknown_name("protocol", proto, PROTOCOLS)
    data = load_calibration(calibration) if calibration is not None else None
    if data is not None:
        topology = apply_calibration(topology, data)
    model = model_with_calibration(default_model(topology), data)
    profile = StepProfile.of(schedule, topology)
    times = profile.times_us(sizes, model.get(proto), instances, model.instance_overhead_us)
    return [float(t) for t in times]


@dataclass(frozen=True)
class Run:
    """What the protocol model prices: a schedule run by the MSCCL runtime with a protocol over
    ``instances`` channel sets."""

    schedule: Schedule
    proto: str = "Simple"
    instances: int = 1


# ---------------------------------------------------- what --proto and --instances do to a file
@dataclass(frozen=True)
class RuntimePoint:
    """The predicted time of the emitted file at one size, as the MSCCL runtime would run it."""

    bytes: int
    time_us: float
    """``inf`` beyond the largest message the file can run (``MSCCL_MAX_ITER``)."""

    @property
    def algbw_GBps(self) -> float:
        return self.bytes / (self.time_us * 1e3) if 0 < self.time_us < math.inf else 0.0

    def to_dict(self) -> dict[str, Any]:
        finite = math.isfinite(self.time_us)
        return {"bytes": self.bytes, "time_us": round(self.time_us, 6) if finite else None,
                "algbw_GBps": round(self.algbw_GBps, 6) if finite else None}


@dataclass(frozen=True)
class RuntimeProfile:
    """:func:`runtime_profile`: one (protocol, instances) pair's predicted times over the sizes."""

    proto: str
    instances: int
    max_bytes: int
    """The largest message the file runs with this protocol and instance count."""
    source: str
    points: list[RuntimePoint]

    def to_dict(self) -> dict[str, Any]:
        return {"proto": self.proto, "instances": self.instances, "max_bytes": self.max_bytes,
                "model": "synth.timing.protocol: step model + protocol launch, per-step "
                         "synchronisation, channel caps, instances; " + self.source,
                "costs": [p.to_dict() for p in self.points]}


def runtime_profile(schedule: Schedule, topology: Topology, sizes: Sequence[int],
                    proto: str = "Simple", instances: int = 1, calibration: Any = None
                    ) -> RuntimeProfile:
    """What ``--proto`` and ``--instances`` do to the time: the schedule run by the MSCCL runtime
    with that protocol over that many channel sets (:func:`synth.timing.protocol.predict_times_us`, the
    model catalogs tune with). The step model alone (:func:`cost_profile`) is the wire: the same
    for every protocol, and what the lower bound is compared with."""
    times = predict_times_us(schedule, topology, sizes, proto, instances, calibration)
    model = default_model(topology)
    limit = max_message_bytes(schedule.collective.buffer_chunks, model.get(proto), instances)
    source = model.source + ("; calibration file applied" if calibration is not None else "")
    return RuntimeProfile(proto, instances, limit, source,
                          [RuntimePoint(int(z), float(t)) for z, t in zip(sizes, times, strict=True)])


class ProtocolTimes:
    """The protocol model as a :class:`synth.timing.TimeModel`: prices a :class:`Run`; the
    calibration's ``protocols`` and ``instance_overhead_us`` apply."""

    name = "protocol"

    def __init__(self, topology: Topology, calibration: Any = None) -> None:
        self.topology = topology
        data = load_calibration(calibration) if calibration is not None else None
        self.model = model_with_calibration(default_model(topology), data)
        self.source = self.model.source

    def times_us(self, subject: Run, sizes: Sequence[int]) -> list[float]:
        profile = StepProfile.of(subject.schedule, self.topology)
        times = profile.times_us(sizes, self.model.get(subject.proto), subject.instances,
                                 self.model.instance_overhead_us)
        return [float(t) for t in times]
