"""The ``ring`` and ``bidir_ring`` baselines over a Hamiltonian cycle of real links.

allgather / reducescatter / allreduce are NCCL's ring algorithms (allreduce = reduce-scatter then
allgather, 2(n-1) steps); broadcast and reduce pipeline the chunks along the ring as a chain from or
to the root (chunk i leaves the root at step i); gather, scatter and alltoall move every message
along the ring, one hop per step. ``bidir_ring`` uses both directions, half of the data each way
(messages of gather/scatter/alltoall take the shorter way).
"""

from __future__ import annotations

from collections.abc import Sequence

from .graph import Plan, Tree, tree_from_parent
from .job import Job


def ring_ag(plan: Plan, order: Sequence[int], groups: Sequence[Sequence[int]], start: int) -> int:
    """Ring allgather: the group at position g travels g -> g+1 -> ... (m-1 hops)."""
    m = len(order)
    for g, chunks in enumerate(groups):
        for t in range(m - 1):
            plan.send(start + t, order[(g + t) % m], order[(g + t + 1) % m], chunks)
    return start + m - 1


def ring_rs(plan: Plan, order: Sequence[int], groups: Sequence[Sequence[int]], start: int) -> int:
    """Ring reduce-scatter: the group owned by position g is reduced g+1 -> g+2 -> ... -> g."""
    m = len(order)
    for g, chunks in enumerate(groups):
        for t in range(m - 1):
            plan.send(start + t, order[(g + 1 + t) % m], order[(g + 2 + t) % m], chunks, "reduce")
    return start + m - 1


def ring_phases(plan: Plan, kind: str, order: Sequence[int], groups: Sequence[Sequence[int]],
                start: int = 0) -> int:
    """``kind`` on one ring from step ``start``: allgather, reducescatter, or allreduce (the
    reduce-scatter, then the allgather); returns the step after its last."""
    if kind == "allgather":
        return ring_ag(plan, order, groups, start)
    if kind == "reducescatter":
        return ring_rs(plan, order, groups, start)
    return ring_ag(plan, order, groups, ring_rs(plan, order, groups, start))


def _chain_tree(order: Sequence[int], root: int, toward_root: bool) -> Tree:
    """The ring as a chain starting (``toward_root`` False) or ending (True) at ``root``."""
    m = len(order)
    p0 = order.index(root)
    if toward_root:  # root+1 -> root+2 -> ... -> root
        parent = {order[(p0 + i) % m]: order[(p0 + i + 1) % m] for i in range(1, m)}
    else:  # root -> root+1 -> ...
        parent = {order[(p0 + i) % m]: order[(p0 + i - 1) % m] for i in range(1, m)}
    return tree_from_parent(root, parent)


def ring_order(job: Job) -> list[int]:
    """A Hamiltonian cycle over real links, crossing nodes as few times as possible."""
    cyc, why = job.g.ring()
    if cyc is None:
        raise job.fail(f"needs a Hamiltonian cycle; {why} in '{job.topology.name}'")
    return cyc


