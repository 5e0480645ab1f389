"""The ``rail_blocks`` baseline: each node's block dealt over its rails, fanned out inside the nodes.

On a multi-node machine whose nodes are m ranks behind one switch, each rank with a NIC of its own
(a rail), allgather is bound by the NICs: every node takes in (N-1)/N of the output through its m
NICs, (N-1)·k chunks a NIC. NCCL's ring meets that bound but pays N·m hops of latency; ``direct``
and ``hierarchical`` meet it with every rank talking to N-1 fabric peers, a threadblock each, which
is more than a GPU lends a collective at 64 nodes. This algorithm meets it with about N/m + m peers:

1. step 0: every rank copies its own chunks to the m-1 others of its node (one switch hop), so each
   rank holds its node's block, the node's m·k chunks, contiguous in the output;
2. the (N-1)·m·k chunk copies a node owes the others (its block to each of them) are dealt to its m
   rails in contiguous runs: rail x of node n sends a run of node n's block to rank x of each of
   about (N-1)/m + 1 nodes. Every NIC sends and receives exactly (N-1)·k chunks;
3. a rank copies every chunk its NIC received to the m-1 others of its node one step later.

Steps 2 and 3 overlap in batches: a rail's runs go out ``b_0, b_1, ...`` chunks a step, every
batch shared among the rail's peers in proportion (:meth:`_Rails.rail_runs`), while the switch fans
out the previous batch. The batch sizes are planned for ``DEFAULT_SIZE`` (1 GiB) with
the topology's own α and β (:func:`plan_batches`): steady batches, then a geometric ramp down whose
ratio keeps the fan-out of one batch no longer than the NIC's next, so the last fan-out is small.

reducescatter is the allgather mirrored in time (every copy reversed into a reduce, so each chunk is
summed up the allgather's tree into its owner); allreduce is that reducescatter, then the allgather.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...schedule import Transfer
from ...steps import step_loads
from ...topology import MB
from ..options import DEFAULT_SIZE
from .graph import Plan
from .hier import _Hier
from .job import Job

RATIOS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Ramp-down ratios :func:`plan_batches` tries besides the topology's own fan-out/NIC ratio."""


@dataclass(frozen=True)
class StepPrices:
    """What one chunk costs at the planned size, in µs: over a rail, and fanned out to the m-1
    others of a node; with each resource's α."""

    rail_us: float
    rail_alpha_us: float
    fan_us: float
    fan_alpha_us: float


def _price(job: Job, transfers: list[Transfer], chunk_mb: float) -> tuple[float, float]:
    loads = step_loads(transfers, job.topology)
    if not loads:  # one rank a node: nothing to fan out
        return 0.0, 0.0
    coef = max(n * beta / lanes for n, _, beta, lanes in loads.values())
    return coef * chunk_mb, max(alpha for _, alpha, _, _ in loads.values())


def step_prices(job: Job, nodes: list[list[int]], size: int = DEFAULT_SIZE) -> StepPrices:
    """:class:`StepPrices` from the topology's own links (rank 0 of node 0 as the probe)."""
    chunk_mb = size / job.coll.buffer_chunks / MB
    a = nodes[0][0]
    rail_us, rail_alpha = _price(job, [Transfer(a, nodes[1][0], 0)], chunk_mb)
    fan_us, fan_alpha = _price(job, [Transfer(a, b, 0) for b in nodes[0][1:]], chunk_mb)
    return StepPrices(rail_us, rail_alpha, fan_us, fan_alpha)


def batches_time_us(batches: list[int], first_fan: int, prices: StepPrices) -> float:
    """The lock-step time of these rail batches: step t sends ``batches[t]`` chunks a rail while
    the switch fans out batch t-1 (``first_fan`` chunks at step 0, the ranks' own); one last
    fan-out step follows."""
    p = prices
    total, fan = 0.0, first_fan
    for b in batches:
        rail = p.rail_alpha_us + b * p.rail_us if b else 0.0
        total += max(rail, p.fan_alpha_us + fan * p.fan_us)
        fan = b
    return total + p.fan_alpha_us + fan * p.fan_us


