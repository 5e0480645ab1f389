"""Max-min fair sharing of resources (links, switch ports, NIC ports) among concurrent flows.

Both discrete-event models, the MSCCL-IR program model (:mod:`synth.timing.program`) and the
MSCCL++ plan model (:mod:`synth.timing.plan`), recompute the rates of the flows in flight
whenever one starts or ends; this is that computation, in one place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def maxmin_rates(res: np.ndarray, res_cap: np.ndarray, flow_cap: np.ndarray,
                 weight: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    ``res`` (F, W) holds each flow's resource indices (-1 padding), ``res_cap`` (R,) the resources'
    capacities and ``flow_cap`` (F,) each flow's own cap (its threadblock). All flows rise together;
    a flow freezes when one of its resources is saturated or it reaches its cap.

    Kept lean the way :func:`maxmin_rates_small` is, with the same float operations: every flow
    still rising has the same rate (``level``: the same increments from 0.0), the smallest share
    left is taken over the resources some rising flow uses (each rising flow's own smallest share
    is one of them), ``min(cap_i - level)`` is ``min(cap_i) - level`` exactly, and each resource's
    count of rising flows drops as its flows freeze instead of being counted again each round.
    Large components are shared out again at every start and end of one of their flows (on
    dgx_a100 x 2 allgather, those reaching this path had a median of 576 flows), so these rounds
    are a good part of the program model's time there.

    ``weight`` (F,): row i stands for that many identical flows (the same resources and cap:
    :func:`fair_rates`); None, one each.
    """
    nf = res.shape[0]
    rate = np.zeros(nf)
    if nf == 0:
        return rate
    valid = res >= 0
    idx = np.where(valid, res, 0)
    nres = len(res_cap)
    left = res_cap.astype(float).copy()
    floor = 1e-9 * np.maximum(res_cap, 1e-30)
    capped_at = flow_cap * (1 - 1e-12)
    # each resource's rising flows, an integer as with the flows one by one (a weighted bincount
    # sums in floats, exactly at these magnitudes)
    per = np.broadcast_to((np.ones(nf, dtype=np.int64) if weight is None
                           else np.asarray(weight, dtype=np.int64))[:, None], idx.shape)
    counts = np.bincount(idx[valid], weights=per[valid], minlength=nres).astype(np.int64)
    active = np.ones(nf, dtype=bool)
    rising = nf
    level = 0.0
    for _ in range(nf + nres + 1):
        if not rising:
            break
        live = counts > 0
        shares = left[live] / counts[live]
        inc = min(float(shares.min()) if shares.size else math.inf,
                  float(flow_cap[active].min()) - level)
        inc = max(inc, 0.0)
        level += inc
        left -= inc * counts
        sat = left <= floor
        frozen = active & ((valid & sat[idx]).any(axis=1) | (level >= capped_at))
        if frozen.any():
            rate[frozen] = level
            active &= ~frozen
            rising -= int(frozen.sum())
            gone = valid[frozen]
            counts -= np.bincount(idx[frozen][gone], weights=per[frozen][gone],
                                  minlength=nres).astype(np.int64)
    rate[active] = level    # not settled within the bound on rounds (never seen): as they stand
    return rate


SMALL_COMPONENT = 128
"""Up to this many flows, :func:`fair_rates` shares them with :func:`maxmin_rates_small`; above it
with the vectorised :func:`maxmin_rates`. Both fill in the same order with the same float operations, so
their rates agree to the bit (tests/test_program_model.py); the split is speed alone. Measured on
random components: at 2-12 flows the list version is 4.5x faster (numpy's per-call overhead), at
300 flows 1.5x slower, at 2,000 2.5x slower. How often each path runs depends on the file: on
the four files ``solve`` writes for the imported 8xH100 x 2 allreduce, 7,259 multi-flow recomputes
took this path and 6,142 the numpy one. End to end, that solve ran in 286.7 s against 337.0 s
before (the two run at once, one core each; byte-identical files)."""


