"""What a caller may ask of an encoding: :class:`Options`, and one typed options class per encoding.

:class:`Options` carries what every encoding understands (algorithm, chunks, time limit) and the
encoding-specific options as a mapping, ``extra`` (what the CLI, the catalog cache key and library
callers pass). Each encoding reads its options only through its own frozen dataclass here
(:class:`SmtOptions`, :class:`MilpOptions`, ...), built by :meth:`EncodingOptions.parse`: every key
must be a field of that class (a misspelled or foreign option is a :class:`~synth.errors.SynthError`
naming the options the encoding takes), and every value is converted to the field's type (a bad
value is an error too, not a traceback).

The classes live here, not beside their encodings, so that the registry
(:mod:`synth.encodings`) can validate options without importing any solver.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from ..errors import SynthError
from ..sizes import parse_size

DEFAULT_SIZE = 1 << 30
"""Bytes a scale encoding tunes its plan for unless told (``size``): 1 GiB."""


@dataclass(frozen=True)
class Options:
    """What a caller may ask of an encoding.

    ``extra`` holds the encoding-specific options by name; each encoding parses it into its own
    class below. ``auto`` is set by ``--encoding auto`` itself (an encoding may then step aside).
    """

    algorithm: str | None = None
    chunks: int | None = None
    """Chunks per rank the user fixed; None lets each algorithm use its natural count."""
    time_limit_s: float | None = None
    """The solver-backed encodings' (smt, milp) work budget, in deterministic seconds (see
    :mod:`synth.encodings.work`): the same effort, and so the same answer, on any machine; a
    wall-clock safety net of ten times as long only stops a runaway solve."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    auto: bool = False
    budget: Any = None
    """A :class:`synth.guards.Budget`: encodings are sized against it before they start."""
    held: int = 0
    """Bytes the candidates already built hold (they share the budget)."""
    notes: list[str] | None = field(default=None, compare=False)
    """Where an encoding appends what the caller must know about the run (e.g. that a wall-clock
    safety net, not the deterministic work budget, stopped a solve); ``synth solve`` prints them."""
    refine_gate: Callable[[Any, int], str | None] | None = field(default=None, compare=False)
    """Asked before a refinement of a candidate that only reorders its last steps (the MILP's
    stage 3, half of the main job's time on trn1_32): given the candidate as it stands (a
    :class:`~synth.schedule.Schedule`) and how many of its leading steps the refinement keeps
    whatever it finds, None when the refinement may change what the caller writes (it runs),
    else the reason it cannot (it is skipped, and the candidate's report says why). None here:
    every refinement runs. The closed-stack main job sets it
    (:class:`synth.solve_closed.RefinementGate`): there a lowered schedule whose kept steps alone
    are slower than the runtime's own call at every size can serve no size."""


# ------------------------------------------------------------------------------- value converters
def _size(value: Any, name: str) -> int:
    """Bytes: a positive number or a size string such as ``"1MB"``."""
    size = parse_size(value) if isinstance(value, str) else value
    if isinstance(size, bool) or not isinstance(size, int | float) or not size > 0 \
            or not math.isfinite(size):
        raise ValueError(f"must be a positive number of bytes, got {value!r}")
    return int(size)


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be an integer, got {value!r}")
    return int(value)


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a number, got {value!r}")
    return float(value)


def _bool(value: Any, name: str) -> bool:
    return bool(value)


def _str(value: Any, name: str) -> str:
    return str(value)


def _any(value: Any, name: str) -> Any:
    return value


_CONVERTERS = {"int": _int, "float": _float, "bool": _bool, "str": _str, "Size": _size, "Any": _any}


class EncodingOptions:
    """Base of the per-encoding option classes (frozen dataclasses whose fields are the options)."""

    ENCODING: ClassVar[str] = ""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None) -> Self:
        """The options in ``values`` as this class: unknown names and bad values are errors."""
        values = dict(values or {})
        known = cls.names()
        unknown = sorted(set(values) - set(known))
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=2, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SynthError(f"the {cls.ENCODING} encoding has no option "
                             f"{', '.join(repr(u) for u in unknown)}{hint} "
                             f"(its options: {', '.join(known) or 'none'})")
        kwargs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in values:
                continue
            value = values[f.name]
            optional = str(f.type).endswith("| None")
            if value is None and optional:
                kwargs[f.name] = None
                continue
            base = str(f.type).removesuffix(" | None")
            try:
                kwargs[f.name] = _CONVERTERS[base](value, f.name)
            except (TypeError, ValueError, SynthError) as exc:
                msg = exc.message if isinstance(exc, SynthError) else str(exc)
                raise SynthError(f"{cls.ENCODING} option {f.name}: {msg}") from None
        return cls(**kwargs)


Size = int
"""Annotation for a byte count that also accepts a size string (``"1MB"``)."""


