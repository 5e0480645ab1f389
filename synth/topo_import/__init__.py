"""``synth topo import``: build a topology file from what a machine reports about itself.

Formats: ``nccl-xml`` (NCCL_TOPO_DUMP_FILE / NCCL_TOPO_FILE, :mod:`.nccl_xml`), ``nvidia-smi``
(``nvidia-smi topo -m``, :mod:`.nvidia_smi`), ``rocm-smi`` (``rocm-smi --showtopo``,
:mod:`.rocm_smi`), ``neuron-ls`` (``neuron-ls --json-output``, :mod:`.neuron_ls`). Each importer
returns a :class:`~.machine.Machine`; :func:`import_topology` validates it as a topology (the same
checks as ``--topo FILE``) and renders the YAML; the CLI writes it atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import unknown_name
from ..files import read_input
from ..topology import Topology
from ..topology_io import parse_topology
from .machine import Machine

FORMATS = ("nccl-xml", "nvidia-smi", "rocm-smi", "neuron-ls")

GPUS = ("none", "v100", "a100", "h100", "h200", "b200", "mi250x", "mi300x", "trn1", "trn2")
"""``--gpu`` values: what a format that does not name its devices should assume."""


def import_machine(path: str, fmt: str, gpu: str | None = None,
                   assume_nic_gbps: float | None = None) -> Machine:
    """Read ``path`` in format ``fmt`` into a :class:`Machine` (SynthError on anything unreadable)."""
    if fmt not in FORMATS:
        raise unknown_name("import format", fmt, FORMATS)
    if gpu is not None and gpu not in GPUS:
        raise unknown_name("--gpu", gpu, GPUS)
    text = read_input(path, "topology dump")
    if fmt == "nccl-xml":
        from .nccl_xml import parse_nccl_xml

        return parse_nccl_xml(text, str(path), gpu, assume_nic_gbps)
    if fmt == "nvidia-smi":
        from .nvidia_smi import parse_nvidia_smi

        return parse_nvidia_smi(text, str(path), gpu, assume_nic_gbps)
    if fmt == "rocm-smi":
        from .rocm_smi import parse_rocm_smi

        return parse_rocm_smi(text, str(path), gpu)
    from .neuron_ls import parse_neuron_ls

    return parse_neuron_ls(text, str(path), gpu)


def import_topology(path: str, fmt: str, name: str | None = None, gpu: str | None = None,
                    assume_nic_gbps: float | None = None) -> tuple[Machine, Topology, str]:
    """Import ``path``: the machine and its log, the validated Topology, and the YAML text."""
    machine = import_machine(path, fmt, gpu, assume_nic_gbps)
    topo_name = name or _name_from(path)
    data = machine.to_data(topo_name, [f"{Path(path).name} ({fmt}), imported by synth topo import"])
    topology = parse_topology(data, f"{path} (imported)")
    return machine, topology, render_yaml(data, machine)


def _name_from(path: str) -> str:
    import re

    stem = re.sub(r"[^A-Za-z0-9_.@-]", "_", Path(path).stem) or "imported"
    return stem


def render_yaml(data: dict[str, Any], machine: Machine) -> str:
    """The topology file: a comment header with the import log, then the data (stable order)."""
    lines = [f"# Imported by `synth topo import --format {machine.fmt}` from {machine.source}.",
             "# Units: alpha_us in microseconds; bandwidth_GBps in GB/s (10^9 B/s) per direction."]
    for title, items in (("read", machine.read), ("inferred", machine.inferred),
                         ("ASSUMED", machine.assumed)):
        for item in items:
            lines.append(f"# {title}: {item}")
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(lines) + "\n" + body

