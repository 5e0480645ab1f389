"""NKI kernels for lowered schedules on Trn2/Trn3: the same permutes as ``nki.collectives`` calls.

A lowered schedule (:mod:`.lower`) is row gathers, permutes and row updates on one buffer of chunk
rows. On NeuronCore-v3 and later (Trn2, Trn3) NKI exposes the permute itself:
``nki.collectives.collective_permute(srcs, dsts, source_target_pairs)`` sends each source rank's
tensor to its target, with the (source, target) rank pairs given explicitly (Neuron SDK 2.30+ NKI
API, "nki.collectives.collective_permute": one tensor per list, tensors in HBM). The kernel follows
the documented conventions of the NKI collectives (the nki-library collective tests): collective
buffers are ``nl.ndarray(..., buffer=nl.shared_hbm, name=...)``, the kernel's own input is copied
into such a buffer first (a collective cannot read an IO tensor), data moves with
``nisa.dma_copy``, and a reduction is ``nisa.tensor_tensor(..., op=nl.add)`` on SBUF tiles between
permutes.

The rank-dependent row tables are indexed with the rank as a Python int at trace time (each rank's
process traces its own kernel, as torch-xla does), so the kernel needs no arithmetic on
``ncc.rank_id()``. Rows that a verified schedule never fills before it reads them are left
unwritten (the stand-in fills new buffers with NaN to prove none is read).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..errors import SynthError
from ..topology import Topology
from .emit import RangeProgram, _columns_code, rows_by_rank, table_name
from .ir import Op, Program
from .reference import global_pairs

NKI_FAMILIES = ("trn2", "trn3")
"""Instance families whose NeuronCores (v3 and later) run ``nki.collectives``."""
REDUCE_TILE = 512
"""Columns per SBUF tile of a reduction (one partition row at a time)."""


def nki_platform(topology: Topology) -> bool:
    """Do ``topology``'s ranks run NKI collectives (Trn2/Trn3)?"""
    name = topology.name.lower()
    device = str(dict(topology.meta).get("device", ""))
    return name.startswith(NKI_FAMILIES) or any(v in device for v in ("v3", "v4"))


def _table(value: list) -> str:
    return json.dumps(value, separators=(",", ":"))


class _Kernel:
    """One range's kernel: the lowered unit program walked op by op into NKI calls."""

    def __init__(self, program: Program, index: int, consts: dict[str, str]) -> None:
        self.program = program
        self.index = index
        self.consts = consts
        self.lines: list[str] = []
        self.where: dict[str, str] = {}
        """IR value -> the NKI expression holding it (put_rows updates its base in place)."""
        self.rows: dict[str, int] = {}
        self.specs = program.specs()
        self.n = 0

    def const(self, prefix: str, value: list) -> str:
        return table_name(self.consts, prefix, _table(value))

    def per_rank(self, prefix: str, op: Op) -> str:
        return self.const(prefix, rows_by_rank(self.program, op))

    def buffer(self, rows: int, label: str) -> str:
        self.n += 1
        name = f"{label}{self.n}"
        self.lines.append(f"{name} = nl.ndarray(({rows}, C), dtype=x.dtype, buffer=nl.shared_hbm, "
                          f"name='r{self.index}_{name}')")
        return name

    def walk(self) -> list[str]:
        ops = self.program.ops
        later: dict[str, int] = {}
        for i, op in enumerate(ops):
            for v in op.ins:
                later[v] = i
        src = self.program.inputs[0][0]
        self.rows[src] = self.specs[src].shape[0]
        # a collective cannot touch the kernel's IO tensor: the input is copied into HBM first
        self.where[src] = self.buffer(self.rows[src], "x")
        self.lines.append(f"nisa.dma_copy(dst={self.where[src]}, src=x)")
        for i, op in enumerate(ops):
            self.op(op, i, later)
        out = self.program.outputs[0]
        return [*self.lines, f"return {self.where[out]}"]

    def op(self, op: Op, i: int, later: dict[str, int]) -> None:
        k = op.kind
        v = op.ins[0]
        if k in ("reshape", "pad"):
            # storage stays (rows, C): a unit program's reshapes keep one chunk per row, and its only
            # pad is the zero row absent chunks point at, which a verified schedule never reads
            # (_gather skips rows past the source's own)
            self.where[op.outs[0]] = self.where[v]
            self.rows[op.outs[0]] = self.rows[v]
            return
        if k == "take_rows":
            table = self.per_rank("ROWS", op)
            rows = len(op.table[0])
            dst = self.buffer(rows, "t")
            self.lines.append(f"_gather({dst}, {self.where[v]}, {table}[rank], {self.rows[v]})")
            self.where[op.outs[0]] = dst
            self.rows[op.outs[0]] = rows
            return
        if k == "permute":
            pairs = self.const("PAIRS", [list(p) for p in global_pairs(self.program.mesh, op.axes,
                                                                      op.perm)])
            dst = self.buffer(self.rows[v], "p")
            self.lines.append(f"ncc.collective_permute(srcs=[{self.where[v]}], dsts=[{dst}], "
                              f"source_target_pairs={pairs})")
            self.where[op.outs[0]] = dst
            self.rows[op.outs[0]] = self.rows[v]
            return
        if k == "put_rows":
            base, val = op.ins
            if later.get(base, -1) > i:
                raise SynthError("an NKI kernel updates a buffer in place; this program reads the "
                                 "old one later")
            table = self.per_rank("DEST", op)
            self.lines.append(f"_scatter({self.where[base]}, {self.where[val]}, {table}[rank], "
                              f"{op.op!r})")
            self.where[op.outs[0]] = self.where[base]
            self.rows[op.outs[0]] = self.rows[base]
            return
        raise SynthError(f"an NKI kernel holds lowered schedules only; '{k}' is not one of their ops")


