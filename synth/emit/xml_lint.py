"""Structural lint of a parsed MSCCL-IR program: the rules and hard limits of
``docs/reference/msccl-xml-spec.md`` §2, §5 and §6 (rule ids such as ``B3`` or ``D8`` refer to its
§7) that a file can break after it parses (:mod:`.xml_parse`).

Contiguous block ids, channels, counts, offsets, dependencies, nop placement, ``re`` fusion,
connection symmetry and message matching. A violation raises
:class:`~synth.errors.VerificationError` (exit code 1) whose ``reason`` is one of
:data:`LINT_REASONS`; advisory findings are returned as strings.
"""

from __future__ import annotations

from collections import defaultdict

from ..errors import VerificationError
from .agreement import disagreements
from .program import PROTOCOLS, Instr, Program, Threadblock
from .runtimes import (
    MAX_DEPID,
    MAX_OFFSET,
    MSCCL_MAX_COUNT,
    MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL,
    MSCCL_MAX_REDUCE_FUSION,
    RECV_TYPES,
    SEND_TYPES,
    SM_COUNT_HINT,
    USES_DST,
    USES_SRC,
    Profile,
    get_profile,
    normalize_coll,
    physical_chunks,
)

LINT_REASONS = ("header", "limit", "gpu_ids", "chunks", "tb_ids", "channel", "peer", "connection",
                "step_position", "count", "offset", "overlap", "dependency", "fusion", "unmatched")


def _err(reason: str, rule: str, msg: str, *, rank: int | None = None, step: int | None = None,
         tb: int | None = None) -> VerificationError:
    where = f"rank {rank} tb {tb}: " if tb is not None and rank is not None else ""
    return VerificationError(reason, f"[{rule}] {where}{msg}", step=step, rank=rank)


