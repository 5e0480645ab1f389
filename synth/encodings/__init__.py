"""Encodings: ``(topology, collective, options) -> schedules``, one module each, behind one registry.

Every encoding returns candidate :class:`~synth.schedule.Schedule` objects; the caller verifies and
costs them (:mod:`synth.solve`). An encoding that cannot express the request raises
:class:`~synth.errors.NotApplicable` saying which encoding can.
"""

from __future__ import annotations

from collections.abc import Callable

from ..collectives import Collective, make_collective
from ..errors import NotApplicable, SynthError, unknown_name
from ..schedule import Schedule
from ..topology import Topology
from .options import Options

RING_ALLTOALL = ("ring", "bidir_ring")
RING_ALLTOALL_MAX_RANKS = 32


def _baseline(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .baseline.algorithms import ALGORITHMS, baseline, preferred_chunks

    names = [options.algorithm] if options.algorithm else list(ALGORITHMS)
    found: dict[str, Schedule] = {}
    reasons: list[str] = []
    for name in names:
        if (not options.algorithm and collective.kind == "alltoall" and name in RING_ALLTOALL
                and collective.num_ranks > RING_ALLTOALL_MAX_RANKS):
            # ring alltoall moves O(n^3) chunk-hops: minutes to build and verify at 128 ranks and
            # never competitive with direct there; it stays available with --algo ring
            continue
        if not options.algorithm and options.extra.get("budget") is not None:
            from ..guards import TooBig

            try:  # each algorithm's schedule shares the budget with the ones already built
                _guard("baseline", topology, collective, options,
                       options.extra.get("held", 0) + _held(found))
            except TooBig as exc:
                reasons.append(f"{name}: {exc.message}")
                continue
        coll = collective
        if options.chunks is None and collective.custom is None:
            k = preferred_chunks(name, collective.kind, collective.num_ranks, topology)
            if k != collective.chunks_per_rank:
                coll = make_collective(collective.kind, collective.num_ranks, k, collective.root,
                                       collective.inplace)
        try:
            found[name] = baseline(topology, coll, name)
        except NotApplicable as exc:
            if options.algorithm:
                raise
            reasons.append(str(exc))
    if not found:
        raise NotApplicable(f"no baseline applies to {collective.name} on '{topology.name}': "
                            + "; ".join(reasons))
    return found


ENCODINGS: dict[str, Callable[[Topology, Collective, Options], dict[str, Schedule]]] = {
    "baseline": _baseline,
}
"""name -> function returning {candidate name: schedule}. Later encodings register here."""


AUTO_ALL_MAX_RANKS = 64
"""Up to this many ranks ``auto`` runs every encoding and keeps the best; above, it runs the
baselines and the one synthesis encoding :func:`.auto.choose` picks for the collective."""


def _auto_encodings(topology: Topology, collective: Collective) -> list[str]:
    if topology.num_ranks <= AUTO_ALL_MAX_RANKS:
        return list(ENCODINGS)
    from .auto import choose

    chosen, _ = choose(topology, collective, ENCODINGS)
    return ["baseline"] + ([chosen] if chosen != "baseline" else [])


def auto_reason(topology: Topology, collective: Collective) -> str:
    """What ``--encoding auto`` runs for this request, and why (printed by ``synth solve``)."""
    if topology.num_ranks <= AUTO_ALL_MAX_RANKS:
        return (f"{topology.num_ranks} ranks <= {AUTO_ALL_MAX_RANKS}: every encoding that applies "
                "runs (each steps aside when it does not fit) and the best verified schedule wins")
    from .auto import choose

    chosen, why = choose(topology, collective, ENCODINGS)
    return f"{topology.num_ranks} ranks: baselines + {chosen} ({why})"


def _guard(name: str, topology: Topology, collective: Collective, options: Options,
           held: int) -> None:
    """Size ``name`` against the run's budget before it starts (:mod:`synth.guards`)."""
    budget = options.extra.get("budget")
    if budget is None or collective.custom is not None:
        return
    from ..guards import check_encoding

    check_encoding(name, collective.kind, topology.num_ranks, len(topology.links), options.chunks,
                   budget, held)


def _held(found: dict[str, Schedule]) -> int:
    from ..guards import SCHEDULE_BYTES_PER_TRANSFER

    return sum(s.num_transfers for s in found.values()) * SCHEDULE_BYTES_PER_TRANSFER


def run_encoding(name: str, topology: Topology, collective: Collective, options: Options,
                 notes: list[str] | None = None) -> dict[str, Schedule]:
    """Run encoding ``name`` (or every one that fits under ``auto``).

    With a budget in ``options.extra["budget"]`` each encoding is sized before it starts: one that
    does not fit is refused (:class:`synth.guards.TooBig`) or, under ``auto``, steps aside with a
    line in ``notes``."""
    from .. import progress

    if name == "auto" and options.algorithm:
        name = "baseline"  # --algo names a baseline algorithm
    if name == "auto":
        from ..guards import TooBig

        found: dict[str, Schedule] = {}
        auto = Options(options.algorithm, options.chunks, options.time_limit_s,
                       {**options.extra, "auto": True})
        for enc in _auto_encodings(topology, collective):
            try:
                _guard(enc, topology, collective, auto, _held(found))
            except TooBig as exc:
                if notes is not None:
                    notes.append(f"{enc} stepped aside: {exc.message}")
                progress.note(f"{enc} stepped aside: {exc.message}")
                continue
            try:
                with progress.phase(enc):
                    found.update(ENCODINGS[enc](topology, collective,
                                                Options(auto.algorithm, auto.chunks,
                                                        auto.time_limit_s,
                                                        {**auto.extra, "held": _held(found)})))
            except NotApplicable:
                continue
        if not found:
            raise SynthError(f"no encoding produced a schedule for {collective.name} on "
                             f"'{topology.name}'" + (f" ({'; '.join(notes)})" if notes else ""))
        return found
    if name not in ENCODINGS:
        raise unknown_name("encoding", name, [*ENCODINGS, "auto"])
    _guard(name, topology, collective, options, 0)
    return ENCODINGS[name](topology, collective, options)


def _trees(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .trees.encoding import trees_encoding

    return trees_encoding(topology, collective, options)


def _flow(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .flow.encoding import flow_encoding

    return flow_encoding(topology, collective, options)


ENCODINGS["trees"] = _trees
ENCODINGS["flow"] = _flow


def _smt(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """SCCL's steps/rounds/chunks encoding (CP-SAT or z3); see :mod:`synth.encodings.smt.encoding`."""
    from .smt.encoding import smt_encoding

    return smt_encoding(topology, collective, options)


ENCODINGS["smt"] = _smt


def _milp(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """TACCL's routing/ordering/scheduling MILPs with a sketch; see :mod:`synth.encodings.milp.encoding`.

    Under ``auto`` it runs only where a shipped sketch fits the topology (or one was given) and
    with a bounded time, as TACCL is meant to be used: guided, not blind.
    """
    from .milp.encoding import AUTO_MAX_RANKS, AUTO_TIME_LIMIT_S, milp_encoding

    if options.extra.get("auto"):
        from ..sketches import sketch_for

        if collective.custom is not None or topology.num_ranks > AUTO_MAX_RANKS:
            raise NotApplicable("milp steps aside under auto above "
                                f"{AUTO_MAX_RANKS} ranks")
        if not options.extra.get("sketch") and sketch_for(topology) is None:
            raise NotApplicable(f"milp: no shipped sketch fits '{topology.name}' (give --sketch)")
        if options.time_limit_s is None:
            options = Options(options.algorithm, options.chunks, AUTO_TIME_LIMIT_S, options.extra)
    return milp_encoding(topology, collective, options)


ENCODINGS["milp"] = _milp
