"""The ``smt`` family: SCCL's steps/rounds/chunks instances (PPoPP'21), decided by CP-SAT or z3.

Encodes: per step, which chunk crosses which link, under per-link bandwidth in rounds.
Objective: the fewest steps (latency optimal) or the Pareto frontier of steps vs rounds.
Limits: exact search, exponential in ranks and chunks; under ``auto`` it runs only on small
instances with a short time limit and steps aside otherwise.

Entry point: :func:`smt_encoding`; the pieces are in :mod:`.encoding`.
"""

from .encoding import smt_encoding

__all__ = ["smt_encoding"]
