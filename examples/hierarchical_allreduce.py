"""Hierarchical allreduce in the DSL on two DGX A100 nodes: three steps.

1. intra-node reduce-scatter: chunk c is summed on local GPU c % 8 of each node (NVSwitch);
2. inter-node allreduce: the two GPUs with the same local index add each other's partial sums
   (both read at the start of the step, so both end with the total; one IB hop);
3. intra-node allgather: each owner copies the total to the other GPUs of its node.

    python examples/hierarchical_allreduce.py
"""

from __future__ import annotations

from synth.collectives import make_collective
from synth.dsl import chunk, program, report
from synth.errors import SynthError
from synth.schedule import Schedule
from synth.topology import Topology
from synth.topology_io import load_topology


def build(topology: Topology | None = None) -> tuple[Topology, Schedule]:
    topology = topology or load_topology("dgx_a100", nodes=2)
    nodes, n = topology.nodes, topology.num_ranks
    if len(nodes) != 2:
        raise SynthError(f"this example is for 2 nodes, '{topology.name}' has {len(nodes)}")
    g = len(nodes[0])

    def owner(node: int, c: int) -> int:
        return nodes[node][c % g]

    with program(topology, make_collective("allreduce", n), name="hierarchical") as p:
        for node, ranks in enumerate(nodes):                # 1. reduce-scatter inside each node
            for c in range(n):
                for r in ranks:
                    if r != owner(node, c):
                        chunk(r, "input", c).reduce(owner(node, c), "input", c)
        for c in range(n):                                  # 2. exchange partial sums
            a, b = chunk(owner(0, c), "input", c), chunk(owner(1, c), "input", c)
            a.reduce(b.rank, "input", c)
            b.reduce(a.rank, "input", c)                    # b: the value before a's reduce
        for node, ranks in enumerate(nodes):                # 3. allgather inside each node
            for c in range(n):
                total = chunk(owner(node, c), "input", c)
                for r in ranks:
                    if r != total.rank:
                        total.copy(r, "output", c)
    return topology, p.schedule()


if __name__ == "__main__":
    print(report(*build()))
