"""What an importer builds: topology data in the schema of :mod:`synth.topology_io`, plus a log.

The log has three parts the CLI prints: what the file said (``read``), what synth concluded from
it (``inferred``) and what it had to take on trust (``assumed``), so a user can judge the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


def class_name(text: str) -> str:
    """A link-class name the topology schema accepts (``[A-Za-z0-9_.@-]``)."""
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", text)


@dataclass
class Machine:
    """One imported node: ranks, link classes, links, switches, NICs and the import log."""

    source: str
    fmt: str
    ranks: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    link_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: list[dict[str, Any]] = field(default_factory=list)
    switches: list[dict[str, Any]] = field(default_factory=list)
    nics: list[dict[str, Any]] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    inferred: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)

    def link_class(self, name: str, alpha_us: float, gbps: float, note: str) -> None:
        """Declare a link class once (the first declaration wins)."""
        self.link_classes.setdefault(name, {"alpha_us": alpha_us,
                                            "bandwidth_GBps": round(gbps, 6), "note": note})

    def to_data(self, name: str, sources: list[str]) -> dict[str, Any]:
        """Plain data for :func:`synth.topology_io.parse_topology` (and the YAML file)."""
        data: dict[str, Any] = {
            "name": name,
            "description": f"imported by `synth topo import --format {self.fmt}` from "
                           f"{self.source}: {self.read[0] if self.read else ''}",
            "sources": sources,
            "ranks": self.ranks,
            "link_classes": self.link_classes,
        }
        if self.links:
            data["links"] = self.links
        if self.switches:
            data["switches"] = self.switches
        if self.nics:
            data["nics"] = self.nics
        data["meta"] = {**self.meta, "imported_from": self.source, "format": self.fmt,
                        "assumed": self.assumed}
        return data
