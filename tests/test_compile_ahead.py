"""Compiling ahead on a spare core (synth/select/compile_ahead.py): the worker's text is the
compiler's, a refusal comes back as the compiler's message, a job the worker has not started is
left to the caller, and a dead worker only sends its jobs back inline; a timing it makes is the
program model's own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.collectives import make_collective
from synth.emit import XmlOptions, emit_xml_text
from synth.errors import SynthError
from synth.schedule import Schedule, Step, Transfer
from synth.select import compile_ahead
from synth.select.compile_ahead import CompileAhead, wanted


def _pair() -> Schedule:
    coll = make_collective("allgather", 2, 1)
    return Schedule(coll, "m", "h", (Step((Transfer(0, 1, 0), Transfer(1, 0, 1))),), "pair",
                    "test", {})


def test_the_workers_text_is_the_compilers_and_a_refusal_is_its_message():
    schedule = _pair()
    simple, ll = XmlOptions(), XmlOptions(proto="LL")
    refused = XmlOptions(instances=10_000)      # more channels than any runtime has
    ahead = CompileAhead()
    try:
        ahead.plan([("pair", schedule, simple), ("pair", schedule, ll), ("pair", schedule, refused)])
        got = []
        for options in (simple, ll, refused):
            ahead.pump()
            got.append(ahead.take("pair", options))
        assert got[0] == emit_xml_text(schedule, simple)
        assert got[1] == emit_xml_text(schedule, ll)
        # the worker's parse came with each text, taken as this process's own
        import hashlib

        from synth.emit import xml_parse
        for text in got[:2]:
            kept = xml_parse._PARSED[(hashlib.sha256(text.encode()).hexdigest(), "exec")][1]
            assert kept == xml_parse.parse_program.__wrapped__.__wrapped__(text, "pair.xml")
        with pytest.raises(SynthError) as exc:
            emit_xml_text(schedule, refused)
        assert got[2][0] == exc.value.message
        assert ahead.compiled == 3
    finally:
        ahead.close()


def test_a_job_not_started_is_left_to_the_caller_and_a_dead_worker_to_the_inline_path():
    schedule = _pair()
    simple, ll = XmlOptions(), XmlOptions(proto="LL")
    ahead = CompileAhead()
    try:
        ahead.plan([("pair", schedule, simple), ("pair", schedule, ll)])
        assert ahead.take("pair", ll) is None       # nothing started yet: compile it yourself
        ahead.pump()                                 # starts the first job (ll is taken)
        ahead._proc.kill()
        ahead._proc.join()
        assert ahead.take("pair", simple) is None
        assert ahead.broken
        ahead.pump()                                 # a broken worker starts nothing
        assert ahead._proc is None
    finally:
        ahead.close()


def test_a_timing_made_ahead_is_the_program_models_and_the_next_one_is_left_to_the_caller():
    from synth.builders import fully_connected
    from synth.emit.xml_parse import parse_program
    from synth.timing.program import program_model, program_times_us

    topology, schedule = fully_connected(2), _pair()
    simple, ll = XmlOptions(), XmlOptions(proto="LL")
    text = emit_xml_text(schedule, simple)
    ahead = CompileAhead(topology, None, "exec", lambda name, options: text if options == simple
                         else None)
    try:
        jobs = [(options, size) for options in (simple, ll) for size in (1 << 10, 1 << 20)]
        ahead.plan_times([("pair", schedule, options, size, "pair.xml") for options, size in jobs])
        ahead.pump()
        # the first job is the caller's next: the worker starts the second
        got = {job: ahead.take_time("pair", *job) for job in jobs}
        assert got[jobs[0]] is None and got[jobs[1]] is not None
        assert ahead.timed == sum(t is not None for t in got.values())
        for (options, size), time_us in got.items():
            if time_us is None:
                continue
            program = parse_program(emit_xml_text(schedule, options), "pair.xml", "exec")
            assert time_us == program_times_us(program, topology, [size],
                                               model=program_model(topology, options.proto))[0]
        if got[jobs[3]] is not None:    # the worker compiled the LL text for it: it is offered
            assert ahead.take("pair", ll) == emit_xml_text(schedule, ll)
    finally:
        ahead.close()


def test_while_the_worker_times_one_the_caller_times_the_next_planned_ones():
    """No worker process here: the state of one timing the next job (``_current``) is set by
    hand, and the caller's inline timing plays the worker finishing it."""
    simple = XmlOptions()
    jobs = [("pair", None, simple, size, "pair.xml") for size in (1, 2, 3, 4)]
    ahead = CompileAhead()
    ahead.plan_times(jobs)
    ahead._seen_times.add(("pair", simple, 1))      # the caller took the first itself
    ahead._current = ("time", ("pair", simple, 2))  # the worker times the second
    ahead._seen_times.add(("pair", simple, 2))
    made = []

    def inline(name, options, size):
        made.append(size)
        if size == 4:       # the worker answers while the caller times the fourth
            with ahead._lock:
                ahead._current = None
                ahead._times[("pair", simple, 2)] = 20.0
        return None if size == 3 else 10.0 * size   # no program at hand for the third

    assert ahead.take_time("pair", simple, 2, inline) == 20.0
    assert made == [3, 4] and ahead.timed == 1
    assert ahead.take_time("pair", simple, 4) == 40.0, "the caller's own time is kept for it"
    assert ahead.timed == 1
    assert ("pair", simple, 3) not in ahead._seen_times, "the third is left to whoever gets to it"
    ahead.close()