def ring_algorithm(job: Job, bidir: bool) -> None:
    """``ring`` (one direction) or ``bidir_ring`` (both, half the data each way)."""
    n, kind, plan = job.n, job.kind, job.plan
    cyc = ring_order(job)
    job.meta["order"] = list(cyc)
    dirs = [cyc]
    if bidir:
        rev = [cyc[0], *cyc[:0:-1]]
        if not job.g.valid_cycle(rev):
            raise job.fail(f"needs links both ways around the ring {cyc} in '{job.topology.name}'")
        dirs.append(rev)
        if kind in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce") \
                and job.k % 2:
            per = "each rank's" if kind in ("allgather", "reducescatter", "allreduce") else "the"
            raise job.fail(f"splits {per} {job.k} chunk(s) in half, one half each way round the "
                           "ring; use an even --chunks (e.g. --chunks 2)")

    def part(chunks: list[int], d: int) -> list[int]:
        if not bidir:
            return chunks
        h = len(chunks) // 2
        return chunks[:h] if d == 0 else chunks[h:]

    if kind in ("allgather", "reducescatter", "allreduce"):
        for d, o in enumerate(dirs):
            ring_phases(plan, kind, o, [part(job.own(r), d) for r in o])
    elif kind in ("broadcast", "reduce"):
        for d, o in enumerate(dirs):
            chunks = part(job.data(), d)
            if kind == "broadcast":
                job.bcast_tree(_chain_tree(o, job.root, False), chunks)
            else:
                job.reduce_tree(_chain_tree(o, job.root, True), chunks)
    else:  # gather, scatter, alltoall: each message takes the shorter way (ties alternate)
        pos = [{r: i for i, r in enumerate(o)} for o in dirs]

        def way(s: int, t: int, tie: int) -> list[int]:
            best = None
            for d in range(len(dirs)):
                hops = (pos[d][t] - pos[d][s]) % n
                if best is None or hops < best[0] or (hops == best[0] and tie % 2 == d):
                    best = (hops, d)
            assert best is not None
            hops, d = best
            o, p = dirs[d], pos[d][s]
            return [o[(p + h) % n] for h in range(hops + 1)]

        if kind == "gather":
            for r in range(n):
                if r != job.root:
                    for i, c in enumerate(job.own(r)):
                        plan.route(way(r, job.root, i), (c,), 0)
        elif kind == "scatter":
            paths = {(r, i): way(job.root, r, i) for r in range(n) if r != job.root
                     for i in range(job.k)}
            longest = max((len(p) for p in paths.values()), default=1)
            for (r, i), p in paths.items():  # farthest first, so each link carries one per step
                plan.route(p, (job.own(r)[i],), longest - len(p))
        else:
            for s in range(n):
                for t in range(n):
                    if s != t:
                        for i, c in enumerate(job.a2a(s, t)):
                            plan.route(way(s, t, i + pos[0][s]), (c,), 0)


def nccl_rings(job: Job) -> list[list[int]]:
    """NCCL's rings as a schedule can hold them: one per rail on several nodes, else one.

    NCCL runs a ring per channel and spreads the channels over the NICs (``src/graph/search.cc``:
    a channel enters a node through one NIC and leaves through another). On one node its channels
    are parallel slices of one ring order, which loads every link as one ring does. On ``N`` nodes
    with ``K`` NICs per node, ring ``c`` walks each node's segment of the Hamiltonian cycle rotated
    by ``c·g/K`` positions, so the ranks that leave (and enter) a node differ per ring and every NIC
    carries one ring. Where a rotation is not a path of real links (a mesh whose in-node order is
    not itself a cycle), the single cycle is used and the meta says so.
    """
    cyc = ring_order(job)
    topo = job.topology
    if topo.num_nodes == 1:
        return [cyc]
    segments: list[list[int]] = []
    for r in cyc:
        if segments and topo.node_of[segments[-1][-1]] == topo.node_of[r]:
            segments[-1].append(r)
        else:
            segments.append([r])
    g = topo.num_ranks // topo.num_nodes
    if len(segments) != topo.num_nodes or any(len(s) != g for s in segments):
        job.meta["rings_note"] = "the cycle enters a node more than once; one ring"
        return [cyc]
    first = set(topo.nodes[0])
    rails = sum(1 for nic in topo.nics if set(nic.ranks) <= first) or 1
    k = max(1, min(rails, g))
    rings = []
    for c in range(k):
        off = c * g // k
        order = [r for seg in segments for r in seg[off:] + seg[:off]]
        if not job.g.valid_cycle(order):
            job.meta["rings_note"] = f"rotating a node's path by {off} leaves the links; one ring"
            return [cyc]
        rings.append(order)
    return rings


def nccl_ring_algorithm(job: Job) -> None:
    """NCCL's ring for allgather / reducescatter / allreduce, one ring per rail (chunk j on ring
    ``j mod K``); broadcast and reduce as the pipelined ring chain."""
    kind, plan = job.kind, job.plan
    if kind in ("broadcast", "reduce"):
        ring_algorithm(job, False)
        return
    rings = nccl_rings(job)
    job.meta["rings"] = [list(o) for o in rings]
    k = len(rings)
    for c, order in enumerate(rings):
        groups = [[x for j, x in enumerate(job.own(r)) if j % k == c] for r in order]
        if any(groups):
            ring_phases(plan, kind, order, groups)
