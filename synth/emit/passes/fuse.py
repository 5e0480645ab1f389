"""The ``fuse`` pass: a receive and the next step's send of the same value become one op."""

from __future__ import annotations

from .ir import Dag


def fuse(dag: Dag, enabled: bool = True) -> int:
    """Mark receive + next-step send pairs of one version as fused ops; returns how many.

    Only the receive that completes the version (the last writer of the step) fuses, with the
    lowest-peer send of the next step; ``nofuse`` receives (set by the driver when the progress or
    allocation pass rejected them) stay plain. A reduce whose result is only forwarded is an
    ``rrs`` (no local store); otherwise ``rrcs``; a copy is an ``rcs``.
    """
    for s in dag.sends:
        s.absorbed = False
    for rv in dag.recvs:
        rv.fwd = None
        rv.store = True
    if not enabled:
        return 0
    count = 0
    for rv in dag.recvs:
        if not rv.last or rv.nofuse or not rv.cands:
            continue
        snd = rv.cands[0]
        rv.fwd = snd
        snd.absorbed = True
        rv.store = not (rv.reduce and rv.sole)
        count += 1
    return count
