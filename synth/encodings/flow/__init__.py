"""The ``flow`` family: time-expanded multi-commodity flow for point-to-point collectives.

Encodes: one commodity per (source, destination) pair over candidate paths, advancing one hop per
synchronous step, as an LP; the fractions are rounded to integral chunks.
Objective: the bandwidth part of the step costs, ``sum_t z_t``, with the steps searched upwards.
Limits: only collectives whose chunks each go from one rank to one rank (alltoall, scatter,
gather, such custom collectives): no combining, no copies; the rounded schedule reports its gap to
the LP optimum; capped transfers.
Options: :class:`~synth.encodings.options.FlowOptions`.

Entry point: :func:`flow_encoding`; the method is described in :mod:`.encoding`.
"""

from .encoding import flow_encoding

__all__ = ["flow_encoding"]
