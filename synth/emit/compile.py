"""Compile a :class:`~synth.schedule.Schedule` to an MSCCL-IR :class:`~synth.emit.program.Program`.

MSCCLang-style (ASPLOS'23) lowering; the passes live in :mod:`synth.emit.passes`::

    lower -> fuse -> aggregate -> agreement -> order -> hazards -> allocate -> progress
          -> dependencies -> replicate (instances) -> Program -> XML (:mod:`synth.emit.xml_write`)

The driver loops: when the allocation cannot pair a fused op's peers on any channel, or the
progress check finds an op that could block under the runtime's FIFO model (capacity 2 messages
for Simple, 8 for LL/LL128; ``ceil(cnt/M)`` messages per step with M from ``max_bytes``), the fused
ops involved are split back into a receive and a send and the program is rebuilt; when a
threadblock has more steps than the profile allows, routes spread over more channels. When the
program is still over a limit (threadblocks, nodes, depid), the schedule is placed once more
unfused, each connection on as few blocks as its length needs
(:func:`synth.emit.passes.allocate_connections`), and that program is kept if it has fewer blocks:
fused ops save instructions, but pairing their two peers in one block spreads every route over the
same channels, which opens a block for every connection side on every channel. Before each
placement, where the ops about to be placed put a rank over the node limit and the ops all
unfused do too, the compile is refused at once (:func:`_over_node_limit`). The result
is deterministic: the same schedule and options give the same program and the same XML bytes.

In-place / out-of-place (``inplace``): ``False`` writes an out-of-place file, ``True`` an in-place
one (spec §3.4 aliasing), ``None`` a file valid for both call kinds (``inplace="1"
outofplace="1"``) -- except alltoall and the LEGACY profile (which cannot declare both), where
``None`` follows the collective's own ``inplace`` flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import ceil
from typing import Any

from .. import collector, guards
from ..errors import SynthError
from ..schedule import Schedule
from . import passes as P
from .program import Gpu, Program, Threadblock
from .proto_twins import keep, keep_refusal, twin_refusal, twin_text
from .runtimes import MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL, PROFILES, get_profile
from .xml_write import MAX_NODES, PROTOCOLS, check_limits, coll_name, program_to_xml

DEFAULT_MAX_THREADBLOCKS = 64
"""Threadblocks per rank a file may use unless the caller says otherwise (``--max-threadblocks``).

All of a rank's blocks run at once, one per SM, and spin while they wait (spec §5.1), so every
block is an SM the training step's own kernels do not get while the collective runs. 64 is under
half of an H100 SXM's 132 SMs and 59% of an A100's 108, it is twice NCCL's own ceiling of one block
per channel over ``MAXCHANNELS`` = 32, and it is above every production MSCCL file we hold: the
Azure/msccl-scheduler ND A100 v4 / ND H100 v5 algorithms in ``tests/data/xml-corpus`` and
``tests/data/msccl_ndv5`` use at most 56 blocks per rank (their 8-GPU allgathers)."""

MAX_ATTEMPTS = 12
"""Rebuilds that un-fuse ops before the driver gives up fusion entirely (always deadlock-free)."""
FUSE_WORK = 12_000_000
"""Rebuilds x schedule transfers the driver spends on fusion: :data:`MAX_ATTEMPTS` up to a million
transfers, fewer above (at least 2). Why: a rebuild re-runs aggregation, ordering, hazards and
placement, linear in the transfers; on trn1_32 x 16 allgather (trees, 8 pieces, 2.09 M transfers)
each took 38 s and 13 ran (9.5 min) before the unfused placement, whose 212 blocks per rank then
went to the per-connection fallback anyway."""

_FUSED = frozenset(("rcs", "rrs", "rrcs"))


@dataclass(frozen=True)
class PassCounts:
    """Size of the program one configuration of the passes produces."""

    name: str
    instructions: int
    """Non-nop steps over all ranks."""
    nops: int
    steps: int
    """All steps (instructions + nops)."""
    threadblocks: int
    max_steps_per_tb: int
    channels: int
    by_type: tuple[tuple[str, int], ...]
    fused: int = 0
    unfused: int = 0
    """Fusion candidates the driver split again (pairing clash or progress check)."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "instructions": self.instructions, "nops": self.nops,
                "steps": self.steps, "threadblocks": self.threadblocks,
                "max_steps_per_tb": self.max_steps_per_tb, "channels": self.channels,
                "by_type": dict(self.by_type), "fused": self.fused, "unfused": self.unfused}


@dataclass(frozen=True)
class CompileStats:
    """Per-pass counts: the DAG as lowered, after fusion, after aggregation, and the final program
    (limits enforced: channel spreading, instances)."""

    passes: tuple[PassCounts, ...]
    schedule_steps: int
    transfers: int
    notes: tuple[str, ...] = field(default=())

    def get(self, name: str) -> PassCounts:
        for p in self.passes:
            if p.name == name:
                return p
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {"schedule_steps": self.schedule_steps, "transfers": self.transfers,
                "passes": [p.as_dict() for p in self.passes], "notes": list(self.notes)}


