"""One (topology, collective) for the SCCL encoding: bounds, instance solving, decoding.

:class:`SmtProblem` turns an instance ``(S steps, R rounds, C chunks per rank)`` into a verified-able
:class:`~synth.schedule.Schedule` or a proof that none exists:

* non-combining collectives (allgather, alltoall, broadcast, gather, scatter, custom) are encoded
  directly on the topology's send graph;
* combining collectives whose chunks each end on one rank (reducescatter, reduce) are solved as
  their *non-combining dual* on the reversed graph (allgather, broadcast) and the schedule is read
  backwards with ``reduce`` transfers (SCCL's inversion);
* allreduce is reducescatter followed by allgather (SCCL's composition): an instance (S, R, C) is
  SAT when some split S = S1 + S2, R = R1 + R2 has both halves SAT.

Each instance is first checked against the bounds (hop distance, the rounds-per-chunk LP), then, if
the topology has a group of automorphisms acting freely on the chunks, tried on the small symmetric
model (a schedule found there is a schedule), and finally decided on the full model with symmetry
breaking. Engines: CP-SAT (``cpsat``, the default) or z3 (``z3``), behind the same model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ... import progress
from ...collectives import Collective, make_collective
from ...errors import NotApplicable, SynthError
from ...schedule import Schedule, Step, Transfer
from ...topology import Topology
from ..work import WorkBudget
from .model import (
    Demand,
    Model,
    ModelBuilder,
    Network,
    Symmetry,
    demand_of,
    free_group,
    group_elements,
    network,
    symmetries,
)

ENGINES = ("cpsat", "z3")
SAT, UNSAT, UNKNOWN = "sat", "unsat", "unknown"
VF2_MAX_RANKS = 16
"""Automorphisms are enumerated with networkx's VF2 up to this many ranks (capped); above it only
the structured candidates of :func:`synth.cuts.symmetry_generators` are tried."""
VF2_MAX_FOUND = 512
SYMMETRIC_BUDGET = 3.0
"""Deterministic-time budget (CP-SAT's units, about seconds) of the symmetric model per instance."""
PLAIN_BUDGET = 1.0
"""... and of the single-worker full model without symmetry breaking."""
LEX_GROUP_BOUND = 64
"""Symmetry breaking uses every element of the automorphism group when it has at most this many."""


@dataclass(frozen=True)
class InstanceResult:
    """The verdict on one instance and how it was reached."""

    steps: int
    rounds: int
    chunks: int
    status: str
    """``sat``, ``unsat`` or ``unknown`` (the time limit hit first)."""
    seconds: float
    how: str
    """``bound``, ``symmetric`` (found on the symmetric model), ``full``, ``inferred`` or ``limit``."""
    engine: str
    schedule: Schedule | None = None
    reason: str = ""

    @property
    def rpc(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)

    def describe(self) -> str:
        return f"S{self.steps},R{self.rounds},C{self.chunks}"


def no_algorithm_message(steps: int, rounds: int, chunks: int, why: str = "") -> str:
    tail = f" ({why})" if why else ""
    return f"no algorithm with {steps} steps, {rounds} rounds, {chunks} chunks{tail}"


MAX_STEPS = 1024
"""The most steps an SMT instance may ask for: its variables grow with steps x chunks x ranks, and
the solvers decide instances of tens of steps (``--steps 10**9`` built variables until killed)."""


def check_instance(steps: int | None, rounds: int | None, chunks: int | None) -> None:
    """Bad instance parameters raise SynthError (exit code 2) with what to change."""
    if steps is not None and not 1 <= steps <= MAX_STEPS:
        raise SynthError(f"--steps must be in 1..{MAX_STEPS} (MAX_STEPS), got {steps}")
    if chunks is not None and chunks < 1:
        raise SynthError(f"--chunks must be at least 1, got {chunks}")
    if rounds is not None and rounds < 1:
        raise SynthError(f"--rounds must be at least 1, got {rounds}")
    if rounds is not None and steps is not None and rounds < steps:
        raise SynthError(f"--rounds ({rounds}) must be at least --steps ({steps}): every step "
                         "takes at least one round")


def resolve_engine(engine: str | None) -> str:
    if engine in (None, "", "auto"):
        return "cpsat"
    if engine not in ENGINES:
        raise SynthError(f"unknown engine '{engine}' for the smt encoding (known: auto, "
                         f"{', '.join(ENGINES)})")
    return engine


# ============================================================================ one network+demand
@dataclass
class _Part:
    """A non-combining demand on a network: the builder, symmetry and engine cache."""

    net: Network
    demand: Demand
    builder: ModelBuilder
    free: list[Symmetry]
    lex: list[Symmetry]
    engines: dict = field(default_factory=dict)


class _Family:
    """Everything that does not depend on the chunk count: network, candidates, bounds."""

    def __init__(self, topology: Topology, net: Network, make: Callable[[int], Demand]) -> None:
        self.topology = topology
        self.net = net
        self.make = make  # chunks per rank -> Demand
        self._candidates: list[tuple[int, ...]] | None = None
        self._parts: dict[int, _Part] = {}
        self._rpc: Fraction | None = None
        self.sccl_rpc: Fraction | None = None
        self.flow_rpc: Fraction | None = None
        self._steps: tuple[int | None] | None = None

    def candidates(self) -> list[tuple[int, ...]]:
        if self._candidates is None:
            from ...cuts import symmetry_generators

            cands = [tuple(p) for p in symmetry_generators(self.topology)]
            if self.net.n <= VF2_MAX_RANKS:
                cands.extend(_vf2_automorphisms(self.net))
            self._candidates = cands
        return self._candidates

    def part(self, chunks: int) -> _Part:
        found = self._parts.get(chunks)
        if found is None:
            demand = self.make(chunks)
            syms = symmetries(self.net, demand, self.candidates())
            free = free_group(syms, demand) if syms else []
            lex = group_elements(syms, LEX_GROUP_BOUND)
            found = _Part(self.net, demand, ModelBuilder(self.net, demand), free, lex)
            self._parts[chunks] = found
        return found

    def steps_lower_bound(self) -> int | None:
        if self._steps is None:
            self._steps = (self.part(1).builder.steps_lower_bound(),)
        return self._steps[0]

    def rpc_lower_bound(self, strong: bool = False) -> Fraction:
        """SCCL's LP bound; with ``strong`` (or when the flow LP is small), also the flow LP, the
        larger of the two."""
        if self._rpc is None:
            self._rpc = rounds_per_chunk_bound(self.net, self.make(1))
            self.sccl_rpc = self._rpc
        if not strong and self.flow_rpc is None:
            d = self.make(1)
            strong = sum(len(d.need(c)) for c in range(d.num_chunks)) * len(self.net.edges) \
                <= FLOW_LP_CHEAP_VARS
        if strong and self.flow_rpc is None:
            flow = flow_rounds_bound(self.net, self.make(1))
            self.flow_rpc = flow if flow is not None else Fraction(0)
            self._rpc = max(self._rpc, self.flow_rpc)
        return self._rpc


def _vf2_automorphisms(net: Network) -> list[tuple[int, ...]]:
    """Up to VF2_MAX_FOUND rank automorphisms of the send graph (edges labelled by capacity)."""
    import networkx as nx
    from networkx.algorithms.isomorphism import DiGraphMatcher

    g = nx.DiGraph()
    g.add_nodes_from(range(net.n))
    for e, (a, b) in enumerate(net.edges):
        g.add_edge(a, b, cap=tuple(net.caps[q] for q in net.edge_res[e]))
    if g.number_of_edges() == net.n * (net.n - 1):
        return []  # a complete graph (one switch): VF2 would list n! maps; the cyclic shift is enough
    out = []
    matcher = DiGraphMatcher(g, g, edge_match=lambda x, y: x["cap"] == y["cap"])
    for i, iso in enumerate(matcher.isomorphisms_iter()):
        if i >= VF2_MAX_FOUND:
            break
        out.append(tuple(iso[r] for r in range(net.n)))
    return out


class _Rows:
    """Rows of a sparse LP constraint matrix, added one at a time (COO triplets and right sides)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.rhs: list[float] = []

    def add(self, terms: Iterable[tuple[int, float]], rhs: float = 0.0) -> None:
        """One row: ``sum(value * x[column] for column, value in terms)`` against ``rhs``."""
        row = len(self.rhs)
        for col, val in terms:
            self.rows.append(row)
            self.cols.append(col)
            self.vals.append(val)
        self.rhs.append(rhs)

    def matrix(self, ncols: int) -> Any:
        from scipy.sparse import coo_array

        return coo_array((self.vals, (self.rows, self.cols)), shape=(len(self.rhs), ncols)).tocsr()


def _least_rho(net: Network, ub: _Rows, eq: _Rows, by_res: dict[int, list[int]], rho: int) -> Any:
    """Minimise ``rho`` (the last variable) over the rows given, with every resource's load at
    most its capacity times ``rho`` (``by_res``: the variables each resource carries) and every
    other variable in [0, 1]: the LP both rounds-per-chunk bounds solve (its scipy result)."""
    from scipy.optimize import linprog

    for q, vs in sorted(by_res.items()):
        ub.add([*((v, 1.0) for v in vs), (rho, -float(net.caps[q]))])
    cost = np.zeros(rho + 1)
    cost[rho] = 1.0
    return linprog(cost, A_ub=ub.matrix(rho + 1), b_ub=np.array(ub.rhs), A_eq=eq.matrix(rho + 1),
                   b_eq=np.array(eq.rhs), bounds=[(0.0, 1.0)] * rho + [(0.0, None)], method="highs")


def rounds_per_chunk_bound(net: Network, demand: Demand) -> Fraction:
    """SCCL's rounds-per-chunk lower bound: the LP relaxation with fractional multi-commodity flow.

    Variables f[c, e] in [0, 1] and rho; a rank that does not start with c sends at most what it
    receives on each out-edge; a rank that needs c receives 1 in total; every resource carries at
    most capacity * rho. The optimum rho bounds R / C for every instance from below.
    """
    n = net.n
    var: dict[tuple[int, int], int] = {}
    for c in range(demand.num_chunks):
        if not demand.need(c):
            continue
        for e, (_a, b) in enumerate(net.edges):
            if b in demand.pre[c]:
                continue
            var[(c, e)] = len(var)
    if not var:
        return Fraction(0)
    ub, eq = _Rows(), _Rows()
    for c in range(demand.num_chunks):
        if not demand.need(c):
            continue
        pre = demand.pre[c]
        for r in range(n):
            if r in pre:
                continue
            ins = [var[(c, e)] for e in net.in_edges[r] if (c, e) in var]
            for e in net.out_edges[r]:
                v = var.get((c, e))
                if v is not None:
                    ub.add([(v, 1.0), *((u, -1.0) for u in ins)])
    by_res: dict[int, list[int]] = {}
    for (_c, e), v in var.items():
        for q in net.edge_res[e]:
            by_res.setdefault(q, []).append(v)
    for c in range(demand.num_chunks):
        for r in sorted(demand.need(c)):
            ins = [var[(c, e)] for e in net.in_edges[r] if (c, e) in var]
            if not ins:
                raise NotApplicable(f"rank {r} can never receive chunk {c} on '{net.name}'")
            eq.add([(u, 1.0) for u in ins], 1.0)
    res = _least_rho(net, ub, eq, by_res, len(var))
    if res.status != 0:
        raise SynthError(f"the rounds lower bound LP failed on '{net.name}': {res.message}")
    return _as_fraction(float(res.fun))


FLOW_LP_MAX_VARS = 120_000
FLOW_LP_CHEAP_VARS = 20_000
"""Up to this size the flow LP is always used (it takes milliseconds)."""
"""The flow LP has a variable per (chunk, destination, edge); above this size it is skipped."""


def flow_rounds_bound(net: Network, demand: Demand) -> Fraction | None:
    """A rounds-per-chunk bound from a multicast *flow* LP (None when the LP would be too large).

    SCCL's LP lets a rank justify what it sends by what it receives, edge by edge, so flow can
    circulate in a cycle that never touches the chunk's source: on DGX-1 alltoall it gives 5/3 while
    the socket bisection alone forces 8/3. Here every destination d of chunk c gets a unit flow
    f[c, d, .] out of the chunk's holders (conservation at every other rank), and the copies a
    schedule sends cover every destination's flow: load[c, e] >= f[c, d, e]. Any schedule's
    arborescences give such flows, so the optimum rho bounds R / C from below.
    """
    size = sum(len(demand.need(c)) for c in range(demand.num_chunks)) * len(net.edges)
    if size > FLOW_LP_MAX_VARS:
        return None
    nvar = 0
    ub, eq = _Rows(), _Rows()
    by_res: dict[int, list[int]] = {}
    for c in range(demand.num_chunks):
        need = sorted(demand.need(c))
        if not need:
            continue
        pre = demand.pre[c]
        edges = [e for e, (_a, b) in enumerate(net.edges) if b not in pre]
        load = {}
        for e in edges:
            load[e] = nvar
            nvar += 1
            for q in net.edge_res[e]:
                by_res.setdefault(q, []).append(load[e])
        for d in need:
            flow = {}
            for e in edges:
                flow[e] = nvar
                nvar += 1
            supply = {}
            for v in sorted(pre):
                supply[v] = nvar
                nvar += 1
            for v in range(net.n):
                eq.add([*((flow[e], 1.0) for e in net.in_edges[v] if e in flow),
                        *((flow[e], -1.0) for e in net.out_edges[v] if e in flow),
                        *([(supply[v], 1.0)] if v in supply else [])], 1.0 if v == d else 0.0)
            # one destination: the load is the flow; more: it covers every destination's flow
            covered = eq if len(need) == 1 else ub
            for e in edges:
                covered.add([(flow[e], 1.0), (load[e], -1.0)])
    if nvar == 0:
        return Fraction(0)
    res = _least_rho(net, ub, eq, by_res, nvar)
    if res.status != 0:
        return None
    return _as_fraction(float(res.fun))


def _as_fraction(value: float) -> Fraction:
    """An LP optimum as a small fraction, or rounded down (a bound must stay valid)."""
    frac = Fraction(value).limit_denominator(10_000)
    if abs(float(frac) - value) > 1e-7:
        frac = Fraction(math.floor(value * 1e6), 10**6)
    return frac


def rounds_lower_bound(rpc: Fraction, chunks: int) -> int:
    return max(1, math.ceil(rpc * chunks))


# ================================================================================ the problem
class SmtProblem:
    """A collective on a topology, ready to decide instances ``(S, R, C)``."""

    def __init__(self, topology: Topology, collective: Collective, *, engine: str | None = None,
                 workers: int = 2, deterministic: bool = True) -> None:
        if collective.num_ranks != topology.num_ranks:
            raise SynthError(f"the collective has {collective.num_ranks} ranks but topology "
                             f"'{topology.name}' has {topology.num_ranks}")
        self.topology = topology
        self.template = collective
        self.engine = resolve_engine(engine)
        self.workers = workers
        self.deterministic = deterministic
        self.custom = collective.custom is not None
        kind = collective.kind
        if collective.combining:
            if not self.custom and kind == "allreduce":
                self.mode = "allreduce"
            elif all(len(p) == 1 for p in collective.post if p):
                self.mode = "dual"
            else:
                raise NotApplicable(
                    f"the smt encoding cannot express the combining collective '{collective.name}': "
                    "it handles combining collectives whose chunks each end on one rank (reduce, "
                    "reducescatter: solved as their non-combining dual) and allreduce "
                    "(reducescatter + allgather); use --encoding baseline")
        else:
            self.mode = "direct"
        n = topology.num_ranks
        self._cache: dict[tuple[int, int, int], InstanceResult] = {}
        if self.mode == "direct":
            self.family = _Family(topology, network(topology), lambda C: demand_of(self.collective(C)))
        elif self.mode == "dual":
            self.family = _Family(topology, network(topology, reverse=True),
                                  lambda C: _dual_demand(self.collective(C)))
        else:
            rs = make_collective("reducescatter", n, 1, None, collective.inplace)
            ag = make_collective("allgather", n, 1, None, collective.inplace)
            self.rs = SmtProblem(topology, rs, engine=self.engine, workers=workers,
                                 deterministic=deterministic)
            self.ag = SmtProblem(topology, ag, engine=self.engine, workers=workers,
                                 deterministic=deterministic)

    # ------------------------------------------------------------------ collectives
    def collective(self, chunks: int) -> Collective:
        t = self.template
        if self.custom:
            if chunks != 1:
                raise SynthError(f"the custom collective '{t.kind}' fixes its own chunks; the smt "
                                 "encoding cannot split them (use --chunks 1)")
            return t
        return make_collective(t.kind, t.num_ranks, chunks, t.root, t.inplace)

    def release(self, chunks: int) -> None:
        """Drop the solver models kept for ``chunks`` (a walk that moved on frees their memory)."""
        if self.mode == "allreduce":
            self.rs.release(chunks)
            self.ag.release(chunks)
        elif chunks in self.family._parts:
            self.family._parts[chunks].engines.clear()

    # ------------------------------------------------------------------ bounds
    def steps_lower_bound(self) -> int:
        if self.mode == "allreduce":
            return self.rs.steps_lower_bound() + self.ag.steps_lower_bound()
        lb = self.family.steps_lower_bound()
        if lb is None:
            raise NotApplicable(f"{self.template.name} cannot be implemented on "
                                f"'{self.topology.name}': some rank can never receive a chunk it needs")
        return lb

    def rpc_lower_bound(self, strong: bool = False) -> Fraction:
        """Rounds per chunk any algorithm needs (R / C >= this): SCCL's LP, and with ``strong`` also
        the flow LP (the larger of the two; bounds computed earlier are always used)."""
        if self.mode == "allreduce":
            return self.rs.rpc_lower_bound(strong) + self.ag.rpc_lower_bound(strong)
        return self.family.rpc_lower_bound(strong)

    def sccl_rpc_lower_bound(self) -> Fraction:
        """SCCL's own LP bound (where its walk starts and what it aims for)."""
        if self.mode == "allreduce":
            return self.rs.sccl_rpc_lower_bound() + self.ag.sccl_rpc_lower_bound()
        self.family.rpc_lower_bound()
        assert self.family.sccl_rpc is not None
        return self.family.sccl_rpc

    def rounds_lower_bound(self, chunks: int) -> int:
        return rounds_lower_bound(self.rpc_lower_bound(), chunks)

    # ------------------------------------------------------------------ inference
    def known(self, steps: int, rounds: int, chunks: int) -> str | None:
        """What earlier verdicts prove about (S, R, C) without solving.

        SAT(S', R') with S' <= S, R' <= R, S <= R implies SAT(S, R) (add rounds; split a step of
        several rounds into two), and UNSAT(S', R') with S' >= S, R' >= R implies UNSAT(S, R).
        """
        for (s2, r2, c2), res in self._cache.items():
            if c2 != chunks:
                continue
            if res.status == SAT and s2 <= steps and r2 <= rounds and steps <= rounds:
                return SAT
            if res.status == UNSAT and s2 >= steps and r2 >= rounds:
                return UNSAT
        return None

    # ------------------------------------------------------------------ solving
    def solve(self, steps: int, rounds: int, chunks: int, *, time_limit_s: float | None = None,
              budget: WorkBudget | None = None) -> InstanceResult:
        """Decide one instance; SAT results carry a schedule (not yet verified by the caller).

        ``budget`` (a :class:`~synth.encodings.work.WorkBudget`, shared by a search) or
        ``time_limit_s`` (a budget of that many deterministic seconds for this instance alone)
        bounds the solver's work; the answer does not depend on the machine's speed unless the
        budget's wall-clock safety net stops it (then ``budget.safety_notes`` says so).
        """
        if budget is None:
            budget = WorkBudget(time_limit_s)
        check_instance(steps, rounds, chunks)
        key = (steps, rounds, chunks)
        cached = self._cache.get(key)
        if cached is not None and cached.status != UNKNOWN:
            return cached
        from ... import progress

        progress.detail(f"smt instance S{steps} R{rounds} C{chunks}")
        start = time.perf_counter()
        if self.mode == "allreduce":
            result = self._solve_allreduce(steps, rounds, chunks, budget)
        else:
            result = self._solve_part(steps, rounds, chunks, budget)
        result = InstanceResult(steps, rounds, chunks, result.status,
                                time.perf_counter() - start, result.how, result.engine,
                                result.schedule, result.reason)
        self._cache[key] = result
        return result

    def _bound_verdict(self, steps: int, rounds: int, chunks: int) -> str | None:
        lb = self.steps_lower_bound()
        if steps < lb:
            return f"every algorithm needs at least {lb} steps (hop distance)"
        rlb = self.rounds_lower_bound(chunks)
        if rounds < rlb:
            return (f"every algorithm needs at least {self.rpc_lower_bound()} rounds per chunk, "
                    f"so {rlb} rounds for {chunks} chunks")
        return None

    def _solve_part(self, steps: int, rounds: int, chunks: int, budget: WorkBudget
                    ) -> InstanceResult:
        why = self._bound_verdict(steps, rounds, chunks)
        if why:
            return InstanceResult(steps, rounds, chunks, UNSAT, 0.0, "bound", self.engine,
                                  reason=why)
        part = self.family.part(chunks)
        # phase 1: the symmetric model (small; a schedule found there is a schedule)
        # phase 2: the full model, one deterministic worker, no symmetry breaking: quick SATs
        # phase 3: the full model with symmetry breaking, all workers, until the budget is spent
        phases = []
        if len(part.free) > 1:
            phases.append(("symmetric", SYMMETRIC_BUDGET))
        if self.engine == "cpsat":
            phases.append(("plain", PLAIN_BUDGET))
        phases.append(("full", None))
        for name, cap in phases:
            if budget.exhausted():
                break
            left = budget.left()
            work = left if cap is None else (cap if left is None else min(cap, left))
            status, sol, model = self._run(part, steps, rounds, name, work, budget)
            if status == SAT:
                return InstanceResult(steps, rounds, chunks, SAT, 0.0, name, self.engine,
                                      self._decode(part, model, sol, chunks))
            if status == UNSAT and name != "symmetric":
                return InstanceResult(steps, rounds, chunks, UNSAT, 0.0, name, self.engine)
        return InstanceResult(steps, rounds, chunks, UNKNOWN, 0.0, "limit", self.engine)

    def _run(self, part: _Part, steps: int, rounds: int, kind: str, work: float | None,
             budget: WorkBudget) -> tuple[str, tuple | None, Model]:
        key = (steps, kind)
        entry = part.engines.get(key)
        if entry is None or entry[1] < rounds:
            if kind == "symmetric":
                model = part.builder.build(steps, restrict=part.free)
            elif kind == "plain":
                model = part.builder.build(steps, order_classes=False)
            else:
                model = part.builder.build(steps, symmetry_break=part.lex)
            cap = max(rounds, 2 * steps + 2)
            if self.engine == "z3":
                from .backend_z3 import Z3Engine

                eng = Z3Engine(model, cap)
            else:
                from .backend_cpsat import CpSatEngine

                eng = CpSatEngine(model, cap, workers=self.workers if kind == "full" else 1)
            entry = (eng, cap)
            part.engines[key] = entry
        eng = entry[0]
        with progress.span("solve"):
            status, sol, used, by_wall = eng.solve(rounds, work, wall_s=budget.wall_left(),
                                                   deterministic=self.deterministic)
        budget.charge(used)
        if by_wall:
            budget.note_safety_stop(f"smt ({self.engine}) instance S{steps} R{rounds} ({kind} model)")
        return status, sol, eng.model

    # ------------------------------------------------------------------ decoding
    def _decode(self, part: _Part, model: Model, sol: tuple[list[int], set[int]], chunks: int
                ) -> Schedule:
        rounds, true = sol
        net = part.net
        S = model.steps
        per_step: list[list[tuple[int, int, int]]] = [[] for _ in range(S)]
        by_rep: dict[int, list[tuple[int, int]]] = {}
        for (c, e, s), v in model.sends.items():
            if v in true:
                by_rep.setdefault(c, []).append((e, s))
        for c in range(part.demand.num_chunks):
            rep, h = model.images[c]
            for e, s in by_rep.get(rep, ()):
                e2 = e if h is None else h.edges[e]
                a, b = net.edges[e2]
                per_step[s - 1].append((c, a, b))
        # drop useless copies (a relay the chunk reached but never needed); keeps files minimal
        per_step = _prune(per_step, part.demand)
        coll = self.collective(chunks)
        if self.mode == "dual":
            steps = tuple(Step(tuple(Transfer(b, a, c, "reduce") for c, a, b in per_step[s]),
                               rounds[s]) for s in reversed(range(S)))
        else:
            steps = tuple(Step(tuple(Transfer(a, b, c, "copy") for c, a, b in per_step[s]),
                               rounds[s]) for s in range(S))
        total = sum(rounds)
        return Schedule(collective=coll, topology=self.topology.name,
                        topology_hash=self.topology.content_hash, steps=steps,
                        algorithm=f"smt_s{S}_r{total}_c{chunks}", encoding="smt",
                        meta={"steps": S, "rounds": total, "chunks": chunks,
                              "construction": {"direct": "direct", "dual": "inverted dual",
                                               "allreduce": "reducescatter+allgather"}[self.mode]})

    # ------------------------------------------------------------------ allreduce
    def _solve_allreduce(self, steps: int, rounds: int, chunks: int, budget: WorkBudget
                         ) -> InstanceResult:
        why = self._bound_verdict(steps, rounds, chunks)
        if why:
            return InstanceResult(steps, rounds, chunks, UNSAT, 0.0, "bound", self.engine,
                                  reason=why + " (reducescatter + allgather)")
        rs_lb, ag_lb = self.rs.steps_lower_bound(), self.ag.steps_lower_bound()
        rs_r, ag_r = self.rs.rounds_lower_bound(chunks), self.ag.rounds_lower_bound(chunks)
        splits = []
        for s1 in range(rs_lb, steps - ag_lb + 1):
            s2 = steps - s1
            for r1 in range(max(s1, rs_r), rounds - max(s2, ag_r) + 1):
                splits.append((abs(s1 - s2) + abs(r1 - (rounds - r1)), s1, r1))
        unknown = False
        for _, s1, r1 in sorted(splits):
            s2, r2 = steps - s1, rounds - r1
            a = self.rs.solve(s1, r1, chunks, budget=budget)
            if a.status == UNKNOWN:
                unknown = True
                continue
            if a.status != SAT:
                continue
            b = self.ag.solve(s2, r2, chunks, budget=budget)
            if b.status == UNKNOWN:
                unknown = True
                continue
            if b.status == SAT:
                assert a.schedule is not None and b.schedule is not None
                coll = self.collective(chunks)
                sched = Schedule(collective=coll, topology=self.topology.name,
                                 topology_hash=self.topology.content_hash,
                                 steps=a.schedule.steps + b.schedule.steps,
                                 algorithm=f"smt_s{steps}_r{rounds}_c{chunks}", encoding="smt",
                                 meta={"steps": steps, "rounds": rounds, "chunks": chunks,
                                       "construction": "reducescatter+allgather",
                                       "split": {"reducescatter": [s1, r1], "allgather": [s2, r2]}})
                return InstanceResult(steps, rounds, chunks, SAT, 0.0, f"{a.how}+{b.how}",
                                      self.engine, sched)
        if unknown:
            return InstanceResult(steps, rounds, chunks, UNKNOWN, 0.0, "limit", self.engine)
        return InstanceResult(steps, rounds, chunks, UNSAT, 0.0, "full", self.engine,
                              reason="no split into reducescatter + allgather instances is SAT")


def _dual_demand(collective: Collective) -> Demand:
    """The non-combining dual: the chunk starts where it must end and ends where it started."""
    pre = tuple(frozenset(p) for p in collective.post)
    post = tuple(frozenset(p) for p in collective.pre)
    contributors = frozenset(r for p in collective.pre for r in p)
    no_relay = frozenset(range(collective.num_ranks)) - contributors
    return Demand(collective.num_ranks, pre, post, no_relay)


def _prune(per_step: list[list[tuple[int, int, int]]], demand: Demand
           ) -> list[list[tuple[int, int, int]]]:
    """Drop transfers to ranks that neither need the chunk nor forward it (repeat until stable)."""
    steps = [list(s) for s in per_step]
    while True:
        sent_from = {(c, a) for step in steps for c, a, _b in step}
        removed = False
        for step in steps:
            keep = []
            for c, a, b in step:
                if b not in demand.post[c] and (c, b) not in sent_from:
                    removed = True
                    continue
                keep.append((c, a, b))
            step[:] = keep
        if not removed:
            return steps


def unsat_reason(result: InstanceResult) -> str:
    return no_algorithm_message(result.steps, result.rounds, result.chunks, result.reason)


def sorted_frontier(points: Sequence[InstanceResult]) -> list[InstanceResult]:
    """SCCL's pruning: keep a point unless another has no more steps and no more rounds per chunk
    (and is better in one of them)."""
    keep = []
    for p in points:
        dominated = False
        for q in points:
            worse = p.steps > q.steps or p.rpc > q.rpc
            not_better = p.steps >= q.steps and p.rpc >= q.rpc
            if worse and not_better:
                dominated = True
                break
        if not dominated:
            keep.append(p)
    return sorted(keep, key=lambda p: (p.steps, p.rpc, p.chunks))
