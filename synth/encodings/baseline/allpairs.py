"""The ``one_pass`` baseline: allreduce in a single step, every rank reducing into every other.

Every rank sends its whole input to each of the n - 1 others, which all reduce it into their own
copy at once: one step, one hop, and every rank ends with the full sum. A port carries n - 1 times
the buffer, against the 2(n - 1)/n of a ring or of ``direct`` (reduce-scatter then allgather), so
this is the allreduce for small messages, where a call costs its launch and its hops and the bytes
barely count. MSCCL's production file for 8 x H100 below 32 KB (Azure/msccl-scheduler ndv5
``allreduce_pairs``, ``ap-1pass``) is this algorithm: one message per (peer, channel) into scratch,
then a local multi-source reduction (``docs/notes/msccl-production-files.md``); synth's compiler
lowers the one step to that shape with ``XmlOptions(gather=True)``, or to a chain of
receive-reduces without it.

It needs every pair of ranks adjacent (a switch, or a full mesh of links): a reduction cannot be
relayed. The schedule has n (n - 1) times the buffer's chunk count in transfers, so it is refused
above :data:`MAX_TRANSFERS` (where it would never be the fast choice anyway).
"""

from __future__ import annotations

from .job import Job

MAX_TRANSFERS = 1_100_000
"""Transfers the one step may hold: 8 ranks with 1 chunk each are 448; 64 ranks are 258,048; 103
ranks at one chunk exceed it. The same cap as ``rail_blocks``' (``RAIL_BLOCKS_MAX_TRANSFERS``):
a schedule that size is verified and compiled in minutes."""


def one_pass(job: Job) -> None:
    """Build the one-step allreduce into ``job.plan`` (raises NotApplicable where it cannot)."""
    n, chunks = job.n, job.data()
    transfers = n * (n - 1) * len(chunks)
    if transfers > MAX_TRANSFERS:
        raise job.fail(f"moves every rank's whole buffer to every other rank: {transfers:,} "
                       f"transfers for {n} ranks x {len(chunks)} chunks, over its cap of "
                       f"{MAX_TRANSFERS:,}")
    for src in range(n):
        for dst in range(n):
            if src != dst:
                job.need_link(src, dst, "reduces")
    for dst in range(n):
        for src in range(n):
            if src != dst:
                job.plan.send(0, src, dst, chunks, "reduce")
