"""Calibrations: measured α/β per link class (and protocol overheads) applied to a topology.

A calibration is what ``synth calibrate`` writes and ``catalog``/``solve``/``pareto`` read:

    {"format": "synth-calibration/1", "kind": "nccl-tests", "topology": "dgx_a100x2",
     "link_classes": {"ib_hdr": {"alpha_us": 2.9, "beta_us_per_mb": 43.1, "source": "fit", ...}},
     "launch": {"launch_us": 4.1, ...}, "protocols": {"LL": {"launch_us": 7.0, ...}},
     "model": {...}, "fit": {...}}

``beta_us_per_mb`` is per link or per switch lane, the unit of ``topologies/*.yaml``'s
``link_classes`` (``bandwidth_GBps`` is accepted instead). ``protocols`` and
``instance_overhead_us`` are read by :mod:`synth.timing.protocol`.

A closed-stack fit (:mod:`synth.calibrate.closed_fit`, the same ``format`` with ``terms``) is also
read: each term is a vendor primitive's α/β over a replica group on one link class. This module
checks and keeps the terms as written; relating them to a topology's classes needs the
closed-stack cost model, which :mod:`synth.calibrated` does (this module sits below every model,
which all read calibrations).

Link classes of a topology: a link's ``kind``; a NIC's ``kind``; a switch port's class is the kind
of the NIC behind it when the port is a NIC (the inter-node fabric of ``--nodes N``, whose own kind
joins its NICs' kinds), else the switch's ``kind`` (:func:`class_of_port`).
:func:`with_class_figures` returns a new topology (same name, new content hash);
:func:`synth.calibrated.apply_calibration` applies a whole file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import SynthError, number_field
from .files import finite_or_null, read_data
from .schema import field_name, short
from .topology import (
    MAX_CLASSES,
    Port,
    Switch,
    Topology,
    beta_from_bandwidth,
    check_link_figures,
)

FORMAT = "synth-calibration/1"

_MAPPED = ("protocols", "instance_overhead_us", "program")
"""The sections :meth:`Calibration.get` exposes to the protocol and program models."""


@dataclass(frozen=True)
class ClassParams:
    """α (µs) and β (µs/MB per link or lane) of one link class, and where they came from."""

    alpha_us: float | None
    beta_us_per_mb: float | None
    source: str = "given"
    alpha_stderr_pct: float | None = None
    beta_stderr_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        bw = None if not self.beta_us_per_mb else 1000.0 / self.beta_us_per_mb
        return {"alpha_us": _r(self.alpha_us), "beta_us_per_mb": _r(self.beta_us_per_mb),
                "bandwidth_GBps": _r(bw), "source": self.source,
                "alpha_stderr_pct": _r(self.alpha_stderr_pct),
                "beta_stderr_pct": _r(self.beta_stderr_pct)}


@dataclass
class Calibration:
    """A calibration: per-class figures plus the fit's context (all optional but ``classes``)."""

    classes: dict[str, ClassParams]
    launch: dict[str, Any] | None = None
    topology: str = ""
    kind: str = ""
    model: dict[str, Any] | None = None
    fit: dict[str, Any] | None = None
    source: str = ""
    protocols: dict[str, Any] | None = None
    instance_overhead_us: float | None = None
    terms: list[dict[str, Any]] = field(default_factory=list)
    """Closed-stack fit terms (see the module docstring), kept for
    :func:`synth.calibrated.apply_calibration`."""
    notes: list[str] = field(default_factory=list)
    nccl_model: dict[str, Any] | None = None
    """Corrections to NCCL's own tuning model (:class:`NcclCalibration`)."""
    program: dict[str, Any] | None = None
    """Floors of the timed program model (``launch_us``, ``step_us``; :mod:`synth.timing.program`)."""

    def get(self, key: str, default: Any = None) -> Any:
        """Mapping-style access for `synth.timing.protocol` (``protocols``, ``instance_overhead_us``)
        and :mod:`synth.timing.program` (``program``)."""
        value = (getattr(self, key, None) if key in _MAPPED else None)
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        """``calibration[key]`` as :meth:`get` (readers index the sections they found with ``get``;
        before this, a calibration with ``instance_overhead_us`` crashed ``solve``)."""
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def to_json(self) -> dict[str, Any]:
        """The file form. A figure that is not finite (a fit statistic of a degenerate log) is
        written as ``null``: JSON has no spelling for it, and the reader refuses ``NaN``. The result
        is checked to read back (:func:`check_readable`), so ``synth calibrate`` never writes a
        file that ``--calibration`` then refuses."""

        data: dict[str, Any] = {"format": FORMAT, "kind": self.kind, "topology": self.topology,
                                "link_classes": {k: v.to_dict() for k, v in sorted(self.classes.items())}}
        for key in ("launch", "protocols", "instance_overhead_us", "model", "fit", "nccl_model",
                    "program"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        if self.terms:
            data["terms"] = self.terms
        data = finite_or_null(data)
        check_readable(data, self.source or "calibration")
        return data

    @staticmethod
    def from_json(data: Any, source: str = "calibration") -> Calibration:
        if not isinstance(data, Mapping):
            raise SynthError(f"{source}: a calibration file is a JSON object")
        terms = data.get("terms") or [] if data.get("format") == FORMAT else []
        if not isinstance(terms, list):
            raise SynthError(f"{source}: 'terms' must be a list of closed-stack terms, got "
                             f"{short(terms)}")
        if not ("link_classes" in data or terms or "protocols" in data or "nccl_model" in data
                or "program" in data):
            raise SynthError(f"{source}: not a synth calibration (expected 'link_classes', "
                             f"'protocols', 'program' or closed-stack 'terms' with \"format\": "
                             f"\"{FORMAT}\"; make one with `synth calibrate`)")
        program = data.get("program")
        _check_program(program, source)
        classes_in = data.get("link_classes") or {}
        if not isinstance(classes_in, Mapping):
            raise SynthError(f"{source}: 'link_classes' must map a class name to its α/β")
        if len(classes_in) > MAX_CLASSES:
            raise SynthError(f"{source}: 'link_classes' names {len(classes_in)} classes; synth "
                             f"reads at most {MAX_CLASSES} (MAX_CLASSES)")
        classes = {str(k): _class_params(v, f"{source}: link_classes.{field_name([k])}")
                   for k, v in sorted(classes_in.items(), key=lambda kv: str(kv[0]))}
        protocols = data.get("protocols")
        _check_protocols(protocols, source)
        for key in ("launch", "model", "fit"):
            if data.get(key) is not None and not isinstance(data[key], Mapping):
                raise SynthError(f"{source}: '{key}' must be an object, got {short(data[key])}")
        raw_terms = data.get("terms")
        if raw_terms is not None and not isinstance(raw_terms, list):
            raise SynthError(f"{source}: 'terms' must be a list of closed-stack terms, got "
                             f"{short(raw_terms)}")
        for i, term in enumerate(terms):
            _check_term(term, f"{source}: terms.{i}")
        overhead = data.get("instance_overhead_us")
        return Calibration(classes, data.get("launch"), str(data.get("topology", "")),
                           str(data.get("kind", "")), data.get("model"), data.get("fit"), source,
                           dict(protocols) if protocols is not None else None,
                           None if overhead is None else _number(overhead, f"{source}: "
                                                                 "instance_overhead_us", True),
                           [dict(t) for t in terms],
                           nccl_model=_nccl_section(data.get("nccl_model"), source),
                           program=dict(program) if program is not None else None)


def check_readable(data: Mapping[str, Any], source: str) -> None:
    """Raise a SynthError when ``data`` (a calibration about to be written) would not read back:
    the writer's side of :meth:`Calibration.from_json`, so a fit that produced an unusable figure
    (a bandwidth of 10^-9 GB/s, a negative latency) fails in ``synth calibrate``, naming it,
    instead of in every later ``--calibration``."""
    try:
        Calibration.from_json(data, source)
    except SynthError as exc:
        raise SynthError(f"not writing the calibration: it would not read back ({exc.message})") \
            from None


PROTOCOL_FIGURES = ("efficiency", "launch_us", "hop_intra_us", "hop_inter_us", "channel_GBps")
"""The figures of ``protocols.<P>``: what :func:`synth.timing.protocol.model_with_calibration`
reads, and what :func:`_check_protocols` checks (one list for both)."""


def _check_protocols(section: Any, source: str) -> None:
    """The ``protocols`` section: protocol name -> object whose figures are numbers >= 0 (> 0 for
    ``efficiency`` and ``channel_GBps``; ``efficiency`` at most 1), as the protocol model reads
    them. Other keys (``source``, fit statistics) travel along unread."""
    if section is None:
        return
    if not isinstance(section, Mapping):
        raise SynthError(f"{source}: 'protocols' must map a protocol name to its parameters")
    for name, entry in section.items():
        where = f"{source}: protocols.{field_name([name])}"
        if not isinstance(entry, Mapping):
            raise SynthError(f"{where} must be an object, got {short(entry)}")
        for key in PROTOCOL_FIGURES:
            if entry.get(key) is not None:
                value = number_field(entry[key], f"{where}.{key}",
                                     allow_zero=key not in ("efficiency", "channel_GBps"))
                if key == "efficiency" and value > 1:
                    raise SynthError(f"{where}.efficiency must be at most 1, got {value}")


def _check_program(section: Any, source: str) -> None:
    """``program``: ``launch_us`` (a number, or one per protocol) and ``step_us``, each >= 0."""
    if section is None:
        return
    if not isinstance(section, Mapping):
        raise SynthError(f"{source}: 'program' must be an object with launch_us / step_us")
    launch = section.get("launch_us")
    if isinstance(launch, Mapping):
        for proto, value in launch.items():
            number_field(value, f"{source}: program.launch_us.{field_name([proto])}",
                         allow_zero=True)
    elif launch is not None:
        number_field(launch, f"{source}: program.launch_us", allow_zero=True)
    if section.get("step_us") is not None:
        number_field(section["step_us"], f"{source}: program.step_us", allow_zero=True)


def _check_term(term: Any, where: str) -> None:
    """A closed-stack term: ``{primitive, group: [nodes, per_node], link_class, alpha_us,
    beta_us_per_mb}`` (:func:`synth.calibrated.closed_term_ratios` reads these)."""
    if not isinstance(term, Mapping):
        raise SynthError(f"{where}: a term is an object, got {short(term)}")
    group = term.get("group")
    if not (isinstance(term.get("primitive"), str) and isinstance(term.get("link_class"), str)
            and isinstance(group, list) and len(group) == 2
            and all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in group)):
        raise SynthError(f"{where}: a term needs 'primitive' and 'link_class' (strings) and "
                         "'group' ([nodes, ranks per node], whole numbers >= 1)")
    for key in ("alpha_us", "beta_us_per_mb"):
        number_field(term.get(key), f"{where}.{key}", allow_zero=True)


