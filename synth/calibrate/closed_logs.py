"""Closed-stack measurement logs: nccom-test output and timing JSON, as :class:`Record` objects.

Inputs (detected by content):

* **nccom-test output** (Neuron): a ``nccom-test -r RANKS [-N NODES] OP ...`` command line followed
  by its table (``size(B) count(elems) type time(us) algbw(GB/s) busbw(GB/s)``); several runs may
  follow each other. OP is allr / allg / redsc / alltoall / permute (long names accepted). A run of
  R ranks on N nodes measures the key (primitive, (N, R/N), link class of those ranks).
* **timing JSON** (JAX, or anything): ``{"format": "synth-timings/1", "records": [...]}`` where a
  record is ``{"primitive", "axes": [...] | "group": [nodes, per_node] + "link_class", "bytes",
  "time_us", "calls": M}`` (M independent calls issued back to back in one program),
  ``{"transform": NAME, "bytes", "time_us"}`` (a memcopy), or ``{"launch": true, "time_us"}`` (a
  call that moves nothing: the launch tax alone).

A record's link class is resolved against the closed-stack model of the topology being calibrated
(:mod:`synth.closed.cost`); :mod:`.closed_fit` fits the model's terms from the records.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..closed.cost import CostModel
from ..closed.mesh import Mesh
from ..errors import SynthError
from ..files import parse_data, read_input
from .nccl_tests import check_time

OPS = {
    "allr": "all_reduce", "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "allg": "all_gather", "all_gather": "all_gather", "allgather": "all_gather",
    "redsc": "reduce_scatter", "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "rs": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "all2all": "all_to_all", "a2a": "all_to_all", "permute": "permute",
}
TIMINGS_FORMAT = "synth-timings/1"

MAX_RANKS_IN_LOG = 1 << 20
"""Ranks (and nodes) a command line may name; more is not a machine, and the count becomes a
topology size."""


@dataclass
class Record:
    kind: str  # call | transform | launch
    time_us: float
    primitive: str = ""
    group: tuple[int, int] = (1, 1)
    link_class: str = ""
    nbytes: int = 0
    calls: int = 1
    logged_busbw: float | None = None
    line: str = ""

    @property
    def key(self) -> tuple[str, tuple[int, int], str]:
        return (self.primitive, self.group, self.link_class)

    @property
    def ranks(self) -> int:
        return self.group[0] * self.group[1]


# ------------------------------------------------------------------------------------ parsing
def parse_nccom(text: str, source: str, mesh: Mesh, model: CostModel) -> list[Record]:
    records: list[Record] = []
    ctx: tuple[str, int, int] | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if any(tok.endswith("nccom-test") for tok in line.split()):
            ctx = _parse_command(line, f"{source}:{lineno}")
            continue
        nums = line.split()
        if len(nums) >= 4 and re.fullmatch(r"[0-9]+", nums[0]):
            if ctx is None:
                raise SynthError(f"{source}:{lineno}: a result row before any nccom-test command line "
                                 "(the command names the operation and the ranks)")
            op, ranks, nodes = ctx
            try:
                size = _int(nums[0], f"{source}:{lineno}", "size")
                time_us = float(nums[3])
                busbw = float(nums[5]) if len(nums) >= 6 else None
            except ValueError:
                raise SynthError(f"{source}:{lineno}: cannot read row '{_cut(line)}'") from None
            check_time(time_us, f"{source}:{lineno}")
            if busbw is not None and not math.isfinite(busbw):
                busbw = None
            per_node = ranks // nodes
            cls = _class_for(mesh, model, nodes, per_node, f"{source}:{lineno}")
            records.append(Record("call", time_us, op, (nodes, per_node), cls, size, 1, busbw,
                                  f"{source}:{lineno}"))
    if not records:
        raise SynthError(f"{source}: no nccom-test results found (expected a 'nccom-test -r N OP' line "
                         "and rows 'size count type time algbw busbw')")
    return records


def _parse_command(line: str, where: str) -> tuple[str, int, int]:
    tokens = line.split()
    tokens = tokens[tokens.index(next(t for t in tokens if t.endswith("nccom-test"))) + 1:]
    ranks, nodes, op = None, 1, None
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("-r", "--nworkers", "--ranks") and i + 1 < len(tokens):
            ranks = _int(tokens[i + 1], where, "rank count", MAX_RANKS_IN_LOG)
            i += 2
            continue
        if t in ("-N", "--nnodes", "--nodes") and i + 1 < len(tokens):
            nodes = _int(tokens[i + 1], where, "node count", MAX_RANKS_IN_LOG)
            i += 2
            continue
        if t.startswith("-"):
            i += 2 if i + 1 < len(tokens) and not tokens[i + 1].startswith("-") \
                and tokens[i + 1].lower() not in OPS else 1
            continue
        if t.lower() in OPS:
            op = OPS[t.lower()]
        i += 1
    if ranks is None or op is None:
        raise SynthError(f"{where}: cannot read the nccom-test command '{_cut(line)}' (need -r RANKS "
                         f"and an operation: {', '.join(sorted(set(OPS)))})")
    if ranks < 1:
        raise SynthError(f"{where}: -r {ranks}: a run needs at least 1 rank")
    if nodes < 1 or ranks % nodes:
        raise SynthError(f"{where}: {ranks} ranks do not split evenly over {nodes} nodes")
    return op, ranks, nodes


def _int(text: str, where: str, what: str = "number", most: int = 2**64 - 1) -> int:
    """A whole number of a log line, at most ``most`` (digits are counted before ``int()``, which
    refuses thousands of them with a ValueError of its own)."""
    if not re.fullmatch(r"[0-9]+", text):
        raise SynthError(f"{where}: expected a whole number, got '{_cut(text)}'")
    if len(text) > 20 or int(text) > most:
        raise SynthError(f"{where}: {what} {_cut(text)} is too large (at most {most})")
    return int(text)


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _class_for(mesh: Mesh, model: CostModel, nodes: int, per_node: int, where: str) -> str:
    """Link class of a run over ranks 0..per_node-1 of each of ``nodes`` nodes."""
    node_axes = [a.name for a in mesh.axes if a.role == "node"]
    avail_nodes = mesh.axis("node").size if node_axes else 1
    if nodes > avail_nodes:
        raise SynthError(f"{where}: the log has {nodes} nodes; calibrate with --nodes {nodes}")
    intra = [a for a in mesh.axes if a.role != "node"]
    if per_node > math.prod(a.size for a in intra):
        raise SynthError(f"{where}: {per_node} ranks per node is more than the topology has")
    axes = []
    span = 1
    for a in reversed(intra):
        if span >= per_node:
            break
        axes.append(a.name)
        span *= a.size
    if nodes > 1:
        axes += node_axes
    return model.group_class(axes) if axes else "local"


def parse_timings(data: Any, source: str, mesh: Mesh, model: CostModel) -> list[Record]:
    if not isinstance(data, dict) or data.get("format") != TIMINGS_FORMAT:
        raise SynthError(f"{source}: not a timing file (expected \"format\": \"{TIMINGS_FORMAT}\")")
    records = data.get("records", [])
    if not isinstance(records, list):
        raise SynthError(f"{source}: 'records' must be a list of timing records")
    out = []
    for i, r in enumerate(records):
        where = f"{source}: records.{i}"
        try:
            if not isinstance(r, dict):
                raise TypeError(f"a record is an object, got {r!r:.60}")
            t = _number(r["time_us"], "time_us")
            check_time(t, "time_us")
            if r.get("launch"):
                out.append(Record("launch", t, line=where))
            elif "transform" in r:
                out.append(Record("transform", t, primitive=str(r["transform"]),
                                  nbytes=_whole(r["bytes"], "bytes", 0), line=where))
            else:
                prim = OPS.get(str(r["primitive"]).lower())
                if prim is None:
                    raise ValueError(f"unknown primitive {r['primitive']!r}")
                if "axes" in r:
                    axes = mesh.ordered(r["axes"])
                    prim_key = model.group_key(prim, axes)
                    group, cls = prim_key[1], prim_key[2]
                else:
                    if not isinstance(r["group"], list) or len(r["group"]) != 2:
                        raise ValueError("group must be [nodes, ranks per node]")
                    group = (_whole(r["group"][0], "group nodes", 1),
                             _whole(r["group"][1], "group ranks per node", 1))
                    cls = str(r["link_class"])
                calls = _whole(r.get("calls", 1), "calls", 1)
                out.append(Record("call", t, prim, group, cls, _whole(r["bytes"], "bytes", 0), calls,
                                  None, where))
        except SynthError as exc:
            raise SynthError(f"{where}: {exc.message}") from None
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SynthError(f"{where}: malformed record: {exc}") from None
    if not out:
        raise SynthError(f"{source}: no records")
    return out


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {value!r:.60}")
    return float(value)


def _whole(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number, got {value!r:.60}")
    if value < least or (value > MAX_RANKS_IN_LOG and what.startswith("group")):
        raise ValueError(f"{what} must be at least {least}"
                         + (f" and at most {MAX_RANKS_IN_LOG}" if what.startswith("group") else "")
                         + f", got {value}")
    return value


def read_log(path: str | Path, mesh: Mesh, model: CostModel) -> list[Record]:
    p = Path(path)
    text = read_input(p, "log file")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_timings(parse_data(text, str(p), "json"), str(p), mesh, model)
    return parse_nccom(text, str(p), mesh, model)


def nodes_in_log(log: str | Path) -> int:
    """The most nodes any run in a log uses (1 for a timing JSON without a node axis)."""
    p = Path(log)
    text = read_input(p, "log file")
    if text.lstrip().startswith("{"):
        data = parse_data(text, str(p), "json")
        recs = data.get("records", []) if isinstance(data, dict) else []
        groups = [r.get("group") for r in recs if isinstance(r, dict)] if isinstance(recs, list) \
            else []
        # a malformed group is reported, with its record, by parse_timings
        return max([g[0] for g in groups if isinstance(g, list) and g and isinstance(g[0], int)
                    and not isinstance(g[0], bool) and 1 <= g[0] <= MAX_RANKS_IN_LOG] + [1])
    most = 1
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#") and any(t.endswith("nccom-test") for t in s.split()):
            most = max(most, _parse_command(s, f"{p}:{lineno}")[2])
    return most