# ------------------------------------------------------------------------------- the encodings
@dataclass(frozen=True)
class BaselineOptions(EncodingOptions):
    """The baselines take no options beyond :class:`Options` (``algorithm``, ``chunks``)."""

    ENCODING: ClassVar[str] = "baseline"


@dataclass(frozen=True)
class SmtOptions(EncodingOptions):
    """SCCL's search (:mod:`synth.encodings.smt`): one instance, least steps, or a cheap default."""

    ENCODING: ClassVar[str] = "smt"
    steps: int | None = None
    """Solve the one instance with this many steps S (UNSAT is an error)."""
    rounds: int | None = None
    """Total rounds R with ``steps`` or ``least_steps`` (default: R = S)."""
    least_steps: bool = False
    """Search the fewest steps from the proven lower bound up."""
    engine: str | None = None
    """``cpsat`` | ``z3`` | ``auto`` (= cpsat)."""


@dataclass(frozen=True)
class MilpOptions(EncodingOptions):
    """TACCL's three stages (:mod:`synth.encodings.milp`)."""

    ENCODING: ClassVar[str] = "milp"
    sketch: str | None = None
    """Shipped sketch name or file; default the shipped sketch fitting the topology."""
    solver: str | None = None
    """``highs`` (default) | ``cbc`` | ``cpsat`` | ``gurobi``."""
    size: Size = DEFAULT_SIZE
    """Bytes the plan is tuned for."""
    window: int = 4
    """Stage 3 re-batches the ordering's last ``window + 1`` steps into up to ``window`` more
    (0: no batching MILP); a window over 2 runs after a first pass with 2, from its plan."""
    max_extra_hops: int | None = None
    """Route-length slack over shortest paths; default the sketch's hint, else 1 for alltoall, 0."""
    mip_gap: float | None = None
    """Relative MIP gap; default the sketch's hint, else the solver layer's default."""
    symmetry: bool = True
    """Plan one representative per rank orbit and replicate."""
    stage3_time_limit: float = 10.0
    """Cap on each batching MILP's work, in deterministic seconds (:mod:`synth.encodings.work`;
    also at most a quarter of the time limit); its node budget ``STAGE3_NODES`` applies too."""
    progress: Any = None
    """A :class:`synth.progress.SolverProgress` that observes every solve (benchmarks); None: the
    current progress reporter shows them."""


@dataclass(frozen=True)
class TreesOptions(EncodingOptions):
    """ForestColl tree packing (:mod:`synth.encodings.trees`)."""

    ENCODING: ClassVar[str] = "trees"
    size: Size = DEFAULT_SIZE
    """Bytes the plan is tuned for."""
    symmetry: bool = True
    """False plans every root instead of one per orbit."""
    max_transfers: int = 2_200_000
    """Cap on the schedule's transfers."""
    max_tasks: int = 12_000
    """Cap on the planned tasks per phase."""
    max_pieces: int | None = None
    """Cap on the pieces per root (e.g. to fit a runtime's per-rank instruction limit)."""
    small_size: int = 1 << 20
    """A second candidate ``trees_<size>`` is planned for this many bytes (0: none)."""
    rail_stripes: bool = False
    """Each rank talks to about nodes/8 fabric peers (fits MSCCL's 32 threadblocks per channel)."""
    aligned_ops: int = 3584
    """When the main candidate's pieces per root are not a power of two, or its program is over
    the runtime's 4095 nodes a rank, a candidate ``trees_aligned`` is planned with (fewer)
    power-of-two pieces and at most this many instructions per rank (two per transfer); 0: none.
    The MSCCL runtimes select a file only for calls whose element count is a multiple of its
    ``nchunksperloop`` (spec §3.1), so a 120-piece plan never serves a power-of-two call;
    3584 = 64 threadblocks (the default budget) of 56 steps (the exec limit of 64, less an eighth
    for dependency nops)."""
    striped_peers: int = 64
    """When the main candidate's busiest rank exchanges with more peers than this in one direction
    (each peer needs a threadblock of its own: 64 is the default budget), a candidate
    ``trees_striped`` is planned with ``rail_stripes`` and power-of-two pieces within
    ``aligned_ops``, so that a file can be written at all; 0: none."""


@dataclass(frozen=True)
class FlowOptions(EncodingOptions):
    """Time-expanded multi-commodity flow (:mod:`synth.encodings.flow`)."""

    ENCODING: ClassVar[str] = "flow"
    size: Size = DEFAULT_SIZE
    """Bytes the plan is tuned for."""
    symmetry: bool = True
    """Plan one representative source per orbit and replicate."""
    rail_stripes: bool = False
    """Paths only over the striped inter-node fabric."""
    max_paths: int = 4
    """Candidate paths per commodity."""
    extra_steps: int = 8
    """How far the step count is searched past its minimum (stops after two steps without gain)."""
    max_transfers: int = 6_000_000
    """Cap on the schedule's transfers."""