def _mode(schedule: Schedule, profile: str, inplace: bool | None) -> str:
    coll = schedule.collective
    aliasable = coll.custom is None and coll.kind in P.ALIASED_KINDS
    if inplace is None:
        if profile != "legacy" and aliasable and coll.kind != "alltoall":
            return P.BOTH
        inplace = coll.inplace
    if not inplace:
        return P.OOP
    if not aliasable:
        raise SynthError(f"{coll.name} has no in-place form in MSCCL-IR (spec §3.4 defines it for "
                         f"{', '.join(P.ALIASED_KINDS)}); compile it out-of-place")
    if profile == "legacy" and coll.kind == "alltoall":
        raise SynthError("the legacy runtime refuses in-place alltoall; compile it out-of-place")
    return P.INPLACE


def _algo_name(schedule: Schedule) -> str:
    coll = schedule.collective
    base = f"{schedule.algorithm}_{coll.kind}_n{coll.num_ranks}"
    name = re.sub(r"[^A-Za-z0-9_.+:-]", "_", base)[:63]
    return "algo_2D" if name == "2D" else name


def _check_args(schedule: Schedule, profile: str, proto: str, instances: int, min_bytes: int,
                max_bytes: int) -> None:
    get_profile(profile)
    if proto not in PROTOCOLS:
        raise SynthError(f"unknown protocol '{proto}' (known: {', '.join(PROTOCOLS)})")
    if not isinstance(instances, int) or instances < 1:
        raise SynthError(f"instances must be a positive integer, got {instances!r}")
    if min_bytes < 0 or max_bytes < 0:
        raise SynthError(f"min_bytes and max_bytes must be >= 0, got {min_bytes}, {max_bytes}")
    if max_bytes and min_bytes > max_bytes:
        raise SynthError(f"min_bytes {min_bytes} exceeds max_bytes {max_bytes} (0 = unbounded)")
    coll = schedule.collective
    if coll.num_ranks < 2:
        raise SynthError("MSCCL-IR needs at least 2 ranks (ngpus >= 2)")
    if coll.custom is not None:
        if profile != "legacy":
            raise SynthError(f"the {profile} runtime has no custom collectives; use profile "
                             "'legacy' (coll=\"custom\")")
    elif coll.kind in ("gather", "scatter"):
        raise SynthError(f"MSCCL-IR defines no buffer layout for {coll.kind} (spec §3.3); "
                         "there is nothing to emit it for")
    else:
        coll_name(coll.kind, profile)
    if get_profile(profile).max_channels < instances:
        raise SynthError(f"instances={instances} needs {instances} channels but the {profile} "
                         f"runtime has {get_profile(profile).max_channels} (MAXCHANNELS)")


@dataclass
class _Built:
    program: Program
    fused: int
    unfused: int


def _build(schedule: Schedule, **kw: Any) -> _Built:
    """Run the passes with aggregated ops and, where the schedule could fit the node limit with one
    op per chunk (:func:`_narrow_fits`) and the aggregated program has an op of several chunks,
    again with one op per chunk; the narrow program is kept when its busiest threadblock moves
    fewer chunks (:func:`_block_load`), else the aggregated one (fewer instructions, fewer
    messages).

    Why: an aggregated op is one step of one threadblock, which moves its ``cnt`` chunks one
    message after another at that block's copy rate, however fast the link, while the same chunks
    as separate ops go round-robin over the connection's blocks
    (:func:`synth.emit.passes.allocate_connections`) and copy in parallel. Measured with the timed
    program model (:mod:`synth.timing.program`) on trn1_32 allgather at x1: trees_aligned at 1 GiB
    takes 2,894 µs narrow against 3,776 µs aggregated (its first step sends 21 of rank 0's 32
    pieces to the 205 GB/s neighbour as one op), milp (32 pieces) 2,931 against 5,436 µs; at 64 MiB
    273 against 321 µs. The price is latency where messages are small: 2.5-2.8% from 1 KiB to
    256 KiB (104 against 101 µs), 1.6% at 1 MiB, each op being a message of its own. Where
    aggregation only bundles what one block carries anyway (a ring: one block a rank, every op two
    chunks), the loads tie and the aggregated program stays.

    Where wide ops remain because one op per chunk does not fit the node limit (by the estimate
    or when built), the aggregated ops are also placed unfused with the budget's spare blocks
    given to the connections that move the most chunks (``spread``, :func:`_place_connections`),
    and that program kept when its busiest block moves fewer chunks: dgx_h100 x 64
    ``rail_blocks`` x1 at 1 GiB (before its rails were interleaved), 5,964 µs fused (7 fan-out
    blocks, 260 chunks each) against 5,299 µs spread (64 blocks, 137 at most); dgx_h100 x 4
    ``rail_blocks`` with 64 chunks a rank, 5,332 against 4,838 µs.

    The cyclic garbage collector is paused meanwhile (:mod:`synth.collector`): the passes allocate
    millions of small objects (a 512-rank ring: 260k ops), and its scans would double the time;
    each build unlinks its op graphs when it is over (:class:`synth.emit.passes.Graphs`), so
    reference counting frees them and the collector finds nothing when it is back on."""
    with collector.paused():
        forced = kw.pop("aggregate", None)
        if forced is not None:      # the caller's form, nothing weighed
            return _build_passes(schedule, **{**kw, "do_aggregate": forced})
        narrow = kw.get("do_aggregate", True) and kw.get("enforce", True) and _narrow_fits(
            schedule, kw.get("instances", 1), kw.get("profile", "exec"))
        narrow_kw = {**kw, "do_aggregate": False}
        try:
            built = _build_passes(schedule, **kw)
        except SynthError as first:
            if not narrow:
                raise
            try:
                return _build_passes(schedule, **narrow_kw)
            except SynthError:
                raise first from None
        narrow_built = None
        size = (kw.get("proto", "Simple"), kw.get("max_bytes", 0), kw.get("profile", "exec"))
        if narrow and _widest_op(built.program) > 1:
            narrow_built = _build_or_none(schedule, narrow_kw)
            built = _lighter(built, narrow_built, *size)
        if narrow_built is None and _widest_op(built.program) > 1 and kw.get("enforce", True):
            built = _lighter(built, _build_or_none(schedule, {**kw, "spread": True}), *size)
        return built


