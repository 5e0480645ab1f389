"""nccl-tests logs (``all_gather_perf``, ``all_reduce_perf``, ...) as :class:`Run` objects.

**Input.** The text nccl-tests prints (NVIDIA/nccl-tests ``src/common.cu``/``util.cu``): a header of
``#`` comments (``# Collective test starting: all_gather_perf``, ``# nThread 1 nGpus 1 minBytes ...``,
one ``#  Rank  r Group g Pid p on HOST device d [...] NAME`` line per rank), the column header
``size count type redop root time algbw busbw #wrong`` for out-of-place then in-place, rows, and a
footer. Older versions (no ``root``/``Group``, ``bytes N type op ... res``) and the per-iteration
and timestamp variants are read by column name. Several runs may be concatenated in one file; the
collective comes from the ``Collective test starting`` line or a command line naming ``*_perf``.
Ranks and nodes come from the ``Rank`` lines (distinct hosts = nodes), else from busbw/algbw.

:mod:`.nccl_fit` fits per-link-class α/β from the runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SynthError
from ..files import read_input

PROGRAMS = {"all_gather": "allgather", "reduce_scatter": "reducescatter",
            "all_reduce": "allreduce", "alltoall": "alltoall"}
"""nccl-tests program stem -> synth collective."""
UNSUPPORTED = ("broadcast", "reduce", "sendrecv", "gather", "scatter", "hypercube", "alltoallv")
BUS_FACTOR = {"allgather": lambda n: (n - 1) / n, "reducescatter": lambda n: (n - 1) / n,
              "allreduce": lambda n: 2 * (n - 1) / n, "alltoall": lambda n: (n - 1) / n}
"""busbw = algbw × factor (nccl-tests' *GetBw)."""

TIME_RANGE_US = (1e-3, 1e9)
"""Times a measurement may report, in µs: a nanosecond (no collective call is faster) to a quarter
of an hour. Outside it a figure is a typo or a unit slip, and a fit over it breaks (a least-squares
solve over 10^-320 does not converge; a 10^400 is infinite)."""

def check_time(time_us: float, where: str) -> None:
    """A measured time must be a number of µs within :data:`TIME_RANGE_US`."""
    lo, hi = TIME_RANGE_US
    if not (math.isfinite(time_us) and lo <= time_us <= hi):
        raise SynthError(f"{where}: time {time_us:g} µs is outside {lo:g}..{hi:g} µs "
                         "(TIME_RANGE_US); is it in µs?")


MAX_RANK = 1 << 20
"""The largest rank number a ``# Rank`` line may carry: ranks become a topology size."""

_PROG_RE = re.compile(r"\b([a-z_]+?)_perf(?:_mpi)?\b")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_TS_RE = re.compile(r"^\d{1,4}[-/:.]\d{1,2}[-/:.]\d{1,4}")


# ======================================================================================= parsing
@dataclass(frozen=True)
class Row:
    """One measured point: bytes, time and the columns nccl-tests printed beside it."""

    size: int
    time_us: float
    algbw: float | None
    busbw: float | None
    placement: str  # out-of-place | in-place
    dtype: str
    line: int


@dataclass
class Run:
    """One nccl-tests invocation: the collective, who took part, and its rows."""

    collective: str | None
    start_line: int
    program: str = ""
    hosts: dict[int, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    nodes: int = 1
    ranks: int = 0

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def parse_nccl_tests(text: str, source: str = "log") -> list[Run]:
    """The runs in an nccl-tests log, with ranks and nodes resolved where the log states them.

    Raises a :class:`SynthError` naming the line for anything malformed, and when no result row of
    a supported collective is found.
    """
    runs: list[Run] = []
    cur: Run | None = None
    columns: list[str] | None = None
    ignored: list[str] = []

    def start(lineno: int) -> Run:
        nonlocal cur, columns
        if cur is None or cur.rows or cur.skipped:
            cur = Run(None, lineno)
            runs.append(cur)
            columns = None
        return cur

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}:{lineno}"
        prog = _program(line)
        if line.startswith("#"):
            body = line[1:].strip()
            if body.startswith("nccl-tests version") or body.startswith("nThread "):
                start(lineno)
            elif body.startswith("Collective test starting:"):
                run = start(lineno)
                _set_program(run, body.split(":", 1)[1].strip(), where)
                continue
            elif body.startswith("Collective test concluded:"):
                continue
            m = _RANK_RE.match(line)
            if m:
                run = start(lineno) if cur is None else cur
                if len(m.group(1)) > 7 or int(m.group(1)) > MAX_RANK:
                    raise SynthError(f"{where}: rank {m.group(1)[:12]}... is larger than "
                                     f"{MAX_RANK}: not a rank of a real run")
                run.hosts[int(m.group(1))] = m.group(2)
                continue
            header = _column_header(body)
            if header is not None:
                run = start(lineno) if cur is None else cur
                if run.rows:  # a second table in the same run: a new run of the same program
                    prev = run
                    run = start(lineno)
                    run.collective, run.program, run.hosts = prev.collective, prev.program, prev.hosts
                columns = header
                continue
            if prog:
                _set_program(start(lineno), prog, where)
            continue
        tokens = line.split()
        if columns is not None and len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit():
            assert cur is not None
            _read_row(cur, columns, tokens, lineno, where)
            continue
        if prog:  # a command line (shell prompt, job script echo)
            _set_program(start(lineno), prog, where)
            continue
        if len(ignored) < 3 and tokens and tokens[0].isdigit():
            ignored.append(where)
    kept = [r for r in runs if r.rows or r.skipped]
    usable = [r for r in kept if r.collective in PROGRAMS.values() and r.rows]
    for r in kept:
        if r.rows and r.collective is None:
            raise SynthError(f"{source}:{r.start_line}: results without a collective name; keep the "
                             "'# Collective test starting: ...' line or the command line "
                             "(e.g. './all_gather_perf -b 8 -e 8G') in the log")
    if not usable:
        named = sorted({r.program for r in kept if r.program})
        what = f" (found only: {', '.join(named)})" if named else ""
        raise SynthError(
            f"{source}: no nccl-tests results for all_gather_perf, reduce_scatter_perf, "
            f"all_reduce_perf or alltoall_perf found{what}; expected the table nccl-tests prints "
            "('#  size  count  type  redop  root  time  algbw  busbw  #wrong ...' and its rows) after a "
            "'# Collective test starting: NAME' line or a command line naming the *_perf program")
    for r in usable:
        _resolve_ranks(r, source)
    return usable


def _program(line: str) -> str | None:
    m = _PROG_RE.search(line)
    return m.group(1) if m else None


def _set_program(run: Run, name: str, where: str) -> None:
    stem = re.sub(r"(_perf)?(_mpi)?$", "", name.strip().split("/")[-1])
    run.program = f"{stem}_perf"
    if stem in PROGRAMS:
        run.collective = PROGRAMS[stem]
    elif stem in UNSUPPORTED or stem.endswith(UNSUPPORTED):
        run.collective = "unsupported"
    else:
        raise SynthError(f"{where}: unknown nccl-tests program '{name}' (calibration reads "
                         f"{', '.join(k + '_perf' for k in PROGRAMS)})")


def _column_header(body: str) -> list[str] | None:
    tokens = body.split()
    low = [t.lower() for t in tokens]
    if low and low[0] in ("size", "bytes") and ("time" in low or "cputime" in low) and "algbw" in low:
        # old versions print the largest deviation ("error"/"res") instead of a count of wrong
        # elements; a float sum may deviate a little without being wrong, so that column is not used
        return [{"bytes": "size", "n": "count", "op": "redop", "cputime": "time", "res": "delta",
                 "error": "delta"}.get(t, t) for t in low if t not in ("timestamp",)]
    return None


def _read_row(run: Run, columns: list[str], tokens: list[str], lineno: int, where: str) -> None:
    while tokens and _TS_RE.match(tokens[-1]):  # -T timestamps (date and time tokens)
        tokens = tokens[:-1]
    first_time = columns.index("time")
    tail = columns[first_time:]
    head = tokens[:len(tokens) - len(tail)]
    if len(tokens) < len(tail) + 2:
        raise SynthError(f"{where}: row has {len(tokens)} fields, the header names {len(columns)}: "
                         f"'{' '.join(tokens)}'")
    vals = tokens[len(tokens) - len(tail):]
    if len(head[0]) > 20 or int(head[0]) > 2**64 - 1:
        raise SynthError(f"{where}: size {head[0][:24]}{'...' if len(head[0]) > 24 else ''} is "
                         "larger than 2^64 bytes")
    size = int(head[0])
    dtype = head[2] if len(head) > 2 else "?"
    if run.collective == "unsupported":
        run.skip("unsupported collective")
        return
    if size == 0:
        run.skip("size 0 (the per-rank count rounds down to nothing)")
        return
    # the tail repeats (time algbw busbw #wrong [per-iteration...]) for out-of-place then in-place
    starts = [i for i, c in enumerate(tail) if c == "time"]
    for n, s in enumerate(starts):
        block = tail[s:starts[n + 1] if n + 1 < len(starts) else len(tail)]
        block_vals = vals[s:s + len(block)]
        placement = "out-of-place" if n == 0 else "in-place"
        values = dict(zip(block, block_vals, strict=True))
        t = _num(values.get("time"), where, "time")
        if t is None:
            continue
        wrong = _num(values.get("#wrong"), where, "#wrong")
        if wrong:
            run.skip("#wrong > 0 (nccl-tests found wrong results)")
            continue
        check_time(t, where)
        run.rows.append(Row(size, t, _num(values.get("algbw"), where, "algbw"),
                            _num(values.get("busbw"), where, "busbw"), placement, dtype, lineno))


def _num(text: str | None, where: str, what: str) -> float | None:
    if text is None or text in ("N/A", "n/a", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        raise SynthError(f"{where}: cannot read {what} '{text}'") from None


def _resolve_ranks(run: Run, source: str) -> None:
    """Ranks and nodes from the Rank lines; else ranks from the busbw/algbw factor."""
    if run.hosts:
        run.ranks = max(run.hosts) + 1
        run.nodes = len(set(run.hosts.values()))
        return
    assert run.collective is not None
    # nccl-tests prints two decimals: below 1 GB/s the ratio is rounding noise (0.02 / 0.01 = 2)
    best = max((r for r in run.rows if r.algbw and r.algbw >= 1.0 and r.busbw), key=lambda r: r.size,
               default=None)
    if best is None:
        run.ranks = 0  # decided by the topology
        return
    ratio = best.busbw / best.algbw  # type: ignore[operator]
    if run.collective == "allreduce":
        n = 2 / (2 - ratio) if ratio < 2 else 0
    else:
        n = 1 / (1 - ratio) if ratio < 1 else 0
    run.ranks = round(n) if n and math.isfinite(n) and n >= 2 else 0


def read_nccl_log(path: str | Path) -> list[Run]:
    return parse_nccl_tests(read_input(path, "log file"), str(path))


def nodes_in_nccl_log(path: str | Path) -> int:
    """The most hosts any run in the log spans (1 when the log lists no ranks)."""
    return max((r.nodes for r in read_nccl_log(path)), default=1)
