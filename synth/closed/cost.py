"""Cost model of composed programs on a closed stack (OverlayCCL's terms).

A vendor call on a replica group costs

    launch + latency(primitive, group, size) + bytes(primitive, group, size)

* **launch** (``launch_us``): the per-call launch tax. A call issued right after another call that
  it does not depend on (back to back, e.g. the per-tensor calls of one stage) pays
  ``amortization · launch`` instead: **back-to-back amortization**.
* **Trainium** (Neuron's own calls): latency and bytes come from :mod:`synth.closed.neuron`, the
  runtime's documented composition (chip / NeuronLink / EFA stages, mesh-RDH-ring by message size)
  with figures fitted to the public nccom-test outputs of ``tests/data/nccom-test`` (median error
  1.09x, worst 1.98x over those files, 1.84x / 4.6x leaving each file out of the fit;
  ``benchmarks/reality_trainium.py``). The group of a call over
  mesh axes is the sub-torus those axes span (:meth:`CostModel.group`); the launch is the runtime
  profile's (:data:`synth.closed.neuron.FLOORS`). A calibration (``synth calibrate``, fitted by
  :mod:`synth.calibrate.neuron_fit`) replaces those figures.
* **Other closed stacks** (TPU/JAX): α, β per key (primitive, group shape, link class); the latency
  is α and the bytes ``wire_bytes · β``. ``wire_bytes`` is the volume each rank moves in the
  textbook algorithm: (g-1)/g of the buffer for all-gather (output size), reduce-scatter (input
  size) and all-to-all, 2(g-1)/g for all-reduce, the whole tensor for permute, so ``1/β`` is the
  *bus bandwidth*. Calibration (:mod:`synth.calibrate.closed_fit`) replaces keys it has measured;
  the rest come from the topology's link classes:

  - each mesh axis has a per-rank bandwidth: its link's bandwidth times the neighbours a ring along
    it uses (2 on a ring of 3 or more, 1 on a pair), or the rank's share of its NIC for ``node``;
  - a call inside a node runs one ring through its group: α = slowest hop latency of its axes,
    bandwidth = the slowest axis (a Hamiltonian ring crosses every axis);
  - a call that spans nodes runs hierarchically: intra-node reduce-scatter / inter-node all-reduce /
    intra-node all-gather and so on, each phase at its own bandwidth, α summed, one launch.
* **memcopy** (``memcopy_GBps``, ``transform_us``): transforms that move data (transpose, concat,
  split, pad, unpad, row gathers, combine) read and write their bytes at memcopy bandwidth plus a
  fixed cost; a row update (``put_rows``) moves only the rows it writes (done in place); a reshape
  is free.

Programs are timed by a small list-scheduling simulation: ops run in program order once their
inputs are ready; calls over the same mesh axis serialise (they share links), calls over disjoint
axes may overlap (so pipelined pieces overlap across levels); transforms serialise on one copy
engine; launches serialise on one issue queue. The result is the makespan with its terms summed.

Defaults (``amortization``, ``memcopy``) are per hardware family; see :data:`HARDWARE`. They are
assumptions until a calibration file replaces them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SynthError
from ..topology import MB, Topology, bandwidth_from_beta
from .ir import Program
from .mesh import Mesh
from .neuron import (
    DEFAULT_RUNTIME,
    FLOORS,
    Bandwidths,
    Group,
    NeuronModel,
    family_of,
    shipped_model,
    wire_factor,
)

NEURON_PARAMETERS = ("core_GBps", "mesh_efficiency", "ring_efficiency", "efa_efficiency",
                     "per_rank_us", "chip_hop_us", "link_hop_us", "efa_hop_us")
"""Figures of the Trainium model a calibration file may set (``parameters``), next to launch_us."""
DERIVED_TERMS = "neuron-model"
"""``source`` of the per-key α/β a Trainium calibration reports for :mod:`synth.calibrated`:
derived from the fitted figures, so not applied again as overrides."""

HARDWARE: dict[str, dict[str, Any]] = {
    "trainium": {
        "launch_us": FLOORS[DEFAULT_RUNTIME].launch_us,
        "amortization": 0.5,
        "transform_us": 0.5,
        "note": (f"launch {FLOORS[DEFAULT_RUNTIME].launch_us:g} µs FITTED (runtime profile "
                 f"{DEFAULT_RUNTIME}, synth.closed.neuron.FLOORS); amortization 0.5 ASSUMED; memcopy "
                 "from HBM bandwidth per chip / ranks per chip / 2 (read + write)"),
    },
    "tpu": {
        "launch_us": 2.0,
        "amortization": 0.5,
        "transform_us": 0.3,
        "note": "launch 2 µs and amortization 0.5 ASSUMED (no published figure); memcopy from v5e HBM",
    },
}
HBM_GBPS = {"trn1": 820.0, "trn2": 2900.0, "tpu": 819.0}
"""HBM bandwidth per chip (hardware.md for Trainium; TPU v5e 819 GB/s from Google's v5e page)."""

PRIMS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "permute")


