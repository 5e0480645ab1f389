"""Two-step alltoall in the DSL on two DGX A100 nodes.

Chunks for GPUs of the same node go straight over NVSwitch (step 0). Chunks for the other node are
gathered on one gateway GPU per (node, peer node) over NVSwitch (step 0), cross in one exchange
per node pair between the two gateways (pinned to step 1), and are scattered inside the
receiving node (step 2). Alltoall chunk ids are distinct, so the gateways just relay copies.

    python examples/two_step_alltoall.py
"""

from __future__ import annotations

from synth.collectives import make_collective
from synth.dsl import chunk, program, report
from synth.schedule import Schedule
from synth.topology import Topology
from synth.topology_io import load_topology


def build(topology: Topology | None = None) -> tuple[Topology, Schedule]:
    topology = topology or load_topology("dgx_a100", nodes=2)
    nodes, node_of, n = topology.nodes, topology.node_of, topology.num_ranks
    g = len(nodes[0])

    def gateway(a: int, b: int) -> int:
        """The GPU of node ``a`` that carries node a's traffic for node ``b``."""
        return nodes[a][b % g]

    with program(topology, make_collective("alltoall", n), name="two_step") as p:
        for s in range(n):
            for d in range(n):
                if s == d:
                    continue                                # already in place
                c = chunk(s, "input", d)                    # s's chunk for d
                a, b = node_of[s], node_of[d]
                if a == b:
                    c.copy(d, "output", s)
                    continue
                out, into = gateway(a, b), gateway(b, a)
                if s != out:
                    c = c.copy(out)                         # gather on the gateway
                c = c.copy(into, step=1)                    # the node pair's one exchange
                if d != into:
                    c = c.copy(d)                           # scatter
                assert c.rank == d and c.chunk == p.collective.outputs[d][s]
    return topology, p.schedule()


if __name__ == "__main__":
    print(report(*build()))
