"""NCCL-style baseline algorithms as verified :class:`~synth.schedule.Schedule` objects.

Every algorithm works in the single-slot model of :mod:`synth.verify` and only moves data between
adjacent ranks (a link or a switch):

* non-combining data (allgather, alltoall, broadcast, gather, scatter, and the copy phase of an
  allreduce) may be *relayed* along shortest paths: a relay just ends up holding a copy;
* combining data (reducescatter, reduce, allreduce) is reduced along *in-trees* whose edges are real
  links, every rank adding its own contribution exactly once (a ring reduce-scatter is such an
  in-tree per chunk). Where an algorithm's logical partner is not adjacent, it is not applicable.

Algorithms (``ALGORITHMS``): ``ring``, ``bidir_ring``, ``direct``, ``recursive_doubling``,
``recursive_halving``, ``binomial_tree``, ``double_binary_tree``, ``hierarchical``, ``rail_blocks``,
``tree`` and ``one_pass``.
:func:`baseline` builds one, raising :class:`~synth.errors.NotApplicable` with the reason when it
does not apply; :func:`applicable` and :func:`all_baselines` try them all; :func:`preferred_chunks`
is the chunk count an algorithm wants (e.g. an even count for ``bidir_ring``).

Each step's rounds come from :func:`synth.steps.make_step`, so a schedule's bandwidth always fits the
topology, and the same input always gives the same schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...collectives import KINDS, Collective, make_collective
from ...errors import NotApplicable, SynthError, unknown_name
from ...schedule import Schedule
from ...topology import Topology
from ..options import BaselineOptions, Options
from .allpairs import one_pass
from .graph import RankGraph, Tree, tree_from_parent
from .hier import hierarchical
from .job import Job
from .nccl_trees import btree_parent, dtree_parents
from .rails import rail_blocks
from .ring import nccl_ring_algorithm, nccl_rings, ring_algorithm

__all__ = ["ALGORITHMS", "Algorithm", "all_baselines", "applicable", "baseline", "baseline_encoding",
           "btree_parent", "dtree_parents", "preferred_chunks"]

ALL_KINDS = KINDS
ROOTED_TREE_KINDS = ("broadcast", "reduce", "gather", "scatter", "allreduce")


# -------------------------------------------------------------------------------------- direct
def _home(job: Job, c: int) -> int | None:
    """Where a combining chunk is reduced first."""
    if job.coll.custom is None:
        return job.root if job.kind == "reduce" else c // job.k
    post = job.coll.post[c]
    return min(post) if post else None


def _direct(job: Job) -> None:
    """Per-chunk BFS trees of the real topology, every chunk at once, level by level."""
    coll, g, plan, n = job.coll, job.g, job.plan, job.n
    everyone = set(range(n))
    for c in range(coll.num_chunks):
        holders, post = coll.pre[c], coll.post[c]
        if coll.combining:
            if not post:
                continue
            if set(holders) != everyone:
                raise job.fail(f"reduces chunks every rank contributes to; chunk {c} has "
                               f"contributions from ranks {list(holders)} only")
            home = _home(job, c)
            assert home is not None
            tin = g.bfs((home,), reverse=True)
            if not tin.spans(range(n)):
                lost = min(everyone - set(tin.depth))
                raise job.fail(f"cannot reduce: rank {lost} has no path to rank {home} in "
                               f"'{job.topology.name}'")
            start = job.reduce_tree(tin, (c,), 0, pipeline=False)
            targets = [t for t in post if t != home]
            src: tuple[int, ...] = (home,)
        else:
            targets = [t for t in post if t not in holders]
            src, start = tuple(holders), 0
        if not targets:
            continue
        if len(src) == 1 and len(g.out(src[0])) == n - 1:
            for t in targets:
                plan.add(start, src[0], t, c)
            continue
        tree = g.bfs(src)
        edges: dict[int, int] = {}
        for t in targets:
            if t not in tree.depth:
                raise job.fail(f"cannot reach rank {t} from rank(s) {list(src)} in "
                               f"'{job.topology.name}'")
            v = t
            while v not in tree.roots and v not in edges:
                edges[v] = tree.parent[v]
                v = tree.parent[v]
        for v in sorted(edges, key=lambda v: (tree.depth[v], v)):
            p = edges[v]
            plan.add(start + tree.depth[p], p, v, c)


# ---------------------------------------------------------------------------------------- tree
def _spanning(job: Job, root: int) -> Tree:
    tree = job.g.bfs((root,), sym=True)
    if not tree.spans(range(job.n)):
        raise job.fail(f"needs a spanning tree of two-way links; rank "
                       f"{min(set(range(job.n)) - set(tree.depth))} is not reachable from rank "
                       f"{root} in '{job.topology.name}'")
    return tree


def _rerooted(base: Tree, r: int) -> Tree:
    """The same undirected tree, rooted at ``r``."""
    adj: dict[int, list[int]] = {v: [] for v in base.order}
    for v, p in base.parent.items():
        adj[v].append(p)
        adj[p].append(v)
    parent: dict[int, int] = {}
    depth, order = {r: 0}, [r]
    for v in order:
        for u in sorted(adj[v]):
            if u not in depth:
                parent[u], depth[u] = v, depth[v] + 1
                order.append(u)
    return Tree((r,), parent, depth, order)


def _tree(job: Job) -> None:
    """One BFS spanning tree of the real topology (two-way links), rooted at the root or rank 0."""
    kind, n, plan = job.kind, job.n, job.plan
    base = _spanning(job, job.root)
    if kind == "broadcast":
        job.bcast_tree(base, job.data())
    elif kind == "reduce":
        job.reduce_tree(base, job.data())
    elif kind == "allreduce":
        chunks = job.data()
        job.reduce_tree(base, chunks)
        job.bcast_tree(base, chunks, base.height[job.root])
    elif kind == "gather":
        for r in range(n):
            plan.route(base.path_up(r), job.own(r), 0)
    elif kind == "scatter":
        for r in range(n):
            plan.route(base.path_up(r)[::-1], job.own(r), 0)
    else:
        rooted = [_rerooted(base, r) for r in range(n)]
        for r in range(n):
            if kind == "allgather":
                job.bcast_tree(rooted[r], job.own(r), pipeline=False)
            elif kind == "reducescatter":
                job.reduce_tree(rooted[r], job.own(r), pipeline=False)
            else:  # alltoall
                for t in range(n):
                    if t != r:
                        plan.route(rooted[r].path_up(t)[::-1], job.a2a(r, t), 0)


# --------------------------------------------------------------------------- recursive doubling
def _need_pow2(job: Job) -> None:
    if job.n & (job.n - 1):
        raise job.fail(f"needs a power-of-two rank count; '{job.topology.name}' has {job.n} ranks")


def _halving(job: Job, start: int) -> tuple[int, list[list[int]]]:
    """Recursive-halving reduce-scatter of rank blocks: partner r xor d for d = n/2 .. 1."""
    n = job.n
    d = n // 2
    while d:  # check every partner before building anything
        for r in range(n):
            job.need_link(r, r ^ d, "reduces")
        d //= 2
    blocks = [list(range(n)) for _ in range(n)]
    d = n // 2
    while d:
        sends = []
        for r in range(n):
            give = [b for b in blocks[r] if (b & d) != (r & d)]
            sends.append((r, r ^ d, [c for b in give for c in job.own(b)]))
        start = job.phase(start, sends, "reduce")
        blocks = [[b for b in blocks[r] if (b & d) == (r & d)] for r in range(n)]
        d //= 2
    return start, blocks


def _doubling(job: Job, start: int) -> int:
    """Recursive-doubling allgather of rank blocks: partner r xor d for d = 1 .. n/2."""
    n = job.n
    blocks = [[r] for r in range(n)]
    d = 1
    while d < n:
        sends = [(r, r ^ d, [c for b in blocks[r] for c in job.own(b)]) for r in range(n)]
        start = job.phase(start, sends)
        blocks = [sorted(blocks[r] + blocks[r ^ d]) for r in range(n)]
        d *= 2
    return start


def _recursive_doubling(job: Job) -> None:
    _need_pow2(job)
    if job.kind == "allgather":
        _doubling(job, 0)
    else:  # allreduce: Rabenseifner = recursive-halving reduce-scatter + recursive-doubling allgather
        end, _ = _halving(job, 0)
        _doubling(job, end)


def _recursive_halving(job: Job) -> None:
    _need_pow2(job)
    _halving(job, 0)


# -------------------------------------------------------------------------------- binomial tree
def _binomial(job: Job) -> None:
    """Binomial tree over ranks relative to the root (rank 0 for allreduce); not pipelined."""
    n, kind = job.n, job.kind
    root = job.root

    def real(v: int) -> int:
        return (v + root) % n

    levels = max(1, (n - 1).bit_length())
    phases: list[tuple[str, list[tuple[int, int, list[int]]]]] = []
    if kind in ("reduce", "allreduce", "gather"):
        for lvl in range(levels):
            bit = 1 << lvl
            sends = []
            for v in range(bit, n, 2 * bit):
                if kind == "gather":
                    part = [c for u in range(v, min(v + bit, n)) for c in job.own(real(u))]
                else:
                    part = job.data()
                sends.append((real(v), real(v - bit), part))
            phases.append(("copy" if kind == "gather" else "reduce", sends))
    if kind in ("broadcast", "allreduce", "scatter"):
        for lvl in reversed(range(levels)):
            bit = 1 << lvl
            sends = []
            for v in range(0, n, 2 * bit):
                if v + bit < n:
                    if kind == "scatter":
                        part = [c for u in range(v + bit, min(v + 2 * bit, n))
                                for c in job.own(real(u))]
                    else:
                        part = job.data()
                    sends.append((real(v), real(v + bit), part))
            phases.append(("copy", sends))
    if job.coll.combining:  # check every edge before building anything
        for op, sends in phases:
            for a, b, _ in sends:
                job.need_link(a, b, "reduces" if op == "reduce" else "sends the reduced result")
    t = 0
    for op, sends in phases:
        t = job.phase(t, sends, op)


# -------------------------------------------------------------------------- double binary tree
def _double_binary_tree(job: Job) -> None:
    """Two complementary binary trees, each carrying half the chunks, pipelined."""
    n, kind = job.n, job.kind
    chunks = job.data()
    if len(chunks) < 2:
        raise job.fail("splits the data over two trees and needs at least 2 chunks; use --chunks 2 "
                       "(or any count >= 2)")
    trees = []
    if kind == "allreduce":
        for root, parent in dtree_parents(n):
            trees.append(tree_from_parent(root, parent))
    else:  # rooted: the root feeds both trees, built over the other n-1 ranks
        others = [(job.root + 1 + i) % n for i in range(n - 1)]
        for sub_root, parent in dtree_parents(n - 1):
            full = {others[v]: others[p] for v, p in parent.items()}
            full[others[sub_root]] = job.root
            trees.append(tree_from_parent(job.root, full))
    for i, tree in enumerate(trees):
        mine = chunks[i::2]
        if kind == "broadcast":
            job.bcast_tree(tree, mine)
        elif kind == "reduce":
            job.reduce_tree(tree, mine)
        else:
            for v, p in tree.parent.items():
                job.need_link(p, v, "sends the reduced result")
            job.bcast_tree(tree, mine, job.reduce_tree(tree, mine) - len(mine) + 1)


# ------------------------------------------------------------------------------------ registry
@dataclass(frozen=True)
class Algorithm:
    """A baseline algorithm: its name, the collectives it implements and its builder."""

    name: str
    kinds: tuple[str, ...]
    description: str
    build: Callable[[Job], None]

    def __call__(self, topology: Topology, collective: Collective) -> Schedule:
        """Same as ``baseline(topology, collective, self.name)``."""
        return baseline(topology, collective, self.name)


NCCL_KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall")
"""The collectives NCCL implements (gather and scatter are not NCCL collectives)."""


def _nccl_rings(job: Job) -> None:
    from ...timing.nccl import machine_of

    try:
        machine_of(job.topology)  # NCCL's ring search: only where NCCL runs
    except NotApplicable as exc:
        raise job.fail(f"does not apply: {exc}") from exc
    if job.kind == "alltoall":
        _direct(job)
    else:
        nccl_ring_algorithm(job)


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("ring", ALL_KINDS, "unidirectional ring over a Hamiltonian cycle of real links; "
              "broadcast/reduce pipelined along it", lambda j: ring_algorithm(j, False)),
    Algorithm("bidir_ring", ALL_KINDS, "both directions of the ring, half the data each way",
              lambda j: ring_algorithm(j, True)),
    Algorithm("direct", ALL_KINDS, "every chunk straight to every rank that needs it (all-pairs on "
              "a switch; per-chunk BFS trees otherwise)", _direct),
    Algorithm("recursive_doubling", ("allgather", "allreduce"),
              "exchange with rank xor 2^i; allreduce is Rabenseifner's (recursive-halving "
              "reduce-scatter + recursive-doubling allgather)", _recursive_doubling),
    Algorithm("recursive_halving", ("reducescatter",), "reduce-scatter halving the data each step "
              "with rank xor n/2^i", _recursive_halving),
    Algorithm("binomial_tree", ROOTED_TREE_KINDS, "binomial tree over ranks relative to the root; "
              "allreduce = reduce + broadcast", _binomial),
    Algorithm("double_binary_tree", ("broadcast", "reduce", "allreduce"),
              "NCCL's two complementary binary trees, each with half the chunks, pipelined",
              _double_binary_tree),
    Algorithm("hierarchical", ALL_KINDS, "intra-node then inter-node phases on multi-node "
              "topologies", hierarchical),
    Algorithm("rail_blocks", ("allgather", "reducescatter", "allreduce"),
              "each node's block dealt over its rails in contiguous runs, fanned out inside the "
              "nodes; meets the NIC bound with about nodes/m + m peers a rank", rail_blocks),
    Algorithm("tree", ALL_KINDS, "one BFS spanning tree of the real topology, pipelined; allreduce "
              "= reduce + broadcast", _tree),
    Algorithm("one_pass", ("allreduce",), "one step: every rank reduces its whole buffer into "
              "every other rank (n-1 times the data a port carries, one hop; small messages)",
              one_pass),
    Algorithm("nccl_rings", NCCL_KINDS, "NCCL's own rings, one per rail (alltoall: direct "
              "point-to-point), as a schedule written and timed like any other; NCCL itself is "
              "no file: it competes in every selection as 'nccl' (synth.select.nccl)",
              _nccl_rings),
)}
"""name -> :class:`Algorithm`, in the order :func:`applicable` tries them."""

_EVEN_SPLIT = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


RAIL_BLOCKS_CHUNKS = (16, 8, 4, 2)
"""Chunks per rank ``rail_blocks`` prefers, finest first, within ``RAIL_BLOCKS_MAX_TRANSFERS`` and
the runtime's node limit (:func:`preferred_chunks`)."""
RAIL_BLOCKS_MAX_TRANSFERS = 1_100_000