def _nccl_section(section: Any, source: str) -> dict[str, Any] | None:
    """The ``nccl_model`` section, checked (:class:`NcclCalibration`)."""
    if section is None:
        return None
    NcclCalibration.from_mapping(section, f"{source}: nccl_model")
    return dict(section)


@dataclass(frozen=True)
class NcclCalibration:
    """Measured corrections to NCCL's own model (:mod:`synth.timing.nccl`), the file's
    ``nccl_model`` section: ``t = launch + lat_scale·lat + bytes/(bw_scale·bw)``."""

    launch_us: float = 0.0
    latency_scale: float = 1.0
    bandwidth_scale: float = 1.0
    source: str = "NCCL's tuning model, uncalibrated"

    def time(self, latency_us: float, bandwidth_us: float) -> float:
        """The calibrated time of a configuration whose NCCL terms are these."""
        return self.launch_us + self.latency_scale * latency_us + bandwidth_us / self.bandwidth_scale

    def to_dict(self) -> dict[str, Any]:
        return {"launch_us": round(self.launch_us, 6), "latency_scale": round(self.latency_scale, 6),
                "bandwidth_scale": round(self.bandwidth_scale, 6), "source": self.source}

    @staticmethod
    def from_mapping(data: Any, where: str = "calibration") -> NcclCalibration:
        if data is None:
            return NcclCalibration()
        if not isinstance(data, Mapping):
            raise SynthError(f"{where}: 'nccl_model' must be an object with launch_us, "
                             "latency_scale, bandwidth_scale")
        vals = {}
        for key, lo in (("launch_us", None), ("latency_scale", 0.0), ("bandwidth_scale", 0.0)):
            if key in data:
                v = data[key]
                if not isinstance(v, int | float) or not math.isfinite(v) or (lo is not None and v <= lo):
                    raise SynthError(f"{where}: nccl_model.{key} must be a "
                                     f"{'positive ' if lo is not None else ''}number, got {v!r}")
                vals[key] = float(v)
        return NcclCalibration(vals.get("launch_us", 0.0), vals.get("latency_scale", 1.0),
                               vals.get("bandwidth_scale", 1.0), str(data.get("source", where)))


