"""Selection: which candidate serves which message sizes, for ``synth solve`` and ``synth catalog``.

One path from candidates to size ranges, used by both commands::

    candidates.SolveResult (verified schedules, lock-step costs)
        ──► scorers: each candidate's times under the deciding model (program or lock-step)
        ──► buckets: the sizes a choice is made at, and the byte ranges they cover
        ──► ranking.rank_sizes (solve) | tuned.tune_buckets (catalog: a knob search)
        ──► ranges.choose: winners per bucket, near ties settled, adjacent winners merged, and
            the fallback past a configuration whose file cannot be produced
    nccl: what NCCL itself runs at each size, the competitor every result is compared with

Modules: :mod:`.candidates`, :mod:`.scorers`, :mod:`.program_scorer`, :mod:`.buckets`,
:mod:`.ranking`, :mod:`.tuned`, :mod:`.ranges`, :mod:`.nccl`. Nothing here writes a file: the
winners' files are produced by :mod:`synth.outputs`.
"""