PIPELINED = ("ring", "bidir_ring", "binomial_tree", "double_binary_tree", "tree")
"""Algorithms whose rooted broadcast/reduce pipeline chunks down a chain or tree."""


def preferred_chunks(algorithm: str, kind: str, n: int, topology: Topology | None = None) -> int:
    """Chunks per rank the algorithm wants for ``kind`` on ``n`` ranks (callers may build with it).

    ``nccl_rings`` wants one chunk per ring, which depends on the ``topology`` (its rails).
    """
    if algorithm not in ALGORITHMS:
        raise unknown_name("baseline algorithm", algorithm, ALGORITHMS)
    if algorithm == "nccl_rings" and kind in ("allgather", "reducescatter", "allreduce") \
            and topology is not None and topology.num_ranks == n:
        try:
            return len(nccl_rings(Job(topology, make_collective(kind, n, 1), RankGraph(topology),
                                      "nccl_rings")))
        except NotApplicable:
            return 1
    if kind in ("broadcast", "reduce") and algorithm in PIPELINED:
        # a rooted collective on a chain/tree only streams when the buffer is cut into pieces;
        # 2n pieces keep the pipeline fill below a third of the time, as NCCL's chunking does
        return 2 * max(n, 1)
    if algorithm == "rail_blocks" and kind in ALGORITHMS["rail_blocks"].kinds:
        # finer chunks let the rail batches ramp down to a small last fan-out (dgx_a100 x 8 at
        # 1 GiB: 98.27% of the bound at 8 chunks, 98.82% at 16), but only while the program
        # with one op per chunk fits the runtime's node limit (every rank sends and receives
        # (n - 1) k chunks a phase): beyond it the compiler must bundle chunks into wide ops,
        # one block's copy each, and the timed program model runs them slower (dgx_h100 x 64
        # allgather at 1 GiB: 4 chunks 3,677.9 us, 2 chunks 3,588.2 us; dgx_h100 x 8 allreduce:
        # 16 chunks 11,622.8 us, 8 chunks 6,725.5 us), and a 512-rank allreduce of 2 chunks
        # needs 151 threadblocks a rank, over the default 64. The transfer cap keeps a schedule
        # about a million transfers (verified and compiled in minutes).
        from ...guards import narrow_fits

        phases = 2 if kind == "allreduce" else 1
        return next((k for k in RAIL_BLOCKS_CHUNKS
                     if n * (n - 1) * k * phases <= RAIL_BLOCKS_MAX_TRANSFERS
                     and narrow_fits(n, 2 * (n - 1) * k * phases)), 1)
    if algorithm == "bidir_ring" and kind in _EVEN_SPLIT:
        return 2
    if algorithm == "double_binary_tree":
        if kind in ("broadcast", "reduce"):
            return 2
        if kind == "allreduce" and n % 2:
            return 2
    return 1


