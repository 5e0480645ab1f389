"""The ``trees`` encoding: bandwidth-optimal spanning-tree packing, pipelined into synchronous steps.

For allgather every rank broadcasts its data, so a schedule is a set of spanning out-trees per root;
ForestColl (arXiv 2402.06787) shows that trees whose bandwidth shares meet the cut bound exist, on
any topology, switches included. This encoding

1. finds a semiregular group of rank automorphisms (:mod:`..symmetry`) and plans one representative
   root per orbit (a single root on every shipped multi-node machine);
2. packs trees by column generation (:mod:`.pack`): an LP over trees whose pricing step is
   Edmonds' minimum arborescence; switches are unwound into rank-to-rank edges that load the
   sender's out-port and receiver's in-port (port budgets, NICs shared by several ranks); the LP
   optimum is the cut bound (checked in the tests and the benchmark);
3. gives the trees integer multiplicities: each root's data is cut into ``k`` pieces, ``k`` chosen
   among multiples of the weights' common denominator and powers of two, and pieces are assigned
   by largest remainder;
4. pipelines the pieces into synchronous steps with a budgeted list scheduler
   (:mod:`.sched`) whose geometric ramp keeps the step count, and so the α term, small;
5. replicates the representative's steps by the group and sets every step's rounds with
   :func:`synth.steps.make_step`.

Reducescatter and reduce are the same on the reversed graph (in-trees), run backwards in time with
``reduce`` transfers; allreduce is reducescatter followed by allgather (same chunks, each reduced
into its owner and broadcast back); broadcast packs the trees of its root alone.

Options (:class:`..options.TreesOptions`): ``size`` (bytes the plan is tuned for, default 1 GiB), ``symmetry``
(False to plan every root), ``max_transfers`` (cap on the schedule's transfers, default 2.2M),
``max_tasks`` (cap on planned tasks per phase, default 12000), ``max_pieces`` (cap on the pieces
per root, e.g. to fit a runtime's per-rank instruction limit), ``small_size`` (a second
candidate ``trees_<size>`` is planned for this size, default 1 MiB; 0: none), ``rail_stripes``
(each rank talks to about nodes/8 fabric peers instead of all nodes: fits MSCCL's 32 threadblocks
per channel), ``aligned_ops`` and ``striped_peers`` (the runtime-friendly candidates
``trees_aligned``, power-of-two pieces, and ``trees_striped``, rail stripes, planned beside the
main one when its file could not run at power-of-two sizes or is over the runtime's node limit,
and when it needs a threadblock per peer beyond the default budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ... import progress
from ...collectives import Collective, make_collective
from ...errors import NotApplicable, SynthError
from ...schedule import Schedule, Step
from ...sizes import format_size
from ...steps import step_from_arrays
from ...topology import MB, Topology
from ..options import Options, TreesOptions
from ..symmetry import RankGroup, ResourceMap, rank_group, trivial_group
from .pack import LogicalGraph, Packing, logical_graph, pack_trees
from .sched import Plan, Scheduler, TaskSet, assign_pieces, build_tasks

TREE_KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
DEFAULT_SIZE = TreesOptions.size
DEFAULT_MAX_TRANSFERS = TreesOptions.max_transfers
DEFAULT_MAX_TASKS = TreesOptions.max_tasks
DEFAULT_SMALL_SIZE = TreesOptions.small_size
"""A second candidate is planned for this size (few pieces, few steps) unless ``small_size`` is 0."""


@dataclass
class Phase:
    """One tree phase: out-trees (``reverse=False``) or in-trees run backwards (``reverse=True``)."""

    reverse: bool
    graph: LogicalGraph
    packing: Packing


@dataclass
class PhasePlan:
    phase: Phase
    tasks: TaskSet
    plan: Plan
    scheduler: Scheduler


PACKINGS = (("plain", None, False), ("balanced", None, True), ("shallow", 0.0, True),
            ("near-shallow", 0.5, True))
"""Packing variants tried per phase: (name, shallow slack, balance); see :func:`pack_trees`."""

MAX_T_EXCESS = 1.05
"""A variant whose LP time exceeds the best one's by more than this is not scheduled."""


