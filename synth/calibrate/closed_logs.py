"""Closed-stack measurement logs: nccom-test output and timing JSON, as :class:`Record` objects.

Inputs (detected by content):

* **nccom-test output** (Neuron): a ``nccom-test -r RANKS [-N NODES] OP ...`` command line followed
  by its table; several runs may follow each other. OP is allr / allg / redsc / redsct / alltoall /
  permute (long names accepted). A run of R ranks on N nodes measures ranks 0 .. R/N - 1 of each
  node. The table is read by its header, so every layout nccom-test has printed is accepted:

  - ``size(B) count(elems) type time(us) algbw(GB/s) busbw(GB/s)`` (integer times, SDK 2.10 era);
  - ``time:avg(us)`` instead of ``time(us)`` (floating point, later releases);
  - ``--show-input-output-size``: ``total_input_size(B) total_output_size(B)`` after the count;
  - ``--stats avg p25 ...``: several ``time:<stat>(us)`` columns (the average is used, else p50);
  - ``--show-algorithm``: a trailing ``algorithm`` column (mesh / rdh / kangaring / ...), kept.

  A row without a header above it is read positionally (size, count, type, time, algbw, busbw).
  nccom-test's ``size(B)`` is the all-gather output, the reduce-scatter input and the all-reduce
  buffer: the convention of :mod:`synth.closed.cost`.
* **timing JSON** (JAX, or anything): ``{"format": "synth-timings/1", "records": [...]}`` where a
  record is ``{"primitive", "axes": [...] | "group": [nodes, per_node] + "link_class", "bytes",
  "time_us", "calls": M}`` (M independent calls issued back to back in one program),
  ``{"transform": NAME, "bytes", "time_us"}`` (a memcopy), or ``{"launch": true, "time_us"}`` (a
  call that moves nothing: the launch tax alone).
* **a suite** (:func:`read_suite`): a folder of nccom-test logs, each opening with
  ``# synth: topology=NAME nodes=N runtime=RELEASE [instance=...] [status=...]`` (and ``# source:`` /
  ``# hardware:`` lines): ``tests/data/nccom-test``.

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
    "redsct": "reduce_scatter", "rs": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
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
    run: str = ""
    """The command block (file:line) a row belongs to: the unit the fits weight by."""
    axes: tuple[str, ...] | None = None
    """Mesh axes of a timing-JSON record given by axes (None: ranks 0 .. per_node - 1 per node)."""
    algorithm: str = ""
    """What nccom-test's ``--show-algorithm`` column printed, if anything."""

    @property
    def key(self) -> tuple[str, tuple[int, int], str]:
        return (self.primitive, self.group, self.link_class)

    @property
    def ranks(self) -> int:
        return self.group[0] * self.group[1]


# ------------------------------------------------------------------------------------ parsing
def parse_nccom(text: str, source: str, mesh: Mesh | None, model: CostModel | None) -> list[Record]:
    """Every result row of nccom-test output (``mesh``/``model`` resolve link classes; None: skip)."""
    records: list[Record] = []
    ctx: tuple[str, int, int] | None = None
    run = ""
    columns: dict[str, int] | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if _is_command(line):
            ctx = _parse_command(line, f"{source}:{lineno}")
            run = f"{source}:{lineno}"
            columns = None
            continue
        if line.startswith("size(B)"):
            columns = _header_columns(line, f"{source}:{lineno}")
            continue
        nums = line.split()
        if len(nums) >= 4 and re.fullmatch(r"[0-9]+", nums[0]):
            where = f"{source}:{lineno}"
            if ctx is None:
                raise SynthError(f"{where}: a result row before any nccom-test command line "
                                 "(the command names the operation and the ranks)")
            op, ranks, nodes = ctx
            size, time_us, busbw, algorithm = _read_row(nums, columns, line, where)
            per_node = ranks // nodes
            cls = (_class_for(mesh, model, nodes, per_node, where)
                   if mesh is not None and model is not None else "")
            records.append(Record("call", time_us, op, (nodes, per_node), cls, size, 1, busbw,
                                  where, run, None, algorithm))
    if not records:
        raise SynthError(f"{source}: no nccom-test results found (expected a 'nccom-test -r N OP' line "
                         "and rows 'size count type time algbw busbw')")
    return records