def _build(job: Job, algorithm: Algorithm) -> Schedule:
    coll, topo = job.coll, job.topology
    if coll.num_ranks != topo.num_ranks:
        raise SynthError(f"the collective has {coll.num_ranks} ranks but topology '{topo.name}' "
                         f"has {topo.num_ranks}")
    if coll.custom is not None and algorithm.name != "direct":
        raise job.fail(f"implements the standard collectives only, not the custom collective "
                       f"'{coll.kind}'; use direct")
    if coll.custom is None and coll.kind not in algorithm.kinds:
        raise job.fail(f"does not implement {coll.kind} (it implements "
                       f"{', '.join(algorithm.kinds)})")
    if job.n > 1:
        algorithm.build(job)
    steps = job.plan.steps(topo, coll)
    return Schedule(collective=coll, topology=topo.name, topology_hash=topo.content_hash,
                    steps=steps, algorithm=algorithm.name, encoding="baseline", meta=job.meta)


def baseline(topology: Topology, collective: Collective, algorithm: str, *,
             graph: RankGraph | None = None) -> Schedule:
    """Build one baseline algorithm; NotApplicable (with the reason) when it does not apply."""
    alg = ALGORITHMS.get(algorithm)
    if algorithm == "nccl":
        raise SynthError("'nccl' is no schedule: NCCL itself competes in every solve and serves, "
                         "with no file, the sizes where its model is fastest; NCCL's rings written "
                         "as a schedule are --algo nccl_rings")
    if alg is None:
        raise unknown_name("baseline algorithm", algorithm, ALGORITHMS)
    if graph is None or graph.topology is not topology:
        graph = RankGraph(topology)
    return _build(Job(topology, collective, graph, algorithm), alg)


