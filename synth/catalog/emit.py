"""The winners' MSCCL-IR files, each proven by the interpreter before the catalog may hold it.

For a range ``[lo, hi]`` the file for the executor runtimes (``exec`` profile: msccl-executor-nccl,
and RCCL's parser with the same semantics) carries ``minBytes=lo maxBytes=hi`` — inclusive at both
ends there (spec §2.1), so the ranges of one collective tile the requested sizes exactly — and the
protocol and instance count of the winning configuration. The legacy runtime (microsoft/msccl,
``MSCCL_CONFIG``) spells some collectives differently, reads ``maxBytes`` as exclusive and cannot
declare both in-place and out-of-place, so it gets its own twin (``legacy`` profile,
``maxBytes=hi+1``, out-of-place). Both go through :func:`synth.emit.emit_verified_xml`: compiled,
printed, parsed back with the runtime's lexical rules and executed by the interpreter in every mode
the file declares, with the deadlock analysis at the file's ``maxBytes``.

**Drafts while choosing.** The program model's veto (:func:`synth.select.nccl.choose_with_nccl`)
chooses the ranges many times over, and most ranges it tries are passed over. So while it chooses,
a range's file is only compiled (:meth:`Emitter.attempt`: the compiler's limits and the
co-residency check decide whether it can exist), and the interpreter runs once per file finally
chosen (:meth:`Emitter.verify`); a file failing there is excluded like one failing a limit and the
ranges are chosen again. The compile depends on the range's ``maxBytes`` only (its deadlock check
and placement weigh messages at that size; ``minBytes`` is only written into the file), so one
compile per (configuration, ``maxBytes``) serves every range ending there: the file is that
program with the range's ``minBytes`` set, byte for byte what compiling with both bounds writes.
The compiled text is kept in the cache's ``compiled/`` section (keyed like a verified file, with
``minBytes`` 0, but never read as one), so a rerun compiles none of the ranges it passes over.

A file the runtime could not run is not produced: the compiler's hard limits (threadblocks, steps,
channels, tokenizer nodes; spec §6) raise, and so does this module's co-residency check — all of a
rank's threadblocks must be resident at once (spec §5.1), so a file needing more than the GPU has
SMs (:data:`SM_COUNT`) would hang.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..emit import XmlOptions, emit_verified_xml, verify_text, xml_unsupported_reason
from ..emit.compile import compile_schedule
from ..emit.program import Program
from ..emit.xml_parse import parse_program
from ..emit.xml_write import program_to_xml
from ..errors import SynthError
from ..mscclpp.emit import PlanOptions, emit_verified_plan
from ..outputs.msccl import max_threadblocks, sm_count
from ..select.buckets import Bucket
from ..select.nccl import Timed
from ..select.ranges import Config, Range
from ..timing.program_store import TimingStore
from ..timing.protocol import ProtocolModel
from ..topology import Topology
from .cache import SolveCache, xml_key
from .candidates import Candidate


@dataclass(frozen=True)
class Emitted:
    """One range's files and what the interpreter checked."""

    range: Range
    exec_xml: str
    legacy_xml: str | None
    legacy_note: str
    modes: tuple[str, ...]
    threadblocks: int
    nchannels: int
    plan_json: str | None = None
    """The range's MSCCL++ execution plan (``catalog --format mscclpp``), verified by the plan
    interpreter (:func:`synth.mscclpp.emit.emit_verified_plan`)."""
    plan_note: str = ""
    """Why the range has no plan when one was asked for."""
    timed_xml: str = ""
    """The same program with ``minBytes`` 0, what the program model times (it never reads
    ``minBytes``), so ranges sharing a compile share their times; empty: ``exec_xml``."""


