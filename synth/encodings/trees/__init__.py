"""The ``trees`` family: bandwidth-optimal spanning-tree packing (ForestColl), pipelined into steps.

Encodes: weighted spanning out-trees per root (in-trees for reductions) packed by column generation,
given integer multiplicities and list-scheduled into synchronous steps.
Objective: the cut bound on bandwidth (the packing LP's optimum), with few steps (α term).
Limits: allgather, reducescatter, allreduce, broadcast, reduce (no custom collectives); the
plan's size is capped by transfers, tasks and pieces per root; rounding to integer pieces and
pipelining cost a few percent of the bound.
Options: :class:`~synth.encodings.options.TreesOptions`.

Entry point: :func:`trees_encoding`; the method is described in :mod:`.encoding`.
"""

from .encoding import trees_encoding

__all__ = ["trees_encoding"]