def test_a_range_file_made_ahead_is_the_inline_one_and_its_times_are_remembered():
    from dataclasses import replace

    from synth.builders import fully_connected
    from synth.emit import emit_verified_xml
    from synth.emit.variants import program_for_sizes
    from synth.emit.xml_parse import parse_program
    from synth.timing.program import CACHE_STATS, cached_times, program_model

    topology, schedule = fully_connected(2), _pair()
    full = XmlOptions(proto="LL", max_bytes=1 << 20)
    ahead = CompileAhead(topology, None, "exec")
    try:
        ahead.plan_files([("pair", schedule, full, None, 1024, 4096, (1024, 4096)),
                          ("pair", schedule, replace(full, proto="Simple"), None, 0, 1 << 20, ()),
                          ("pair", schedule, replace(full, instances=10_000), None, 0, 0, ())])
        ahead.pump()        # the worker starts from the last job: the compiler refuses it
        refused = ahead.take_file("pair", replace(full, instances=10_000), 0, 0)
        with pytest.raises(SynthError) as exc:
            emit_verified_xml(schedule, replace(full, instances=10_000))
        assert refused == (exc.value.message, None)
        own = ahead.take_file("pair", replace(full, proto="Simple"), 0, 1 << 20)
        whole, part = ahead.take_file("pair", full, 1024, 4096)
    finally:
        ahead.close()
    def untimed(entry):     # a report's elapsed_s is the wall time its proof took
        return entry[0], [replace(r, elapsed_s=0.0) for r in entry[1]]

    # the range that is the compile's own: the compile, proven
    assert untimed(own[0]) == untimed(emit_verified_xml(schedule, replace(full, proto="Simple")))
    assert own[1] is None
    # another range: the compile, not proven (nothing writes it), and the range's file, proven
    text, _ = emit_verified_xml(schedule, full)
    assert whole == (text, None)
    ranged, reports = program_for_sizes(parse_program(text, "pair.xml"), schedule, full, 1024, 4096)
    assert untimed(part) == untimed((ranged, reports))
    assert ahead.made_files == 3
    simulated = CACHE_STATS.simulated
    model = program_model(topology, "LL")
    times = cached_times(ranged, topology, [1024, 4096], model=model)
    assert CACHE_STATS.simulated == simulated, "the worker's times were not remembered"
    from synth.timing.program import program_times_us
    assert times == program_times_us(parse_program(ranged), topology, [1024, 4096], model=model)