class Emitter:
    """Produces (and remembers) each range's files for one collective.

    With a ``cache``, an emission whose inputs were verified before (same schedule bytes, options and
    emitter/interpreter sources, :func:`synth.catalog.cache.xml_key`) is reused instead of compiled
    and executed again; its text is checked against the stored SHA-256.
    """

    def __init__(self, topology: Topology, candidates: dict[Config, Candidate],
                 cache: SolveCache | None = None, plans: bool = False) -> None:
        self.topology = topology
        self.plans = plans
        self.sms = sm_count(topology)
        self.lookup = candidates
        self.cache = cache
        self.done: dict[tuple[Config, int, int], Emitted | str] = {}
        self.checked: set[tuple[Config, int, int]] = set()
        """Ranges whose executor file the interpreter has proved (now or in the cache)."""
        self.programs: dict[tuple[Config, int], tuple[Program, str] | str] = {}
        self.finished: dict[tuple[Config, int, int], Emitted] = {}
        self.reused = 0
        self.verified = 0
        self.compiled = 0
        """Programs compiled in this run (one per configuration and ``maxBytes``)."""

    def attempt(self, r: Range) -> str | None:
        """None when the range's file can exist (now or from an earlier attempt), else why not.

        Only the executor file is compiled here, not yet interpreted (module docstring: drafts):
        it decides whether the range can be served, and it is what the program model times. The
        interpreter's verdict (:meth:`verify`), the legacy twin and the plan wait until the range
        is chosen, so a range the program model's veto passes over
        (:func:`synth.select.nccl.choose_with_nccl`) costs at most one compile."""
        key = (r.config, r.lo, r.hi)
        if key not in self.done:
            self.done[key] = self._draft(r)
        got = self.done[key]
        return got if isinstance(got, str) else None

    def verify(self, r: Range) -> str | None:
        """The interpreter on the range's executor file: None when proved (now or before, in the
        cache), else why not; a failed range fails :meth:`attempt` from then on."""
        key = (r.config, r.lo, r.hi)
        if self.attempt(r) is not None or key in self.checked:
            return self.attempt(r)
        e = self.executor_file(r)
        cand, opts = self.lookup[r.config], self._options(r)
        try:
            _, reports = verify_text(e.exec_xml, cand.schedule, opts)
            modes = tuple(rep.mode for rep in reports)
            record: dict[str, Any] = {"xml": e.exec_xml, "sha256": _sha(e.exec_xml),
                                      "modes": list(modes), "error": None}
            self.done[key] = dataclasses.replace(e, modes=modes)
        except SynthError as exc:
            record = {"error": exc.message}
            self.done[key] = exc.message
        self.verified += 1
        self.checked.add(key)
        if self.cache is not None:
            self.cache.put(xml_key(cand.schedule.to_json(), dataclasses.asdict(opts)), record, "xml")
        return self.attempt(r)

    def executor_file(self, r: Range) -> Emitted:
        """The range's executor file as :meth:`attempt` produced it (no legacy twin or plan yet)."""
        got = self.done[(r.config, r.lo, r.hi)]
        assert isinstance(got, Emitted)
        return got

    def result(self, r: Range) -> Emitted:
        """The range's files, the legacy twin and the plan included (produced on first call)."""
        key = (r.config, r.lo, r.hi)
        if key not in self.finished:
            assert self.verify(r) is None, "a range was written whose file the interpreter failed"
            self.finished[key] = self._twins(self.executor_file(r))
        return self.finished[key]

    @staticmethod
    def _options(r: Range) -> XmlOptions:
        cfg = r.config
        return XmlOptions(profile="exec", proto=cfg.proto, instances=cfg.instances,
                          min_bytes=r.lo, max_bytes=r.hi)

    def _draft(self, r: Range) -> Emitted | str:
        """The range's executor file, from the cache's verified record when there is one, else
        compiled (once per configuration and ``maxBytes``) but not yet interpreted."""
        cand, opts = self.lookup[r.config], self._options(r)
        if self.cache is not None:
            rec = self.cache.get(xml_key(cand.schedule.to_json(), dataclasses.asdict(opts)), "xml")
            if rec is not None:
                if rec.get("error") is not None:
                    self.reused += 1
                    self.checked.add((r.config, r.lo, r.hi))
                    return str(rec["error"])
                text = rec.get("xml", "")
                if _sha(text) == rec.get("sha256"):
                    self.reused += 1
                    self.checked.add((r.config, r.lo, r.hi))
                    return self._file(r, text, tuple(rec.get("modes", ())))
        got = self._program(r.config, opts)
        if isinstance(got, str):
            return got
        program, timed = got
        text = program_to_xml(dataclasses.replace(program, min_bytes=r.lo), opts.profile)
        return self._file(r, text, (), timed)

    def _program(self, cfg: Config, opts: XmlOptions) -> tuple[Program, str] | str:
        """The configuration compiled for sizes up to ``opts.max_bytes`` (``minBytes`` 0) and its
        text, or why it cannot be (the compiler's limits: the same verdict
        :func:`synth.emit.emit_verified_xml` reaches before it interprets anything)."""
        key = (cfg, opts.max_bytes)
        if key in self.programs:
            return self.programs[key]
        cand = self.lookup[cfg]
        opts = dataclasses.replace(opts, min_bytes=0)
        disk = xml_key(cand.schedule.to_json(), dataclasses.asdict(opts))
        rec = self.cache.get(disk, "compiled") if self.cache is not None else None
        if rec is not None and rec.get("error") is not None:
            self.programs[key] = str(rec["error"])
        elif rec is not None and _sha(rec.get("xml", "")) == rec.get("sha256"):
            text = rec["xml"]
            self.programs[key] = (parse_program(text, f"{cand.name}.xml", opts.profile), text)
        else:
            why = xml_unsupported_reason(cand.schedule, opts)
            try:
                if why:
                    raise SynthError(f"cannot emit XML: {why}")
                program = compile_schedule(cand.schedule, profile=opts.profile, proto=opts.proto,
                                           instances=opts.instances, min_bytes=0,
                                           max_bytes=opts.max_bytes, inplace=opts.inplace,
                                           max_threadblocks=opts.max_threadblocks,
                                           gather=opts.gather, channels=opts.channels,
                                           aggregate=opts.aggregate)
                text = program_to_xml(program, opts.profile)
                self.programs[key] = (program, text)
                record: dict[str, Any] = {"xml": text, "sha256": _sha(text), "error": None}
            except SynthError as exc:
                self.programs[key] = exc.message
                record = {"error": exc.message}
            self.compiled += 1
            if self.cache is not None:
                self.cache.put(disk, record, "compiled")
        return self.programs[key]

    def _file(self, r: Range, text: str, modes: tuple[str, ...], timed: str = "") -> Emitted | str:
        """The range's executor file, or why the runtime could not run it (co-residency)."""
        tbs = max_threadblocks(text)
        if self.sms is not None and tbs > self.sms:
            return (f"needs {tbs} threadblocks per rank; all must be co-resident and the GPU has "
                    f"{self.sms} SMs (spec §5.1)")
        m = re.search(r'\bnchannels="(\d+)"', text)
        return Emitted(r, text, None, "", modes, tbs, int(m.group(1)) if m else 0,
                       timed_xml=timed)

    def _verified(self, cand: Candidate, options: XmlOptions) -> tuple[str, tuple[str, ...]] | str:
        """(text, modes the interpreter ran) or why the file cannot be produced."""
        key = None
        if self.cache is not None:
            key = xml_key(cand.schedule.to_json(), dataclasses.asdict(options))
            rec = self.cache.get(key, "xml")
            if rec is not None:
                if rec.get("error") is not None:
                    self.reused += 1
                    return str(rec["error"])
                text = rec.get("xml", "")
                if _sha(text) == rec.get("sha256"):
                    self.reused += 1
                    return text, tuple(rec.get("modes", ()))
        try:
            text, reports = emit_verified_xml(cand.schedule, options)
            out: tuple[str, tuple[str, ...]] | str = (text, tuple(rep.mode for rep in reports))
            record = {"xml": text, "sha256": _sha(text),
                      "modes": list(out[1]), "error": None}
        except SynthError as exc:
            out = exc.message
            record = {"error": exc.message}
        self.verified += 1
        if self.cache is not None and key is not None:
            self.cache.put(key, record, "xml")
        return out

    def _twins(self, e: Emitted) -> Emitted:
        """``e`` with its legacy twin (``maxBytes=hi+1``, out-of-place) and, when asked, its plan."""
        r, cfg = e.range, e.range.config
        cand = self.lookup[cfg]
        legacy = self._verified(cand, XmlOptions(profile="legacy", proto=cfg.proto,
                                                 instances=cfg.instances, min_bytes=r.lo,
                                                 max_bytes=r.hi + 1))
        legacy_xml, note = (None, f"no legacy file: {legacy}") if isinstance(legacy, str) \
            else (legacy[0], "")
        plan_json, plan_note = self._plan(cand, r) if self.plans else (None, "")
        return dataclasses.replace(e, legacy_xml=legacy_xml, legacy_note=note,
                                   plan_json=plan_json, plan_note=plan_note)

    def _plan(self, cand: Candidate, r: Range) -> tuple[str | None, str]:
        """The same schedule and knobs as the range's XML, as a verified MSCCL++ plan whose
        ``min/max_message_size`` are the range's bounds (both inclusive in the executor's
        ``checkMessageSize``, as in the exec profile's XML)."""
        cfg = r.config
        if cfg.proto not in ("Simple", "LL"):
            return None, f"no MSCCL++ plan: MSCCL++ has no {cfg.proto} protocol"
        try:
            text, _ = emit_verified_plan(cand.schedule, self.topology,
                                         PlanOptions(proto=cfg.proto, instances=cfg.instances,
                                                     min_bytes=r.lo, max_bytes=r.hi,
                                                     max_threadblocks=self.sms))
        except SynthError as exc:
            return None, f"no MSCCL++ plan: {exc.message}"
        return text, ""