def all_baselines(topology: Topology, collective: Collective) -> dict[str, Schedule]:
    """Every algorithm that applies, by name (registry order)."""
    graph = RankGraph(topology)
    out: dict[str, Schedule] = {}
    for name in ALGORITHMS:
        try:
            out[name] = baseline(topology, collective, name, graph=graph)
        except NotApplicable:
            continue
    return out


def applicable(topology: Topology, collective: Collective) -> list[str]:
    """Names of the algorithms that build for this topology and collective."""
    return list(all_baselines(topology, collective))


# ------------------------------------------------------------------------------- the encoding
RING_ALLTOALL = ("ring", "bidir_ring")
RING_ALLTOALL_MAX_RANKS = 32


def baseline_encoding(topology: Topology, collective: Collective, options: Options
                      ) -> dict[str, Schedule]:
    """``--encoding baseline``: the algorithm ``options.algorithm`` names, else every one that
    applies, each at its preferred chunk count unless ``options.chunks`` fixes it."""
    BaselineOptions.parse(options.extra)
    names = [options.algorithm] if options.algorithm else list(ALGORITHMS)
    found: dict[str, Schedule] = {}
    reasons: list[str] = []
    for name in names:
        if (not options.algorithm and collective.kind == "alltoall" and name in RING_ALLTOALL
                and collective.num_ranks > RING_ALLTOALL_MAX_RANKS):
            # ring alltoall moves O(n^3) chunk-hops: minutes to build and verify at 128 ranks and
            # never competitive with direct there; it stays available with --algo ring
            continue
        if not options.algorithm and options.budget is not None and collective.custom is None:
            from ...guards import SCHEDULE_BYTES_PER_TRANSFER, TooBig, check_encoding

            held = options.held + SCHEDULE_BYTES_PER_TRANSFER * sum(
                s.num_transfers for s in found.values())
            try:  # each algorithm's schedule shares the budget with the ones already built
                check_encoding("baseline", collective.kind, topology.num_ranks,
                               len(topology.links), options.chunks, options.budget, held)
            except TooBig as exc:
                reasons.append(f"{name}: {exc.message}")
                continue
        coll = collective
        if options.chunks is None and collective.custom is None:
            k = preferred_chunks(name, collective.kind, collective.num_ranks, topology)
            if k != collective.chunks_per_rank:
                coll = make_collective(collective.kind, collective.num_ranks, k, collective.root,
                                       collective.inplace)
        try:
            found[name] = baseline(topology, coll, name)
        except NotApplicable as exc:
            if options.algorithm:
                raise
            reasons.append(str(exc))
    if not options.algorithm and options.chunks is None and collective.custom is None:
        found.update(_finer_variants(topology, collective, found))
    if not found:
        raise NotApplicable(f"no baseline applies to {collective.name} on '{topology.name}': "
                            + "; ".join(reasons))
    return found