def _build_or_none(schedule: Schedule, kw: dict[str, Any]) -> _Built | None:
    """An alternative build, or None where it breaks a limit (the first build stands)."""
    try:
        return _build_passes(schedule, **kw)
    except SynthError:
        return None


def _lighter(built: _Built, alt: _Built | None, proto: str = "Simple", max_bytes: int = 0,
             profile: str = "exec") -> _Built:
    """``alt`` where its busiest threadblock costs less, else ``built``: for a file without a
    size bound, the block that moves the most chunks (:func:`_block_load`); for one bounded by
    ``max_bytes``, the block whose messages and bytes at that size cost the most
    (:func:`_block_cost`)."""
    if alt is None:
        return built
    if max_bytes > 0:
        if _block_cost(alt.program, proto, max_bytes, profile) < _block_cost(
                built.program, proto, max_bytes, profile):
            return alt
        return built
    if _block_load(alt.program) < _block_load(built.program):
        return alt
    return built


MESSAGE_BYTES = {"Simple": 135_000, "LL": 9_000, "LL128": 73_000}
"""What one message's fixed cost is worth in bytes a block could copy meanwhile, per protocol:
the timed program model's per-message cost on 8 x H100 (NCCL's per-hop ``hwLat`` above LL --
Simple 2.8, LL 0, LL128 1.3 µs -- plus the NVLink α of 0.7 µs) times the protocol's per-block copy
rate (Simple 38.7, LL 12.9, LL128 36.7 GB/s; :mod:`synth.timing.protocol`). Used only to weigh two
placements of one schedule against each other (:func:`_block_cost`), where the ratio matters, not
the machine. Why: a file bounded to small sizes was compiled with one op per chunk whenever that
moved fewer chunks through its busiest block, whatever the messages cost: ``solve``'s trees
allreduce for dgx_h100 up to 2,896 B became 3,584 Simple messages taking 188.3 µs at 1 KB in the
program model, against 15.4 µs for the same schedule aggregated (112 messages)."""