def calibration_of(calibration: Any) -> NcclCalibration:
    """The ``nccl_model`` section of a calibration (a Calibration, mapping or None)."""
    if calibration is None:
        return NcclCalibration()
    if isinstance(calibration, NcclCalibration):
        return calibration
    section = getattr(calibration, "nccl_model", None)
    if section is None and isinstance(calibration, Mapping):
        section = calibration.get("nccl_model")
    return NcclCalibration.from_mapping(section)


def _class_params(entry: Any, where: str) -> ClassParams:
    if not isinstance(entry, Mapping):
        raise SynthError(f"{where} must be an object with alpha_us and/or beta_us_per_mb")
    alpha = _number(entry.get("alpha_us"), f"{where}.alpha_us", True)
    beta = _number(entry.get("beta_us_per_mb"), f"{where}.beta_us_per_mb", False)
    bw = _number(entry.get("bandwidth_GBps"), f"{where}.bandwidth_GBps", False)
    if beta is None and bw is not None:
        beta = beta_from_bandwidth(bw)
    if alpha is None and beta is None:
        raise SynthError(f"{where} sets neither alpha_us nor beta_us_per_mb / bandwidth_GBps")
    # the same sanity range as a topology's link classes (a figure left out is not checked)
    check_link_figures(0.0 if alpha is None else alpha, 1.0 if beta is None else beta, where)
    return ClassParams(alpha, beta, str(entry.get("source", "given")),
                       _number(entry.get("alpha_stderr_pct"), f"{where}.alpha_stderr_pct", True),
                       _number(entry.get("beta_stderr_pct"), f"{where}.beta_stderr_pct", True))


