"""The ``smt`` family: SCCL's steps/rounds/chunks instances (PPoPP'21), decided by CP-SAT or z3.

Encodes: per step, which chunk crosses which link, under per-link bandwidth in rounds.
Objective: the fewest steps (latency optimal) or the Pareto frontier of steps vs rounds.
Limits: exact search, exponential in ranks and chunks; under ``auto`` it runs only up to
:data:`~.encoding.AUTO_MAX_RANKS` ranks within :data:`~.encoding.AUTO_SECONDS` and steps aside
otherwise; a time limit that hits first is an error (exit 3) saying what was proven.
Options: :class:`~synth.encodings.options.SmtOptions`.

Entry point: :func:`smt_encoding`; the pieces are in :mod:`.encoding`.
"""

from .encoding import smt_encoding

__all__ = ["smt_encoding"]