@dataclass(frozen=True)
class AxisLink:
    name: str
    link_class: str
    alpha_us: float
    ring_GBps: float
    """Per-rank bandwidth of a ring along the axis (both neighbours)."""
    hop_GBps: float
    """Per-rank bandwidth to one neighbour (a permute step)."""
    is_node: bool


@dataclass
class CostModel:
    """Parameters of the model; ``terms`` holds calibrated (α, β) per key."""

    hardware: str
    launch_us: float
    amortization: float
    memcopy_GBps: float
    transform_us: float
    axes: dict[str, AxisLink]
    terms: dict[tuple[str, tuple[int, int], str], tuple[float, float]] = field(default_factory=dict)
    source: str = "defaults"
    mesh: Mesh | None = None
    class_scale: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per link class: (α, β) ratio calibrated/default, applied to the keys not measured, so a
    partly calibrated model does not mix measured and optimistic figures on one class."""
    physics: NeuronModel | None = None
    """Trainium: Neuron's own calls, priced by :mod:`synth.closed.neuron` (None elsewhere)."""

    def group(self, axes: Sequence[str]) -> Group:
        """The replica group a call over ``axes`` runs on: nodes, the sub-torus, cores per chip, and
        how many sibling groups (the same call on the other ranks) share its chips' links and its
        instance's EFA: a program's call is issued by every rank at once."""
        mesh = self.mesh
        assert mesh is not None
        role = {a.name: a.role for a in mesh.axes}
        nodes = math.prod(mesh.axis(a).size for a in axes if role[a] == "node")
        dims = tuple((mesh.axis(a).size, True) for a in axes
                     if role[a] == "torus" and mesh.axis(a).size > 1)
        per_chip = math.prod(mesh.axis(a).size for a in axes if role[a] in ("core", "flat"))
        chip_ranks = math.prod(a.size for a in mesh.axes if a.role in ("core", "flat"))
        node_ranks = math.prod(a.size for a in mesh.axes if a.role != "node")
        group_node_ranks = math.prod(mesh.axis(a).size for a in axes if role[a] != "node")
        group = Group(nodes, dims, per_chip, link_sharing=chip_ranks // per_chip)
        if self.physics is not None and nodes > 1:
            # sibling groups on the same EFA devices: the node's ranks per device over the group's
            fam = self.physics.family
            share = node_ranks * group.efa_devices(fam) // (group_node_ranks * fam.efa_devices)
            group = Group(nodes, dims, per_chip, chip_ranks // per_chip, max(1, share))
        return group

    def rescale(self) -> None:
        ratios: dict[str, list[tuple[float, float]]] = {}
        for key, (a, b) in self.terms.items():
            axes = self._axes_for(key)
            if axes is None:
                continue
            da, db = self.default_terms(key[0], axes)
            ratios.setdefault(key[2], []).append((a / da if da > 0 else 1.0, b / db if db > 0 else 1.0))
        self.class_scale = {c: (sum(r[0] for r in v) / len(v), sum(r[1] for r in v) / len(v))
                            for c, v in ratios.items()}

    def _axes_for(self, key) -> tuple[str, ...] | None:
        import itertools
        mesh = self.mesh
        assert mesh is not None
        for size in range(1, len(mesh.axes) + 1):
            for combo in itertools.combinations(mesh.names, size):
                if self.group_key(key[0], combo) == key:
                    return combo
        return None

    def key_default_terms(self, key: tuple[str, tuple[int, int], str]) -> tuple[float, float]:
        """Default (α µs, β µs/MB) of a calibration key: those of the mesh axes with that group
        shape and class, else the class's worst axis (largest α, slowest ring). What a fit's
        measured terms are compared with (:mod:`synth.calibrate.closed_fit`,
        :func:`synth.calibrated.closed_term_ratios`)."""
        axes = self._axes_for(key)
        if axes is not None:
            return self.default_terms(key[0], axes)
        cls = key[2]
        alpha = max((a.alpha_us for a in self.axes.values() if a.link_class == cls), default=0.0)
        bw = min((a.ring_GBps for a in self.axes.values() if a.link_class == cls), default=1.0)
        return alpha, 1000.0 / bw

    # ------------------------------------------------------------------ keys
    def group_key(self, prim: str, axes: Sequence[str]) -> tuple[str, tuple[int, int], str]:
        mesh = self.mesh
        assert mesh is not None
        nodes = 1
        per_node = 1
        for a in axes:
            if self.axes[a].is_node:
                nodes *= mesh.axis(a).size
            else:
                per_node *= mesh.axis(a).size
        cls = self.group_class(axes)
        return (prim, (nodes, per_node), cls)

    def group_class(self, axes: Sequence[str]) -> str:
        node = [self.axes[a] for a in axes if self.axes[a].is_node]
        if node:
            return node[0].link_class
        intra = [self.axes[a] for a in axes]
        return min(intra, key=lambda x: x.ring_GBps).link_class if intra else "local"

    def call_terms(self, prim: str, axes: Sequence[str]) -> tuple[float, float, str]:
        """(α µs, β µs/MB, source) of a call over ``axes`` (Trainium: its large-message line)."""
        key = self.group_key(prim, axes)
        if key in self.terms:
            a, b = self.terms[key]
            return a, b, "calibrated"
        a, b = self.default_terms(prim, axes)
        if self.physics is not None:
            return a, b, "calibrated" if self.source != "defaults" else "default"
        scale = self.class_scale.get(key[2])
        if scale is not None:
            return a * scale[0], b * scale[1], "scaled"
        return a, b, "default"

    def default_terms(self, prim: str, axes: Sequence[str]) -> tuple[float, float]:
        """(α µs, β µs/MB of wire bytes) of a call over ``axes`` before any per-key calibration."""
        if self.physics is not None:
            return self.physics.large_message_terms(prim, self.group(axes))
        mesh = self.mesh
        assert mesh is not None
        intra = [a for a in axes if not self.axes[a].is_node]
        node = [a for a in axes if self.axes[a].is_node]
        g_i = math.prod(mesh.axis(a).size for a in intra) if intra else 1
        g_n = math.prod(mesh.axis(a).size for a in node) if node else 1
        g = g_i * g_n
        if g <= 1:
            return 0.0, 0.0
        bw_i = min((self.axes[a].hop_GBps if prim == "permute" else self.axes[a].ring_GBps)
                   for a in intra) if intra else math.inf
        bw_n = min((self.axes[a].hop_GBps if prim == "permute" else self.axes[a].ring_GBps)
                   for a in node) if node else math.inf
        a_i = max(self.axes[a].alpha_us for a in intra) if intra else 0.0
        a_n = max(self.axes[a].alpha_us for a in node) if node else 0.0
        # seconds-per-byte of the buffer, phase by phase (bw in GB/s -> µs per MB = 1000 / bw)
        f_i = (g_i - 1) / g_i
        f_n = (g_n - 1) / g_n
        us_per_mb = 0.0
        if prim == "permute":
            us_per_mb = 1000.0 / min(bw_i, bw_n)
        elif not node:
            us_per_mb = wire_factor(prim, g) * 1000.0 / bw_i
        elif not intra:
            us_per_mb = wire_factor(prim, g) * 1000.0 / bw_n
        elif prim == "all_gather":
            us_per_mb = f_n / g_i * 1000.0 / bw_n + f_i * 1000.0 / bw_i
        elif prim == "reduce_scatter":
            us_per_mb = f_i * 1000.0 / bw_i + f_n / g_i * 1000.0 / bw_n
        elif prim == "all_reduce":
            us_per_mb = 2 * f_i * 1000.0 / bw_i + 2 * f_n / g_i * 1000.0 / bw_n
        elif prim == "all_to_all":
            us_per_mb = f_i * 1000.0 / bw_i + f_n * 1000.0 / bw_n
        alpha = a_i + a_n if prim != "permute" else max(a_i, a_n)
        return alpha, us_per_mb / wire_factor(prim, g)

    def call_time(self, prim: str, axes: Sequence[str], nbytes: int) -> tuple[float, float]:
        """(latency, byte part) in µs of one call moving a buffer of ``nbytes`` (launch excluded)."""
        if self.physics is not None and self.group_key(prim, axes) not in self.terms:
            t = self.physics.call(prim, self.group(axes), nbytes)
            return t.latency_us, t.bytes_us
        a, b, _ = self.call_terms(prim, axes)
        g = self.mesh.group_size(axes) if self.mesh else 1
        return a, wire_factor(prim, g) * nbytes / MB * b

    def memcopy_us(self, nbytes: int) -> float:
        return self.transform_us + nbytes / MB * 1000.0 / self.memcopy_GBps

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "launch_us": self.launch_us,
                "amortization": self.amortization, "memcopy_GBps": self.memcopy_GBps,
                "transform_us": self.transform_us, "source": self.source,
                **({"neuron": self.physics.to_dict()} if self.physics is not None else {}),
                "axes": {k: {"class": v.link_class, "alpha_us": v.alpha_us,
                             "ring_GBps": v.ring_GBps, "hop_GBps": v.hop_GBps}
                         for k, v in self.axes.items()},
                "terms": [{"primitive": k[0], "group": list(k[1]), "link_class": k[2],
                           "alpha_us": v[0], "beta_us_per_mb": v[1]}
                          for k, v in sorted(self.terms.items())]}


def hardware_of(topology: Topology) -> str:
    meta = dict(topology.meta)
    if meta.get("platform") == "tpu" or "ici" in topology.link_classes():
        return "tpu"
    return "trainium"


def _hbm(topology: Topology) -> float:
    meta = dict(topology.meta)
    if "hbm_GBps" in meta:
        return float(meta["hbm_GBps"])
    name = topology.name
    if name.startswith("trn2"):
        return HBM_GBPS["trn2"]
    if name.startswith("trn1"):
        return HBM_GBPS["trn1"]
    return HBM_GBPS["tpu"]


def default_model(topology: Topology, mesh: Mesh) -> CostModel:
    """Defaults from the topology's link classes and :data:`HARDWARE`."""
    hw = hardware_of(topology)
    params = HARDWARE[hw]
    rpc = int(dict(topology.meta).get("ranks_per_chip", 1))
    memcopy = _hbm(topology) / rpc / 2.0
    axes: dict[str, AxisLink] = {}
    for ax in mesh.axes:
        i = mesh.names.index(ax.name)
        c = [0] * len(mesh.axes)
        c[i] = 1
        nb = mesh.rank(c)
        ch = topology.channel(0, nb)
        if ch is None:
            raise SynthError(f"ranks 0 and {nb} (next along axis '{ax.name}') are not connected")
        if ax.role == "node":
            # the rank's share of its NIC: the fabric port (NIC) is shared by the ranks behind it
            res = ch.resources[0]
            port_ranks = _port_ranks(topology, 0)
            share = bandwidth_from_beta(res[1]) * res[2] / max(port_ranks, 1)
            kind = next((sw.kind for sw in topology.switches if sw.name == ch.via), ch.via)
            axes[ax.name] = AxisLink(ax.name, kind, ch.alpha_us, share, share, True)
            continue
        link = next(lk for lk in topology.links if lk.src == 0 and lk.dst == nb)
        bw = link.bandwidth_GBps
        neighbours = 1 if ax.size == 2 else 2
        axes[ax.name] = AxisLink(ax.name, link.kind, link.alpha_us, bw * neighbours, bw, False)
    physics = None
    launch = params["launch_us"]
    if hw == "trainium":
        meta = dict(topology.meta)
        physics = shipped_model(family_of(topology.name, int(meta.get("ranks_per_chip", 0)) or None),
                                str(meta.get("neuron_runtime", DEFAULT_RUNTIME)))
        launch = physics.floor.launch_us
    return CostModel(hw, launch, params["amortization"], memcopy, params["transform_us"], axes,
                     mesh=mesh, physics=physics)


def _port_ranks(topology: Topology, rank: int) -> int:
    for sw in topology.switches:
        for p in sw.ports:
            if rank in p.ranks and sw.name == "fabric":
                return len(p.ranks)
    for nic in topology.nics:
        if rank in nic.ranks:
            return len(nic.ranks)
    return 1


def load_model(topology: Topology, mesh: Mesh, calibration: str | Path | dict | None) -> CostModel:
    """The default model with a calibration file (or its parsed data) applied on top."""
    model = default_model(topology, mesh)
    if calibration is None:
        return model
    if isinstance(calibration, dict):
        data, where = calibration, "calibration"
    else:
        from ..files import read_data

        path = Path(calibration)
        data = read_data(path, "calibration file", fmt="json")
        where = str(path)
    if not isinstance(data, dict) or data.get("format") != "synth-calibration/1":
        raise SynthError(f"{where}: not a synth calibration file (expected \"format\": "
                         "\"synth-calibration/1\"; make one with `synth calibrate`)")
    params = data.get("parameters", {})
    if not isinstance(params, dict):
        raise SynthError(f"{where}: 'parameters' must be an object")
    for key in ("launch_us", "amortization", "memcopy_GBps", "transform_us"):
        if key in params and params[key] is not None:
            value = _parameter(params, key, where)
            if value < 0 or (key == "memcopy_GBps" and value <= 0):
                raise SynthError(f"{where}: parameter {key} must be positive, got {value}")
            setattr(model, key, value)
    if model.physics is not None:
        model.physics = _calibrated_physics(model.physics, params, model.launch_us, where)
    for t in data.get("terms", []):
        if isinstance(t, dict) and t.get("source") == DERIVED_TERMS:
            continue
        try:
            key = (str(t["primitive"]), (int(t["group"][0]), int(t["group"][1])), str(t["link_class"]))
            model.terms[key] = (float(t["alpha_us"]), float(t["beta_us_per_mb"]))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SynthError(f"{where}: malformed term {t}: {exc}") from None
    model.source = where
    model.rescale()
    return model


def _parameter(params: dict, key: str, where: str) -> float:
    try:
        value = float(params[key])
    except (TypeError, ValueError):
        raise SynthError(f"{where}: parameter {key} must be a number, got {params[key]!r}") from None
    if not math.isfinite(value):
        raise SynthError(f"{where}: parameter {key} must be finite, got {value}")
    return value


def _calibrated_physics(physics: NeuronModel, params: dict, launch_us: float, where: str) -> NeuronModel:
    """The Trainium model with a calibration's figures (those it sets) in place of the shipped ones."""
    from dataclasses import replace

    given = {k: _parameter(params, k, where) for k in NEURON_PARAMETERS if params.get(k) is not None}
    for key, value in given.items():
        positive = key != "per_rank_us"
        if value < 0 or (positive and value == 0):
            raise SynthError(f"{where}: parameter {key} must be {'positive' if positive else '>= 0'}, "
                             f"got {value}")
    bw = physics.bandwidths
    bw = Bandwidths(*(given.get(k, getattr(bw, k)) for k in ("core_GBps", "mesh_efficiency",
                                                              "ring_efficiency", "efa_efficiency")))
    floor = replace(physics.floor, launch_us=launch_us,
                    **{k: given[k] for k in ("per_rank_us", "chip_hop_us", "link_hop_us", "efa_hop_us")
                       if k in given})
    runtime = str(params.get("runtime") or physics.runtime)
    return replace(physics, bandwidths=bw, floor=floor, runtime=runtime)


# ------------------------------------------------------------------------------------ simulation
@dataclass
class Estimate:
    time_us: float
    launch_us: float
    alpha_us: float
    bytes_us: float
    memcopy_us: float
    calls: int
    transforms: int
    sources: set[str] = field(default_factory=set)

    @property
    def serial_us(self) -> float:
        return self.launch_us + self.alpha_us + self.bytes_us + self.memcopy_us

    @property
    def overlap_us(self) -> float:
        return max(0.0, self.serial_us - self.time_us)

    def to_dict(self) -> dict[str, Any]:
        return {"time_us": round(self.time_us, 4), "launch_us": round(self.launch_us, 4),
                "alpha_us": round(self.alpha_us, 4), "bytes_us": round(self.bytes_us, 4),
                "memcopy_us": round(self.memcopy_us, 4), "overlap_us": round(self.overlap_us, 4),
                "calls": self.calls, "transforms": self.transforms}


MOVING = ("transpose", "concat", "split", "pad", "unpad", "take_rows", "put_rows", "combine")


def estimate(program: Program, model: CostModel, columns: int = 1) -> Estimate:
    """The program's time under ``model``; ``columns``: run on a trailing column axis of that width
    (:mod:`synth.closed.columns`), every value ``columns`` times its unit bytes."""
    specs = program.meta.get("specs")
    if specs is None:  # kept: a unit program is priced at every size of a sweep
        specs = program.meta["specs"] = program.specs()
    ready: dict[str, float] = {name: 0.0 for name, _ in program.inputs}
    axis_free: dict[str, float] = {}
    copy_free = 0.0
    issue_free = 0.0
    prev_call_outs: tuple[str, ...] | None = None
    est = Estimate(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0)
    finish_all = 0.0
    for op in program.ops:
        start = max((ready[v] for v in op.ins), default=0.0)
        if op.is_call:
            nbytes = specs[op.ins[0]].nbytes * columns
            if op.kind == "all_gather":
                nbytes = specs[op.outs[0]].nbytes * columns
            a, by = model.call_time(op.kind, op.axes, nbytes)
            _, _, src = model.call_terms(op.kind, op.axes)
            est.sources.add(src)
            back_to_back = prev_call_outs is not None and not set(op.ins) & set(prev_call_outs)
            launch = model.launch_us * (model.amortization if back_to_back else 1.0)
            start = max([start, issue_free] + [axis_free.get(x, 0.0) for x in op.axes])
            issue_free = start + launch
            end = start + launch + a + by
            for x in op.axes:
                axis_free[x] = end
            est.launch_us += launch
            est.alpha_us += a
            est.bytes_us += by
            est.calls += 1
            prev_call_outs = op.outs
        else:
            prev_call_outs = None
            if op.kind in MOVING:
                # a row update writes its rows in place (XLA updates a scatter's operand in place
                # when nothing reads it after, as in a lowered schedule's buffer): its rows' bytes
                written = op.outs if op.kind != "put_rows" else op.ins[1:]
                moved = sum(specs[v].nbytes for v in written) * columns
                dt = model.memcopy_us(moved)
                start = max(start, copy_free)
                end = start + dt
                copy_free = end
                est.memcopy_us += dt
                est.transforms += 1
            else:
                end = start
        for v in op.outs:
            ready[v] = end
        finish_all = max(finish_all, end)
    est.time_us = finish_all
    return est


def explain(best: Estimate, other: Estimate, best_name: str, other_name: str) -> str:
    """Why ``best`` beats ``other``: the terms that differ, largest first."""
    diffs = {
        "launch tax": other.launch_us - best.launch_us,
        "latency (α)": other.alpha_us - best.alpha_us,
        "bytes on links (β)": other.bytes_us - best.bytes_us,
        "memcopy": other.memcopy_us - best.memcopy_us,
        "overlap": best.overlap_us - other.overlap_us,
    }
    gain = other.time_us - best.time_us
    parts = sorted(((k, v) for k, v in diffs.items() if abs(v) > 1e-6), key=lambda kv: -abs(kv[1]))
    head = (f"{best_name} beats {other_name} by {gain:.2f} µs ({other.time_us / best.time_us:.2f}x)"
            if best.time_us > 0 else f"{best_name} beats {other_name}")
    if not parts:
        return head + ": identical terms"
    text = ", ".join(f"{k} {'saves' if v > 0 else 'costs'} {abs(v):.2f} µs" for k, v in parts[:3])
    calls = f"{best.calls} call(s) vs {other.calls}"
    return f"{head}: {text} ({calls})"


class ClosedTimes:
    """The closed-stack model as a :class:`synth.timing.TimeModel`. What it prices is a strategy:
    a function from a message size (bytes) to the closed-stack program that moves it, since a
    program's shapes fix its size. A calibration's closed-stack ``terms`` apply (:func:`load_model`)."""

    name = "closed"

    def __init__(self, topology: Topology, calibration: Any = None) -> None:
        from .mesh import mesh_for_topology

        self.topology = topology
        self.model = load_model(topology, mesh_for_topology(topology), calibration)
        self.source = f"synth.closed.cost ({self.model.hardware})"

    def times_us(self, subject: Any, sizes: Sequence[int]) -> list[float]:
        return [estimate(subject(int(n)), self.model).time_us for n in sizes]
