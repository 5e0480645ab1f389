"""The ``baseline`` family: NCCL-style algorithms (ring, trees, direct, recursive doubling/halving,
hierarchical, NCCL's own rings) built as schedules, no solver involved.

Encodes: each named algorithm's transfers over the topology's real links, relaying non-combining
data along shortest paths and reducing combining data along in-trees of links.
Objective: none (fixed algorithms); the caller costs every candidate and keeps the best.
Limits: an algorithm whose logical partner is not adjacent raises
:class:`~synth.errors.NotApplicable`; ring alltoall is skipped unless named above 32 ranks.
Options: only ``algorithm`` and ``chunks`` (:class:`~synth.encodings.options.BaselineOptions`).

Entry point: :func:`baseline_encoding` (the registry's); :func:`baseline` builds one algorithm.
"""

from .algorithms import ALGORITHMS, all_baselines, applicable, baseline, baseline_encoding, preferred_chunks

__all__ = ["ALGORITHMS", "all_baselines", "applicable", "baseline", "baseline_encoding", "preferred_chunks"]
