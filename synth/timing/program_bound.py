"""A lower bound on the program model's time that costs no simulation.

The select layer times many candidate files at many sizes (:mod:`synth.select.program_scorer`),
most of which lose. :func:`time_lower_bound` says, from the file's static structure alone, a time
the simulation (:func:`synth.timing.program.program_time`) can never beat, so a candidate whose
bound already exceeds the best time found at that size cannot win there and need not be
simulated. It is sound because it only adds up costs the machine (:mod:`.program_machine`)
charges one after another:

* **A block's own work.** A threadblock runs one unit at a time, from the launch on. A send unit
  (``s``, ``rcs``, ``rrs``, ``rrcs``: one message) lasts at least its floors (the executor's step
  cost and NCCL's per-hop latency) plus its wire bytes at the block's own rate cap (2/3 of it for a
  fused reduce-and-send); a ``cpy`` / ``re`` lasts its step cost plus its memory streams at the
  block's rate; a receive-only unit at least its step cost. So the call lasts at least the launch
  plus the busiest block's sum.
* **A resource's bytes.** Every link, switch port or NIC port carries its flows at a total rate
  no higher than its capacity (max-min sharing never oversubscribes), from the launch on, so the
  call lasts at least the launch plus the busiest resource's wire bytes over its capacity.

The bound is the larger of the two, less a margin of 2e-6 of itself for the machine's own
tolerances (a flow ends when less than a millionth of its bytes is left; sums are taken in
another order). It ignores dependencies, FIFO back-pressure, latency chains across ranks and
pipelining, so it is loose where those dominate; ``tests/test_program_model.py`` checks it never
exceeds the simulated time on a sample of files and sizes, and ``benchmarks/speed.py`` reports
how close it comes.
"""

from __future__ import annotations

import numpy as np

from ..emit.program import Program
from ..memo import by_identity
from ..topology import Topology
from .program_machine import CPY, RE, RECVS, RRC, RRCS, RRS, SENDS, ProgramModel, layout_of, slicing

MARGIN = 2e-6
"""Relative slack taken off the bound: flows end with up to 1e-6 of their bytes unsent, and the
bound's sums round differently from the simulation's clock."""


class _Static:
    """Per layout: each operation's block, chunk count and class, as arrays."""

    def __init__(self, layout) -> None:
        block, cnt, code, nsrc = [], [], [], []
        for b, ops in enumerate(layout.ops):
            for op in ops:
                block.append(b)
                cnt.append(op[1])
                code.append(op[0])
                nsrc.append(op[5])
        self.block = np.asarray(block, dtype=np.int64)
        self.cnt = np.asarray(cnt, dtype=np.float64)
        code_a = np.asarray(code, dtype=np.int64)
        sends = np.asarray(SENDS, dtype=bool)[code_a] if code else np.zeros(0, dtype=bool)
        recvs = np.asarray(RECVS, dtype=bool)[code_a] if code else np.zeros(0, dtype=bool)
        self.sends = sends
        self.recv_only = recvs & ~sends
        self.local = ~(sends | recvs)
        self.fused = (code_a == RRS) | (code_a == RRCS)
        self.cpy = code_a == CPY
        self.re_streams = np.where(code_a == RE, (np.asarray(nsrc, dtype=np.float64) + 2) / 2, 1.0)
        self.rrc = code_a == RRC
        out = np.asarray(layout.out_conn, dtype=np.int64)
        self.conn = out[self.block] if len(block) else np.zeros(0, dtype=np.int64)
        self.inter = np.asarray([*layout.conn_inter, False], dtype=bool)[self.conn]
        # chunks each resource carries per grid iteration (every send's cnt, over its connection)
        per_conn = np.zeros(len(layout.conn_res))
        np.add.at(per_conn, self.conn[sends], self.cnt[sends])
        per_res = np.zeros(len(layout.res_cap_list))
        for c, res in enumerate(layout.conn_res):
            for r in res:
                per_res[r] += per_conn[c]
        self.res_load = per_res / np.maximum(np.asarray(layout.res_cap_list), 1e-300)
        """Per resource: chunks per byte-per-µs of capacity (times chunk bytes / efficiency = µs)."""
        self.nb = layout.nb


@by_identity(16)
def _static(layout) -> _Static:
    return _Static(layout)


def time_lower_bound(program: Program, topology: Topology, nbytes: int, model: ProgramModel,
                     profile: str = "exec") -> float:
    """µs that :func:`synth.timing.program.program_time` with ``model`` can never go below for
    one call of ``program`` moving ``nbytes`` (module docstring: what it adds up). ``model`` must
    be the one the simulation would use (its protocol the program's)."""
    layout = layout_of(program, topology, model.nvlink_efficiency)
    st = _static(layout)
    sl = slicing(program, int(nbytes), profile)
    proto = model.proto
    m, iters, chunk = sl.max_count, len(sl.slices), sl.chunk_bytes
    rate = proto.channel_GBps * 1e3                      # data bytes per µs, one block
    eff = proto.efficiency
    # -- the busiest block: its units one after another
    messages = np.ceil(st.cnt / m)
    hop = np.where(st.inter, proto.hop_inter_us, proto.hop_intra_us)
    floors = np.where(st.sends, messages * (model.step_us + hop),
                      np.where(st.recv_only, messages * model.step_us, model.step_us))
    cap = np.where(st.fused & model.reduce_streams, rate * (2.0 / 3.0), rate)
    streams = np.where(st.cpy, 1.0, st.re_streams if model.reduce_streams else 1.0)
    # a send's wire bytes at the block's cap in wire bytes: its data bytes at the data cap
    per_byte = np.where(st.sends, st.cnt / cap, np.where(st.local, st.cnt * streams / rate, 0.0))
    per_op = floors * iters + per_byte * chunk
    busy = np.bincount(st.block, weights=per_op, minlength=st.nb) if len(per_op) else np.zeros(1)
    block_bound = float(busy.max()) if len(busy) else 0.0
    # -- the busiest resource: its bytes at its capacity
    link_bound = float(st.res_load.max()) * chunk / eff if len(st.res_load) else 0.0
    return model.launch_us + max(block_bound, link_bound) * (1.0 - MARGIN)


def time_lower_bounds(program: Program, topology: Topology, sizes, model: ProgramModel,
                      profile: str = "exec") -> list[float]:
    """:func:`time_lower_bound` at each size."""
    return [time_lower_bound(program, topology, n, model, profile) for n in sizes]