def maxmin_rates_small(flow_res: Sequence[Sequence[int]], res_cap: Sequence[float],
                       flow_cap: Sequence[float], weight: Sequence[int] | None = None
                       ) -> list[float]:
    """:func:`maxmin_rates` on plain lists, for small components.

    ``flow_res[i]`` holds flow i's resource indices (no padding), ``res_cap`` every resource's
    capacity (indexed by those ids), ``flow_cap`` each flow's own cap.

    The same filling, with the same float operations, kept lean: every flow still rising has
    the same rate (each got the same increments, from 0.0, in the same order), so one ``level``
    stands for all of them, and ``min(cap_i - level)`` is ``min(cap_i) - level`` exactly (a
    subtraction of one value rounds monotonically); resources no rising flow uses any more are
    left out (their remaining capacity no longer matters). ``weight`` as in :func:`maxmin_rates`.
    """
    n = len(flow_res)
    rate = [0.0] * n
    if n == 0:
        return rate
    local: dict[int, int] = {}
    fres: list[list[int]] = []
    for rs in flow_res:
        mine = []
        for r in rs:
            k = local.get(r)
            if k is None:
                k = local[r] = len(local)
            mine.append(k)
        fres.append(mine)
    if weight is None:
        weight = [1] * n
    count = [0] * len(local)
    for mine, w in zip(fres, weight, strict=True):
        for k in mine:
            count[k] += w
    left = [0.0] * len(local)
    floor = [0.0] * len(local)
    for r, k in local.items():
        cap = float(res_cap[r])
        left[k] = cap
        floor[k] = 1e-9 * max(cap, 1e-30)
    capped_at = [c * (1 - 1e-12) for c in flow_cap]
    live = list(range(len(local)))
    active = list(range(n))
    level = 0.0
    for _ in range(n + len(res_cap) + 1):
        if not active:
            break
        inc = min(min([left[k] / count[k] for k in live]),
                  min([flow_cap[i] for i in active]) - level)
        inc = max(inc, 0.0)
        level += inc
        for k in live:
            left[k] -= inc * count[k]
        still = []
        dropped = False
        # saturated resources, looked up once a round (a rising flow's resources are all live)
        sat = {k for k in live if left[k] <= floor[k]}
        for i in active:
            mine = fres[i]
            if level >= capped_at[i] or (sat and not sat.isdisjoint(mine)):
                rate[i] = level
                w = weight[i]
                for k in mine:
                    count[k] -= w
                dropped = True
            else:
                still.append(i)
        active = still
        if dropped:
            live = [k for k in live if count[k]]
    for i in active:        # not settled within the bound on rounds (never seen): as they stand
        rate[i] = level
    return rate


def fair_rates(flow_res: Sequence[Sequence[int]], res_cap: Sequence[float],
               flow_cap: Sequence[float], res_cap_array: np.ndarray | None = None,
               res_rows: np.ndarray | None = None, weight: Sequence[int] | None = None
               ) -> list[float]:
    """Max-min fair rates of a set of flows that share resources: the one entry point the timed
    models call (this module's simulator, :mod:`synth.timing.plan`).

    ``flow_res[i]`` holds flow i's resource ids, ``res_cap`` every resource's capacity (indexed by
    those ids) and ``flow_cap`` each flow's own cap. Up to :data:`SMALL_COMPONENT` flows go to
    :func:`maxmin_rates_small`, more to the vectorised :func:`maxmin_rates` (``res_cap_array``:
    ``res_cap`` as an array already, so a caller that keeps one does not convert it per call); the
    two agree to the bit, so the split changes the speed alone. ``res_rows``: ``flow_res`` as an
    (F, W) array padded with -1, W at least the widest (padding changes no rate), for a caller
    that keeps each flow's row: filling the array row by row took half of this function's time
    on dgx_a100 x 2 allgather's components of hundreds of flows.

    ``weight[i]``: entry i stands for that many flows with the same resources and cap (None: one
    each). Such flows rise together and freeze in the same round whatever else shares their
    resources, so one entry with its count in every resource's tally fills with the very float
    operations of the flows one by one and gets their rate (``tests/test_program_model.py``):
    the program model hands each component over as its classes of alike flows
    (:meth:`synth.timing.program_machine.Layout.fair`), 2.4 times fewer than its flows on
    dgx_a100 x 8 allgather's ``trees`` (3,754,227 flows in 29,040 shares at 256 MiB)."""
    n = len(flow_res)
    if n <= SMALL_COMPONENT:
        return maxmin_rates_small(flow_res, res_cap, flow_cap, weight)
    if res_rows is not None:
        res = res_rows
    else:
        width = max(len(rs) for rs in flow_res)
        res = np.full((n, width), -1, dtype=np.int64)
        for i, rs in enumerate(flow_res):
            res[i, :len(rs)] = rs
    caps = res_cap_array if res_cap_array is not None else np.asarray(res_cap, dtype=float)
    return maxmin_rates(res, caps, np.asarray(flow_cap, dtype=float),
                        None if weight is None else np.asarray(weight, dtype=np.int64)).tolist()