def pack_phases(topology: Topology, kind: str, group: RankGroup, roots: tuple[int, ...],
                time_limit_s: float, stripes: bool = False) -> list[list[Phase]]:
    """Per phase of ``kind``: the distinct packings worth scheduling (best LP time first)."""
    rm = ResourceMap(topology, group)
    reverses = {"allgather": [False], "broadcast": [False], "reducescatter": [True],
                "reduce": [True], "allreduce": [True, False]}[kind]
    out: list[list[Phase]] = []
    cache: dict[bool, list[Phase]] = {}
    for rev in reverses:
        if rev not in cache:
            graph = logical_graph(topology, group, reverse=rev, resources=rm, stripes=stripes)
            target = _target_T(topology, kind, rev, roots)
            variants: list[Phase] = []
            seen: set[tuple] = set()
            for name, shallow, balance in PACKINGS:
                packing = pack_trees(graph, roots, time_limit_s=time_limit_s, shallow=shallow,
                                     balance=balance, target_T=target)
                key = tuple(sorted((t.rep, t.edges.tobytes(), round(t.weight, 9))
                                   for t in packing.trees))
                if key in seen:
                    continue
                seen.add(key)
                packing.notes.insert(0, name)
                variants.append(Phase(rev, graph, packing))
            best = min(v.packing.T for v in variants)
            variants = [v for v in variants if best * MAX_T_EXCESS >= v.packing.T]
            variants.sort(key=lambda v: v.packing.T)
            cache[rev] = variants
        out.append(cache[rev])
    return out


def _target_T(topology: Topology, kind: str, reverse: bool, roots: tuple[int, ...]) -> float | None:
    """The cut bound in packing units (time per unit of per-root data): stage 1 stops there."""
    from ...bounds import allgather_inv_bandwidth, reducescatter_inv_bandwidth, root_mincut_inv_bandwidth

    n = topology.num_ranks
    try:
        if kind in ("broadcast", "reduce"):
            slope, _ = root_mincut_inv_bandwidth(topology, roots[0], reduce=reverse)
            return slope * 1e3
        fn = reducescatter_inv_bandwidth if reverse else allgather_inv_bandwidth
        return fn(topology)[0] * n * 1e3
    except SynthError:
        return None


def k_candidates(phases: list[list[Phase]], kmax: int, rooted: bool = False) -> list[int]:
    """Pieces per root worth trying: multiples of the weights' common denominator, powers of two."""
    cands: set[int] = set()
    for variants in phases:
        for ph in variants:
            denom = 1
            for t in ph.packing.trees:
                d = Fraction(t.weight).limit_denominator(256).denominator
                denom = denom * d // math.gcd(denom, d)
            m, taken = denom, 0
            while m <= kmax and m <= 1024 and taken < 2:
                if m >= 4 or m * 2 > kmax:
                    cands.add(m)
                    taken += 1
                m *= 2
    for k in (4, 8, 16, 32, 64, 128) + ((256, 512, 1024) if rooted else ()):
        if k <= kmax:
            cands.add(k)
    if not cands:
        cands.add(max(1, kmax))
    return sorted(cands)


def _rounding_loss(ph: Phase, k: int) -> float:
    """T of the pieces' integer multiplicities over the LP's T (>= 1)."""
    pieces = assign_pieces(ph.packing.trees, len(ph.packing.roots), k)
    usage = np.zeros(ph.graph.cap().size)
    for seq in pieces:
        for tree in seq:
            usage += np.asarray(ph.graph.load[tree.edges].sum(axis=0)).ravel() / k
    t_int = float(np.max(usage / ph.graph.cap()))
    return t_int / ph.packing.T if ph.packing.T > 0 else 1.0


def plan_phase(ph: Phase, k: int, chunk_mb: float, *, grid: str, refine: int) -> PhasePlan:
    pieces = assign_pieces(ph.packing.trees, len(ph.packing.roots), k)
    tasks = build_tasks(ph.graph, pieces)
    sched = Scheduler(ph.graph, tasks, chunk_mb)
    return PhasePlan(ph, tasks, sched.best(refine_rounds=refine, grid=grid), sched)


