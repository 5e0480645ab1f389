"""Encodings: ``(topology, collective, options) -> schedules``, one family each, behind one registry.

Every encoding returns candidate :class:`~synth.schedule.Schedule` objects; the caller verifies and
costs them (:mod:`synth.solve`). An encoding that cannot express the request raises
:class:`~synth.errors.NotApplicable` saying which encoding can.

The registry, :data:`ENCODINGS`, is declared once at the end of this module: each
:class:`Encoding` names its family's entry point and its typed options class
(:mod:`synth.encodings.options`). Options an encoding does not take are an error, never silently
ignored; under ``auto`` every option must belong to some encoding, and each encoding receives only
its own. The families are imported only when they run (the MILP one loads OR-Tools and PuLP).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..collectives import Collective
from ..errors import NotApplicable, SynthError, unknown_name
from ..guards import Sized
from ..schedule import Schedule
from ..topology import Topology
from .options import (
    BaselineOptions,
    EncodingOptions,
    FlowOptions,
    MilpOptions,
    Options,
    SmtOptions,
    TreesOptions,
)

__all__ = ["ENCODINGS", "Encoding", "Options", "auto_reason", "run_encoding"]

Runner = Callable[[Topology, Collective, Options], dict[str, Schedule]]


@dataclass(frozen=True)
class Encoding:
    """One registered encoding: its name, its typed options, its entry point and what it is."""

    name: str
    options: type[EncodingOptions]
    run: Runner
    summary: str

    def __call__(self, topology: Topology, collective: Collective,
                 options: Options) -> dict[str, Schedule]:
        """Check the options (a foreign or misspelled one is a SynthError), then run."""
        self.options.parse(options.extra)
        return self.run(topology, collective, options)


# ------------------------------------------------------------------------------- entry points
def _baseline(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .baseline import baseline_encoding

    return baseline_encoding(topology, collective, options)


def _trees(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .trees import trees_encoding

    return trees_encoding(topology, collective, options)


def _flow(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .flow import flow_encoding

    return flow_encoding(topology, collective, options)


def _smt(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    from .smt import smt_encoding

    return smt_encoding(topology, collective, options)


def _milp(topology: Topology, collective: Collective, options: Options) -> dict[str, Schedule]:
    """Under ``auto`` the MILP runs only where a shipped sketch fits the topology (or one was given)
    and with a bounded time, as TACCL is meant to be used: guided, not blind."""
    from .milp import milp_encoding
    from .milp.encoding import AUTO_TIME_LIMIT_S

    if options.auto:
        why = _milp_steps_aside(topology, collective, options)
        if why is not None:
            raise NotApplicable(why)
        if options.time_limit_s is None:
            options = replace(options, time_limit_s=AUTO_TIME_LIMIT_S)
    return milp_encoding(topology, collective, options)


def _milp_steps_aside(topology: Topology, collective: Collective, options: Options) -> str | None:
    """Why the MILP steps aside under ``auto`` (:func:`_milp`), or None where it runs."""
    from .milp.encoding import AUTO_MAX_RANKS

    if collective.custom is not None or topology.num_ranks > AUTO_MAX_RANKS:
        return f"milp steps aside under auto above {AUTO_MAX_RANKS} ranks"
    from ..sketches import sketch_for

    if not options.extra.get("sketch") and sketch_for(topology) is None:
        return f"milp: no shipped sketch fits '{topology.name}' (give --sketch)"
    return None


# ------------------------------------------------------------------------------- auto
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
    if options.budget is None or collective.custom is not None:
        return
    from ..guards import check_encoding

    check_encoding(name, collective.kind, topology.num_ranks, len(topology.links), options.chunks,
                   options.budget, held)


def _held(found: dict[str, Schedule]) -> int:
    from ..guards import SCHEDULE_BYTES_PER_TRANSFER

    return sum(s.num_transfers for s in found.values()) * SCHEDULE_BYTES_PER_TRANSFER


def _own_options(options: Options, encoding: Encoding, auto: bool) -> Options:
    """``options`` with only the encoding-specific options ``encoding`` takes."""
    names = set(encoding.options.names())
    return replace(options, extra={k: v for k, v in options.extra.items() if k in names}, auto=auto)


def _check_auto_options(options: Options) -> None:
    """Under ``auto`` an option must belong to at least one encoding."""
    known = {name for enc in ENCODINGS.values() for name in enc.options.names()}
    for key in sorted(set(options.extra) - known):
        raise unknown_name("encoding option", key, known)


def _start_ahead(encode_ahead: Any, encodings: list[str], topology: Topology,
                 collective: Collective, options: Options) -> Any:
    """The worker running ``auto``'s synthesis encoding beside the baselines (:mod:`.ahead`), or
    None: where none may, or its guard refuses it even with nothing held."""
    from ..guards import TooBig

    name = encode_ahead.pick(encodings)
    if name is None:
        return None
    try:
        _guard(name, topology, collective, options, 0)
    except TooBig:
        return None
    # the MILP, where it runs after it, keeps the solving process busy for its budget
    beside_milp = ("milp" in encodings[encodings.index(name):]
                   and _milp_steps_aside(topology, collective, options) is None)
    # held: the worker's encodings do not read it; refine_gate: only the MILP reads it
    own = replace(_own_options(options, ENCODINGS[name], True), held=0, refine_gate=None)
    return encode_ahead.start(ENCODINGS[name], topology, collective, own, beside_milp)


@dataclass
class _Ran:
    """An encoding run before the ahead worker's result was taken (:func:`_run_early`): what it
    returned or raised, and the notes it appended, for :meth:`replay` in its turn."""

    found: dict[str, Schedule]
    notes: list[str]
    error: SynthError | None = None

    def replay(self, notes: list[str] | None) -> dict[str, Schedule]:
        """What running the encoding now would do: append its notes to ``notes``, then return
        its candidates or raise its error."""
        if notes is not None:
            notes.extend(self.notes)
        if self.error is not None:
            raise self.error
        return self.found


def _run_early(encodings: list[str], topology: Topology, collective: Collective,
               options: Options, held: int) -> dict[str, _Ran]:
    """Run ``encodings`` (those after the ahead worker's in ``auto``'s order) while the worker
    works, each as its turn would run it, with its own list of notes.

    Their turns come after the worker's result is taken, with its candidates' memory held, so a
    guard may then refuse what it passes here at ``held`` (these runs are then dropped) or, where
    an earlier one here was dropped, pass what it refuses here (that one is not in the result and
    runs in its turn). Only the baselines read ``Options.held``, and they come first, so a run
    here returns what its turn would. The first error other than NotApplicable ends the runs, as
    it ends the inline loop."""
    from .. import progress
    from ..guards import TooBig

    ran: dict[str, _Ran] = {}
    for enc in encodings:
        try:
            _guard(enc, topology, collective, options, held)
        except TooBig:
            continue
        own = replace(_own_options(options, ENCODINGS[enc], True), held=held,
                      notes=[] if options.notes is not None else None)
        try:
            with progress.phase(enc):
                found = ENCODINGS[enc](topology, collective, own)
        except SynthError as exc:
            ran[enc] = _Ran({}, own.notes or [], exc)
            if isinstance(exc, NotApplicable):
                continue
            break
        ran[enc] = _Ran(found, own.notes or [])
        held += _held(found)
    return ran


def run_encoding(name: str, topology: Topology, collective: Collective, options: Options,
                 notes: list[str] | None = None) -> dict[str, Schedule | Sized]:
    """Run encoding ``name`` (or ``auto``) and return its candidates by name.

    With ``options.budget`` (:mod:`synth.guards`) each encoding is sized before it starts: one
    that does not fit is refused (:class:`synth.guards.TooBig`) or, under ``auto``, steps aside
    with a line in ``notes``. Under ``auto`` one encoding may run in a worker process beside the
    baselines (:mod:`.ahead`); a candidate it built that the size guards refuse whatever else is
    held comes back as its :class:`~synth.guards.Sized`, refused by
    :func:`synth.solve.within_budget` like a schedule (the caller sizes every candidate where
    there is a budget, and there is none of these without one)."""
    from .. import progress
    from ..guards import TooBig

    if name == "auto":
        _check_auto_options(options)
        if options.algorithm:  # --algo names a baseline algorithm
            _guard("baseline", topology, collective, options, 0)
            return ENCODINGS["baseline"](topology, collective,
                                         _own_options(options, ENCODINGS["baseline"], False))
        from . import ahead as encode_ahead

        found: dict[str, Schedule | Sized] = {}
        encodings = _auto_encodings(topology, collective)
        worker = _start_ahead(encode_ahead, encodings, topology, collective, options)
        early: dict[str, _Ran] = {}
        try:
            for at, enc in enumerate(encodings):
                mine = worker is not None and worker.name == enc
                try:
                    _guard(enc, topology, collective, options, _held(found))
                except TooBig as exc:
                    if mine:
                        worker.close()
                    if notes is not None:
                        notes.append(f"{enc} stepped aside: {exc.message}")
                    progress.note(f"{enc} stepped aside: {exc.message}")
                    continue
                ran = early.pop(enc, None)
                try:
                    if ran is not None:
                        found.update(ran.replay(options.notes))
                        continue
                    if mine:   # the encodings after the worker's run while it works
                        early = _run_early(encodings[at + 1:], topology, collective, options,
                                           _held(found))
                    with progress.phase(enc):
                        own = replace(_own_options(options, ENCODINGS[enc], True),
                                      held=_held(found))
                        got = worker.take() if mine else None
                        if got is None:
                            found.update(ENCODINGS[enc](topology, collective, own))
                        else:
                            found.update(got[0])
                            if own.notes is not None:
                                own.notes.extend(got[1])
                except NotApplicable:
                    continue
        finally:
            if worker is not None:
                worker.close()
        if not found:
            raise SynthError(f"no encoding produced a schedule for {collective.name} on "
                             f"'{topology.name}'" + (f" ({'; '.join(notes)})" if notes else ""))
        return found
    if name not in ENCODINGS:
        raise unknown_name("encoding", name, [*ENCODINGS, "auto"])
    _guard(name, topology, collective, options, 0)
    return ENCODINGS[name](topology, collective, options)


# ------------------------------------------------------------------------------- the registry
ENCODINGS: dict[str, Encoding] = {e.name: e for e in (
    Encoding("baseline", BaselineOptions, _baseline,
             "NCCL-style algorithms (ring, trees, direct, hierarchical, NCCL's rings); no solver"),
    Encoding("trees", TreesOptions, _trees,
             "ForestColl spanning-tree packing, pipelined: meets the cut bound (allgather family)"),
    Encoding("flow", FlowOptions, _flow,
             "time-expanded multi-commodity flow LP for point-to-point collectives (alltoall)"),
    Encoding("smt", SmtOptions, _smt,
             "SCCL's steps/rounds/chunks search (CP-SAT or z3): least steps, exact, small scale"),
    Encoding("milp", MilpOptions, _milp,
             "TACCL's sketch-guided routing, ordering and batching MILPs"),
)}
"""name -> :class:`Encoding`, in the order ``auto`` runs them and catalogs list them."""
