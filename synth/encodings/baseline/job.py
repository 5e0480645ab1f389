"""The build context shared by the baseline algorithms: a :class:`Job` holds the topology, the
collective and the :class:`~synth.encodings.baseline.graph.Plan` being filled, with the tree and
phase primitives every algorithm is written in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...collectives import Collective
from ...errors import NotApplicable
from ...topology import Topology
from .graph import Plan, RankGraph, Tree


class Job:
    """One (topology, collective, algorithm) build: shared helpers and the plan being filled."""

    def __init__(self, topology: Topology, collective: Collective, graph: RankGraph,
                 algorithm: str) -> None:
        self.topology = topology
        self.coll = collective
        self.g = graph
        self.name = algorithm
        self.n = collective.num_ranks
        self.k = collective.chunks_per_rank
        self.kind = collective.kind
        self.root = collective.root if collective.root is not None else 0
        self.plan = Plan()
        self.meta: dict[str, Any] = {}
        self._holding: list[set[int]] | None = None

    def fail(self, reason: str) -> NotApplicable:
        return NotApplicable(f"{self.name} {reason}")

    def own(self, r: int) -> list[int]:
        """Chunks indexed by rank r: its allgather input, its reducescatter output, ..."""
        return list(range(r * self.k, (r + 1) * self.k))

    def a2a(self, s: int, d: int) -> list[int]:
        """The alltoall chunks rank s sends to rank d."""
        base = (s * self.n + d) * self.k
        return list(range(base, base + self.k))

    def data(self) -> list[int]:
        return list(range(self.coll.num_chunks))

    def need_link(self, a: int, b: int, what: str) -> None:
        if not self.g.adjacent(a, b):
            raise self.fail(f"{what} from rank {a} to rank {b}, which are not directly connected in "
                            f"'{self.topology.name}' (reductions cannot be relayed)")

    # ------------------------------------------------------------------ tree primitives
    def bcast_tree(self, tree: Tree, chunks: Sequence[int], start: int = 0, *,
                   pipeline: bool = True, relay: bool = True) -> int:
        """Copy ``chunks`` down an out-tree. Pipelined: chunk j leaves the root at ``start + j``;
        otherwise all chunks move together, level by level. A tree edge that is not a link is
        relayed along a shortest path (non-combining collectives only). Returns the end step."""
        if not chunks:
            return start
        ready = {r: 0 for r in tree.roots}
        last = 0
        for v in tree.order:
            for c in tree.children.get(v, ()):
                if self.g.adjacent(v, c):
                    path = [v, c]
                elif relay and not self.coll.combining:
                    path = self.g.path(v, c)
                else:
                    raise self.fail(f"sends from rank {v} to rank {c}, which are not directly "
                                    f"connected in '{self.topology.name}'")
                for j, ch in enumerate(chunks):
                    self.plan.route(path, (ch,), start + ready[v] + (j if pipeline else 0))
                ready[c] = ready[v] + len(path) - 1
                last = max(last, ready[c])
        return start + last + (len(chunks) - 1 if pipeline else 0)

    def reduce_tree(self, tree: Tree, chunks: Sequence[int], start: int = 0, *,
                    pipeline: bool = True) -> int:
        """Reduce ``chunks`` up an in-tree (edges ``v -> parent[v]`` must be links): a rank sends
        its partial sum once all its children's have arrived. Returns the end step."""
        if not chunks:
            return start
        height = tree.height
        for v in tree.order:
            p = tree.parent.get(v)
            if p is None:
                continue
            self.need_link(v, p, "reduces")
            if pipeline:
                for j, ch in enumerate(chunks):
                    self.plan.add(start + height[v] + j, v, p, ch, "reduce")
            else:
                self.plan.send(start + height[v], v, p, chunks, "reduce")
        top = max(height[r] for r in tree.roots)
        return start + top + (len(chunks) - 1 if pipeline else 0)

    def phase(self, start: int, sends: Sequence[tuple[int, int, Sequence[int]]], op: str = "copy"
              ) -> int:
        """One logical step of (src, dst, chunks) messages. Copies between ranks that are not
        adjacent are relayed (the phase then takes as many steps as its longest path); reductions
        need links. Returns the end step.

        In a non-combining collective a relay hop is skipped when its receiver already holds the
        chunks (from before the phase, or from a shorter path of this phase that delivers the same
        chunks no later); it forwards them all the same. This keeps relayed recursive doubling on a
        long ring linear in its output instead of cubic.
        """
        end = start
        held = self._held() if op == "copy" else None
        routes = []
        for src, dst, chunks in sends:
            if op == "reduce":
                self.need_link(src, dst, "reduces")
                path = [src, dst]
            else:
                path = self.g.path(src, dst)
            if chunks:
                routes.append((path, chunks))
                end = max(end, start + len(path) - 1)
        if op != "copy":
            for path, chunks in routes:
                self.plan.send(start, path[0], path[1], chunks, op)
        elif held is None:
            for path, chunks in routes:
                self.plan.route(path, chunks, start)
        else:
            first: dict[tuple[int, tuple[int, ...]], int] = {}  # earliest delivery of a message
            for path, chunks in routes:
                key = tuple(chunks)
                for h in range(1, len(path)):
                    if first.get((path[h], key), h) >= h:
                        first[(path[h], key)] = h
            for path, chunks in routes:
                key, want = tuple(chunks), set(chunks)
                for h in range(1, len(path)):
                    if first.get((path[h], key)) == h:
                        del first[(path[h], key)]  # one delivery only
                        self.plan.send(start + h - 1, path[h - 1], path[h],
                                       sorted(want - held[path[h]]))
            for path, chunks in routes:
                for r in path[1:]:
                    held[r].update(chunks)
        return end

    def _held(self) -> list[set[int]] | None:
        """Chunks each rank holds so far, tracked across phases (non-combining collectives only)."""
        if self.coll.combining:
            return None
        if self._holding is None:
            self._holding = [set() for _ in range(self.n)]
            for c, holders in enumerate(self.coll.pre):
                for r in holders:
                    self._holding[r].add(c)
        return self._holding
