"""The ``milp`` encoding: TACCL's three-stage synthesis (NSDI'23) guided by a communication sketch.

The request passes through a chain of reductions, each a small module, and the solution maps back:

1. **sketch -> logical links** (:mod:`synth.sketches`): which one-hop pairs may be used and whose
   data each inter-node relay may carry; no sketch means every channel.
2. **problem** (:mod:`.problem`): the sketch-preserving rank group, one representative rank's
   chunks, and their sparse candidate links (shortest paths of the sketch's graph).
3. **routing MILP** (:mod:`.route`): a tree (allgather) or path (alltoall) per representative
   chunk minimising the busiest resource orbit, with the sketch's switch policies.
4. **ordering** (:mod:`.schedule`): list scheduling into synchronous steps.
5. **scheduling MILP** (:mod:`.schedule`): re-batching the ordering's drain (α paid once per batch).
6. **replication**: every group element maps the representative's steps to its ranks; the
   verifier (called by :func:`synth.solve.solve`) checks the whole schedule.

Candidates: ``milp`` (the chunking whose ordering is cheapest at ``size``), ``milp_coarse`` (the
best with at most half its chunks, when one was routed: a smaller program that fits more instances
under the runtimes' limits, so the timed program model can prefer it; on trn1_32 allgather the
32-chunk ``milp`` is 95.15 % of bound at 1 GiB but 114 nodes over the exec limit at 2 instances,
the 16-chunk ``milp_coarse`` 94.54 % and fits), and ``milp_1MB`` (one chunk, planned for 1 MB).

Reducescatter routes an allgather over the reversed links and reverses its steps (copies become
reductions); allreduce is that reducescatter followed by the allgather. Solvers are open
(HiGHS default, CBC, CP-SAT; Gurobi when installed) via :mod:`.solvers`.

:class:`..options.MilpOptions`: ``sketch`` (name or file; default the shipped sketch fitting the topology),
``solver``, ``size`` (bytes the plan is tuned for, default 1 GiB), ``window`` (stage 3 re-batches
the ordering's last ``window + 1`` steps, default 4, after a first pass over the last 3),
``max_extra_hops``, ``mip_gap``, ``symmetry``.

Time limits are deterministic work budgets (:mod:`synth.encodings.work`): ``--time-limit S`` (or
the sketch's ``time_limit_s`` hint, or :data:`AUTO_TIME_LIMIT_S` under auto) is S work units, of
which the routing MILPs share :data:`ROUTING_SHARE` (as node limits for HiGHS/CBC/Gurobi, fewer
for bigger models, CP-SAT deterministic seconds; a model whose root alone may take more than
:data:`ROOT_SHARE` of it is not started, its pieces then following a coarser chunking's routes)
and each scheduling MILP gets :data:`STAGE3_NODES` nodes / a quarter of it.
So which chunkings are routed, and each solve's incumbent, are the same on any machine; the
wall-clock limit (ten times the budget) is only a safety net, noted in ``synth solve``'s notes
when it is what stopped a solve.

Since each scheduling MILP has its own budget, they are independent once the plans are picked:
:class:`_Finishes` runs them on spawned worker processes (:data:`PARALLEL_WORKERS`), the 1 MB
candidate's while the main target still routes, and the schedules are assembled in pick order,
byte-identical to the inline path.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ...collectives import Collective, make_collective
from ...errors import NotApplicable, SynthError
from ...schedule import Schedule, Step
from ...sizes import format_size
from ...steps import step_from_arrays
from ...topology import MB, Topology
from ..options import MilpOptions, Options
from ..work import WorkBudget
from .problem import (
    MILP_KINDS,
    LogicalLinks,
    MilpProblem,
    all_links,
    build_problem,
    chunk_images,
    reversed_links,
)
from .route import InfeasibleSketch, NoRouting, PeerPolicy, Routes, route
from .schedule import (
    FIRST_WINDOW,
    Tasks,
    make_tasks,
    order,
    outcome,
    schedule_tasks,
    stage2_report,
    stage3_keeps,
    step_arrays,
)

DEFAULT_WINDOW = MilpOptions.window
AUTO_MAX_RANKS = 80
"""``--encoding auto`` tries milp up to this many ranks (TACCL's reach); above, trees/flow."""
AUTO_TIME_LIMIT_S = 60.0
"""Work budget (work units, :mod:`synth.encodings.work`) of the milp encoding under auto."""
STAGE3_MAX_S = MilpOptions.stage3_time_limit
"""Default cap on each scheduling MILP's work units: measured, it rarely improves on the ordering heuristic by
more than ~1% (stage-2 plans are within the routing's integrality of the busiest orbit), so its
time is better spent elsewhere; ``stage3_time_limit`` raises it."""
SMALL_SIZE = 2**20
"""The second candidate is planned for this size with one chunk per rank (latency-lean)."""


def resolve_sketch(topology: Topology, spec: str | None):
    """(sketch or None, logical links, switch policies) for this topology."""
    from ...sketches import load_sketch, require_fit, sketch_for

    sketch = load_sketch(spec, topology) if spec else sketch_for(topology)
    if sketch is None:
        return None, all_links(topology), ()
    require_fit(sketch, topology)
    pairs = sketch.allowed_pairs(topology)

    def carry(origin: int, u: int, v: int) -> bool:
        return sketch.may_carry(topology, origin, u, v)

    policies = tuple(PeerPolicy(p.switch, p.max_peers, p.min_peers) for p in sketch.switch_policies)
    return sketch, LogicalLinks(frozenset(pairs), carry), policies


def _replicate(problem: MilpProblem, tasks: Tasks, steps: list[int], topology: Topology) -> list[Step]:
    perms = problem.group.perms
    images = problem.chunk_image
    src = np.array([e[0] for e in tasks.edge], dtype=np.int64)
    dst = np.array([e[1] for e in tasks.edge], dtype=np.int64)
    chunk = np.array(tasks.chunk, dtype=np.int64)
    out: list[Step] = []
    for idx in step_arrays(tasks, steps):
        u = perms[:, src[idx]].ravel()
        v = perms[:, dst[idx]].ravel()
        c = images[:, chunk[idx]].ravel()
        if problem.reverse:
            a, b, op = v, u, "reduce"
        else:
            a, b, op = u, v, "copy"
        out.append(step_from_arrays(a, b, c, topology, op))
    if problem.reverse:
        out.reverse()
    return out


ROUTING_SHARE = 0.6
"""Of ``--time-limit``'s work budget, the part the routing MILPs share (stage 3 gets
min(1/4, STAGE3_MAX_S) each)."""
ROOT_SHARE = 0.5
"""A routing model whose root alone may cost more than this part of the routing budget
(:func:`synth.encodings.work.root_work`) is not started when a routed coarser chunking divides its
chunking: the pieces then follow that routing (:meth:`_Phase.split`). The coarsest chunking is
always started (dgx2 x 2 alltoall's single-chunk model has 134,911 nonzeros and routes). Without
the cap, ``--time-limit 55`` on dgx2 x 2 allgather spent 547 s in the roots of the finer
chunkings' routing models (up to 233,418 nonzeros) until the wall-clock safety net stopped them."""
MAX_TREE_DEEPENING = 2
"""Hops beyond the sketch's slack that broadcast trees may take when the sketch is otherwise
infeasible (a peer cap of k through a switch needs depth about log_k of the ranks)."""
BOUND_SLACK = 1.02
"""A DAG routing within 2% of the cut bound is not worth the detour model's time."""


def _bound_proxy(topology: Topology, routed: Collective) -> float:
    """The cut bound in the routing objective's units: µs per MB of one chunk (bandwidth part)."""
    from ...bounds import lower_bound

    bound = lower_bound(topology, routed)
    return bound.inv_bandwidth_us_per_byte * routed.buffer_chunks * MB


class _Unrouted(SynthError):
    """A chunking's routing failed; ``work_used`` is what its models spent (0 for a model that was
    not started), so the caller charges the routing budget with that and not with the whole
    share."""

    def __init__(self, message: str, work_used: float) -> None:
        super().__init__(message, exit_code=3)
        self.work_used = work_used


class _Phase:
    """One routed allgather (forward, or reversed for a reduction) with ``k`` chunks per rank:
    its problem, its routes and the transfer tasks they make. Built by :meth:`solve` (its own
    routing models) or :meth:`split` (a coarser chunking's routes cut into pieces)."""

    def __init__(self, problem: MilpProblem, routes: Routes, *, work_used: float = 0.0,
                 seconds: float = 0.0, split_from: int | None = None) -> None:
        self.problem = problem
        self.routes = routes
        self.tasks = make_tasks(problem, routes.edges)
        self.work_used = work_used
        """Work units the routing models used (deterministic: nodes explored, or the whole share
        where a backend does not say)."""
        self.seconds = seconds
        self.split_from = split_from
        """Chunks per rank of the routing this phase's pieces follow (:meth:`split`); None: its own."""

    @classmethod
    def solve(cls, topology: Topology, routed: Collective, links: LogicalLinks, policies, *,
              reverse: bool, opts: MilpOptions, solver: str, work: float | None,
              safety: WorkBudget, progress, max_root_work: float | None = None) -> _Phase:
        """Route it; ``work`` is this phase's share of the routing work budget (per model);
        ``max_root_work`` the most a model's root may cost (bigger models are not started);
        ``safety`` the run's wall-clock safety net. Raises :class:`_Unrouted` (with the work its
        models used) when no model found a routing, :class:`InfeasibleSketch` when the sketch
        allows none."""
        t0 = time.perf_counter()
        work_used = 0.0
        hops = (opts.max_extra_hops if opts.max_extra_hops is not None
                else 1 if routed.kind == "alltoall" else 0)
        logical = reversed_links(links) if reverse else links
        # broadcast trees first on the shortest-path DAG (small, no level variables); only if the
        # sketch makes that infeasible (e.g. a peer cap on a switch) with the sketch's extra hops
        # and again with them when the DAG's busiest resource stays above the cut bound (the
        # optimum then needs detours, as on the DGX-1 cube-mesh); the better routing is kept
        # alltoall paths take the sketch's slack, and a few hops more only if a peer cap makes
        # that infeasible (a cap of k peers reaches about k^h ranks in h hops)
        best: tuple[float, MilpProblem, Routes] | None = None
        deeper = list(range(hops + 1, hops + MAX_TREE_DEEPENING + 1)) if hops >= 1 else []
        a2a = routed.kind == "alltoall"
        tries = [(0, h) for h in [hops, *deeper]] if a2a else [(t, hops) for t in
                                                               [*sorted({0, hops}), *deeper]]
        last = tries[-1]
        for tree_hops, path_hops in tries:
            if best is not None and (a2a or tree_hops > hops
                                     or best[0] <= BOUND_SLACK * _bound_proxy(topology, routed)):
                break
            problem = build_problem(topology, routed, logical,
                                    symmetry=opts.symmetry, extra_hops=path_hops,
                                    reverse=reverse, tree_extra_hops=tree_hops)
            try:
                routes = route(problem, policies, solver=solver,
                               time_limit_s=_wall(safety), mip_gap=opts.mip_gap,
                               progress=progress, diagnose=(tree_hops, path_hops) == last,
                               work=work, safety=safety, max_root_work=max_root_work)
                work_used += _used(routes.result, work)
            except InfeasibleSketch:
                if (tree_hops, path_hops) == last:
                    raise
                continue
            except SynthError as exc:
                work_used += _used(exc.result, work) if isinstance(exc, NoRouting) else work or 0.0
                if best is None:
                    raise _Unrouted(exc.message, work_used) from exc
                break  # the detour model found nothing in its budget: keep the DAG's routing
            if best is None or routes.objective_us_per_mb < best[0] - 1e-9:
                best = (routes.objective_us_per_mb, problem, routes)
        assert best is not None
        _, problem, routes = best
        return cls(problem, routes, work_used=work_used, seconds=time.perf_counter() - t0)

    @classmethod
    def split(cls, base: _Phase, routed: Collective) -> _Phase | None:
        """``base``'s routing with each chunk cut into ``m`` pieces that follow its route, for a
        chunking whose own routing model was not solved in its budget (None when the chunk ids
        do not nest). The load on every resource is base's, so the routing stays as good; only the
        ordering and scheduling stages work on the finer pieces (a shorter pipeline fill and
        drain). Measured on dgx2 x 2 allgather: the 2-chunk routing proves optimal in 41 nodes,
        the 12-chunk model (233,418 nonzeros) found no routing in 99 s."""
        old = base.problem
        k_old, k_new = old.collective.chunks_per_rank, routed.chunks_per_rank
        if routed.kind != old.collective.kind or k_new % k_old or k_new == k_old:
            return None
        m = k_new // k_old
        chunks = []
        for rep in old.chunks:
            for j in range(m):
                c = rep.chunk * m + j
                if (routed.pre[c], routed.post[c]) != (old.collective.pre[rep.chunk],
                                                       old.collective.post[rep.chunk]):
                    return None
                chunks.append(dataclasses.replace(rep, chunk=c))
        problem = dataclasses.replace(old, collective=routed, chunks=chunks,
                                      chunk_image=chunk_images(routed, old.group))
        edges = {rep.chunk * m + j: list(base.routes.edges[rep.chunk])
                 for rep in old.chunks for j in range(m)}
        routes = Routes(edges, base.routes.objective_us_per_mb * m, base.routes.result)
        return cls(problem, routes, split_from=k_old)

    def order(self, chunk_mb: float) -> tuple[list[int], float, float]:
        return order(self.tasks, chunk_mb)

    def finish(self, initial: list[int], rate: float, chunk_mb: float, *, window: int, solver: str,
               work: float, safety: WorkBudget, progress) -> tuple[list[Step], dict]:
        """Stage 3 and replication in this process (:class:`_Finishes` runs the same two halves,
        :func:`_schedule` possibly in a worker process, then :meth:`replicate`)."""
        steps, report = _schedule(self.tasks, initial, chunk_mb, window, solver, work, safety,
                                  progress)
        return self.replicate(steps, report, rate)

    def replicate(self, steps: list[int], report: dict, rate: float) -> tuple[list[Step], dict]:
        """The whole schedule's steps from the representative's ``steps`` (stage 3's plan)."""
        report["stage2_steps_per_load"] = round(1.0 / rate, 3) if rate else None
        return _replicate(self.problem, self.tasks, steps, self.problem.topology), report

    def describe(self) -> dict:
        res = self.routes.result
        # no wall-clock figures here: the schedule (meta included) must be byte-identical per input
        return {"group": self.problem.group.describe(), "rep_chunks": len(self.problem.chunks),
                "routing_split_from": self.split_from,
                "candidate_pairs": self.problem.num_candidate_pairs,
                "routing": outcome(res),
                "routing_size": {"variables": res.variables,  # type: ignore[attr-defined]
                                 "integer_variables": res.integer_variables,  # type: ignore[attr-defined]
                                 "constraints": res.constraints},  # type: ignore[attr-defined]
                "routing_gap": res.gap,  # type: ignore[attr-defined]
                "routing_busiest_us_per_mb": round(self.routes.objective_us_per_mb, 6)}


def _split_coarser(phases: dict[tuple[int, bool], _Phase], routed: Collective, reverse: bool
                   ) -> _Phase | None:
    """A routing for ``routed`` cut from the finest routed chunking that divides it, or None."""
    k = routed.chunks_per_rank
    for k_old in sorted((key[0] for key in phases if key[1] == reverse and k % key[0] == 0
                         and key[0] < k and phases[key].split_from is None), reverse=True):
        phase = _Phase.split(phases[(k_old, reverse)], routed)
        if phase is not None:
            return phase
    return None


def _wall(safety: WorkBudget) -> float | None:
    """The safety net's seconds left for one solve (a solver needs a positive limit)."""
    left = safety.wall_left()
    return None if left is None else max(0.01, left)


def _used(result, work: float | None) -> float:
    """Work units a routing solve used: its nodes where the backend counts them, else its share."""
    if result.work_used is not None:
        return result.work_used
    return work or 0.0


def _schedule(tasks: Tasks, initial: list[int], chunk_mb: float, window: int, solver: str,
              work: float, safety: WorkBudget, progress=None) -> tuple[list[int], dict]:
    """Stage 3 of one plan (:func:`.schedule.schedule_tasks`): a deterministic work budget of its
    own (``work``), only the wall-clock safety net shared. Module-level so a worker process can
    run it (:class:`_Finishes`)."""
    return schedule_tasks(tasks, initial, chunk_mb, window=window, solver=solver,
                          time_limit_s=_wall(safety), progress=progress, work=work, safety=safety)


def _schedule_in_worker(tasks: Tasks, initial: list[int], chunk_mb: float, window: int,
                        solver: str, work: float, safety: WorkBudget
                        ) -> tuple[list[int], dict, list[str]]:
    """:func:`_schedule` in a worker process: also returns the safety-net notes it raised (the
    worker's ``safety`` is a copy, so the parent merges them into its own). The worker's progress
    reporter is the library's default, ``off``: its solver lines would garble the parent's."""
    steps, report = _schedule(tasks, initial, chunk_mb, window, solver, work, safety)
    return steps, report, list(safety.safety_notes)


PARALLEL_WORKERS: int | None = None
"""Processes the scheduling MILPs (stage 3) run on. None: ``SYNTH_MILP_WORKERS`` when set, else
the cores other processes leave idle (:func:`synth.cores.idle_cores`) capped at
:data:`MAX_WORKERS`, and only for a request big enough to pay for the
workers' start (:data:`PARALLEL_MIN_TASKS`) made outside a worker process (a catalog's workers
already share the cores). Why the load: on a busy machine the workers only add their start-up;
measured with ``benchmarks/speed.py`` beside a CI run (load average about 3 on 2 cores), the main
job took 123.1 s with two workers against 110.7 s for e8beec7 inline, where on a quiet machine two
workers took it from 108.4 s to 86.7 s. 1 runs them in this process, one after another (the
inline path, as before); a test or benchmark may set it to compare the two paths. Either way the
schedules are byte-identical: each scheduling MILP has its own deterministic work budget, only the
wall-clock safety net is shared, and the results are assembled in the same order."""
WORKERS_ENV = "SYNTH_MILP_WORKERS"
"""Environment variable that sets the processes for stage 3 (a positive integer; 1: inline)."""
MAX_WORKERS = 4
"""At most this many stage-3 processes by default (a request has at most a few plans to schedule:
two targets' picks times its directions)."""
PARALLEL_MIN_TASKS = 500
"""By default stage 3 goes to worker processes only when the finest chunking tried has at least
this many representative transfers: a spawned worker costs a second or more to start (it imports
numpy, PuLP and HiGHS; measured 1.2 and 3.2 s more than inline for one 15 s scheduling MILP on the
loaded 2-core machine), more than a small request's scheduling MILPs take. trn1_32 allgather
(32 chunks per rank: 992 transfers) is over it: its stage 3 took 80 s in one process there (the
1 MB candidate's 14 s, the main one's 63 s, the coarse one's 3 s; load average 2.7)."""


def scheduling_workers(per_plan_tasks: int) -> int:
    """Processes for stage 3 (:data:`PARALLEL_WORKERS`): 1 means inline. ``per_plan_tasks``: the
    representative transfers of the finest chunking tried (the default's size test)."""
    import os

    if PARALLEL_WORKERS is not None:
        return max(1, int(PARALLEL_WORKERS))
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise SynthError(f"{WORKERS_ENV} must be a positive integer, got {raw!r}")
        return int(raw)
    if per_plan_tasks < PARALLEL_MIN_TASKS:
        return 1
    from ...cores import idle_cores, in_worker

    if in_worker():
        return 1  # already a worker (``synth catalog``'s pool shares the cores among its solves)
    idle = idle_cores()
    return 1 if idle < 2 else min(idle, MAX_WORKERS)


class _Finishes:
    """The stage-3 solves of the picked plans, run inline or on a pool of spawned processes.

    :meth:`submit` hands one plan's scheduling MILPs over (inline: solved at once, exactly as
    before; parallel: a job on the pool, so the 1 MB candidate's stage 3 runs while the main target
    is still routing), :meth:`result` gives its outcome back in the caller's order. The workers are
    *spawned*, not forked: HiGHS has started threads in this process, and a fork of a threaded
    process can deadlock. A worker's SynthError comes back as itself (same message, same exit
    code) when its result is asked for, and its safety-net notes join ``safety``'s."""

    def __init__(self, workers: int, safety: WorkBudget, progress) -> None:
        self.workers = workers
        self.safety = safety
        self.progress = progress
        self._jobs: list = []
        """Per submitted plan: its (steps, report) once solved, else (its future, its arguments)."""
        self._pool = None
        self._submitted = 0

    @property
    def parallel(self) -> bool:
        return self.workers > 1

    @property
    def submitted(self) -> int:
        """Plans whose stage 3 was submitted (not :meth:`skip`-ped)."""
        return self._submitted

    @property
    def processes(self) -> int:
        """Worker processes the submitted plans use (no more than there are plans)."""
        return min(self.workers, self._submitted)

    def submit(self, tasks: Tasks, initial: list[int], chunk_mb: float, *, window: int,
               solver: str, work: float) -> int:
        """Start one plan's stage 3; returns its handle for :meth:`result`."""
        self._submitted += 1
        if not self.parallel:
            self._jobs.append(_schedule(tasks, initial, chunk_mb, window, solver, work,
                                        self.safety, self.progress))
        else:
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                                 mp_context=multiprocessing.get_context("spawn"))
            from concurrent.futures.process import BrokenProcessPool

            args = (tasks, initial, chunk_mb, window, solver, work)
            try:
                future = self._pool.submit(_schedule_in_worker, *args, self.safety)
            except BrokenProcessPool:
                # an earlier worker died: this plan is solved here when its result is asked for
                future = None
            self._jobs.append((future, args))
        return len(self._jobs) - 1

    def skip(self, initial: list[int], report: dict) -> int:
        """Record a plan whose stage 3 is not run (its stage-2 steps stand); returns its handle."""
        self._jobs.append((initial, report))
        return len(self._jobs) - 1

    def result(self, handle: int) -> tuple[list[int], dict]:
        """The plan's (steps, report); raises the worker's error, if it raised one."""
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        job = self._jobs[handle]
        if not isinstance(job[0], Future) and job[0] is not None:
            return job
        future, args = job
        try:
            if future is None:
                raise BrokenProcessPool("the pool broke before this plan was submitted")
            steps, report, notes = future.result()
            self.safety.safety_notes.extend(n for n in notes if n not in self.safety.safety_notes)
        except BrokenProcessPool:
            # a worker died (killed, or no room to start under the address-space backstop of
            # :mod:`synth.guards`): solve this plan here instead, as the inline path does
            steps, report = _schedule(*args, self.safety, self.progress)
        self._jobs[handle] = (steps, report)
        return steps, report

    def settle(self) -> None:
        """Wait for every submitted plan in submission order, raising the first error: what the
        inline path would have raised first (it solves each plan when it is submitted)."""
        for handle in range(len(self._jobs)):
            self.result(handle)

    def close(self) -> None:
        """Stop the pool (jobs not started are cancelled: only an error path leaves any)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


CHUNK_MULTIPLES = (1, 2, 3, 4, 6, 8, 16, 32)
"""Chunkings tried for the main candidate: the sketch's chunks per rank times these. 32: on trn1_32
allgather the 32-chunk ordering (each chunk half of a 16-chunk route, or its own routing) beats the
16-chunk one at 1 GiB, 2779.5 against 2782.8 µs, and its drain re-batches to 2755.0 (95.15 %).
(48 reached 2751.7, but 1536 chunks per loop do not divide power-of-two sizes: no runtime runs it
there, spec §3.1.)"""
MAX_REP_TASKS = 3000
"""Largest representative transfer count a chunking may have (keeps stage 3 and memory small)."""


def milp_encoding(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """``--encoding milp``: see the module docstring."""
    if collective.custom is not None or collective.kind not in MILP_KINDS:
        raise NotApplicable(f"milp synthesises {', '.join(MILP_KINDS)}; not {collective.name}")
    n = topology.num_ranks
    opts = MilpOptions.parse(options.extra)
    solver = opts.solver or "highs"
    from .solvers import SOLVERS, available_solvers

    if solver not in SOLVERS:
        from ...errors import unknown_name

        raise unknown_name("solver", solver, SOLVERS)
    if not available_solvers().get(solver, False):
        avail = [s for s, ok in available_solvers().items() if ok]
        raise SynthError(f"solver '{solver}' is not installed here (available: {', '.join(avail)})")
    sketch, links, policies = resolve_sketch(topology, opts.sketch)
    hints = dict(sketch.hints) if sketch is not None else {}
    # the sketch's solver hints fill what the caller left unset
    opts = dataclasses.replace(opts, **{key: hints[key] for key in ("max_extra_hops", "mip_gap")
                                        if getattr(opts, key) is None and key in hints})
    time_limit = options.time_limit_s or hints.get("time_limit_s")
    size = opts.size
    window = opts.window
    k0 = int(sketch.chunks_per_rank if sketch is not None else 1)
    kind = collective.kind
    if n == 1:
        coll = make_collective(kind, 1, options.chunks or k0, collective.root, collective.inplace)
        return {"milp": Schedule(coll, topology.name, topology.content_hash, (), "milp", "milp",
                                 {"why": "a single rank needs no communication"})}
    progress = opts.progress
    directions = {"allgather": (False,), "alltoall": (False,), "reducescatter": (True,),
                  "allreduce": (True, False)}[kind]
    per_k_tasks = (n - 1) * (n - 1 if kind == "alltoall" else 1)
    if options.chunks:
        main_ks = [int(options.chunks)]
    else:
        main_ks = sorted({k0 * m for m in CHUNK_MULTIPLES if k0 * m * per_k_tasks <= MAX_REP_TASKS}
                         or {k0})
    targets = [("milp", main_ks, size)]
    if not options.chunks and size > SMALL_SIZE:
        targets.append((f"milp_{format_size(SMALL_SIZE)}", [1], SMALL_SIZE))
    stage3_work = min(0.25 * time_limit if time_limit is not None else STAGE3_MAX_S,
                      opts.stage3_time_limit)
    # the wall-clock safety net: ten times the whole budget (or the stage-3 budgets' when unlimited)
    safety = WorkBudget(time_limit)
    if time_limit is None:
        safety = WorkBudget(stage3_work * 2 * len(directions) * (len(targets) + 1))
    phases: dict[tuple[int, bool], _Phase] = {}
    failed: dict[int, str] = {}
    to_route = sorted({(k, r) for _, ks, _ in targets for k in ks for r in directions})
    routing_left = None if time_limit is None else ROUTING_SHARE * time_limit
    max_root_work = None if routing_left is None else ROOT_SHARE * routing_left
    finishes = _Finishes(scheduling_workers(max(main_ks) * per_k_tasks), safety, progress)
    # per candidate, in pick order: (name, collective, [(stage-3 handle, phase, stage-2 rate,
    # reverse)], meta but its stages); stage 3 of a target's picks is handed to ``finishes`` as
    # soon as they are known (in parallel mode the 1 MB candidate's runs while the main target
    # routes), and the schedules are assembled afterwards in pick order
    picked: list[tuple[str, Collective, list[tuple[int, _Phase, float, bool]], dict]] = []
    try:
        for name, ks, target in sorted(targets, key=lambda t: t[1]):  # fewest chunks first: cheapest
            best: tuple[float, int, list] | None = None
            routed_ks: dict[int, tuple[float, int, list]] = {}
            for k in ks:
                if k in failed:
                    continue
                coll = make_collective(kind, n, k, collective.root, collective.inplace)
                chunk_mb = target / coll.buffer_chunks / MB
                plans = []
                total = 0.0
                try:
                    for reverse in directions:
                        if (k, reverse) not in phases:
                            # the routing work budget is shared by the chunkings still to route
                            left = [key for key in to_route if key not in phases]
                            share = (None if routing_left is None
                                     else max(1.0, routing_left / len(left)))
                            routed = make_collective("alltoall" if kind == "alltoall" else "allgather",
                                                     n, k)
                            # only a chunking that a routed one divides may be left unstarted: its
                            # pieces can follow that routing (:meth:`_Phase.split`)
                            coarser = any(r == reverse and k % k2 == 0 and k2 < k for k2, r in phases)
                            try:
                                phase = _Phase.solve(topology, routed, links, policies,
                                                     reverse=reverse, opts=opts, solver=solver,
                                                     work=share, safety=safety, progress=progress,
                                                     max_root_work=max_root_work if coarser else None)
                                spent = phase.work_used
                            except SynthError as exc:
                                # charged with what its models used: nothing for one not started
                                spent = exc.work_used if isinstance(exc, _Unrouted) else share or 0.0
                                phase = _split_coarser(phases, routed, reverse)
                                if phase is None:
                                    raise
                            if routing_left is not None:
                                routing_left = max(0.0, routing_left - spent)
                            phases[(k, reverse)] = phase
                        phase = phases[(k, reverse)]
                        initial, cost, rate = phase.order(chunk_mb)
                        plans.append((phase, initial, rate, reverse))
                        total += cost
                except InfeasibleSketch:
                    raise
                except SynthError as exc:
                    failed[k] = exc.message  # no routing in its share of the work: try other chunkings
                    to_route = [key for key in to_route if key[0] != k]
                    continue
                routed_ks[k] = (total, k, plans)
                if best is None or total < best[0] - 1e-9:
                    best = (total, k, plans)
            if best is None:
                if name != "milp":
                    continue  # the latency-lean extra candidate is optional
                finishes.settle()  # an earlier candidate's stage-3 error (and notes) come first
                if options.notes is not None:
                    options.notes.extend(n for n in safety.safety_notes if n not in options.notes)
                raise SynthError("milp: no chunking could be routed within the time limit ("
                                 + "; ".join(f"{k} chunks: {m}" for k, m in sorted(failed.items()))
                                 + "); raise --time-limit", exit_code=3)
            picks = [(name, best, "", window)]
            coarse = [c for c in routed_ks.values() if 2 <= c[1] <= best[1] // 2]
            if name == "milp" and coarse:
                # a second candidate with at most half the chunks: a smaller program that fits more
                # instances under the runtime's limits, for the program model to weigh (its drain
                # gets the narrow stage-3 pass only: the wide one costs ~20 s on trn1_32 for ~0.1 %)
                picks.append((f"{name}_coarse", min(coarse, key=lambda c: (c[0], c[1])),
                              f"; the best chunking with at most half of {best[1]} chunks per rank",
                              min(window, FIRST_WINDOW)))
            for cand, (_, k, plans), extra, cand_window in picks:
                coll = make_collective(kind, n, k, collective.root, collective.inplace)
                chunk_mb = target / coll.buffer_chunks / MB
                moot = (_stage3_moot(options.refine_gate, coll, cand, plans, cand_window,
                                     stage3_work, topology)
                        if options.refine_gate is not None and directions == (False,) else None)
                jobs = []
                for phase, initial, rate, reverse in plans:
                    if moot is not None:
                        handle = finishes.skip(initial, stage2_report(
                            phase.tasks, initial, chunk_mb, cand_window, why_not=moot))
                    else:
                        handle = finishes.submit(phase.tasks, initial, chunk_mb,
                                                 window=cand_window, solver=solver,
                                                 work=stage3_work)
                    jobs.append((handle, phase, rate, reverse))
                why = (f"milp: TACCL-style routing MILP + ordering + scheduling MILP ({solver}), "
                       f"sketch {sketch.name if sketch else 'none (every link)'}, {k} chunk(s) per "
                       f"rank (of {', '.join(map(str, ks))} tried), planned for "
                       f"{format_size(target)}{extra}")
                meta = {"why": why, "sketch": sketch.name if sketch else None, "solver": solver,
                        "planned_bytes": int(target),
                        "chunkings_tried": [x for x in ks if x not in failed],
                        "chunkings_not_routed_in_time": sorted(x for x in ks if x in failed),
                        "stages": []}
                picked.append((cand, coll, jobs, meta))
        if finishes.parallel and finishes.submitted:
            with _progress_phase(f"milp: scheduling {_count(finishes.submitted, 'plan')} on "
                                 f"{_count(finishes.processes, 'process', 'es')}"):
                finishes.settle()
        out: dict[str, Schedule] = {}
        for cand, coll, jobs, meta in picked:
            steps: list[Step] = []
            for handle, phase, rate, reverse in jobs:
                part, report = phase.replicate(*finishes.result(handle), rate)
                steps.extend(part)
                meta["stages"].append({**phase.describe(), **report, "direction":
                                       "reduce (reversed allgather)" if reverse else "forward"})
            out[cand] = Schedule(coll, topology.name, topology.content_hash, tuple(steps), cand,
                                 "milp", meta)
    except SynthError:
        finishes.settle()  # a stage-3 job submitted earlier raised first in the inline order
        raise
    finally:
        finishes.close()
    if options.notes is not None:
        options.notes.extend(n for n in safety.safety_notes if n not in options.notes)
    return out


def _stage3_moot(gate, coll: Collective, cand: str, plans: list, window: int, work: float,
                 topology: Topology) -> str | None:
    """Why stage 3 of the one-phase plan of ``cand`` cannot change what the caller writes, or
    None: ``gate`` (:attr:`..options.Options.refine_gate`) is given the schedule of the stage-2
    plan and the leading steps of it that stage 3 keeps (:func:`.schedule.stage3_keeps`)."""
    (phase, initial, _, _), = plans
    kept = stage3_keeps(initial, window, work) if window > 0 else 0
    if kept < 1:
        return None
    schedule = Schedule(coll, topology.name, topology.content_hash,
                        tuple(_replicate(phase.problem, phase.tasks, initial, topology)), cand,
                        "milp", {})
    with _progress_phase(f"milp: can stage 3 of {cand} change what is written?"):
        return gate(schedule, kept)


def _count(n: int, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


def _progress_phase(label: str):
    """A progress phase of the current reporter (imported here: a lower floor need not load it
    with the module)."""
    from ... import progress

    return progress.phase(label)
