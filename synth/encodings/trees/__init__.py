"""The ``trees`` family: bandwidth-optimal spanning-tree packing (ForestColl), pipelined into steps.

Encodes: weighted spanning out-trees per root (in-trees for reductions) packed by column generation,
given integer multiplicities and list-scheduled into synchronous steps.
Objective: the cut bound on bandwidth (the packing LP's optimum), with few steps (α term).
Limits: allgather, reducescatter, allreduce, broadcast, reduce; capped transfers and tasks.

Entry point: :func:`trees_encoding`; the method is described in :mod:`.encoding`.
"""

from .encoding import trees_encoding

__all__ = ["trees_encoding"]
