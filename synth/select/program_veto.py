"""The program model's veto of the files ``synth solve`` is about to write.

Why: a solve ranks with the program model only down to the sizes its budget lets it time
(:attr:`synth.select.program_scorer.ProgramScorer.cut`); below them the lock-step model ranks, and
a file it puts ahead of NCCL there can still be behind NCCL as the runtime runs it. On
``synth solve --topo dgx_h100 --nodes 64 --coll allgather`` the lock-step model handed
1,449 B..47 MB to recursive doubling, whose written file the program model then timed at
0.77x-0.99x NCCL. The catalog already vetoes such files (:func:`synth.select.nccl.
choose_with_nccl`); :class:`ProgramVeto` is the timer that lets ``solve`` use the same loop: each
file the ranges would write is timed at the sizes of its range the program model did not rank,
and a (configuration, size) not below NCCL's time there is vetoed, the ranges chosen again.

Times are kept by the file's content (:func:`synth.timing.program.cached_times`), so the
written files' ``program_us`` that ``solve`` reports afterwards are read, not simulated again.
Where the program model's lower bound (:func:`synth.timing.program_bound.time_lower_bound`) is
already not below NCCL's time, the file is vetoed there without a simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..emit.xml_parse import parse_program
from ..timing.program import (
    ProgramModel,
    cached_times,
    program_model,
    remembered_times,
)
from ..timing.program_bound import time_lower_bound
from ..topology import Topology


class ProgramVeto:
    """Times written files with the timed program model, to veto those behind NCCL.

    ``calibration``: the solve's calibration file (None: NCCL's figures); ``profile``: the XML
    profile the files are written in (their slicing depends on it). ``protocols``: a protocol
    model already built, instead of ``calibration``'s (a catalog's); ``store``: where times are
    kept across runs (:class:`synth.timing.program.TimingStore`, a catalog's cache). ``synth
    catalog`` times its written files through this too (:func:`synth.catalog.emit.program_times`).
    """

    def __init__(self, topology: Topology, calibration: Any = None, profile: str = "exec",
                 protocols: Any = None, store: Any = None) -> None:
        self.topology = topology
        self.calibration = calibration
        self.profile = profile
        self.protocols = protocols
        self.store = store
        self._models: dict[str, ProgramModel] = {}

    def model(self, proto: str) -> ProgramModel:
        """The program model for files in ``proto``, built once."""
        if proto not in self._models:
            self._models[proto] = program_model(self.topology, proto, self.calibration,
                                                protocols=self.protocols)
        return self._models[proto]

    def times(self, text: str, proto: str, sizes: Sequence[int], nccl_us: Sequence[float]
              ) -> tuple[list[float], set[int]]:
        """The file ``text`` (in ``proto``, interpreter-verified) at each of ``sizes``: its
        program time, or, at the positions returned in the set, the program model's lower bound
        where that is already not below ``nccl_us`` at that size (then it is not simulated).

        A range's file is the compile it was cut from with byte bounds set
        (:func:`synth.select.ranking.ranged_xml`); the timing key leaves the bounds out
        (:func:`synth.timing.program_store.text_digest`), so the ranges a veto round reshapes
        share that compile's times, and ``solve``'s report finds them afterwards."""
        return self._times(text, proto, sizes, nccl_us)

    def _times(self, text: str, proto: str, sizes: Sequence[int], nccl_us: Sequence[float]
               ) -> tuple[list[float], set[int]]:
        model = self.model(proto)
        known = remembered_times(text, self.topology, sizes, model=model, profile=self.profile)
        out: list[float] = [known.get(n, 0.0) for n in sizes]
        bounds: set[int] = set()
        todo: list[int] = []
        program = (parse_program(text, "<program>", self.profile) if any(
            n not in known and math.isfinite(nccl) for n, nccl in zip(sizes, nccl_us, strict=True))
            else None)     # no bound to take: cached_times parses only if it must simulate
        for i, (n, nccl) in enumerate(zip(sizes, nccl_us, strict=True)):
            if n in known:
                continue
            if program is None or not math.isfinite(nccl):
                todo.append(i)
                continue
            low = time_lower_bound(program, self.topology, n, model, self.profile)
            if low < nccl:
                todo.append(i)
            else:
                out[i] = low
                bounds.add(i)
        timed = cached_times(text, self.topology, [sizes[i] for i in todo], model=model,
                             profile=self.profile, program=program, store=self.store)
        for i, t in zip(todo, timed, strict=True):
            out[i] = t
        return out, bounds
