"""The ``baseline`` family: NCCL-style algorithms (ring, trees, direct, recursive doubling/halving,
hierarchical) built as schedules, no solver involved.

Encodes: each named algorithm's transfers over the topology's real links, relaying non-combining
data along shortest paths and reducing combining data along in-trees of links.
Objective: none (fixed algorithms); the caller costs every candidate and keeps the best.
Limits: an algorithm whose logical partner is not adjacent raises
:class:`~synth.errors.NotApplicable`; ring alltoall is skipped under ``auto`` above 32 ranks.

Entry point: :func:`baseline` (one algorithm); see :mod:`.algorithms` for the rest.
"""

from .algorithms import ALGORITHMS, all_baselines, applicable, baseline, preferred_chunks

__all__ = ["ALGORITHMS", "all_baselines", "applicable", "baseline", "preferred_chunks"]