def program_times(emitted: Sequence[Emitted], buckets: Sequence[Bucket], topology: Topology,
                  protocols: ProtocolModel, store: TimingStore | None,
                  nccl_us: Sequence[float] | None = None) -> Timed:
    """Per bucket a file serves, that file run by the timed program model
    (:mod:`synth.timing.program`) at the bucket's size: the file as the runtime would execute it
    (threadblocks, grid iterations, FIFO slots, shared links), where the tuner ranked its lock-step
    protocol-model time. What the catalog's NCCL veto (:func:`synth.select.nccl.choose_with_nccl`)
    and its report's ``program_us`` both read, computed once.

    Times are kept by the file's content (:func:`synth.timing.program.cached_times`; in ``store``
    across runs), so another round or a rerun reads them instead of simulating again.

    ``nccl_us`` (NCCL's time per bucket index; None: NCCL does not compete): where the program
    model's lower bound (:func:`synth.timing.program_bound.time_lower_bound`, milliseconds against
    up to seconds a size for an LL file at large sizes) is already not below NCCL's time, the file
    is vetoed there whatever its time, so the bound is returned (listed in ``Timed.bounds``) and
    nothing is simulated; every bucket a final file serves is below NCCL's time, so simulated.
    """
    from ..select.program_veto import ProgramVeto

    veto = ProgramVeto(topology, protocols=protocols, store=store)
    out = Timed()
    size = {b.index: b.size for b in buckets}
    for e in emitted:
        idx = list(e.range.buckets)
        times, bounds = veto.times(e.timed_xml or e.exec_xml, e.range.config.proto,
                                   [size[i] for i in idx],
                                   [nccl_us[i] for i in idx] if nccl_us is not None
                                   else [math.inf] * len(idx))
        out.update(zip(idx, times, strict=True))
        out.bounds.update(idx[k] for k in bounds)
    return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
