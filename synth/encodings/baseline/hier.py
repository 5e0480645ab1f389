"""The ``hierarchical`` baseline: intra-node phases and inter-node phases on multi-node topologies.

Ranks are grouped by node (``Topology.nodes``, all of one size m) and by local index l (the l-th
rank of every node: ``G_l``). Intra-node phases use a ring over the node when it has a Hamiltonian
cycle, else BFS trees inside the node; inter-node phases use a ring over ``G_l`` through the fabric.

* allgather: inter-node ring allgather in every ``G_l``, then intra-node allgather of the N·k chunks
  each rank now holds;
* reducescatter (mirrored): intra-node reduce-scatter, rank l of a node collecting the node's
  partial sums of the chunks owned by ``G_l``; then inter-node ring reduce-scatter in ``G_l``;
* allreduce: intra reduce-scatter, inter ring allreduce in every ``G_l``, intra allgather;
* alltoall: intra-node aggregation (s sends its data for d to the rank of its node with d's local
  index), then inter-node exchange inside ``G_l``;
* broadcast / reduce: a two-level tree, NCCL's binary tree over the nodes' leaders (the ranks with
  the root's local index) and a BFS tree inside every node, pipelined;
* gather / scatter: through the leaders of each node.
"""

from __future__ import annotations

from .graph import Tree, tree_from_parent
from .job import Job
from .nccl_trees import btree_parent
from .ring import ring_phases