def test_a_range_nobody_planned_takes_the_compile_of_a_planned_one():
    """The veto can move a range's bounds after the worker was given the first pass's: the file
    for the moved range is the same compile with other bounds, so the worker's compile serves it
    (not proven: the caller proves the range's file), and the range's own file is left to it."""
    from synth.builders import fully_connected
    from synth.emit import emit_verified_xml

    topology, schedule = fully_connected(2), _pair()
    full = XmlOptions(proto="LL", max_bytes=1 << 20)
    ahead = CompileAhead(topology, None, "exec")
    try:
        ahead.plan_files([("pair", schedule, full, None, 1024, 4096, ())])
        ahead.pump()
        moved = ahead.take_file("pair", full, 1024, 8192)   # waits for the job it started
        never = ahead.take_file("pair", replace(full, proto="Simple"), 1024, 8192)
    finally:
        ahead.close()
    assert moved == ((emit_verified_xml(schedule, full)[0], None), None)
    assert never is None
    assert ahead.shared_compiles == 1 and ahead.made_files == 0


def test_when_it_compiles_ahead(monkeypatch):
    monkeypatch.setenv(compile_ahead.ENV, "1")
    assert wanted(0)
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert not wanted(10**9)
    monkeypatch.setenv(compile_ahead.ENV, "yes")
    with pytest.raises(SynthError, match=compile_ahead.ENV):
        wanted(0)
    monkeypatch.delenv(compile_ahead.ENV)
    assert not wanted(compile_ahead.MIN_TRANSFERS - 1)
    monkeypatch.setattr("synth.cores.idle_cores", lambda: 1)
    assert not wanted(10**9)
    monkeypatch.setattr("synth.cores.idle_cores", lambda: 2)
    assert wanted(10**9)


def test_idle_cores_are_those_other_processes_leave_idle_now(monkeypatch):
    from types import SimpleNamespace

    from synth import cores

    def machine(busy_ticks, own_s):     # this module's os and time, as they read 0.2 s apart
        ticks = iter([(0, 0), (40, 40 - busy_ticks)])
        clock = iter([0.0, 0.2])
        own = iter([(0.0, 0.0), (own_s, 0.0)])
        monkeypatch.setattr(cores, "_cpu_ticks", lambda: next(ticks))
        monkeypatch.setattr(cores, "time", SimpleNamespace(sleep=lambda s: None,
                                                           monotonic=lambda: next(clock)))
        monkeypatch.setattr(cores, "os", SimpleNamespace(
            cpu_count=lambda: 2, getloadavg=lambda: (1.9, 1.0, 1.0), times=lambda: next(own)))

    machine(20, 0.2)        # one core busy, and it is this process: the load average is stale
    assert cores.idle_cores() == 2
    machine(40, 0.2)        # both busy, one by another process
    assert cores.idle_cores() == 1
    machine(10, 0.0)        # a quarter of the ticks busy: half a core elsewhere
    assert cores.busy_elsewhere() == pytest.approx(0.5)

    def no_proc():
        raise OSError("no /proc/stat")

    monkeypatch.setattr(cores, "_cpu_ticks", no_proc)
    assert cores.busy_elsewhere() is None
    assert cores.idle_cores() == 1      # the load average stands in: 0.9 of another's load


def test_a_planned_compile_the_caller_will_never_ask_for_is_passed_over():
    """The caller's word (``wanted``) is asked as each planned compile comes up, with the
    compiles the worker saw refused: here, nothing after a refusal is wanted."""
    schedule = _pair()
    simple, ll = XmlOptions(), XmlOptions(proto="LL")
    refused = XmlOptions(instances=10_000)
    asked: list[tuple[XmlOptions, frozenset]] = []

    def after_a_refusal_nothing(name, options, seen_refused):
        asked.append((options, frozenset(seen_refused)))
        return not seen_refused

    ahead = CompileAhead()
    ahead.wanted = after_a_refusal_nothing
    try:
        ahead.plan([("pair", schedule, refused), ("pair", schedule, simple),
                    ("pair", schedule, ll)])
        ahead.pump()
        assert isinstance(ahead.take("pair", refused), tuple)
        ahead.pump()
        assert ahead.take("pair", simple) is None and ahead.take("pair", ll) is None
        assert ahead.passed_over == 2 and ahead.compiled == 1
        assert [o for o, _ in asked] == [refused, simple, ll]
        assert asked[1][1] == {("pair", refused)}
    finally:
        ahead.close()