def _ramp(total: int, steady: int, ratio: float) -> list[int]:
    """``total`` chunks as batches of ``steady`` then shrinking by ``ratio`` down to 1 (ratio 1:
    no ramp)."""
    ramp: list[int] = []
    b = steady
    while ratio < 1 and b > 1:
        b = max(1, math.floor(b * ratio))
        ramp.append(b)
    while sum(ramp) > total:
        ramp.pop(0)
    rest = total - sum(ramp)
    head = [steady] * (rest // steady)
    if rest % steady:
        head.insert(0, rest % steady)
    return head + ramp


def plan_batches(total: int, first: int, first_fan: int, prices: StepPrices) -> list[int]:
    """Batch sizes for ``total`` chunks a rail: the first at most ``first``, the chunks a rank
    holds at step 0 while the switch fans out ``first_fan`` (0 when it holds none of them), then
    the fastest of the steady-then-ramp plans under :func:`batches_time_us`."""
    ratio = prices.fan_us / prices.rail_us if prices.rail_us > 0 else 1.0
    ratios = sorted({*RATIOS, min(1.0, round(ratio, 6))})
    best: tuple[float, int, int, list[int]] | None = None
    for steady in range(1, total + 1):
        b0 = min(first, steady, total)
        for r in ratios:
            # a rank that holds none of its rail's chunks at step 0 sends nothing then (batch 0)
            batches = [b0] + (_ramp(total - b0, steady, r) if total > b0 else [])
            t = batches_time_us(batches, first_fan, prices)
            key = (t, len(batches), steady, batches)
            if best is None or key[:3] < best[:3]:
                best = key
    assert best is not None
    return best[3]


class _Rails:
    """The allgather plan of ``rail_blocks`` over ``_Hier``'s validated nodes."""

    def __init__(self, job: Job) -> None:
        h = _Hier(job)
        self.job, self.nodes, self.N, self.m = job, h.nodes, h.N, h.m
        g = job.g
        for nd in self.nodes:
            for a in nd:
                for b in nd:
                    if a != b and not g.adjacent(a, b):
                        raise job.fail(f"needs every node's ranks directly connected (a switch or a "
                                       f"full mesh); ranks {a} and {b} are not in "
                                       f"'{job.topology.name}'")
        for x in range(self.m):
            for i in range(1, self.N):
                a, b = self.nodes[0][x], self.nodes[i][x]
                if not (g.adjacent(a, b) and g.adjacent(b, a)):
                    raise job.fail(f"needs a direct fabric path between the ranks of one local "
                                   f"index (a rail); ranks {a} and {b} have none in "
                                   f"'{job.topology.name}'")
        self.blocks = [[c for r in nd for c in job.own(r)] for nd in self.nodes]
        self.shares = self.rail_shares()

    def rail_shares(self) -> list[list[tuple[int, int]]]:
        """Each rail's cells, (node offset i, local rank y): the k chunks of local rank y that a
        node sends to the node i ahead. The (N-1)·m cells in row order are dealt to the rails in
        contiguous ranges of N-1; a rail whose range holds none of its own cells (fewer nodes
        than ranks a node: dgx_a100 x 4's rail 1 serves local ranks 3-5 of one node) swaps its
        range's first cell for its own in the same row, so it too has chunks to send at step 0,
        while the NIC would otherwise idle through the node's fan-out (dgx_a100 x 4 at 1 GiB:
        81.3% of the bound without the swap), and both rails keep their peers."""
        N, m = self.N, self.m
        cells = [(q // m + 1, q % m) for q in range((N - 1) * m)]
        shares = [cells[x * (N - 1):(x + 1) * (N - 1)] for x in range(m)]
        owner = {c: x for x, cs in enumerate(shares) for c in cs}
        for x in range(m):
            if any(y == x for _, y in shares[x]):
                continue
            give, take = shares[x][0], (shares[x][0][0], x)
            other = owner[take]
            shares[other][shares[other].index(take)] = give
            shares[x][0] = take
            owner[give], owner[take] = other, x
        return shares

    def rail_runs(self, x: int) -> list[tuple[int, int]]:
        """Rail x's share of a node's outgoing copies (:meth:`rail_shares`), as (node offset i,
        unit u) in sending order: its own chunks first (it holds them at step 0), then the rest with
        its peers' runs interleaved in proportion, so every batch feeds all of them.

        Why interleaved: the runtime runs each peer's sends on blocks of their own, all at once,
        sharing the NIC, so a peer served last in the step order is in fact served at a share of
        the NIC from the start and finishes late, and its receivers' fan-out, in step order,
        waits on it. The timed program model at 1 GiB: dgx_h100 x 64 x1, 5,299 µs in range order
        against 3,678 µs interleaved; dgx_h100 x 8 x2 at 8 chunks a rank, 3,854 against 3,211 µs
        (the lock-step time is the same: a batch's NIC load does not depend on which peers it
        feeds)."""
        k = self.job.k
        units = [(i, y * k + j) for i, y in self.shares[x] for j in range(k)]
        own = [iu for iu in units if iu[1] // k == x]
        by_peer: dict[int, list[tuple[int, int]]] = {}
        for iu in units:
            if iu[1] // k != x:
                by_peer.setdefault(iu[0], []).append(iu)
        keyed = sorted(((j + 0.5) / len(run), i, iu) for i, run in by_peer.items()
                       for j, iu in enumerate(run))
        return own + [iu for _, _, iu in keyed]

    def allgather(self, plan: Plan, start: int) -> int:
        """Fill ``plan`` from step ``start``; returns the end step."""
        job, nodes, N, m, k = self.job, self.nodes, self.N, self.m, self.job.k
        runs = [self.rail_runs(x) for x in range(m)]
        first = min(sum(1 for _, u in r if u // k == x) for x, r in enumerate(runs))
        batches = plan_batches((N - 1) * k, first, k, step_prices(job, nodes))
        job.meta["rail_batches"] = batches
        for nd in nodes:                          # 1: own chunks to the node
            for a in nd:
                for b in nd:
                    if a != b:
                        plan.send(start, a, b, job.own(a))
        for x, order in enumerate(runs):          # 2 and 3: rail runs, then the fan-out
            pos = 0
            for t, b in enumerate(batches):
                for i, u in order[pos:pos + b]:
                    for n in range(N):
                        src, dst = nodes[n][x], nodes[(n + i) % N][x]
                        chunk = self.blocks[n][u]
                        plan.add(start + t, src, dst, chunk)
                        for y in nodes[(n + i) % N]:
                            if y != dst:
                                plan.add(start + t + 1, dst, y, chunk)
                pos += b
        return start + len(batches) + 1


def _mirror(plan: Plan, into: Plan, start: int, end: int) -> int:
    """``plan``'s copies (steps < ``end``) reversed in time and direction as reductions into
    ``into`` from step ``start``: a broadcast tree becomes a reduction tree into its root."""
    for s, transfers in plan.by_step.items():
        for t in transfers:
            into.add(start + end - 1 - s, t.dst, t.src, t.chunk, "reduce")
    return start + end


def rail_blocks(job: Job) -> None:
    rails = _Rails(job)
    if job.kind == "allgather":
        rails.allgather(job.plan, 0)
        return
    forward = Plan()
    end = rails.allgather(forward, 0)
    done = _mirror(forward, job.plan, 0, end)
    if job.kind == "allreduce":
        rails.allgather(job.plan, done)
