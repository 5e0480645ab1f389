"""The runtime's view of an MSCCL-IR file before it runs: operation codes, the folding of a block's
steps into operations, messages per step and FIFO capacity (``docs/reference/msccl-xml-spec.md``
§3.5, §5.1-§5.4).

Both executions of a file share it: the interpreter (:mod:`synth.emit.interpreter`), which runs
a file on symbolic data to prove it, and the timed program model (:mod:`synth.timing.program`),
which runs it in simulated time, fold blocks exactly alike.
"""

from __future__ import annotations

from math import ceil

from .program import Program, Threadblock
from .runtimes import get_profile, normalize_coll

S, R, RCS, RRS, RRC, RRCS, CPY, RE = range(8)
OP_CODES = {"s": S, "r": R, "rcs": RCS, "rrs": RRS, "rrc": RRC, "rrcs": RRCS, "cpy": CPY, "re": RE}
NEEDS_IN = (False, True, True, True, True, True, False, False)
NEEDS_OUT = (True, False, True, True, False, True, False, False)
USES_SRC = (True, False, False, True, True, True, True, True)
USES_DST = (False, True, True, False, True, True, True, True)

SIMPLE_CHUNK_BYTES = 2 * 1024 * 1024
SIMPLE_ROOTED_CHUNK_BYTES = 512 * 1024    # EXEC: Simple reduce/broadcast
LL_CHUNK_BYTES = 32 * 1024
LL128_CHUNK_BYTES = 576000
NCCL_STEPS = 8
MSCCL_CHUNKSTEPS = 4


def max_allowed_count(program: Program, profile: str = "exec") -> int:
    """The runtime's maxAllowedCount M at the largest size the file is selected for (§3.5)."""
    prof = get_profile(profile)
    coll = normalize_coll(program.coll)
    if program.proto == "Simple":
        eff = (SIMPLE_ROOTED_CHUNK_BYTES if prof.name in ("exec", "rccl")
               and coll in ("reduce", "broadcast") else SIMPLE_CHUNK_BYTES)
    elif program.proto == "LL":
        eff = LL_CHUNK_BYTES
    else:
        eff = LL128_CHUNK_BYTES
    nbytes = program.max_bytes
    if nbytes <= 0:          # EXEC/RCCL: unbounded; LEGACY: never selected -- assume the worst
        return 1
    per_chunk = -(-nbytes // program.nchunksperloop)
    return max(1, min(71, eff // per_chunk))


def fifo_capacity(program: Program) -> int:
    """Guaranteed messages in flight per connection: 2 for Simple, 8 for LL/LL128 (§5.3)."""
    return NCCL_STEPS // MSCCL_CHUNKSTEPS if program.proto == "Simple" else NCCL_STEPS


def fold_steps(tb: Threadblock) -> list[tuple]:
    """The runtime's operations of one block, before buffers are placed: (code, srcbuf, srcoff,
    dstbuf, dstoff, srcoffs, cnt, waits, pos, first, hasdep, instr) with ``srcoffs`` the source
    offsets of a fused ``re`` (else None) and waits as (depid, deps) pairs relative to the rank.

    A ``nop`` only adds its wait to the next operation's; a run of fusable ``re`` steps is one
    operation (spec §5.1). Independent of the memory layout, so one folding serves both modes."""
    steps = tb.steps
    n = len(steps)
    ops = []
    pending: list[tuple[int, int]] = []
    i = 0
    while i < n:
        st = steps[i]
        if st.type == "nop":
            if st.depid >= 0:
                pending.append((st.depid, st.deps))
            i += 1
            continue
        waits = pending + ([(st.depid, st.deps)] if st.depid >= 0 else [])
        pending = []
        code = OP_CODES[st.type]
        first = i
        srcoffs = None
        if code == RE:
            srcoffs = [st.srcoff]
            while (i + 1 < n and steps[i].hasdep == 0 and steps[i + 1].type == "re"
                   and steps[i + 1].depid == -1 and steps[i + 1].srcbuf == st.srcbuf
                   and steps[i + 1].dstbuf == st.dstbuf and steps[i + 1].dstoff == st.dstoff):
                i += 1
                srcoffs.append(steps[i].srcoff)
        last = steps[i]
        ops.append((code, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, srcoffs, last.cnt, waits, i,
                    first, last.hasdep, last))
        i += 1
    return ops


def fold_block(tb: Threadblock, bases: dict[str, int], M: int,
               folded: list[tuple] | None = None) -> list[tuple]:
    """The runtime's operations of one block with buffers placed at ``bases``: (code, src, dst,
    srcs, cnt, waits, pos, first, hasdep, nunits, instr), ``nunits`` the messages of a step at
    ``M`` chunks a message. ``folded``: :func:`fold_steps` of ``tb``, if the caller has it."""
    out = []
    for (code, sb, so, db, do, srcoffs, cnt, waits, pos, first, hasdep, last) in (
            folded if folded is not None else fold_steps(tb)):
        base = bases[sb]
        srcs = [base + off for off in srcoffs] if srcoffs is not None else None
        nunits = ceil(cnt / M) if (NEEDS_IN[code] or NEEDS_OUT[code]) else 1
        out.append((code, base + so, bases[db] + do, srcs, cnt, waits, pos, first, hasdep, nunits,
                    last))
    return out