def _is_command(line: str) -> bool:
    return any(tok.strip("\"'").endswith("nccom-test") and not tok.startswith("-")
               for tok in line.split())


TIME_COLUMNS = ("time:avg(us)", "time(us)", "time:p50(us)")
"""Which time column a row is read from, in order of preference."""


def _header_columns(line: str, where: str) -> dict[str, int]:
    names = line.split()
    cols = {name: i for i, name in enumerate(names)}
    if not any(t in cols for t in TIME_COLUMNS):
        raise SynthError(f"{where}: nccom-test header without a time column "
                         f"({', '.join(TIME_COLUMNS)}): '{line}'")
    return cols


def _read_row(nums: list[str], columns: dict[str, int] | None, line: str,
              where: str) -> tuple[int, float, float | None, str]:
    """(size, time µs, logged busbw, algorithm) of one row."""
    if columns is None:
        i_time, i_bus, i_alg = 3, 5, None
    else:
        i_time = next(columns[t] for t in TIME_COLUMNS if t in columns)
        i_bus = columns.get("busbw(GB/s)")
        i_alg = columns.get("algorithm")
    try:
        size = _int(nums[0], where, "size")
        time_us = float(nums[i_time])
        busbw = float(nums[i_bus]) if i_bus is not None and len(nums) > i_bus else None
    except (ValueError, IndexError):
        raise SynthError(f"{where}: cannot read row '{_cut(line)}'") from None
    check_time(time_us, where)
    if busbw is not None and not math.isfinite(busbw):
        busbw = None
    algorithm = nums[i_alg] if i_alg is not None and len(nums) > i_alg else ""
    return size, time_us, busbw, algorithm


def _parse_command(line: str, where: str) -> tuple[str, int, int]:
    tokens = [t.strip("\"'") for t in line.split()]
    tokens = tokens[tokens.index(next(t for t in tokens if t.endswith("nccom-test")
                                      and not t.startswith("-"))) + 1:]
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
                axes = None
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
                                  None, where, where, axes))
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
        if s and not s.startswith("#") and _is_command(s):
            most = max(most, _parse_command(s, f"{p}:{lineno}")[2])
    return most


# ------------------------------------------------------------------------------------ suites
SUITE_HEADER = re.compile(r"^#\s*synth:\s*(.*)$")


@dataclass
class SuiteLog:
    """One file of a measurement suite: what its header says, and its records."""

    path: Path
    topology: str
    nodes: int
    runtime: str
    instance: str
    status: str
    records: list[Record]

    @property
    def name(self) -> str:
        return self.path.name


def read_suite(directory: str | Path) -> list[SuiteLog]:
    """Every ``*.txt`` nccom-test log of ``directory`` with its ``# synth:`` header, sorted by name."""
    folder = Path(directory)
    if not folder.is_dir():
        raise SynthError(f"{folder}: not a folder of nccom-test logs")
    out = []
    for path in sorted(folder.glob("*.txt")):
        text = read_input(path, "log file")
        fields: dict[str, str] = {}
        for line in text.splitlines():
            m = SUITE_HEADER.match(line.strip())
            if m:
                for kv in m.group(1).split():
                    key, _, value = kv.partition("=")
                    fields[key] = value
                break
        missing = [k for k in ("topology", "nodes", "runtime") if k not in fields]
        if missing:
            raise SynthError(f"{path}: no '# synth: topology=NAME nodes=N runtime=RELEASE' line "
                             f"(missing {', '.join(missing)})")
        nodes = _int(fields["nodes"], f"{path}: nodes")
        records = parse_nccom(text, str(path), None, None)
        for r in records:
            if r.group[0] != nodes:
                raise SynthError(f"{r.line}: the run uses {r.group[0]} node(s), the header says {nodes}")
        out.append(SuiteLog(path, fields["topology"], nodes, fields["runtime"],
                            fields.get("instance", ""), fields.get("status", ""), records))
    if not out:
        raise SynthError(f"{folder}: no *.txt nccom-test logs")
    return out