def _block_cost(program: Program, proto: str, max_bytes: int, profile: str = "exec") -> float:
    """The costliest block at ``max_bytes``: per step its messages (``ceil(cnt / M)``, M the
    chunks a message holds at that size) times :data:`MESSAGE_BYTES` plus its chunks' bytes."""
    chunk = max_bytes / program.nchunksperloop
    m, _ = P.units_params(proto, max_bytes, program.nchunksperloop, program.coll, profile)
    worst = 0.0
    for g in program.gpus:
        for tb in g.tbs:
            cost = 0.0
            for st in tb.steps:
                if st.type == "nop":
                    continue
                if st.type not in P.LOCAL_OPS:
                    cost += -(-st.cnt // m) * MESSAGE_BYTES.get(proto, MESSAGE_BYTES["Simple"])
                cost += st.cnt * chunk
            worst = max(worst, cost)
    return worst


def _widest_op(program: Program) -> int:
    """The most chunks one step of the program covers."""
    return max((st.cnt for g in program.gpus for tb in g.tbs for st in tb.steps
                if st.type != "nop"), default=0)


def _block_load(program: Program) -> int:
    """The most chunks one threadblock moves (the ``cnt`` of its steps, nops aside): the block
    runs its steps one after another at one block's copy rate, so this bounds the program's time
    from below wherever chunks are large."""
    return max((sum(st.cnt for st in tb.steps if st.type != "nop")
                for g in program.gpus for tb in g.tbs), default=0)


def _narrow_fits(schedule: Schedule, instances: Any, profile: Any) -> bool:
    """Whether the program with one op per chunk can stay within the runtime's node limit: the
    busiest rank's sends and receives, ``instances`` times, plus the fewest blocks that hold them
    (``max_steps`` each), the gpu nodes and the algorithm node. Counted unfused (copies left out,
    so it under-counts): a fused op saves a step but pairs two peers in one block, and over the
    block budget the placement unfuses. A schedule over it is not compiled narrow at all (a
    64-rank reduce-scatter of 128 pieces has 16,128 such ops a rank; compiling it narrow took
    minutes before it broke a limit)."""
    import numpy as np

    from ..guards import schedule_arrays

    if not isinstance(instances, int) or instances < 1 or profile not in PROFILES:
        return False    # invalid arguments: the aggregated build names them
    n = schedule.collective.num_ranks
    _, src, dst, _ = schedule_arrays(schedule)
    if src.min(initial=0) < 0 or max(src.max(initial=0), dst.max(initial=0)) >= n:
        return False    # not a schedule of this collective: the aggregated build says so
    ops = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    return narrow_fits(n, int(ops.max(initial=0)) * instances, profile)


def narrow_fits(num_ranks: int, ops: int, profile: str = "exec") -> bool:
    """Whether a rank with ``ops`` sends and receives, one op per chunk (instances included), fits
    the tokenizer's node limit: those steps, the fewest blocks that hold them (``max_steps``
    each), the gpu nodes and the algorithm node. Also what an algorithm that picks its own chunk
    count can aim for before it is built (:func:`synth.encodings.baseline.preferred_chunks`):
    the rule itself is :func:`synth.guards.narrow_fits`, with this profile's ``max_steps``."""
    return guards.narrow_fits(num_ranks, ops, PROFILES[profile].max_steps)


def _build_passes(schedule: Schedule, **kw: Any) -> _Built:
    """:func:`_passes`, its op graphs unlinked once it is over (:class:`synth.emit.passes.Graphs`:
    freed as the build lets go of them, not traced by the cyclic collector)."""
    graphs = P.Graphs()
    try:
        return _passes(schedule, graphs, **kw)
    finally:
        graphs.release()


def _passes(schedule: Schedule, graphs: P.Graphs, *, profile: str, proto: str, instances: int,
            min_bytes: int, max_bytes: int, inplace: bool | None,
            max_threadblocks: int = DEFAULT_MAX_THREADBLOCKS, do_fuse: bool = True,
            do_aggregate: bool = True, enforce: bool = True, spread: bool = False,
            gather: bool = False, channels: int = 0) -> _Built:
    """The compile passes, fused placement first (``spread``: straight to the unfused placement
    over spare blocks, :func:`_place_connections`, which :func:`_build` weighs against it).
    ``gather`` and ``channels`` as in :func:`compile_schedule`."""
    _check_args(schedule, profile, proto, instances, min_bytes, max_bytes)
    if not isinstance(channels, int) or channels < 0:
        raise SynthError(f"channels must be a non-negative integer, got {channels!r}")
    if channels * instances > get_profile(profile).max_channels:
        raise SynthError(f"channels={channels} x instances={instances} needs "
                         f"{channels * instances} channels but the {profile} runtime has "
                         f"{get_profile(profile).max_channels} (MAXCHANNELS)")
    lim = get_profile(profile)
    coll = schedule.collective
    mode = _mode(schedule, profile, inplace)
    kind = "custom" if coll.custom is not None else coll.kind
    cname = "custom" if coll.custom is not None else coll_name(coll.kind, profile)
    nchunks = coll.buffer_chunks * instances
    m, cap = P.units_params(proto, max_bytes, nchunks, kind, profile)
    budget = lim.max_channels // instances if enforce else 1 << 20
    dag = graphs.dag(P.lower(schedule, mode, gather))

    def assemble(tbs: list[list[Threadblock]]) -> Program:
        nchannels = max(tb.chan for row in tbs for tb in row) + 1
        tbs = P.renumber(P.replicate(tbs, instances, nchannels))
        gpus = tuple(
            Gpu(id=r, i_chunks=len(coll.inputs[r]) * instances,
                o_chunks=len(coll.outputs[r]) * instances, s_chunks=dag.scratch[r] * instances,
                tbs=tuple(tbs[r]))
            for r in range(coll.num_ranks))
        return Program(name=_algo_name(schedule), coll=cname, proto=proto,
                       nchannels=nchannels * instances, nchunksperloop=nchunks,
                       ngpus=coll.num_ranks, inplace=int(mode in (P.INPLACE, P.BOTH)),
                       outofplace=int(mode in (P.OOP, P.BOTH)), min_bytes=min_bytes,
                       max_bytes=max_bytes, gpus=gpus)

    def unfused_ir() -> P.Ir:
        """The schedule's ops all unfused, aggregated and ordered (``dag``'s fusion reset)."""
        P.fuse(dag, False)
        return graphs.ir(_ordered(dag, graphs.ir(P.aggregate(dag, do_aggregate)), instances,
                                  do_aggregate))

    def unfused_program(fallback: bool = False) -> Program | None:
        """The schedule unfused, each connection on as few blocks as it needs (more where the
        budget leaves blocks spare); None when no run length fits, and (``fallback``: the
        program is wanted only if it is within every limit) where its ops alone put a rank over
        the tokenizer's node limit (:func:`_nodes_at_least`: no placement can be within it)."""
        ir = unfused_ir()
        if fallback and _nodes_at_least(ir, instances) > MAX_NODES:
            return None
        alt = _place_connections(ir, lim.max_steps, budget, m, cap,
                                 max(1, max_threadblocks // instances))
        return None if alt is None else assemble(alt)

    if spread and enforce:
        program = unfused_program()
        if program is None:
            raise SynthError("no unfused placement fits the runtime's steps per threadblock")
        check_limits(program, profile)
        _check_budget(program, max_threadblocks)
        candidates = sum(1 for rv in dag.recvs if rv.last and rv.cands)
        return _Built(program, 0, candidates if do_fuse else 0)
    fuse_on = do_fuse
    attempts = 0
    most = max(2, min(MAX_ATTEMPTS, FUSE_WORK // max(1, schedule.num_transfers)))
    unfused_over: bool | None = None
    """Whether the ops all unfused put a rank over the node limit (None: not looked at yet)."""
    while True:
        attempts += 1
        if attempts > most and fuse_on:
            fuse_on = False
        fused = P.fuse(dag, fuse_on)
        ir = graphs.ir(P.aggregate(dag, do_aggregate))
        if fuse_on and _unfuse(dag, P.disagreements(ir)):
            continue
        ir = graphs.ir(_ordered(dag, ir, instances, do_aggregate))
        if enforce and unfused_over is not False:
            over = _over_node_limit(ir, instances)
            if over is not None:    # no placement of these ops is within the node limit
                if unfused_over is None:
                    unfused_over = _nodes_at_least(unfused_ir(), instances) > MAX_NODES
                if unfused_over:    # nor of them all unfused: refused (the driver's rule)
                    raise _node_limit_error(*over, profile)
                attempts -= 1       # this attempt again, its fusions as they were (fuse resets)
                continue
        tbs, misfits, bad = _place(ir, lim.max_steps, budget, m, cap, enforce,
                                   max(1, max_threadblocks // instances), channels)
        if misfits:
            _unfuse(dag, misfits)
            continue
        if bad:
            if not fuse_on:     # cannot happen (see synth.emit.passes): a bug, not a user error
                raise AssertionError(f"progress check failed without fused ops at {bad[0].typ} "
                                     f"rank {bad[0].rank} step {bad[0].step}")
            if not _unfuse(dag, _culprits(bad)):
                fuse_on = False
            continue
        break

    program = assemble(tbs)
    candidates = sum(1 for rv in dag.recvs if rv.last and rv.cands)
    unfused = candidates - fused if do_fuse else 0
    if enforce:
        try:
            check_limits(program, profile)
            _check_budget(program, max_threadblocks)
        except SynthError as first:
            # over a limit: the same schedule unfused; the first error stands if that breaks a
            # limit too
            second = unfused_program(fallback=True)
            if second is None:
                raise
            try:
                check_limits(second, profile)
                _check_budget(second, max_threadblocks)
            except SynthError:
                raise first from None
            program = second
            fused, unfused = 0, candidates if do_fuse else 0
    return _Built(program, fused, unfused)


def _over_node_limit(ir: P.Ir, instances: int) -> tuple[int, int] | None:
    """The node count ``ir``'s ops alone give its busiest rank, and that rank, where they put it
    over the node limit (:func:`_nodes_at_least`), else None: checked before each placement of
    the driver's loop
    (:func:`_passes`). Where it is over, the ops all unfused are counted too, once; if they are
    over as well, the compile is refused at once, else the loop goes on as without the check.

    Why: over the node limit, the loop went on placing, splitting the fused ops the placement
    could not pair or the progress check blocked and placing again, while the count it was over
    by grew, until the program was refused. Measured on the candidates of ``synth solve --topo
    dgx_h100 --nodes 64 --coll allgather``: ``hierarchical`` as Simple x4 was refused after 12
    placements (over the limit from the fifth), ``recursive_doubling`` x4 after 4 (over from the
    second); on ``dgx_a100`` x 8, ``rail_blocks`` x4 after 9 (over from the first).

    What it assumes, so this is the driver's rule and not a proof: that where the ops with the
    loop's fusions and the ops all unfused are both over, the fusions in between (the loop's next
    placements only split more of them) are over too. Splitting does not always add ops -- an
    unfused receive can join a bundle its fused form could not (:func:`synth.emit.passes.
    aggregate` groups routes by their whole path): recursive doubling allreduce on dgx_a100 x 2
    has 27 ops on its busiest rank fused and 16 unfused -- which is why the unfused count is
    looked at rather than assumed; a placement in between that the loop would have reached under
    the limit is not looked for. In the compiles above the count rose from each placement to the
    next."""
    nodes, rank = _nodes_floor(ir, instances)
    return (nodes, rank) if nodes > MAX_NODES else None


def _node_limit_error(nodes: int, rank: int, profile: str) -> SynthError:
    """The refusal :func:`_over_node_limit` leads to (made where it is raised: an error held in
    a local of the frame it is raised from would keep that frame's op graphs in a cycle)."""
    return SynthError(f"the tokenizer node count (1 + gpus + tbs + steps) is at least {nodes} "
                      f"(rank {rank}: its operations alone, fused or not); the "
                      f"{profile} runtime allows at most {MAX_NODES} (MAX_NODES - 1): "
                      f"{nodes - MAX_NODES} over")


def _nodes_at_least(ir: P.Ir, instances: int) -> int:
    """A lower bound on the busiest rank's tokenizer nodes (1 + gpus + tbs + steps, spec §6) in
    any placement of ``ir`` replicated ``instances`` times: each op is one step of one block
    (:func:`synth.emit.passes.dependencies` adds nops, never merges ops), a rank has a block at
    least, and each instance repeats them all (:func:`synth.emit.passes.replicate`).

    Why: where the fused program breaks a limit, the unfused one is placed only to be checked
    against the same limits (:func:`_passes`), and where it is over this bound that placement
    is wasted -- the first error stands either way. Measured on ``dgx_a100`` x 8 allgather,
    ``trees`` at x2 (5,301 nodes, 1,206 over): the unfused placement took 11 of the refused
    compile's 62 s under cProfile."""
    return _nodes_floor(ir, instances)[0]


def _nodes_floor(ir: P.Ir, instances: int) -> tuple[int, int]:
    """:func:`_nodes_at_least` and the rank it is of (the lowest where several tie)."""
    n = ir.collective.num_ranks
    ops = [0] * n
    for op in ir.ordered:
        ops[op.rank] += 1
    busiest = max(range(n), key=lambda r: (ops[r], -r))
    return 1 + n + instances * (1 + ops[busiest]), busiest


def _ordered(dag: P.Dag, ir: P.Ir, instances: int, do_aggregate: bool) -> P.Ir:
    """The aggregated Ir made ready for placement: bundles split where instances need every op of a
    chunk to cover the same chunk group, then the global order and the hazards."""
    if instances > 1 and do_aggregate and not P.consistent_groups(ir):
        ir = P.split_bundles(dag, ir)
        assert P.consistent_groups(ir)
    P.order(ir)
    P.hazards(ir, dag.alias)
    return ir


def _place_connections(ir: P.Ir, max_steps: int, max_channels: int, m: int, cap: int,
                       tb_budget: int) -> list[list[Threadblock]] | None:
    """The fallback placement of an unfused program (:func:`synth.emit.passes.allocate_connections`):
    each connection side on as few blocks as its length needs, a send-only and a receive-only block
    of one channel shared where a rank is still over ``tb_budget`` (:func:`synth.emit.passes.pack`,
    kept only when the progress check still passes). The run length leaves room for copies and
    dependency nops, shorter runs are tried while a block is over ``max_steps``. None when no run
    length fits. Where the fewest blocks leave part of ``tb_budget`` spare, the busiest connections
    are spread over the spare blocks (kept when that still fits)."""
    for run in (max_steps - max_steps // 8, max_steps - max_steps // 4, max_steps // 2):
        for packing in (True, False):
            per_rank = P.allocate_connections(ir, run, max_channels, MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)
            packed = P.pack(per_rank, max_steps, tb_budget) if packing else 0
            # shared blocks: the global order's check is stricter than the runtime needs
            if _progress(ir, m, cap) and (not packed or _progress_any_order(ir, m, cap)):
                if packed:
                    continue
                return None     # cannot happen without fused ops (synth.emit.passes)
            tbs = P.dependencies(per_rank)
            if max(len(tb.steps) for row in tbs for tb in row) > max_steps:
                break
            if packed or max(len(row) for row in per_rank) >= tb_budget:
                return tbs
            wide = P.allocate_connections(ir, run, max_channels,
                                          MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL, tb_budget)
            if (max(len(row) for row in wide) <= tb_budget and _side_excess(wide) == 0
                    and not _progress(ir, m, cap)):
                spread = P.dependencies(wide)
                if max(len(tb.steps) for row in spread for tb in row) <= max_steps:
                    return spread
            # the spread did not fit: place the fewest blocks again (the ops carry their placement)
            return P.dependencies(P.allocate_connections(ir, run, max_channels,
                                                         MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL))
    return None


def _side_excess(per_rank: list[list[P.Tb]]) -> int:
    """The most send-side (or receive-side) blocks one rank has on one channel, beyond the
    runtime's ``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`` (0 when within it)."""
    worst = 0
    for tbs in per_rank:
        count: dict[tuple[int, bool], int] = {}
        for tb in tbs:
            for is_send, peer in ((True, tb.send), (False, tb.recv)):
                if peer >= 0:
                    count[(tb.chan, is_send)] = count.get((tb.chan, is_send), 0) + 1
        worst = max(worst, max(count.values(), default=0))
    return max(0, worst - MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)


def _check_budget(program: Program, max_threadblocks: int) -> None:
    """The threadblock budget per rank (:data:`DEFAULT_MAX_THREADBLOCKS`): over it is an error
    that names the rank, the count and the excess."""
    if max_threadblocks < 1:
        raise SynthError(f"--max-threadblocks must be at least 1, got {max_threadblocks}")
    worst = max(program.gpus, key=lambda g: (len(g.tbs), -g.id))
    if len(worst.tbs) > max_threadblocks:
        raise SynthError(f"threadblocks per rank is {len(worst.tbs)} (rank {worst.id}); the budget "
                         f"(--max-threadblocks) is {max_threadblocks}: {len(worst.tbs) - max_threadblocks}"
                         f" over")


def _place(ir: P.Ir, max_steps: int, budget: int, m: int, cap: int, enforce: bool,
           tb_budget: int = 1 << 20, channels: int = 0
           ) -> tuple[list[list[Threadblock]], list[P.IOp], list[P.IOp]]:
    """Allocate, check progress, add dependencies; spread over more channels while a threadblock
    is longer than ``max_steps`` or a rank has more than 32 send-side (receive-side) blocks on a
    channel: chunk blocks first (keeps related routes together), then load-balanced routes that
    avoid opening a 33rd connection side on a channel. A rank with more than 32 peers on one side
    starts balanced over ``ceil(peers / 32)`` channels. A rank over ``tb_budget`` blocks shares
    blocks between a send side and a receive side (:func:`synth.emit.passes.pack`). ``channels``
    is the least spread (the caller's). Returns (step lists, fused ops that did not pair, blocked
    ops)."""
    spread, balance = max(1, min(budget, channels)), False
    if enforce:     # a threadblock holds all ops of one (rank, peer, direction) of its channel
        side: dict[tuple[int, int], int] = {}
        for op in ir.ordered:
            if op.sendp >= 0:
                side[(op.rank, op.sendp)] = side.get((op.rank, op.sendp), 0) + 1
            if op.recvp >= 0:
                side[(op.rank, -1 - op.recvp)] = side.get((op.rank, -1 - op.recvp), 0) + 1
        spread = max(spread, min(budget, ceil(max(side.values(), default=0) / max_steps)))
        peers: dict[tuple[int, bool], int] = {}
        for rank, key in side:
            peers[(rank, key >= 0)] = peers.get((rank, key >= 0), 0) + 1
        need = ceil(max(peers.values(), default=0) / MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)
        if need > 1:
            balance, spread = True, max(spread, min(budget, need))
    limit = MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL if enforce else 0
    packing = enforce
    fill = 0
    fallback: list[list[Threadblock]] | None = None
    while True:
        per_rank, misfits = P.allocate(ir, spread, budget, balance=balance, side_limit=limit,
                                       fill=fill)
        if misfits:
            return [], misfits, []
        longest = max(len(tb.ops) for tbs in per_rank for tb in tbs)
        if enforce and _side_excess(per_rank):
            longest = max(longest, max_steps + 1)   # not placed yet: more channels
        packed = P.pack(per_rank, max_steps, tb_budget) if packing and longest <= max_steps else 0
        tbs: list[list[Threadblock]] = []
        if not enforce or longest <= max_steps:
            bad = _progress(ir, m, cap)
            if bad and packed:      # a shared block can wait on its own send side: do not share
                packing = False
                continue
            if bad:
                return [], [], bad
            tbs = P.dependencies(per_rank)
            longest = max(len(tb.steps) for row in tbs for tb in row)
            if not enforce or longest <= max_steps:
                if fill or max(len(row) for row in tbs) <= tb_budget:
                    return tbs, [], []
                # over the block budget: first fit, each side on as few channels as it needs;
                # a block may hold a send side and a receive side (fused ops pair them), so each
                # side gets half a block, less an eighth for the dependency nops
                fallback, fill, spread = tbs, (max_steps - max_steps // 8) // 2, budget
                packing = True
                continue
        if fill and fallback is not None:
            return fallback, [], []
        if spread < budget:
            spread = min(budget, max(spread + 1, ceil(spread * longest / max_steps)))
        elif not balance:
            balance, spread = True, min(budget, 2)
        else:       # nothing fits: return what we have, the limit check names the overflow
            if not tbs:
                bad = _progress(ir, m, cap)
                if bad and packed:
                    packing = False
                    continue
                if bad:
                    return [], [], bad
                tbs = P.dependencies(per_rank)
            return tbs, [], []


_BLOCKED = [0]
"""Progress checks in this process that found an op blocked (:func:`_progress`)."""


def _progress(ir: P.Ir, m: int, cap: int) -> list[P.IOp]:
    """:func:`synth.emit.passes.progress`, counted in :data:`_BLOCKED` where it finds an op
    blocked: a build none of whose checks did is the same build at any larger FIFO capacity
    (:func:`emit_xml`: why a Simple file is its LL and LL128 twins' too)."""
    bad = P.progress(ir, m, cap)
    if bad:
        _BLOCKED[0] += 1
    return bad


def _progress_any_order(ir: P.Ir, m: int, cap: int) -> list[P.IOp]:
    """:func:`synth.emit.passes.progress_any_order`, counted like :func:`_progress`."""
    bad = P.progress_any_order(ir, m, cap)
    if bad:
        _BLOCKED[0] += 1
    return bad


def _culprits(bad: list[P.IOp]) -> list[P.IOp]:
    """Fused ops to split for the ops the progress check found blocked."""
    out: list[P.IOp] = []
    for op in bad:
        if op.typ in _FUSED:
            out.append(op)
        elif op.typ == "s":
            for tb in (op.nxt.tb, op.tb):
                found = [x for x in tb.ops if x.typ in _FUSED]
                if found:
                    out.extend(found)
                    break
    return out


def _unfuse(dag: P.Dag, ops: list[P.IOp]) -> bool:
    """Mark the receives behind ``ops`` as not fusable; False when nothing new was marked."""
    targets = {id(op) for op in ops}
    changed = False
    for rv in dag.recvs:
        if rv.fwd is not None and rv.iop is not None and id(rv.iop) in targets and not rv.nofuse:
            rv.nofuse = True
            changed = True
    return changed


def compile_schedule(schedule: Schedule, *, profile: str = "exec", proto: str = "Simple",
                     instances: int = 1, min_bytes: int = 0, max_bytes: int = 0,
                     inplace: bool | None = None,
                     max_threadblocks: int = DEFAULT_MAX_THREADBLOCKS, gather: bool = False,
                     channels: int = 0, aggregate: bool | None = None) -> Program:
    """Lower ``schedule`` to an MSCCL-IR program for ``profile`` (``exec``, ``rccl``, ``legacy``).

    ``proto`` is Simple, LL or LL128; ``instances`` replicates the program on that many channel
    sets with every chunk split as many times; ``min_bytes``/``max_bytes`` bound the message sizes
    the file is selected for (0 = unbounded; the deadlock analysis uses the largest size);
    ``inplace`` as in the module docstring. ``gather``: several ranks reducing into one chunk in
    one step land in scratch and are folded by one multi-source ``re`` (:func:`synth.emit.passes.
    lower`) instead of a chain of receive-reduces. ``channels``: the routes of one instance are
    spread over at least this many channels, by chunk (0: as few as the limits need), so each
    channel's blocks carry a share of the chunks -- fewer steps a block, hence fewer per-message
    costs on its path (what MSCCL's ``allreduce_ring_4channelsperring`` files do). ``aggregate``:
    True bundles contiguous chunks into one op (fewest messages), False keeps one op per chunk
    (each its own message, dealt over more blocks), None weighs both (:func:`_build`). Raises
    SynthError when the schedule cannot be emitted or the program exceeds one of the profile's
    hard limits or ``max_threadblocks`` blocks per rank (the message names the limit and the
    excess).
    """
    return _build(schedule, profile=profile, proto=proto, instances=instances, min_bytes=min_bytes,
                  max_bytes=max_bytes, inplace=inplace, max_threadblocks=max_threadblocks,
                  gather=gather, channels=channels, aggregate=aggregate).program


def emit_xml(schedule: Schedule, *, profile: str = "exec", proto: str = "Simple",
             instances: int = 1, min_bytes: int = 0, max_bytes: int = 0,
             inplace: bool | None = None, max_threadblocks: int = DEFAULT_MAX_THREADBLOCKS,
             gather: bool = False, channels: int = 0, aggregate: bool | None = None) -> str:
    """:func:`compile_schedule` then :func:`~synth.emit.xml_write.program_to_xml` (or its twin's
    text with the protocol changed, or its twin's refusal, where the two are one program:
    :mod:`.proto_twins`).

    Whether a Simple compile is its LL and LL128 twins' too: the passes see the protocol only
    through the chunks a message holds (one in every protocol where ``max_bytes`` is 0) and the
    FIFO's capacity (2 messages for Simple, 8 for LL and LL128), and the capacity only through
    the progress checks. Those are monotone in it (:func:`synth.emit.passes.progress` moves the
    same occupancy whatever the capacity and only compares it; an interleaving that finishes at
    a capacity finishes at a larger one), so a Simple build none of whose checks found an op
    blocked (:data:`_BLOCKED`) is, check for check, the LL build: the same program, or the same
    refusal."""
    return emit_xml_program(schedule, profile=profile, proto=proto, instances=instances,
                            min_bytes=min_bytes, max_bytes=max_bytes, inplace=inplace,
                            max_threadblocks=max_threadblocks, gather=gather, channels=channels,
                            aggregate=aggregate)[0]


def emit_xml_program(schedule: Schedule, **options: Any) -> tuple[str, Program | None]:
    """:func:`emit_xml` (the same keywords) and the program its text was written from, None where
    the text is its twin's with the protocol changed (:mod:`.proto_twins`: no program was built)
    and for the ``legacy`` profile (whose writer spells an unbounded ``maxBytes`` as INT64_MAX
    and has no ``outofplace``, so the parse of its text is another value).

    Why the program too: the program model times what parsing the text gives, and
    :func:`~synth.emit.xml_write.program_to_xml` writes every field the parser reads into the same
    field (``tests/test_xml_roundtrip.py`` compares their ``repr``, every field and its type, over
    the baselines of four machines in six forms and two profiles), so a caller that only times the
    file takes this program instead of parsing a text of tens of megabytes
    (:func:`synth.emit.compiled_text`). A file that is written is still parsed, where it is proven
    (:func:`synth.emit.verify_text`)."""
    refused = twin_refusal(schedule, options)
    if refused is not None:
        raise SynthError(refused)
    text = twin_text(schedule, options)
    if text is not None:
        return text, None
    blocked = _BLOCKED[0]
    try:
        program = compile_schedule(schedule, **options)
        text = program_to_xml(program, options.get("profile", "exec"))
    except SynthError as exc:
        keep_refusal(schedule, options, exc.message, _BLOCKED[0] == blocked)
        raise
    keep(schedule, options, text, _BLOCKED[0] == blocked)
    return text, None if options.get("profile", "exec") == "legacy" else program


def _counts(name: str, program: Program, fused: int = 0, unfused: int = 0) -> PassCounts:
    types: dict[str, int] = {}
    tbs = 0
    longest = 0
    for g in program.gpus:
        tbs += len(g.tbs)
        for tb in g.tbs:
            longest = max(longest, len(tb.steps))
            for st in tb.steps:
                types[st.type] = types.get(st.type, 0) + 1
    nops = types.get("nop", 0)
    steps = sum(types.values())
    return PassCounts(name=name, instructions=steps - nops, nops=nops, steps=steps,
                      threadblocks=tbs, max_steps_per_tb=longest, channels=program.nchannels,
                      by_type=tuple(sorted(types.items())), fused=fused, unfused=unfused)


def compile_stats(schedule: Schedule, *, profile: str = "exec", proto: str = "Simple",
                  instances: int = 1, min_bytes: int = 0, max_bytes: int = 0,
                  inplace: bool | None = None) -> CompileStats:
    """Counts after each pass, for reporting (results/compiler.md).

    ``dag``: the lowered ops (one per send, receive and copy), ``fusion``: after fusion,
    ``aggregation``: after aggregation -- these three on one instance without the profile's limits
    (no channel spreading) so they compare directly; ``program``: what :func:`compile_schedule`
    returns (limits enforced, instances applied), absent with a note when it raises.
    """
    kw = dict(profile=profile, proto=proto, min_bytes=min_bytes, max_bytes=max_bytes,
              inplace=inplace)
    rows = []
    for name, f, a in (("dag", False, False), ("fusion", True, False), ("aggregation", True, True)):
        b = _build(schedule, instances=1, do_fuse=f, do_aggregate=a, enforce=False, **kw)
        rows.append(_counts(name, b.program, b.fused, b.unfused if f else 0))
    notes = []
    try:
        b = _build(schedule, instances=instances, **kw)
        rows.append(_counts("program", b.program, b.fused, b.unfused))
    except SynthError as exc:
        notes.append(f"program: {exc.message}")
    return CompileStats(passes=tuple(rows), schedule_steps=schedule.num_steps,
                        transfers=schedule.num_transfers, notes=tuple(notes))
