"""All-pairs allreduce in the DSL on one DGX A100 (NVSwitch): two steps.

Step 0 (reduce-scatter): every rank adds its copy of chunk r into rank r -- all n-1 reduces into
one slot share the step. Step 1 (allgather): rank r copies the sum to every other rank.

    python examples/allpairs_allreduce.py
"""

from __future__ import annotations

from synth.collectives import make_collective
from synth.dsl import chunk, program, report
from synth.schedule import Schedule
from synth.topology import Topology
from synth.topology_io import load_topology


def build(topology: Topology | None = None, chunks: int = 1) -> tuple[Topology, Schedule]:
    topology = topology or load_topology("dgx_a100")
    n, k = topology.num_ranks, chunks
    with program(topology, make_collective("allreduce", n, k), name="allpairs") as p:
        for r in range(n):                                  # rank r owns slots r*k .. r*k+k-1
            for q in range(n):
                if q != r:
                    chunk(q, "input", r * k, size=k).reduce(r, "input", r * k)
        for r in range(n):
            total = chunk(r, "input", r * k, size=k)
            for q in range(n):
                if q != r:
                    total.copy(q, "output", r * k)
    return topology, p.schedule()


if __name__ == "__main__":
    print(report(*build()))
