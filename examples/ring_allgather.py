"""Ring allgather in the DSL: every rank's chunk travels n-1 hops around a ring of real links.

    python examples/ring_allgather.py
"""

from __future__ import annotations

from collections.abc import Sequence

from synth.collectives import make_collective
from synth.dsl import chunk, program, report
from synth.schedule import Schedule
from synth.topology import Topology
from synth.topology_io import load_topology

DGX1_RING = (0, 1, 3, 2, 6, 7, 5, 4)
"""A Hamiltonian cycle of dgx1's NVLinks (the one the ``ring`` baseline picks)."""


def build(topology: Topology | None = None, order: Sequence[int] | None = None,
          chunks: int = 1) -> tuple[Topology, Schedule]:
    if topology is None:
        topology, order = load_topology("dgx1"), order or DGX1_RING
    n = topology.num_ranks
    order = list(order or range(n))
    nxt = {order[i]: order[(i + 1) % n] for i in range(n)}
    with program(topology, make_collective("allgather", n, chunks), name="ring") as p:
        for r in range(n):
            c = chunk(r, "input", 0, size=chunks)           # rank r's own chunk(s)
            for _ in range(n - 1):                          # one hop per step, all ranks at once
                c = c.copy(nxt[c.rank], "output", r * chunks)
    return topology, p.schedule()


if __name__ == "__main__":
    print(report(*build()))
