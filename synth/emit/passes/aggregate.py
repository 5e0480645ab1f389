"""The ``aggregate`` pass: Dag -> Ir, routes of contiguous chunks bundled into cnt > 1 ops."""

from __future__ import annotations

from collections import defaultdict
from operator import itemgetter

from .ir import MAX_COUNT, Copy, Dag, IOp, Ir, Recv, Reduce, Send


def _recv_type(rv: Recv) -> str:
    if rv.fwd is None:
        return "rrc" if rv.reduce else "r"
    if not rv.reduce:
        return "rcs"
    return "rrcs" if rv.store else "rrs"


def _landing(rv: Recv) -> int:
    """Where a message to ``rv`` lands (its write cell, or its operand for an rrs)."""
    return rv.dst if rv.store else rv.operand


def aggregate(dag: Dag, enabled: bool = True) -> Ir:
    """Dag -> Ir: group routes (head send plus its chain of fused receives) into cnt > 1 ops.

    Chains whose heads leave the same rank for the same peer in the same step and that then take
    the same path with the same op types are candidates; sorted by their cells, a run joins while
    every cell of the next chain is the previous one's plus one (at most 71 chunks). Copies anchored
    to the same op with contiguous source and destination join likewise.
    """
    chains: list[list[Send | Recv]] = []
    for s in dag.sends:
        if s.absorbed:
            continue
        ch: list[Send | Recv] = [s]
        rv = s.recv
        while True:
            assert rv is not None
            ch.append(rv)
            if rv.fwd is None:
                break
            rv = rv.fwd.recv
        chains.append(ch)

    def vector(ch: list) -> tuple[int, ...]:
        out = [ch[0].src]
        for rv in ch[1:]:
            if rv.store:
                out.append(rv.dst)
            if rv.reduce:
                out.append(rv.operand)
        return tuple(out)

    runs: list[list[list]] = []
    if enabled:
        by_head: dict[tuple[int, int, int], list[list]] = defaultdict(list)
        for ch in chains:
            by_head[(ch[0].rank, ch[0].step, ch[0].peer)].append(ch)
        for group in by_head.values():
            if len(group) == 1:
                runs.append(group)
                continue
            by_sig: dict[tuple, list[list]] = defaultdict(list)
            for ch in group:
                sig = tuple((rv.rank, rv.step, rv.reduce, rv.fwd is None, rv.store) for rv in ch[1:])
                by_sig[sig].append(ch)
            for members in by_sig.values():
                if len(members) == 1:
                    runs.append(members)
                    continue
                # sorted by cells (stable, as sorting the chains by ``vector`` is), each chain's
                # vector made once; a run goes on while a vector is its predecessor's plus one
                keyed = sorted([(vector(ch), ch) for ch in members], key=itemgetter(0))
                prev = keyed[0][0]
                run = [keyed[0][1]]
                for vec, ch in keyed[1:]:
                    if len(run) < MAX_COUNT and vec == tuple([a + 1 for a in prev]):
                        run.append(ch)
                    else:
                        runs.append(run)
                        run = [ch]
                    prev = vec
                runs.append(run)
    else:
        runs = [[ch] for ch in chains]

    out_chains: list[list[IOp]] = []
    for run in runs:
        first = run[0]
        cnt = len(run)
        chunks = tuple(ch[0].chunk for ch in run)
        head: Send = first[0]
        r1: Recv = first[1]
        iops = [IOp(head.rank, "s", head.step, 0, head.peer, -1, cnt, head.src, _landing(r1), chunks)]
        for j in range(1, len(first)):
            rv: Recv = first[j]
            typ = _recv_type(rv)
            prev = iops[-1]
            if typ == "r":      # the message's source: the sender's cell (spec E2)
                src, dst = prev.src if prev.typ == "s" else prev.dst, rv.dst
            elif typ == "rcs":
                src = dst = rv.dst
            elif typ == "rrs":
                assert rv.fwd is not None and rv.fwd.recv is not None
                src, dst = rv.operand, _landing(rv.fwd.recv)
            else:
                src, dst = rv.operand, rv.dst
            op = IOp(rv.rank, typ, rv.step, 1, rv.fwd.peer if rv.fwd else -1, rv.peer, cnt, src,
                     dst, chunks)
            op.prev, prev.nxt = prev, op
            iops.append(op)
        for ch in run:
            for j, x in enumerate(ch):
                x.iop = iops[j]
        out_chains.append(iops)

    copies: list[IOp] = _reductions(dag, enabled)
    groups: dict[tuple, list[Copy]] = defaultdict(list)
    for cp in dag.copies:
        anchor = cp.anchor.iop if cp.anchor is not None else None
        groups[(cp.rank, cp.step, cp.phase, id(anchor) if enabled else id(cp))].append(cp)
    for members in groups.values():
        members.sort(key=lambda cp: (cp.src, cp.dst))
        run = [members[0]]
        for cp in [*members[1:], None]:
            if cp is not None and len(run) < MAX_COUNT and cp.src == run[-1].src + 1 and \
                    cp.dst == run[-1].dst + 1:
                run.append(cp)
                continue
            f = run[0]
            op = IOp(f.rank, "cpy", f.step, f.phase, -1, -1, len(run), f.src, f.dst,
                     tuple(x.chunk for x in run))
            op.prev = f.anchor.iop if f.anchor is not None else None    # anchor (placement only)
            for x in run:
                x.iop = op
            copies.append(op)
            run = [cp]
    return Ir(collective=dag.collective, num_steps=dag.num_steps, chains=out_chains, copies=copies,
              ordered=[])


def _reductions(dag: Dag, enabled: bool) -> list[IOp]:
    """The gathered reductions as ``re`` runs: one op per source, all on the anchor's block, each
    covering the chunks whose reductions share an anchor and sit in contiguous cells (destination
    and every source) -- the same rule as for copies. The run's ops fold into one multi-source
    reduction in the runtime (spec §4.1: same ``srcbuf``, ``dstbuf``, ``dstoff`` and ``cnt``)."""
    out: list[IOp] = []
    groups: dict[tuple, list[Reduce]] = defaultdict(list)
    for red in dag.reductions:
        anchor = red.anchor.iop
        groups[(red.rank, red.step, len(red.srcs), id(anchor) if enabled else id(red))].append(red)
    for members in groups.values():
        members.sort(key=lambda rd: (rd.dst, rd.srcs))
        run = [members[0]]
        for rd in [*members[1:], None]:
            if rd is not None and len(run) < MAX_COUNT and rd.dst == run[-1].dst + 1 and all(
                    a == b + 1 for a, b in zip(rd.srcs, run[-1].srcs, strict=True)):
                run.append(rd)
                continue
            f = run[0]
            chunks = tuple(x.chunk for x in run)
            ops = [IOp(f.rank, "re", f.step, 2, -1, -1, len(run), src, f.dst, chunks)
                   for src in f.srcs]
            for op in ops:
                op.prev = f.anchor.iop      # placement only, as for copies
            for x in run:
                x.iop = ops[0]
            out.extend(ops)
            run = [rd]
    return out