def plan_phases(phases: list[list[Phase]], k: int, chunk_mb: float, *, grid: str, refine: int
                ) -> list[PhasePlan]:
    """Per phase: the cheapest plan over its packing variants."""
    out = []
    done: dict[int, PhasePlan] = {}
    for variants in phases:
        if id(variants) in done:  # allreduce on a reversal-symmetric machine: same phase twice
            out.append(done[id(variants)])
            continue
        plans = [plan_phase(ph, k, chunk_mb, grid=grid, refine=refine) for ph in variants]
        best = min(plans, key=lambda p: p.plan.cost_us)
        done[id(variants)] = best
        out.append(best)
    return out


def _replicate(pp: PhasePlan, group: RankGroup, roots: tuple[int, ...], k: int, per_root_chunks: bool,
               topology: Topology) -> list[Step]:
    """Steps of one phase for every rank: the representative tasks mapped by every group element."""
    g = pp.phase.graph
    t = pp.tasks
    perms = group.perms
    steps: list[Step] = []
    root_arr = np.asarray(roots, dtype=np.int64)
    for placed in pp.plan.steps:
        idx = np.asarray(placed, dtype=np.int64)
        e = t.edge[idx]
        u = perms[:, g.src[e]].ravel()
        v = perms[:, g.dst[e]].ravel()
        piece = np.broadcast_to(t.piece[idx], (perms.shape[0], idx.size)).ravel()
        if per_root_chunks:
            owner = perms[:, root_arr[t.rep[idx]]].ravel()
            chunk = owner * k + piece
        else:
            chunk = piece
        if pp.phase.reverse:
            a, b, op = v, u, "reduce"
        else:
            a, b, op = u, v, "copy"
        steps.append(step_from_arrays(a, b, chunk, topology, op))
    if pp.phase.reverse:
        steps.reverse()
    return steps


def _describe_trees(ph: Phase) -> list[dict]:
    g = ph.graph
    out = []
    for tree in ph.packing.trees:
        depth = {tree.root: 0}
        for e in tree.edges.tolist():
            depth[int(g.dst[e])] = depth[int(g.src[e])] + 1
        out.append({"root": tree.root, "weight": round(tree.weight, 9), "depth": max(depth.values())})
    return out


