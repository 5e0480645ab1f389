"""A timed model of an MSCCL-IR program: a discrete-event execution of the parsed XML.

The lock-step models (:mod:`synth.timing.lockstep`, :mod:`synth.timing.protocol`) price a *schedule*
as a sum of synchronous steps. The runtime does not run steps in lock step: every threadblock walks
its own step list, grid iteration after grid iteration, and only FIFOs, flags and shared links couple the
blocks (``docs/reference/msccl-xml-spec.md`` §3.5, §5.1-§5.4). This module executes the parsed
:class:`~synth.emit.program.Program` -- the same object the interpreter checks, folded the same way
(:func:`synth.emit.interpreter.fold_block`) -- in simulated time:

* **Blocks.** Each ``<tb>`` of each rank runs its folded operations in order, once per grid
  iteration (§3.5). A block starts its next iteration as soon as it finished the previous one, so
  blocks overlap iterations; FIFOs and flags are what hold them back.
* **Slicing.** A call of ``nbytes`` has chunks of ``S = nbytes / nchunksperloop`` bytes. With the
  protocol's effective chunk ``E`` (2 MiB Simple, 512 KiB EXEC Simple reduce/broadcast, 32 KiB LL,
  576 000 B LL128; spec §3.5) the host's ``M = clamp(floor(E / S), 1, 71)``; a chunk bigger than
  ``E`` is walked in ``ceil(S / E)`` iterations of ``E``-byte slices (the last one shorter). A step
  with ``cnt = k`` moves ``ceil(k / M)`` messages of ``min(M, k - c)`` slices each.
* **FIFOs.** Every (sender, receiver, channel) is a connection of ``NCCL_STEPS`` = 8 slots: 8
  messages in flight for LL/LL128, 2 for Simple (a Simple message takes ``MSCCL_CHUNKSTEPS`` = 4
  slots; §5.3). A send waits for a free slot (back-pressure); the slot is freed when the receiving
  block has consumed the message. A receive waits for the message to have arrived.
* **Dependencies.** An operation with waits starts only when every awaited block has published a
  step ``>=`` the awaited one in the same iteration (§5.4); ``hasdep=1`` operations publish when they
  complete.
* **Links.** A message is a fluid flow of ``bytes / efficiency`` wire bytes over the resources the
  topology gives the (sender, receiver) pair (:meth:`synth.topology.Topology.channel`: a direct link,
  or a switch's out-port and in-port -- NVSwitch ports and, across nodes, NIC ports of the fabric).
  **Sharing policy: max-min fair**, recomputed whenever a flow starts or ends (progressive filling
  over the connected component of flows that share resources with the change; every flow is also
  capped by its threadblock's own copy rate, ``channel_GBps`` of the protocol). Intra-node links of
  NVIDIA GPUs carry NCCL's usable NVLink bandwidth (:data:`NVLINK_EFFICIENCY`).
* **Cut-through.** The receiver may start on a message once its head has arrived (``alpha_us``
  after the first bytes left): at once for LL/LL128, whose 8-byte / 128-byte lines carry their own
  flags, after the first of a Simple message's 2 slices (``MSCCL_CHUNKSTEPS / MSCCL_SLICESTEPS``,
  spec §6). A receiving operation cannot finish before the message's tail has arrived, and a
  forwarding one (``rcs``, ``rrs``, ``rrcs``) cannot release its own message's tail earlier either,
  so a chain of forwards pipelines at line or slice granularity instead of store-and-forward.
* **Costs per operation** (:class:`ProgramModel`): each message pays the protocol's per-hop
  synchronisation ``hop_intra_us`` / ``hop_inter_us`` (NCCL's ``hwLat`` above the LL link latency,
  :mod:`synth.timing.protocol`) plus the executor's per-message flag/barrier cost ``step_us``; local
  ``cpy`` moves its bytes at the block's copy rate; a receive-only step (``r``, ``rrc``) copies out
  of the FIFO while the data arrives, and only the last Simple slice is exposed after the tail.
  **Assumed, not cited** (no published per-operation figures exist): a reduction costs its memory
  streams -- ``re`` with k sources reads k + 1 streams and writes one, so (k + 2) / 2 times a copy;
  ``rrc`` 1.5 times a copy; a fused ``rrs`` / ``rrcs`` sends at 2/3 of the block's rate (three
  streams instead of two). Measured since on one H200 (``results/gpu_block_rates.md``, local
  memory only): one block's two-source fp32 reduction takes 1.36 (640 threads) to 1.63 (512
  threads) times its copy's time, and a lone block copies at 48.4 GB/s, 1.25 times the cap used
  here. The call starts after the kernel launch ``launch_us``.

Deliberate simplifications: messages are fluid flows (no per-packet effects); the proxy thread of
network transfers is not modelled separately from the sending block; the FIFO capacity is the
guaranteed 2 (Simple) / 8 (LL, LL128) messages whatever the message size.

Where the floors come from: ``hop_*``, ``channel_GBps`` and the launch ``launch_us`` (NCCL's
per-protocol ring ``baseLat``) from NCCL's tuning model via :mod:`synth.timing.protocol` (cited there);
the usable NVLink bandwidth from NCCL's ``topo.h`` (:data:`NVLINK_EFFICIENCY`). The executor's
extra per-message flag cost ``step_us`` is *fitted* to MSCCL's own published ND H100 v5 times
(Azure/msccl ``docs/performance-nd-h100-v5.md`` @ 050b4a10, MSCCL executor 6eacec0, NCCL 2.18.3)
on the production XML files they were measured with, by ``benchmarks/reality_msccl.py`` (least
squares on log time; in-sample and leave-one-file-out errors in ``results/reality_msccl.md``): the
fit is 0.0 µs. A calibration's ``protocols.<P>.launch_us`` replaces the launch, its ``program``
section (``{"launch_us": .. or {protocol: ..}, "step_us": ..}``, written by
``synth calibrate --format msccl``, :mod:`synth.calibrate.program_fit`) both.

Outputs: :func:`program_time` (one size), :func:`program_times_us` (a sweep), and with ``trace`` a
Chrome/Perfetto trace (:func:`write_trace`): one track per rank x threadblock (its messages and
local operations), and one counter track per link/port with the bandwidth it carries.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import progress
from ..calibration import load_calibration
from ..emit.program import Program
from ..emit.runtimes import normalize_coll
from ..errors import SynthError, VerificationError
from ..memo import by_identity
from ..topology import Topology
from .program_bound import time_lower_bound, time_lower_bounds
from .program_machine import (
    MAX_COUNT,
    SIMPLE_SLICES_PER_MESSAGE,
    STEP_US,
    ProgramModel,
    ProgramTiming,
    Slicing,
    effective_chunk_bytes,
    simulate,
    slicing,
)
from .program_store import TimingStore, group_key, model_figures, text_digest
from .protocol import ProtocolModel, default_model, model_with_calibration

__all__ = ["BUS_FACTOR", "CACHE_STATS", "MAX_COUNT", "NVLINK_EFFICIENCY", "SIMPLE_SLICES_PER_MESSAGE",
           "STEP_US", "CacheStats", "ProgramModel", "ProgramPoint", "ProgramTimes",
           "ProgramTiming", "Slicing", "TimingStore", "cached_times", "effective_chunk_bytes",
           "in_size_range", "not_a_gpu", "program_model", "program_time", "program_times_us",
           "remember_times", "remembered_times", "slicing", "sweep", "time_lower_bound",
           "time_lower_bounds", "write_trace"]

NVLINK_EFFICIENCY = {"volta": 20.0 / 25.0, "ampere": 20.0 / 25.0, "hopper": 20.6 / 25.0}
"""NCCL's usable NVLink bandwidth per lane over the nominal 25 GB/s per direction: NVIDIA/nccl
``src/graph/topo.h`` @ b6475625 (v2.20.3-1) ``SM70_NVLINK_BW 20.0``, ``SM80_NVLINK_BW 20.0``,
``SM90_NVLINK_BW 20.6`` GB/s. Applied to intra-node links and switch ports of NVIDIA GPUs."""





def program_model(topology: Topology, proto: str, calibration: Any = None,
                  protocols: ProtocolModel | None = None) -> ProgramModel:
    """The model for ``proto`` on ``topology``: NCCL's protocol figures plus the fitted floors.

    ``protocols`` is a protocol model already built (e.g. a catalog's, calibration applied); else
    it is NCCL's for the topology with ``calibration``'s protocol overrides.
    """
    data = load_calibration(calibration) if calibration is not None else None
    pm = protocols if protocols is not None else model_with_calibration(default_model(topology),
                                                                        data)
    params = pm.get(proto)
    launch, step = params.launch_us, STEP_US
    src = (pm.source + "; launch = NCCL ring baseLat; executor step cost fitted (0.0 us) to "
           "Azure/msccl docs/performance-nd-h100-v5.md")
    if data is not None and data.get("program") is not None:
        over = data.get("program")
        if not isinstance(over, Mapping):
            raise SynthError("calibration: 'program' must be an object with launch_us / step_us")
        lv = over.get("launch_us", launch)
        if isinstance(lv, Mapping):      # per protocol (synth calibrate --format msccl)
            lv = lv.get(proto, launch)
        launch = _nonneg(lv, "calibration: program.launch_us")
        step = _nonneg(over.get("step_us", step), "calibration: program.step_us")
        src += "; floors from the calibration file"
    exposed = 1.0 / SIMPLE_SLICES_PER_MESSAGE if proto == "Simple" else 0.0
    nvl = NVLINK_EFFICIENCY.get(pm.generation, 1.0) if _nvidia(topology) else 1.0
    return ProgramModel(params, launch, step, exposed, exposed, nvl, True, src)


def not_a_gpu(topology: Topology) -> str | None:
    """Why this model's figures do not describe ``topology``'s ranks, or None where they may.

    The model times MSCCL's GPU executor: threadblocks copying at a GPU block's rate, NCCL's
    per-protocol latencies and FIFOs. A machine whose ``meta`` names a ``device`` (or a TPU
    ``platform``) and no ``gpu`` -- trn1_32 and trn2_64 (NeuronCores), the TPU meshes -- runs no
    MSCCL runtime and has none of those figures: a ranking by them would rest on NCCL's Ampere
    figures (without ``meta.gpu``: 24 GB/s a block for Simple, its latencies), not on that machine.
    Topologies that name neither (the builders, files without ``meta``) keep the model, as
    before."""
    meta = dict(topology.meta)
    if meta.get("gpu"):
        return None
    device = meta.get("device") or ("TPU" if meta.get("platform") == "tpu" else None)
    if not device:
        return None
    return (f"{topology.name}'s ranks are {device}, not GPUs: the program model times MSCCL's GPU "
            "executor (threadblocks at a GPU block's copy rate, NCCL's protocol latencies), which "
            "does not run there")


def _nvidia(topology: Topology) -> bool:
    gpu = str(dict(topology.meta).get("gpu", "")).upper()
    return any(tag in gpu for tag in ("V100", "A100", "A800", "A30", "H100", "H200", "H800"))


def _nonneg(value: Any, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SynthError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise SynthError(f"{what} must be >= 0, got {value!r}")
    return v


@progress.spanned("program-model")
def program_time(program: Program, topology: Topology, nbytes: int, *,
                 model: ProgramModel | None = None, calibration: Any = None,
                 profile: str = "exec", trace: bool = False) -> ProgramTiming:
    """Simulated time of one call of ``program`` moving ``nbytes`` (nccl-tests' size) on ``topology``.

    The program must already have passed the interpreter (:func:`synth.emit.interpreter.
    verify_program`); a size the file cannot run at raises a ``deadlock`` VerificationError.
    """
    if nbytes < 1:
        raise SynthError(f"message size must be at least 1 byte, got {nbytes}")
    if model is None:
        model = program_model(topology, program.proto, calibration)
    elif model.proto.name != program.proto:
        model = replace(model, proto=default_model(topology).get(program.proto))
    return simulate(program, topology, int(nbytes), model, profile, trace)


def program_times_us(program: Program, topology: Topology, sizes: Sequence[int], *,
                     model: ProgramModel | None = None, calibration: Any = None,
                     profile: str = "exec") -> list[float]:
    """:func:`program_time` over a sweep (µs); ``inf`` where the file deadlocks at that size."""
    if model is None:
        model = program_model(topology, program.proto, calibration)
    out = []
    for n in sizes:
        try:
            out.append(program_time(program, topology, n, model=model, profile=profile).time_us)
        except VerificationError as e:
            if "deadlock" not in str(e):
                raise
            out.append(math.inf)
    return out



# ------------------------------------------------------------------------------ cached times
_TIMES: dict[tuple, float] = {}
_TIMES_KEPT = 1 << 20
"""Times remembered in the process at most (then the memory starts again)."""


@dataclass
class CacheStats:
    """What :func:`cached_times` did in this process: sizes answered from memory, from a
    :class:`TimingStore`, and simulated."""

    memory: int = 0
    disk: int = 0
    simulated: int = 0


CACHE_STATS = CacheStats()


@by_identity(64)
def _digest(text: str) -> str:
    """SHA-256 of a text timed again and again (once per size range, protocol and instance count)."""
    return text_digest(text)


def cached_times(text: str, topology: Topology, sizes: Sequence[int], *,
                 model: ProgramModel | None = None, calibration: Any = None,
                 profile: str = "exec", program: Program | None = None,
                 store: TimingStore | None = None) -> list[float]:
    """:func:`program_times_us` of the MSCCL-IR file ``text``, each size simulated at most once.

    Times are remembered by the file's content (SHA-256 of ``text``), the topology's
    ``content_hash``, the model's figures (:func:`synth.timing.program_store.model_figures`, so a
    calibration is part of the key), ``profile`` and the size: in this process always, and across
    processes in ``store`` when one is given (:meth:`TimingStore.beside` a catalog's cache folder).
    The simulation is deterministic, so a remembered time is the time a new run would find,
    to the bit; ``inf`` where the file deadlocks.

    ``model``: the figures to time with (build them once per protocol, e.g.
    :meth:`ProgramTimes.model`); None builds them from ``calibration`` for the file's protocol,
    which needs the file parsed. ``program``: the parsed ``text``, if the caller has it; else it
    is parsed only when some size has to be simulated. ``text`` must have passed the interpreter
    (:func:`synth.emit.emit_verified_xml` produces such text).
    """
    from ..emit.xml_parse import parse_program

    if model is None:
        program = program if program is not None else parse_program(text, "<program>", profile)
        model = program_model(topology, program.proto, calibration)
    group = (_digest(text), topology.content_hash, model_figures(model), profile)
    out: dict[int, float] = {}
    missing = []
    for n in dict.fromkeys(int(x) for x in sizes):
        t = _TIMES.get((*group, n))
        if t is None:
            missing.append(n)
        else:
            out[n] = t
            CACHE_STATS.memory += 1
    key = group_key(*group) if store is not None and missing else None
    if key is not None:
        stored = store.get(key)  # type: ignore[union-attr]
        for n in [n for n in missing if n in stored]:
            out[n] = _remember(group, n, stored[n])
            CACHE_STATS.disk += 1
        missing = [n for n in missing if n not in stored]
    if missing:
        if program is None:
            program = parse_program(text, "<program>", profile)
        fresh = program_times_us(program, topology, missing, model=model, profile=profile)
        for n, t in zip(missing, fresh, strict=True):
            out[n] = _remember(group, n, t)
        CACHE_STATS.simulated += len(missing)
        if key is not None:
            store.put(key, dict(zip(missing, fresh, strict=True)))  # type: ignore[union-attr]
    return [out[int(n)] for n in sizes]


def remember_times(text: str, topology: Topology, sizes: Sequence[int], times: Sequence[float],
                   *, model: ProgramModel, profile: str = "exec") -> None:
    """Remember ``times`` of ``text`` at ``sizes`` (:func:`program_times_us` under ``model``
    and ``profile``, made elsewhere: another process) where :func:`cached_times` looks."""
    group = (_digest(text), topology.content_hash, model_figures(model), profile)
    for n, t in zip(sizes, times, strict=True):
        _remember(group, int(n), t)


def remembered_times(text: str, topology: Topology, sizes: Sequence[int], *,
                     model: ProgramModel, profile: str = "exec") -> dict[int, float]:
    """The times of ``text`` this process already knows (:func:`cached_times`' memory), by size:
    a caller with a cheaper answer for the rest (a lower bound) looks here before parsing."""
    group = (_digest(text), topology.content_hash, model_figures(model), profile)
    return {int(n): _TIMES[(*group, int(n))] for n in sizes if (*group, int(n)) in _TIMES}


def _remember(group: tuple, nbytes: int, t: float) -> float:
    if len(_TIMES) >= _TIMES_KEPT:
        _TIMES.clear()
    _TIMES[(*group, nbytes)] = t
    return t

def write_trace(timing: ProgramTiming, program: Program, path) -> None:
    """Write the run's Chrome/Perfetto trace (JSON object format) atomically."""
    from pathlib import Path

    from ..files import atomic_write

    if timing.trace is None:
        raise SynthError("the run was not traced (program_time(..., trace=True))")
    meta: list[dict] = []
    for g in sorted(program.gpus, key=lambda g: g.id):
        meta.append({"name": "process_name", "ph": "M", "pid": g.id, "args": {"name": f"rank {g.id}"}})
        for tb in g.tbs:
            meta.append({"name": "thread_name", "ph": "M", "pid": g.id, "tid": tb.id,
                         "args": {"name": f"tb {tb.id} (send {tb.send}, recv {tb.recv}, "
                                          f"chan {tb.chan})"}})
    meta.append({"name": "process_name", "ph": "M", "pid": "links", "args": {"name": "links/ports"}})
    doc = {"traceEvents": meta + timing.trace, "displayTimeUnit": "ns",
           "otherData": {"program": program.name, "nbytes": timing.nbytes,
                         "time_us": timing.time_us, "model": timing.model.to_dict()}}
    atomic_write(Path(path), json.dumps(doc, separators=(",", ":")) + "\n")


# ------------------------------------------------------------------------------ sweeps for reports
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
              "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}
"""nccl-tests' busBw = algBw x factor (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``)."""


@dataclass(frozen=True)
class ProgramPoint:
    """One size of a sweep: simulated time, nccl-tests' algbw/busbw, and % of synth's bound."""

    bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    bound_us: float
    pct_of_bound: float
    iterations: int
    max_count: int
    messages: int
    in_range: bool
    """Whether the file is selected at this size (minBytes <= size <= maxBytes, 0 = unbounded)."""

    def to_dict(self) -> dict[str, Any]:
        def r(x: float) -> float | None:
            return round(x, 4) if math.isfinite(x) else None
        return {"bytes": self.bytes, "time_us": r(self.time_us), "algbw_GBps": r(self.algbw_GBps),
                "busbw_GBps": r(self.busbw_GBps), "bound_us": r(self.bound_us),
                "pct_of_bound": r(self.pct_of_bound), "iterations": self.iterations,
                "max_count": self.max_count, "messages": self.messages, "in_range": self.in_range}


def in_size_range(program: Program, nbytes: int) -> bool:
    lo, hi = program.min_bytes, program.max_bytes
    return nbytes >= lo and (hi == 0 or nbytes <= hi)


def sweep(program: Program, topology: Topology, sizes: Sequence[int], *,
          model: ProgramModel | None = None, calibration: Any = None,
          profile: str = "exec") -> list[ProgramPoint]:
    """:func:`program_time` at every size with the report's derived figures."""
    from ..bounds import lower_bound
    from ..collectives import make_collective

    kind = normalize_coll(program.coll)
    n = program.ngpus
    bound = lower_bound(topology, make_collective(kind, n)) if kind in BUS_FACTOR else None
    factor = BUS_FACTOR.get(kind, lambda _n: 1.0)(n)
    if model is None:
        model = program_model(topology, program.proto, calibration)
    points = []
    for size in sizes:
        try:
            tm = program_time(program, topology, size, model=model, profile=profile)
            t, its, m, msgs = tm.time_us, tm.iterations, tm.max_count, tm.messages
        except VerificationError as e:
            if "deadlock" not in str(e):
                raise
            sl = slicing(program, size, profile)
            t, its, m, msgs = math.inf, len(sl.slices), sl.max_count, 0
        algbw = size / (t * 1e3) if math.isfinite(t) and t > 0 else 0.0
        b = bound.time_us(size) if bound is not None else math.nan
        pct = 100.0 * b / t if math.isfinite(t) and t > 0 else 0.0
        points.append(ProgramPoint(int(size), t, algbw, algbw * factor, b, pct, its, m, msgs,
                                   in_size_range(program, size)))
    return points


class ProgramTimes:
    """The program model as a :class:`synth.timing.TimeModel`: prices a parsed MSCCL-IR program
    (:func:`synth.emit.xml_parse.parse_program`) that the interpreter accepted; ``inf`` where it
    deadlocks. The calibration's ``protocols`` and ``program`` sections apply."""

    name = "program"

    def __init__(self, topology: Topology, calibration: Any = None, profile: str = "exec") -> None:
        self.topology = topology
        self.calibration = calibration
        self.profile = profile
        self._models: dict[str, ProgramModel] = {}
        self.source = program_model(topology, "Simple", calibration).source

    def model(self, proto: str) -> ProgramModel:
        """The figures for one protocol, built once."""
        if proto not in self._models:
            self._models[proto] = program_model(self.topology, proto, self.calibration)
        return self._models[proto]

    def times_us(self, subject: Program, sizes: Sequence[int]) -> list[float]:
        return program_times_us(subject, self.topology, sizes, model=self.model(subject.proto),
                                profile=self.profile)