class _Hier:
    def __init__(self, job: Job) -> None:
        topo = job.topology
        self.job, self.g = job, job.g
        nodes = [list(nd) for nd in topo.nodes]
        if len(nodes) < 2:
            raise job.fail(f"needs a multi-node topology; '{topo.name}' is a single node "
                           "(build one with --nodes N)")
        if len({len(nd) for nd in nodes}) != 1:
            raise job.fail(f"needs nodes of one size; '{topo.name}' has nodes of "
                           f"{sorted({len(nd) for nd in nodes})} ranks")
        if sorted(r for nd in nodes for r in nd) != list(range(job.n)):
            raise job.fail(f"needs every rank in exactly one node; '{topo.name}' does not say so")
        self.nodes = nodes
        self.N, self.m = len(nodes), len(nodes[0])
        self.local = {r: i for nd in nodes for i, r in enumerate(nd)}
        self.node_of = topo.node_of
        self.sets = [frozenset(nd) for nd in nodes]

    # -------------------------------------------------------------- groups
    def group(self, loc: int) -> list[int]:
        """``G_l``: the ranks with local index l, one per node, in node order."""
        return [nd[loc] for nd in self.nodes]

    def group_chunks(self, loc: int) -> list[int]:
        """The chunks owned by the ranks of ``G_l``."""
        return [c for r in self.group(loc) for c in self.job.own(r)]

    def inter_ring(self, loc: int) -> list[int]:
        cyc, why = self.g.cycle(self.group(loc))
        if cyc is None:
            raise self.job.fail(f"needs a ring through the ranks with local index {loc} "
                                f"({self.group(loc)}); {why} in '{self.job.topology.name}'")
        return cyc

    def node_tree(self, i: int, root: int, reverse: bool) -> Tree:
        tree = self.g.bfs((root,), reverse=reverse, allowed=self.sets[i])
        if not tree.spans(self.nodes[i]):
            lost = min(self.sets[i] - set(tree.depth))
            raise self.job.fail(f"needs every node connected inside itself; rank {lost} and rank "
                                f"{root} of node {i} are not in '{self.job.topology.name}'")
        return tree

    # -------------------------------------------------------------- intra-node phases
    def intra(self, i: int, chunks_of: dict[int, list[int]], start: int, reduce: bool) -> int:
        """Node ``i``'s allgather (``reduce``: reduce-scatter) of ``chunks_of``: a ring where the
        node has a cycle, else a tree from (to) each of its ranks."""
        members = self.nodes[i]
        cyc, _ = self.g.cycle(members)
        if cyc is not None:
            return ring_phases(self.job.plan, "reducescatter" if reduce else "allgather", cyc,
                               [chunks_of[r] for r in cyc], start)
        along = self.job.reduce_tree if reduce else self.job.bcast_tree
        return max(along(self.node_tree(i, r, reduce), chunks_of[r], start, pipeline=False)
                   for r in members)

    def inter(self, kind: str, start: int) -> int:
        """``kind`` on every inter-node ring (one per local index), each from ``start``."""
        job, end = self.job, start
        for loc in range(self.m):
            ring = self.inter_ring(loc)
            end = max(end, ring_phases(job.plan, kind, ring, [job.own(r) for r in ring], start))
        return end

    def by_local(self, i: int) -> dict[int, list[int]]:
        return {r: self.group_chunks(self.local[r]) for r in self.nodes[i]}

    # -------------------------------------------------------------- collectives
    def allgather(self, start: int = 0) -> int:
        end = self.inter("allgather", start)
        return max(self.intra(i, self.by_local(i), end, False) for i in range(self.N))

    def reducescatter(self, start: int = 0) -> int:
        end = max(self.intra(i, self.by_local(i), start, True) for i in range(self.N))
        return self.inter("reducescatter", end)

    def allreduce(self) -> int:
        end = max(self.intra(i, self.by_local(i), 0, True) for i in range(self.N))
        done = self.inter("allreduce", end)
        return max(self.intra(i, self.by_local(i), done, False) for i in range(self.N))

    def alltoall(self) -> None:
        job, g = self.job, self.g
        hops: list[tuple[int, int, list[int]]] = []
        end = 0
        for s in range(job.n):
            i = self.node_of[s]
            for d in range(job.n):
                if d == s:
                    continue
                via = self.nodes[i][self.local[d]]
                chunks = job.a2a(s, d)
                if via != s:
                    end = max(end, job.plan.route(g.path(s, via, self.sets[i]), chunks, 0))
                if via != d:
                    hops.append((via, d, chunks))
        for via, d, chunks in hops:
            job.plan.route(g.path(via, d), chunks, end)

    def two_level_tree(self, reverse: bool) -> Tree:
        """NCCL's binary tree over the leaders (root's local index), BFS trees inside the nodes."""
        job = self.job
        root = job.root
        i0 = self.node_of[root]
        leaders = self.group(self.local[root])
        parent: dict[int, int] = {}
        for v in range(1, self.N):
            up = btree_parent(self.N, v)
            assert up is not None
            parent[leaders[(v + i0) % self.N]] = leaders[(up + i0) % self.N]
        for i in range(self.N):
            parent.update(self.node_tree(i, leaders[i], reverse).parent)
        return tree_from_parent(root, parent)

    def gather_scatter(self, scatter: bool) -> None:
        job, g = self.job, self.g
        root = job.root
        leaders = self.group(self.local[root])
        for r in range(job.n):
            if r == root:
                continue
            i = self.node_of[r]
            inner = self.node_tree(i, leaders[i], reverse=not scatter).path_up(r)
            if scatter:
                path = g.path(root, leaders[i]) + inner[::-1][1:]
            else:
                path = inner + g.path(leaders[i], root)[1:]
            job.plan.route(path, job.own(r), 0)


def hierarchical(job: Job) -> None:
    h = _Hier(job)
    kind = job.kind
    if kind == "allgather":
        h.allgather()
    elif kind == "reducescatter":
        h.reducescatter()
    elif kind == "allreduce":
        h.allreduce()
    elif kind == "alltoall":
        h.alltoall()
    elif kind == "broadcast":
        job.bcast_tree(h.two_level_tree(reverse=False), job.data())
    elif kind == "reduce":
        job.reduce_tree(h.two_level_tree(reverse=True), job.data())
    else:
        h.gather_scatter(scatter=kind == "scatter")