def lint_program(program: Program, profile: str | None = "exec") -> list[str]:
    """Check the structural rules and, unless ``profile`` is None, that profile's hard limits.

    Raises :class:`VerificationError` (``reason`` in :data:`LINT_REASONS`, the rule id and the
    limit's constant name in the message) on the first violation; returns advisory warnings.
    """
    prof = get_profile(profile) if profile is not None else None
    warn: list[str] = []
    p = program
    N, C = p.ngpus, p.nchunksperloop
    coll = normalize_coll(p.coll)
    # ---- <algo> (B)
    if p.proto not in PROTOCOLS:
        raise _err("header", "B1", f"proto '{p.proto}' is not one of {', '.join(PROTOCOLS)}")
    if prof is not None and p.coll not in prof.colls:
        raise _err("header", "B1", f"coll '{p.coll}' is not known to the {prof.name} runtime")
    if N < 2:
        raise _err("header", "B2", f"ngpus={N}: a collective needs at least 2 ranks")
    if C < 1:
        raise _err("header", "B2", f"nchunksperloop={C} must be at least 1")
    if coll in ("allgather", "reducescatter", "alltoall") and C % N:
        raise _err("header", "B2", f"nchunksperloop={C} must be a multiple of ngpus={N} for {coll}")
    if p.nchannels < 1:
        raise _err("header", "B3", f"nchannels={p.nchannels} must be at least 1")
    if prof is not None and p.nchannels > prof.max_channels:
        raise _err("limit", "B3", f"nchannels={p.nchannels} exceeds MAXCHANNELS={prof.max_channels} "
                                  f"of the {prof.name} runtime")
    if p.inplace not in (0, 1) or p.outofplace not in (0, 1):
        raise _err("header", "B4", "inplace and outofplace must be 0 or 1")
    if not p.inplace and not p.outofplace:
        warn.append("[B4] inplace=0 and outofplace=0: the algorithm is never selected")
    if p.min_bytes < 0 or p.max_bytes < 0:
        raise _err("header", "B5", "minBytes and maxBytes must be >= 0")
    unbounded = p.max_bytes == 0 and (prof is None or prof.name != "legacy")
    if not unbounded and p.min_bytes > p.max_bytes:
        raise _err("header", "B5", f"minBytes={p.min_bytes} > maxBytes={p.max_bytes}")
    if prof is not None and prof.name == "legacy" and p.max_bytes == 0:
        warn.append("[B5] maxBytes=0 means 'never selected' in LEGACY")
    if prof is not None and prof.name == "legacy" and coll == "alltoall" and p.inplace:
        warn.append("[B6] LEGACY refuses in-place alltoall")
    # ---- <gpu> (C1, C2)
    ids = [g.id for g in p.gpus]
    have = set(ids)
    if len(ids) != N or len(have) != N or min(have, default=0) < 0 or max(have, default=0) >= N:
        # the first few of each kind: ngpus may be 10^12, so never build range(N)
        missing: list[int] = []
        i = 0
        while len(missing) < 8 and i < N:
            if i not in have:
                missing.append(i)
            i += 1
        counts: dict[int, int] = defaultdict(int)
        for i in ids:
            counts[i] += 1
        dup = sorted(i for i, c in counts.items() if c > 1)
        extra = sorted(i for i in have if not 0 <= i < N)

        def few(xs: list[int]) -> str:
            return "[" + ", ".join(map(str, xs[:8])) + (", ...]" if len(xs) > 8 else "]")

        raise _err("gpu_ids", "C1", f"need exactly one <gpu> per rank 0..{N - 1}: missing "
                                    f"{few(missing)}, duplicated {few(dup)}, out of range "
                                    f"{few(extra)}", rank=(missing + dup + extra + [None])[0])
    if ids != sorted(ids):
        warn.append("[C1] <gpu> elements are not in ascending id order (VERIFIER requires it)")
    phys_i, phys_o = physical_chunks(p.coll, N, C)
    sizes: dict[int, dict[str, int]] = {}
    tb_steps: dict[int, dict[int, tuple[Instr, ...]]] = {}
    sides: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}   # (src, dst, chan) -> cnts
    recv_sides: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    for g in p.gpus:
        r = g.id
        known = coll in ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
        if known:
            if g.i_chunks not in (0, phys_i):
                raise _err("chunks", "C2", f"rank {r}: i_chunks={g.i_chunks} must be 0 or {phys_i} "
                                           f"(input extent of {coll}, §3.3)", rank=r)
            if g.o_chunks not in (0, phys_o):
                raise _err("chunks", "C2", f"rank {r}: o_chunks={g.o_chunks} must be 0 or {phys_o} "
                                           f"(output extent of {coll}, §3.3)", rank=r)
        if g.i_chunks < 0 or g.o_chunks < 0 or g.s_chunks < 0:
            raise _err("chunks", "C2", f"rank {r}: negative chunk count", rank=r)
        sizes[r] = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}
        tids = [t.id for t in g.tbs]
        ntb = len(tids)
        if sorted(tids) != list(range(ntb)):
            dups = sorted({t for t in tids if tids.count(t) > 1})
            have = set(tids)    # the missing ids among 0..n-1 (an id of 10**9 is not a range to build)
            gaps = [i for i in range(ntb) if i not in have]
            out = sorted(t for t in have if not 0 <= t < ntb)
            raise _err("tb_ids", "C3", f"rank {r}: threadblock ids must be unique and exactly "
                                       f"0..{ntb - 1} (duplicated {dups}, missing {gaps[:8]}"
                                       f"{' ...' if len(gaps) > 8 else ''}, out of range "
                                       f"{out[:8]}{' ...' if len(out) > 8 else ''})", rank=r)
        if tids != sorted(tids):
            warn.append(f"[C3] rank {r}: <tb> elements are not in id order (VERIFIER requires it)")
        if prof is not None and ntb > prof.max_tbs:
            raise _err("limit", "C3", f"rank {r} has {ntb} threadblocks, more than "
                                      f"MSCCL_MAX_NUM_THREAD_BLOCKS={prof.max_tbs} of the {prof.name} "
                                      "runtime", rank=r)
        if ntb > SM_COUNT_HINT:
            warn.append(f"[C4] rank {r} has {ntb} threadblocks: all must be co-resident (A100 has "
                        f"{SM_COUNT_HINT} SMs)")
        tb_steps[r] = {t.id: t.steps for t in g.tbs}
        send_owner: dict[tuple[int, int], int] = {}
        recv_owner: dict[tuple[int, int], int] = {}
        per_chan_send: dict[int, int] = defaultdict(int)
        per_chan_recv: dict[int, int] = defaultdict(int)
        for t in g.tbs:
            for peer, what in ((t.send, "send"), (t.recv, "recv")):
                if peer != -1 and (not 0 <= peer < N or peer == r):
                    raise _err("peer", "C5", f"{what}={peer} must be -1 or another rank in "
                                             f"0..{N - 1}", rank=r, tb=t.id)
            if not 0 <= t.chan < p.nchannels:
                raise _err("channel", "C5", f"chan={t.chan} must be in 0..nchannels-1="
                                            f"{p.nchannels - 1}", rank=r, tb=t.id)
            if t.send >= 0:
                key = (t.chan, t.send)
                if key in send_owner:
                    raise _err("connection", "C6", f"threadblocks {send_owner[key]} and {t.id} both "
                                                   f"send to rank {t.send} on channel {t.chan}",
                               rank=r, tb=t.id)
                send_owner[key] = t.id
                per_chan_send[t.chan] += 1
                sides[(r, t.send, t.chan)] = []
            if t.recv >= 0:
                key = (t.chan, t.recv)
                if key in recv_owner:
                    raise _err("connection", "C6", f"threadblocks {recv_owner[key]} and {t.id} both "
                                                   f"receive from rank {t.recv} on channel {t.chan}",
                               rank=r, tb=t.id)
                recv_owner[key] = t.id
                per_chan_recv[t.chan] += 1
                recv_sides[(t.recv, r, t.chan)] = []
        if prof is not None:
            for chan, cnt in list(per_chan_send.items()) + list(per_chan_recv.items()):
                if cnt > MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL:
                    raise _err("limit", "C8", f"rank {r} channel {chan}: {cnt} blocks with a peer "
                                              "in one direction (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_"
                                              f"CHANNEL={MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL})",
                               rank=r)
    # ---- steps (C9, D)
    for g in p.gpus:
        r = g.id
        sz = sizes[r]
        steps_of = tb_steps[r]
        for t in g.tbs:
            _lint_block(t, r, sz, steps_of, prof, warn, sides, recv_sides)
    # ---- connections (C7, E1)
    for key in sides.keys() - recv_sides.keys():
        a, b, c = key
        raise _err("connection", "C7", f"rank {a} has a block sending to rank {b} on channel {c} but "
                                       f"rank {b} has no block receiving from rank {a} on channel "
                                       f"{c} (connection setup would hang)", rank=a)
    for key in recv_sides.keys() - sides.keys():
        a, b, c = key
        raise _err("connection", "C7", f"rank {b} has a block receiving from rank {a} on channel {c} "
                                       f"but rank {a} has no block sending to rank {b} on channel "
                                       f"{c} (connection setup would hang)", rank=b)
    for key, snd in sides.items():
        rcv = recv_sides[key]
        a, b, c = key
        for idx in range(min(len(snd), len(rcv))):
            if snd[idx][0] != rcv[idx][0]:
                raise _err("unmatched", "E1", f"connection rank {a} -> rank {b} channel {c}: message "
                                              f"{idx} is sent with cnt={snd[idx][0]} (rank {a} tb "
                                              f"{snd[idx][1]} step {snd[idx][2]}) but received with "
                                              f"cnt={rcv[idx][0]} (rank {b} tb {rcv[idx][1]} step "
                                              f"{rcv[idx][2]})", rank=b, step=rcv[idx][2])
        if len(snd) != len(rcv):
            raise _err("unmatched", "E1", f"connection rank {a} -> rank {b} channel {c}: {len(snd)} "
                                          f"send-type steps but {len(rcv)} receive-type steps "
                                          "(the call would hang or leave stale data)", rank=a)
    # ---- both ends of a message name one transfer (E2: portability, the runtimes ignore it)
    warn.extend(disagreements(p, limit=3))
    return warn