def _number(value: Any, where: str, allow_zero: bool) -> float | None:
    return None if value is None else number_field(value, where, allow_zero=allow_zero)


def _r(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")


def load_calibration(source: str | Path | Mapping[str, Any] | Calibration) -> Calibration:
    """A calibration from a file, parsed JSON, or an existing :class:`Calibration`."""
    if isinstance(source, Calibration):
        return source
    if isinstance(source, Mapping):
        return Calibration.from_json(source)
    path = Path(source)
    data = read_data(path, "calibration file", fmt="json")
    return Calibration.from_json(data, str(path))


# ------------------------------------------------------------------------------------ classes
def class_of_port(topology: Topology, switch: Switch, port: Port) -> str:
    """The link class of a switch port: its NIC's kind for a fabric port, else the switch's kind."""
    for nic in topology.nics:
        if nic.name == port.name and tuple(nic.ranks) == tuple(port.ranks):
            return nic.kind
    return switch.kind


def switch_classes(topology: Topology, switch: Switch) -> tuple[str, ...]:
    """The distinct classes of a switch's ports, sorted."""
    return tuple(sorted({class_of_port(topology, switch, p) for p in switch.ports}))


def topology_classes(topology: Topology) -> tuple[str, ...]:
    """Every link class the topology uses."""
    out = {lk.kind for lk in topology.links} | {n.kind for n in topology.nics}
    for sw in topology.switches:
        out.update(switch_classes(topology, sw))
    return tuple(sorted(out))


def given_overrides(topology: Topology, calibration: Calibration
                    ) -> tuple[dict[str, ClassParams], list[str]]:
    """The per-class figures the file gives (``link_classes``) that apply to ``topology``, and
    notes on those that did not apply. Figures a closed-stack fit's ``terms`` imply are added by
    :func:`synth.calibrated.class_overrides`."""
    have = set(topology_classes(topology))
    out = {k: v for k, v in calibration.classes.items() if k in have}
    absent = [k for k in calibration.classes if k not in have]
    notes = []
    if absent:
        named = ", ".join(f"'{short(k)[1:-1]}'" for k in absent[:5]) + \
            (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        notes.append(f"link class{'es' if len(absent) > 1 else ''} {named} "
                     f"{'are' if len(absent) > 1 else 'is'} not in '{topology.name}' (it has "
                     f"{', '.join(sorted(have))}); ignored")
    return out, notes


def class_figures(topology: Topology) -> dict[str, tuple[float, float]]:
    """kind -> (α µs, β µs/MB per link or port lane) for every class the topology uses."""
    out: dict[str, tuple[float, float]] = {}
    for lk in topology.links:
        out.setdefault(lk.kind, (lk.alpha_us, lk.beta_us_per_mb))
    for n in topology.nics:
        out.setdefault(n.kind, (n.alpha_us, n.beta_us_per_mb))
    for sw in topology.switches:
        for p in sw.ports:
            out.setdefault(class_of_port(topology, sw, p), (sw.alpha_us, p.beta_us_per_mb))
    return out


def with_class_figures(topology: Topology, overrides: Mapping[str, ClassParams], label: str
                       ) -> Topology:
    """``topology`` with every overridden class's α and per-link/lane β replaced (a new topology:
    same name, new content hash; ``label`` names the calibration in its sources). A switch takes
    the largest α of its port classes."""
    if not overrides:
        return topology

    def alpha(kind: str, old: float) -> float:
        o = overrides.get(kind)
        return old if o is None or o.alpha_us is None else float(o.alpha_us)

    def beta(kind: str, old: float) -> float:
        o = overrides.get(kind)
        return old if o is None or o.beta_us_per_mb is None else float(o.beta_us_per_mb)

    links = tuple(replace(lk, alpha_us=alpha(lk.kind, lk.alpha_us),
                          beta_us_per_mb=beta(lk.kind, lk.beta_us_per_mb)) for lk in topology.links)
    switches = []
    for sw in topology.switches:
        classes = switch_classes(topology, sw)
        new_alpha = max(alpha(c, sw.alpha_us) for c in classes) if classes else sw.alpha_us
        ports = tuple(replace(p, beta_us_per_mb=beta(class_of_port(topology, sw, p), p.beta_us_per_mb))
                      for p in sw.ports)
        switches.append(replace(sw, alpha_us=new_alpha, ports=ports))
    nics = tuple(replace(n, alpha_us=alpha(n.kind, n.alpha_us),
                         beta_us_per_mb=beta(n.kind, n.beta_us_per_mb)) for n in topology.nics)
    sources = (*topology.sources, f"calibrated: {label} ({', '.join(sorted(overrides))})")
    return Topology(name=topology.name, num_ranks=topology.num_ranks, links=links,
                    switches=tuple(switches), nodes=topology.nodes, nics=nics,
                    description=topology.description, sources=sources, meta=topology.meta)
