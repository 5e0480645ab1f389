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
from .xml_parse import get_profile, normalize_coll

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


def fold_block(tb: Threadblock, bases: dict[str, int], M: int) -> list[tuple]:
    """The runtime's operations of one block: (code, src, dst, srcs, cnt, waits, pos, first,
    hasdep, nunits, instr), waits as (depid, deps) pairs still relative to the rank."""
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
        srcs = None
        if code == RE:
            srcoffs = [st.srcoff]
            while (i + 1 < n and steps[i].hasdep == 0 and steps[i + 1].type == "re"
                   and steps[i + 1].depid == -1 and steps[i + 1].srcbuf == st.srcbuf
                   and steps[i + 1].dstbuf == st.dstbuf and steps[i + 1].dstoff == st.dstoff):
                i += 1
                srcoffs.append(steps[i].srcoff)
            srcs = [bases[st.srcbuf] + off for off in srcoffs]
        last = steps[i]
        cnt = last.cnt
        nunits = ceil(cnt / M) if (NEEDS_IN[code] or NEEDS_OUT[code]) else 1
        ops.append((code, bases[st.srcbuf] + st.srcoff, bases[st.dstbuf] + st.dstoff, srcs, cnt,
                    waits, i, first, last.hasdep, nunits, last))
        i += 1
    return ops

