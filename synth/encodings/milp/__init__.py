"""The ``milp`` family: TACCL's sketch-guided routing/ordering/scheduling MILPs (NSDI'23).

Encodes: a route per representative chunk over a communication sketch's logical links, list
scheduling into synchronous steps, and a batching MILP within a window.
Objective: the busiest resource orbit (routing), then the costed makespan at the planned size.
Limits: allgather, reducescatter, allreduce and alltoall; needs a sketch that fits the topology;
MILP time grows fast with ranks and chunks, so under ``auto`` it runs only where a shipped sketch
fits, up to :data:`~.encoding.AUTO_MAX_RANKS` ranks, with :data:`~.encoding.AUTO_TIME_LIMIT_S`.
Options: :class:`~synth.encodings.options.MilpOptions`.

Entry point: :func:`milp_encoding`; the stages are described in :mod:`.encoding`.
"""

from .encoding import milp_encoding

__all__ = ["milp_encoding"]
