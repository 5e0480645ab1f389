"""MSCCL++ execution plans: the same compiled program as the XML, as a verified plan (JSON).

The emitter (:mod:`synth.mscclpp.emit`) builds and verifies the plan; this module names it and
says where it runs (:class:`PlanTarget`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..mscclpp.emit import PlanOptions
from ..schedule import Schedule
from ..topology import Topology
from .schedule_json import _exact_size, schedule_stem


def plan_file_name(schedule: Schedule, options: PlanOptions, tag: str = "") -> str:
    """The schedule's stem plus every plan option that changes the file (protocol, instances, the
    byte range when one is set), as :func:`xml_file_name` does for the XML: ``--proto LL`` no
    longer overwrites the Simple plan."""
    parts = [schedule_stem(schedule, tag), options.proto, f"x{options.instances}"]
    if options.min_bytes or options.max_bytes:
        parts.append(f"{_exact_size(options.min_bytes)}-"
                     f"{_exact_size(options.max_bytes) if options.max_bytes else 'max'}")
    return "_".join(parts) + ".mscclpp.json"


@dataclass(frozen=True)
class PlanTarget:
    """Write an MSCCL++ execution plan instead of the XML: its options and the topology whose
    nodes decide memory (same node) versus port (across NICs) channels."""

    topology: Topology
    options: PlanOptions = field(default_factory=PlanOptions)