def test_the_scorer_passes_over_only_compiles_it_never_asks_for(monkeypatch):
    """The program scorer's word to the worker (``ProgramScorer._run``'s ``may_want``) is sound:
    no compile it called unwanted is asked for later in the run, and where the compiler refused
    a lower instance count, the higher ones of that protocol are unwanted and never asked for.
    The times are those of the run without a worker."""
    import itertools
    import math

    from synth.select.program_scorer import ProgramScorer
    from synth.solve import solve
    from synth.topology_io import load_topology

    topo = load_topology("dgx1")
    res = solve(topo, make_collective("allgather", 8), encoding="baseline",
                sizes=tuple(2 ** k for k in range(10, 31, 5)), nccl=False)
    # 8 blocks a rank: the direct schedule (7 peers) is refused at x4
    xml = XmlOptions(max_threadblocks=8)
    order = itertools.count()
    verdicts: list[tuple[int, str, XmlOptions, bool]] = []
    requests: list[tuple[int, str, XmlOptions]] = []
    final: list = []

    def set_wanted(self, value):
        def recorded(name, options, refused):
            got = value(name, options, refused)
            verdicts.append((next(order), name, options, got))
            return got
        if value is not None:
            final.append(value)
        self.__dict__["wanted"] = recorded if value is not None else None

    monkeypatch.setattr(compile_ahead.CompileAhead, "wanted",
                        property(lambda self: self.__dict__.get("wanted"), set_wanted),
                        raising=False)
    real = ProgramScorer._program

    def program(self, c, proto, instances):
        requests.append((next(order), c.name, self.options(proto, instances)))
        return real(self, c, proto, instances)

    monkeypatch.setattr(ProgramScorer, "_program", program)
    monkeypatch.setenv(compile_ahead.ENV, "1")
    ahead = ProgramScorer(res, topo, xml, instances=(1, 2, 4, 8), protocols=("LL",))
    times = ahead.run()
    for n, name, options, ok in verdicts:
        if not ok:
            assert not [r for r in requests if r[0] > n and r[1:] == (name, options)], \
                (name, options)
    monkeypatch.setenv(compile_ahead.ENV, "0")
    inline = ProgramScorer(res, topo, xml, instances=(1, 2, 4, 8), protocols=("LL",))
    assert inline.run() == times
    may_want = final[0]
    refused = [(c, inst) for c in res.candidates for inst in (1, 2, 4)
               if ahead._programs.get((c.name, "Simple", inst), 0) is None]
    assert refused, "no candidate's count was refused: the case tests nothing"
    for c, inst in refused:
        for higher in (2 * inst, 4 * inst):
            assert not may_want(c.name, ahead.options("Simple", higher), set())
            assert all(math.isinf(t) for t in times.get((c.name, "Simple", higher), [math.inf]))
    for c in res.candidates:
        if all(ahead._programs.get((c.name, "Simple", inst)) is not None for inst in (1, 2, 4)):
            assert may_want(c.name, ahead.options("Simple", 8), set())
    # another protocol's counts are not a ladder of times, but one above a refused count is
    # neither compiled ahead nor asked for
    refused_ll = [(c, inst) for c in res.candidates for inst in (1, 2, 4)
                  if ahead._programs.get((c.name, "LL", inst), 0) is None]
    assert refused_ll, "no LL count was refused: the case tests nothing"
    for c, inst in refused_ll:
        for higher in (2 * inst, 4 * inst):
            if higher <= 8:
                assert not may_want(c.name, ahead.options("LL", higher), set())
                assert not [r for r in requests if r[1:] == (c.name, ahead.options("LL", higher))]


def test_a_word_that_raises_counts_as_wanted():
    """The thread that feeds the worker asks ``wanted``: whatever it raises, the compile is made
    (a hang of the caller waiting on a dead thread would be worse than a needless compile)."""
    schedule = _pair()

    def broken(name, options, refused):
        raise KeyError(name)

    ahead = CompileAhead()
    ahead.wanted = broken
    try:
        ahead.plan([("pair", schedule, XmlOptions())])
        ahead.pump()
        assert ahead.take("pair", XmlOptions()) == emit_xml_text(schedule, XmlOptions())
        assert ahead.passed_over == 0
    finally:
        ahead.close()