def _lint_block(t: Threadblock, r: int, sz: dict[str, int], steps_of, prof: Profile | None,
                warn: list[str], sides, recv_sides) -> None:
    steps = t.steps
    nsteps = len(steps)
    if prof is not None and nsteps > prof.max_steps:
        raise _err("limit", "D1", f"{nsteps} steps (nops included), more than MSCCL_MAX_NUM_STEPS="
                                  f"{prof.max_steps} of the {prof.name} runtime", rank=r, tb=t.id)
    send_list = sides.get((r, t.send, t.chan)) if t.send >= 0 else None
    recv_list = recv_sides.get((t.recv, r, t.chan)) if t.recv >= 0 else None
    nop_run = 0
    chain_len = 0
    prev: Instr | None = None
    for pos, st in enumerate(steps):
        typ = st.type
        if st.s != pos:
            raise _err("step_position", "D1", f"step s={st.s} is at position {pos}: s must equal the "
                                              "0-based position (the runtime numbers steps by "
                                              "document order)", rank=r, tb=t.id, step=pos)
        # dependencies (D8)
        if st.depid != -1 or st.deps != -1:
            if st.depid < 0 or st.deps < 0:
                raise _err("dependency", "D8", f"depid={st.depid} deps={st.deps}: both must be -1 or "
                                               "both valid", rank=r, tb=t.id, step=pos)
            if prof is not None and st.depid > MAX_DEPID:
                raise _err("limit", "D8", f"depid={st.depid} exceeds {MAX_DEPID} (stored as int8)",
                           rank=r, tb=t.id, step=pos)
            if st.depid == t.id:
                raise _err("dependency", "D8", "a step depends on its own threadblock", rank=r,
                           tb=t.id, step=pos)
            target = steps_of.get(st.depid)
            if target is None:
                raise _err("dependency", "D8", f"depid={st.depid} names no threadblock of rank {r}",
                           rank=r, tb=t.id, step=pos)
            if st.deps >= len(target):
                raise _err("dependency", "D8", f"deps={st.deps} but threadblock {st.depid} has only "
                                               f"{len(target)} steps", rank=r, tb=t.id, step=pos)
            ref = target[st.deps]
            if ref.type == "nop" or ref.hasdep != 1:
                raise _err("dependency", "D8", f"waits for tb {st.depid} step {st.deps} which "
                                               f"{'is a nop' if ref.type == 'nop' else 'has hasdep=0'}"
                                               ": it never publishes that step (a referenced step "
                                               "must be a non-nop step with hasdep=1)",
                           rank=r, tb=t.id, step=pos)
        if typ == "nop":
            if st.depid < 0:
                raise _err("dependency", "D9", "a nop without depid shifts the runtime's step "
                                               "numbering", rank=r, tb=t.id, step=pos)
            nop_run += 1
            chain_len = 0
            prev = st
            continue
        if nop_run and st.depid < 0:
            raise _err("dependency", "D9", "a run of nops must be followed by a step that itself has "
                                           "depid >= 0", rank=r, tb=t.id, step=pos)
        nop_run = 0
        cnt = st.cnt
        if not 1 <= cnt < MSCCL_MAX_COUNT:
            raise _err("count", "D4", f"cnt={cnt} must be in 1..{MSCCL_MAX_COUNT - 1} "
                                      f"(MSCCL_MAX_COUNT={MSCCL_MAX_COUNT})", rank=r, tb=t.id, step=pos)
        is_send, is_recv = typ in SEND_TYPES, typ in RECV_TYPES
        if is_send:
            if t.send < 0:
                raise _err("peer", "C9", f"'{typ}' sends but the threadblock has send=-1", rank=r,
                           tb=t.id, step=pos)
            send_list.append((cnt, t.id, pos))  # type: ignore[union-attr]
        if is_recv:
            if t.recv < 0:
                raise _err("peer", "C9", f"'{typ}' receives but the threadblock has recv=-1",
                           rank=r, tb=t.id, step=pos)
            recv_list.append((cnt, t.id, pos))  # type: ignore[union-attr]
        src_used, dst_used = typ in USES_SRC, typ in USES_DST
        for used, buf, off, what in ((src_used, st.srcbuf, st.srcoff, "src"),
                                     (dst_used, st.dstbuf, st.dstoff, "dst")):
            if not used:
                continue
            if off < 0 or off + cnt > sz[buf]:
                raise _err("offset", "D5", f"{what} range {buf}[{off}..{off + cnt}) is outside the "
                                           f"buffer ({buf}: {sz[buf]} chunks)", rank=r, tb=t.id,
                           step=pos)
            if prof is not None and off > MAX_OFFSET:
                raise _err("limit", "D5", f"{what}off={off} exceeds {MAX_OFFSET} (int16)", rank=r,
                           tb=t.id, step=pos)
        if src_used and dst_used and st.srcbuf == st.dstbuf and st.srcoff != st.dstoff \
                and abs(st.srcoff - st.dstoff) < cnt:
            raise _err("overlap", "D6", f"source {st.srcbuf}[{st.srcoff}..{st.srcoff + cnt}) and "
                                        f"destination {st.dstbuf}[{st.dstoff}..{st.dstoff + cnt}) "
                                        "partially overlap", rank=r, tb=t.id, step=pos)
        # re fusion (D10)
        if (typ == "re" and prev is not None and prev.type == "re" and prev.hasdep == 0
                and st.depid == -1 and prev.srcbuf == st.srcbuf and prev.dstbuf == st.dstbuf
                and prev.dstoff == st.dstoff):
            chain_len += 1
            if prev.cnt != cnt:
                raise _err("fusion", "D10", f"fused 're' chain members have different cnt "
                                            f"({prev.cnt} and {cnt}); the runtime uses the last one",
                           rank=r, tb=t.id, step=pos)
            if chain_len > MSCCL_MAX_REDUCE_FUSION:
                raise _err("fusion", "D10", f"fused 're' chain longer than MSCCL_MAX_REDUCE_FUSION="
                                            f"{MSCCL_MAX_REDUCE_FUSION}", rank=r, tb=t.id, step=pos)
        else:
            chain_len = 1 if typ == "re" else 0
        prev = st
    if nop_run:
        warn.append(f"[D9] rank {r} tb {t.id}: trailing nops (their waits are lost)")