_HELPERS = [
    "def _runs(rows):",
    '    """(dst row, src row, length) of the contiguous runs of a row table (-1 and the',
    '    absent-chunk row skipped), so each run is one DMA."""',
    "    runs = []",
    "    for j, r in enumerate(rows):",
    "        if r < 0:",
    "            continue",
    "        if runs and runs[-1][0] + runs[-1][2] == j and runs[-1][1] + runs[-1][2] == r:",
    "            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)",
    "        else:",
    "            runs.append((j, r, 1))",
    "    return runs",
    "",
    "",
    "def _gather(dst, src, rows, src_rows):",
    '    """dst row j = src row rows[j] (rows past src_rows: an absent chunk, left unwritten)."""',
    "    for j, r, k in _runs([r if r < src_rows else -1 for r in rows]):",
    "        nisa.dma_copy(dst=dst[j:j + k, :], src=src[r:r + k, :])",
    "",
    "",
    "def _scatter(buf, val, rows, op):",
    '    """buf row rows[j] = val row j (copy), or combined with it on SBUF tiles (add, min, max)."""',
    "    if op == 'copy':",
    "        for i, j, k in _runs(_inverse(rows)):",
    "            nisa.dma_copy(dst=buf[i:i + k, :], src=val[j:j + k, :])",
    "        return",
    "    alu = {'add': nl.add, 'min': nl.minimum, 'max': nl.maximum}[op]",
    "    width = buf.shape[1]",
    "    for j, i in enumerate(rows):",
    "        if i < 0:",
    "            continue",
    f"        for c in range(0, width, {REDUCE_TILE}):",
    f"            w = min({REDUCE_TILE}, width - c)",
    "            acc = nl.ndarray((1, w), dtype=buf.dtype, buffer=nl.sbuf)",
    "            new = nl.ndarray((1, w), dtype=buf.dtype, buffer=nl.sbuf)",
    "            nisa.dma_copy(dst=acc, src=buf[i:i + 1, c:c + w])",
    "            nisa.dma_copy(dst=new, src=val[j:j + 1, c:c + w])",
    "            nisa.tensor_tensor(dst=acc, data1=acc, data2=new, op=alu)",
    "            nisa.dma_copy(dst=buf[i:i + 1, c:c + w], src=acc)",
    "",
    "",
    "def _inverse(rows):",
    '    """For a destination table (val row j -> buf row rows[j]): buf row i <- val row, -1 none."""',
    "    size = max(rows) + 1 if rows else 0",
    "    out = [-1] * size",
    "    for j, i in enumerate(rows):",
    "        if i >= 0:",
    "            out[i] = j",
    "    return out",
    "",
    "",
]


def emit_nki(ranges: Sequence[RangeProgram], topology: Topology) -> str:
    """A module of NKI kernels for the ranges a lowered schedule serves, with the same ``run``
    and column mapping as the torch-neuronx module (:func:`synth.closed.emit.emit_ranges`)."""
    if not ranges:
        raise SynthError("no lowered range to write as NKI")
    first = ranges[0].program
    kind, mesh = first.collective, first.mesh
    consts: dict[str, str] = {}
    kernels: list[str] = []
    for i, r in enumerate(ranges):
        body = _Kernel(r.program, i, consts).walk()
        kernels += ["@nki.jit", f"def _range_{i}(x, rank):",
                    f'    """{r.program.name} ({r.lo}..{r.hi} bytes): rank ``rank``\'s kernel."""',
                    "    C = x.shape[1]", *(f"    {line}" for line in body), "", ""]
    lines = ['"""Generated by synth solve: NKI kernels (nki.collectives.collective_permute) of the '
             f"synthesized\nschedules serving {kind} on {topology.name}, for Trn2/Trn3. Do not edit "
             "by hand.", "",
             "run(tensors) is the torch-neuronx module's, for the ranges listed in RANGES (other "
             "sizes run the\nnearest of them: correct, not the fastest; the torch-neuronx module "
             "beside this one serves every\nsize with its fastest strategy). Checked on synth's "
             'NumPy stand-in of nki before it was written.\n"""', "",
             "import math", "", "import nki", "import nki.collectives as ncc",
             "import nki.isa as nisa", "import nki.language as nl", "import torch",
             "import torch_xla.core.xla_model as xm", "",
             f"COLLECTIVE = {kind!r}", f"REDUCE = {first.reduce_op!r}", f"WORLD = {mesh.size}",
             "RANGES = [  # (min bytes, max bytes, schedule), inclusive",
             *(f"    ({r.lo}, {r.hi}, {r.program.name!r})," for r in ranges), "]"]
    lines += [f"{k} = {v}" for k, v in consts.items()]
    lines += ["", "", *_HELPERS, *kernels,
              "_PROGRAMS = [  # (max bytes, kernel, unit elements)",
              *(f"    ({r.hi}, _range_{i}, {r.unit})," for i, r in enumerate(ranges)), "]", "", ""]
    lines += _columns_code(kind, "neuron")
    lines += ["def run(tensors):",
              f'    """{kind} of each of this rank\'s tensors through the NKI kernels; call on every '
              f'one of the {mesh.size} ranks."""',
              "    rank = xm.get_ordinal()",
              "    results = []",
              "    for x in tensors:",
              "        kernel, unit = _range_for(_nbytes(x))",
              "        t, shape = _to_columns(x, unit)",
              "        results.append(_from_columns(kernel(t, rank), shape))",
              "    return results", ""]
    return "\n".join(lines)
