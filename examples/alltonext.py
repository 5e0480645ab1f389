"""AllToNext in the DSL: a custom collective where rank r sends its buffer to rank r+1.

Each buffer is split into ``pieces`` chunks. Inside a node the next GPU is one NVSwitch hop away.
Across nodes (the last GPU of node A to the first of node B) one NIC would carry everything, so
piece j goes through local GPU j's NIC instead: last GPU of A -> GPU j of A -> GPU j of B -> first
GPU of B, spreading the transfer over all NICs (MSCCLang's AllToNext).

    python examples/alltonext.py
"""

from __future__ import annotations

from synth.collectives import Collective, custom_collective
from synth.dsl import chunk, program, report
from synth.schedule import Schedule
from synth.topology import Topology
from synth.topology_io import load_topology


def alltonext(n: int, pieces: int) -> Collective:
    """Chunk r*pieces + j starts on rank r and must end on rank r+1 (the last rank sends nothing)."""
    ids = [(r, r * pieces + j) for r in range(n - 1) for j in range(pieces)]
    return custom_collective({"name": "alltonext", "ranks": n, "chunks": (n - 1) * pieces,
                              "pre": [[c, [r]] for r, c in ids],
                              "post": [[c, [r + 1]] for r, c in ids]}, "alltonext")


def build(topology: Topology | None = None, pieces: int | None = None) -> tuple[Topology, Schedule]:
    topology = topology or load_topology("dgx_a100", nodes=2)
    nodes, node_of, n = topology.nodes, topology.node_of, topology.num_ranks
    g = len(nodes[0])
    k = pieces or g
    with program(topology, alltonext(n, k), name="alltonext") as p:
        for r in range(n - 1):
            if node_of[r] == node_of[r + 1]:
                chunk(r, "input", 0, size=k).copy(r + 1, "output", 0)
                continue
            here, there = nodes[node_of[r]], nodes[node_of[r + 1]]
            for j in range(k):
                c = chunk(r, "input", j)
                for hop in (here[j % g], there[j % g]):
                    if hop != c.rank:
                        c = c.copy(hop)
                if c.rank != r + 1:
                    c.copy(r + 1, "output", j)
    return topology, p.schedule()


if __name__ == "__main__":
    print(report(*build()))
