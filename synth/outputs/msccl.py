"""MSCCL-IR XML: one interpreter-verified file per size range, and the ``MSCCL_CONFIG`` index that
names them for microsoft/msccl.

The compiler (:mod:`synth.emit`) turns a schedule into XML text and proves it with the
interpreter; this module names the files (:func:`xml_file_name`), indexes them
(:func:`config_index`) and reads one back (:func:`read_program`) for ``synth verify`` and
``synth simulate``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..emit import XmlOptions
from ..emit.program import Program
from ..emit.xml_parse import parse_program
from ..errors import SynthError
from ..files import read_input
from ..schedule import Schedule
from ..topology import Topology
from .schedule_json import _exact_size, schedule_stem

DEFAULT_XML = XmlOptions()
"""The exec runtime, Simple protocol, one instance, all sizes."""


def xml_file_name(schedule: Schedule, xml: XmlOptions, tag: str = "") -> str:
    """The schedule's stem plus every XML option that changes the file: protocol, instances,
    ``ip`` / ``oop`` for an in-place-only / out-of-place-only file (``--inplace``,
    ``--outofplace``, or a range served by one file per call kind; the default declares both
    modes where the runtime allows it), the byte range when one is set, and the runtime profile."""
    parts = [schedule_stem(schedule, tag), xml.proto, f"x{xml.instances}"]
    if xml.inplace is not None:
        parts.append("ip" if xml.inplace else "oop")
    if xml.min_bytes or xml.max_bytes:
        parts.append(f"{_exact_size(xml.min_bytes)}-"
                     f"{_exact_size(xml.max_bytes) if xml.max_bytes else 'max'}")
    return "_".join(parts) + f".{xml.profile}.xml"


def config_index(entries: Sequence[tuple[Path, int, int, str]]) -> str:
    """``MSCCL_CONFIG`` for microsoft/msccl (spec §0): one ``<load>`` per file with its byte range
    (``maxbytes`` exclusive, ``-1`` unbounded) and protocol; absolute paths, because the runtime
    opens them relative to the job's working directory otherwise."""
    for path, *_ in entries:
        if any(ch in str(path) for ch in '"<>&\t\n\r'):
            raise SynthError(f"the path '{path}' contains a character MSCCL_CONFIG cannot hold")
    lines = [f'  <load path="{path}" minbytes="{lo}" maxbytes="{hi + 1 if hi else -1}" '
             f'proto="{proto}"/>\n' for path, lo, hi, proto in entries]
    return "<msccl_algos>\n" + "".join(lines) + "</msccl_algos>\n"


def read_program(path: str | Path, profile: str = "exec") -> Program:
    """An MSCCL-IR file parsed with the runtime's lexical rules (spec §1), not yet interpreted."""
    return parse_program(read_input(path, "MSCCL-IR XML file"), str(path), profile)


SM_COUNT = {"V100": 80, "A100": 108, "H100": 132, "H200": 132, "H800": 132, "MI300X": 304}
"""Streaming multiprocessors (CUs on AMD) per GPU: spec §5.1 (A100 108, H100 SXM 132); NVIDIA's
V100 whitepaper (80); AMD's MI300X datasheet (304 CUs)."""

_GPU_RE = re.compile(r"<gpu\b")
_TB_RE = re.compile(r"<tb\b")


def sm_count(topology: Topology) -> int | None:
    """SMs of the topology's GPU (``meta.gpu``), or None when unknown (no co-residency check)."""
    gpu = str(dict(topology.meta).get("gpu", "")).upper()
    for tag, count in SM_COUNT.items():
        if tag in gpu:
            return count
    return None


def max_threadblocks(xml: str) -> int:
    """The most ``<tb>`` elements under one ``<gpu>`` of an MSCCL-IR file."""
    parts = _GPU_RE.split(xml)[1:]
    return max((len(_TB_RE.findall(p)) for p in parts), default=0)