FINER_MAX_RANKS = 16
"""Up to this many ranks, allreduce also gets ``direct`` with one chunk per rank per shard."""


def _finer_variants(topology: Topology, collective: Collective, found: dict[str, Schedule]
                    ) -> dict[str, Schedule]:
    """Extra chunkings worth timing beside each algorithm's preferred one (``direct_k<n>``).

    Why: a schedule's chunk count sets how its program pipelines, and the preferred count is
    chosen for bandwidth. MSCCL's production all-pairs allreduce for 8 x H100 (``ap4ll``, see
    docs/notes/msccl-production-files.md) cuts each rank's shard into 8 pieces so that every
    block's sends stream under LL: on dgx_h100 the program model times ``direct`` at 8 chunks
    (LL x8) at 17.9 µs for 1 MiB, against 21.4 µs for the best of the preferred chunkings.
    Only small machines: the schedule has n^2 chunks a rank."""
    n = collective.num_ranks
    if collective.kind != "allreduce" or n > FINER_MAX_RANKS or "direct" not in found \
            or found["direct"].collective.chunks_per_rank == n:
        return {}
    coll = make_collective(collective.kind, n, n, collective.root, collective.inplace)
    try:
        return {f"direct_k{n}": baseline(topology, coll, "direct")}
    except NotApplicable:
        return {}