def trees_encoding(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """``--encoding trees``: see the module docstring."""
    kind, n = collective.kind, topology.num_ranks
    if collective.custom is not None or kind not in TREE_KINDS:
        raise NotApplicable(f"trees applies to {', '.join(TREE_KINDS)}; {collective.name} needs "
                            "point-to-point routing (use --encoding flow)")
    opts = TreesOptions.parse(options.extra)
    size = opts.size
    time_limit = float(options.time_limit_s or 300.0)
    rooted = kind in ("broadcast", "reduce")
    stripes = opts.rail_stripes
    if n == 1:
        coll = make_collective(kind, 1, options.chunks or 1, collective.root, collective.inplace)
        return {"trees": Schedule(coll, topology.name, topology.content_hash, (), "trees", "trees",
                                  {"why": "a single rank needs no communication"})}
    if rooted:
        group = trivial_group(n)
        roots: tuple[int, ...] = (collective.root or 0,)
    else:
        group = rank_group(topology, enabled=opts.symmetry, nodes_only=stripes)
        roots = group.reps
    with progress.phase(f"trees: packing ({n} ranks, symmetry {group.describe()})"):
        phases = pack_phases(topology, kind, group, roots, time_limit_s=0.5 * time_limit,
                             stripes=stripes)
    n_phases = len(phases)
    roots = tuple(roots)
    kmax = max_pieces(n, n_phases, len(roots), rooted, opts)
    if options.chunks:
        ks = [int(options.chunks)]
    else:
        ks = k_candidates(phases, kmax, rooted)
        losses = {k: max(min(_rounding_loss(ph, k) for ph in variants) for variants in phases)
                  for k in ks}
        good = min(losses.values())
        ks = [k for k in ks if losses[k] <= good * 1.003] or ks
    out: dict[str, Schedule] = {}
    small = opts.small_size
    targets = [("trees", size)]
    if small and small < size and not options.chunks:
        targets.append((f"trees_{format_size(small)}", small))
    for name, target in targets:
        cands = ks if name == "trees" else sorted({k for k in (1, 2, 4, *ks) if k <= min(kmax, 4)})
        with progress.phase(f"trees: planning {name} (pieces per root: "
                            f"{', '.join(map(str, cands))})"):
            sched = _schedule_for(topology, kind, collective, phases, group, roots, cands,
                                  target, rooted, name)
        if name != "trees" and sched.collective.chunks_per_rank == out["trees"].collective.chunks_per_rank \
                and sched.num_steps == out["trees"].num_steps:
            continue  # same plan as the main candidate
        out[name] = sched
    from ...guards import MAX_NODES, xml_estimate

    main = xml_estimate(out["trees"])    # the size guards' estimate of its program
    aligned = aligned_pieces(out["trees"].collective.chunks_per_rank, n, n_phases, kmax,
                             opts.aligned_ops, main.nodes > MAX_NODES)
    if aligned and not options.chunks and not rooted:
        with progress.phase(f"trees: planning trees_aligned (pieces per root: "
                            f"{', '.join(map(str, aligned))})"):
            out["trees_aligned"] = _schedule_for(topology, kind, collective, phases, group, roots,
                                                 aligned, size, rooted, "trees_aligned")
    if not (rooted or stripes or options.chunks) and opts.striped_peers and \
            main.threadblocks > opts.striped_peers:
        striped = _striped(topology, kind, collective, opts, time_limit)
        if max_peers(striped) < main.threadblocks:   # else the machine has nothing to stripe
            out["trees_striped"] = striped
    return out


def max_pieces(n: int, n_phases: int, n_roots: int, rooted: bool, opts: TreesOptions) -> int:
    """Pieces per root: bounded by the transfers the schedule may hold, the tasks we plan and
    ``max_pieces``."""
    per_k_transfers = (n - 1) * (1 if rooted else n) * n_phases
    per_k_tasks = (n - 1) * n_roots
    kmax = max(1, min(opts.max_transfers // max(per_k_transfers, 1),
                      opts.max_tasks // max(per_k_tasks, 1), 1024))
    return min(kmax, opts.max_pieces if opts.max_pieces is not None else kmax)


def max_peers(schedule: Schedule) -> int:
    """The most distinct peers one rank sends to, or receives from: the threadblocks its program
    needs at least (:func:`synth.guards.xml_estimate`, which the size guards use too)."""
    from ...guards import xml_estimate

    return xml_estimate(schedule).threadblocks


def _striped(topology: Topology, kind: str, collective: Collective, opts: TreesOptions,
             time_limit: float) -> Schedule:
    """``trees_striped`` (:class:`TreesOptions` ``striped_peers``): the packing over the rail
    stripes (each rank reaches about nodes/8 fabric peers), power-of-two pieces within
    ``aligned_ops`` instructions per rank."""
    n = topology.num_ranks
    group = rank_group(topology, enabled=opts.symmetry, nodes_only=True)
    roots = tuple(group.reps)
    with progress.phase(f"trees: packing trees_striped (rail stripes, symmetry {group.describe()})"):
        phases = pack_phases(topology, kind, group, roots, time_limit_s=0.25 * time_limit,
                             stripes=True)
    kmax = max_pieces(n, len(phases), len(roots), False, opts)
    ks = power_of_two_pieces(n, len(phases), kmax, opts.aligned_ops) or [1]
    with progress.phase(f"trees: planning trees_striped (pieces per root: {', '.join(map(str, ks))})"):
        return _schedule_for(topology, kind, collective, phases, group, roots, ks, opts.size,
                             False, "trees_striped")


def aligned_pieces(k: int, n: int, n_phases: int, kmax: int, max_ops: int,
                   oversized: bool = False) -> list[int]:
    """Power-of-two pieces per root worth planning when ``k`` is not one (:class:`TreesOptions`
    ``aligned_ops``): the two largest whose ``2 (n - 1) k`` instructions per rank and phase fit
    ``max_ops``; none when nothing fits, or when ``k`` is a power of two already and its plan's
    program is not ``oversized`` (then only the counts below ``k``: dgx_h100 x 64's 8-piece plan
    needs about 6,900 nodes a rank, its 2-piece one 2,500)."""
    if max_ops <= 0 or (k & (k - 1) == 0 and not oversized):
        return []
    return [p for p in power_of_two_pieces(n, n_phases, kmax, max_ops)
            if (p < k if oversized else p != k)]


def power_of_two_pieces(n: int, n_phases: int, kmax: int, max_ops: int) -> list[int]:
    """The two largest powers of two up to ``kmax`` whose ``2 (n - 1) k`` instructions per rank
    and phase fit ``max_ops`` (none when not even 1 does)."""
    top = min(kmax, max_ops // max(1, 2 * (n - 1) * n_phases))
    if top < 1:
        return []
    p = 1 << (top.bit_length() - 1)
    return sorted({max(1, p // 2), p})


def _schedule_for(topology: Topology, kind: str, collective: Collective, phases: list[list[Phase]],
                  group: RankGroup, roots: tuple[int, ...], ks: list[int], size: int, rooted: bool,
                  name: str) -> Schedule:
    """Plan for message size ``size`` over the piece counts ``ks`` and build the schedule."""
    n = topology.num_ranks
    buffer_of = (lambda k: k) if rooted else (lambda k: n * k)
    trials = []
    for k in ks:
        progress.detail(f"{k} pieces per root")
        chunk_mb = size / buffer_of(k) / MB
        plans = plan_phases(phases, k, chunk_mb, grid="coarse", refine=0)
        trials.append((sum(p.plan.cost_us for p in plans), k, [p.phase for p in plans]))
    _, k, chosen = min(trials, key=lambda t: (t[0], t[1]))
    final: dict[int, PhasePlan] = {}
    plans = []
    for ph in chosen:
        if id(ph) not in final:
            final[id(ph)] = plan_phase(ph, k, size / buffer_of(k) / MB, grid="full", refine=2)
        plans.append(final[id(ph)])
    steps: list[Step] = []
    for pp in plans:
        steps.extend(_replicate(pp, group, roots, k, not rooted, topology))
    coll = make_collective(kind, n, k, collective.root, collective.inplace)
    predicted = sum(p.plan.cost_us for p in plans)
    lp_us = sum(p.phase.packing.T * (size / (1 if rooted else n)) / 1e3 for p in plans)
    shape = {"allgather": "a broadcast from every rank along spanning out-trees",
             "broadcast": "a broadcast along spanning out-trees",
             "reducescatter": "a reduction to every rank along spanning in-trees",
             "reduce": "a reduction along spanning in-trees",
             "allreduce": "reduce-scatter along in-trees then allgather along out-trees"}[kind]
    best_T = [min(v.packing.T for v in variants) for variants in phases]
    exact = all(v.packing.optimal for variants in phases for v in variants)
    excess = max(p.phase.packing.T / t for p, t in zip(plans, best_T, strict=True)) - 1
    why = (f"trees: {kind} is {shape}; tree packing (LP with Edmonds pricing"
           f"{', solved to optimality: the cut bound' if exact else ', stopped early'}) on {n} "
           f"ranks; symmetry {group.describe()}; packing {'/'.join(p.phase.packing.notes[0] for p in plans)}"
           f"{f' ({100 * excess:.1f}% above the best packing, shallower)' if excess > 1e-6 else ''}; "
           f"{k} pieces per root pipelined in {len(steps)} steps, planned for {size} bytes")
    meta = {
        "why": why,
        "size_bytes": size,
        "pieces_per_root": k,
        "predicted_us": round(predicted, 6),
        "lp_us": round(lp_us, 6),
        "symmetry": group.describe(),
        "phases": [
            {"reverse": p.phase.reverse, "packing": p.phase.packing.notes[0],
             "lp_optimal": p.phase.packing.optimal,
             "lp_rounds": p.phase.packing.iterations, "trees": _describe_trees(p.phase),
             "plan": p.plan.label, "steps": len(p.plan.steps),
             "sparse_switches": list(p.phase.graph.sparse_switches)}
            for p in plans
        ],
    }
    return Schedule(coll, topology.name, topology.content_hash, tuple(steps), name, "trees", meta)
