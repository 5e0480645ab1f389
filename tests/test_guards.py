"""Size guards (issue 12): requests, encodings and candidates sized before the work, refused fast."""

from __future__ import annotations

import time

import pytest

from synth import guards
from synth.collectives import make_collective
from synth.emit import XmlOptions
from synth.emit.compile import compile_schedule
from synth.encodings import Options, run_encoding
from synth.encodings.baseline import baseline
from synth.errors import SynthError
from synth.guards import Budget, TooBig
from synth.schedule import Schedule, Step, Transfer
from synth.solve import within_budget
from synth.topology_io import load_topology

BIG = Budget(64 * guards.GB)


def test_memory_option_and_default():
    assert guards.parse_memory("8GB") == 8 * 2**30
    total = guards.physical_memory()
    assert total is None or guards.default_max_memory() == total // 2
    with pytest.raises(SynthError, match="below 64MB"):
        guards.parse_memory("1MB")
    with pytest.raises(SynthError):
        guards.parse_memory("lots")


def test_request_over_the_xml_offsets_names_the_fixes():
    with pytest.raises(TooBig, match=r"int16 offsets.*--no-xml, or --chunks 4096 or fewer"):
        guards.check_request("allgather", 8, 100_000, BIG)
    guards.check_request("allgather", 8, 4096, Budget(64 * guards.GB, None))  # no XML: fine
    guards.check_request("allgather", 8, 64, BIG)


def test_request_with_instances_counts_their_chunks():
    with pytest.raises(TooBig, match=r"x 32 instances.*--chunks 512 or fewer"):
        guards.check_request("allgather", 2, 2000, Budget(64 * guards.GB, "exec", 32))
    guards.check_request("allgather", 2, 512, Budget(64 * guards.GB, "exec", 32))


def test_request_over_memory():
    small = Budget(256 * guards.MB, None)
    with pytest.raises(TooBig, match=r"moves at least 5,600,000 chunks.*--chunks \(at most \d+\)"):
        guards.check_request("allgather", 8, 100_000, small)


def _suggested(message: str) -> int:
    """The chunk count a refusal suggests (``at most N`` or ``--chunks N or fewer``)."""
    import re

    found = re.search(r"at most (\d+)\)|--chunks (\d+) or fewer", message)
    assert found, message
    return int(found.group(1) or found.group(2))


@pytest.mark.parametrize("budget", [
    Budget(guards.parse_memory("12GB"), "exec"),       # memory refuses first; XML offsets bind
    Budget(guards.parse_memory("12GB"), None),         # --no-xml: memory alone
    Budget(guards.parse_memory("64MB") + 50 * guards.MB, "exec"),  # memory binds with XML too
    Budget(guards.parse_memory("12GB"), "exec", 8),    # instances shrink the offset limit
])
@pytest.mark.parametrize("kind,n", [("allgather", 8), ("allreduce", 8), ("broadcast", 8),
                                    ("alltoall", 16)])
def test_a_refusal_suggests_chunks_that_every_request_check_accepts(budget, kind, n):
    """Issue 12: `--chunks 1000000000` on dgx1 with XML suggested 172680 (the memory limit), which
    the XML offset limit then refused; the suggestion is the smallest limit, and it passes."""
    with pytest.raises(TooBig) as refused:
        guards.check_request(kind, n, 1_000_000_000, budget)
    fit = _suggested(refused.value.message)
    assert fit == guards.max_request_chunks(kind, n, budget)
    assert fit >= 1
    guards.check_request(kind, n, fit, budget)                  # following the advice works
    with pytest.raises(TooBig):
        guards.check_request(kind, n, fit + 1, budget)          # and it is the most that does


def test_dgx1_billion_chunks_suggests_what_the_xml_can_address(synth_cli, tmp_path):
    r = synth_cli("solve", "--topo", "dgx1", "--coll", "allgather", "--chunks", "1000000000",
                  "--max-memory", "12GB", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    fit = _suggested(r.stderr)
    assert fit == 4096  # 8 ranks x 4096 chunks = 32768 cells, the int16 offsets' reach
    guards.check_request("allgather", 8, fit, Budget(guards.parse_memory("12GB"), "exec"))
    assert not (tmp_path / "o").exists()


def test_model_variable_refusal_suggests_a_request_that_fits():
    budget = Budget(guards.parse_memory("12GB"), "exec")
    with pytest.raises(TooBig) as refused:
        guards.check_encoding("smt", "allgather", 8, 48, 1_000_000, budget)
    fit = _suggested(refused.value.message)
    guards.check_request("allgather", 8, fit, budget)
    guards.check_encoding("smt", "allgather", 8, 48, fit, budget)


def _estimated(spec: str, kind: str, algo: str, k: int):
    """A baseline schedule on ``spec`` and its XML size estimate."""
    topo = load_topology(spec)
    coll = make_collective(kind, topo.num_ranks, k, root=0 if kind == "broadcast" else None)
    sched = baseline(topo, coll, algo)
    return topo, sched, guards.xml_estimate(sched)


def test_xml_estimate_never_exceeds_the_compiled_program():
    """The estimate is a floor of what the compiler emits (so a refusal is never wrong)."""
    cases = [("dgx1", "allgather", "ring", 4), ("dgx1", "allreduce", "ring", 2),
             ("ring:6", "reducescatter", "bidir_ring", 4), ("dgx1", "alltoall", "direct", 1),
             ("switch:5", "allgather", "direct", 2), ("dgx1", "broadcast", "binomial_tree", 4)]
    for spec, kind, algo, k in cases:
        topo, sched, est = _estimated(spec, kind, algo, k)
        prog = compile_schedule(sched)
        nodes = [1 + len(prog.gpus) + len(g.tbs) + sum(len(tb.steps) for tb in g.tbs)
                 for g in prog.gpus]
        assert est.nodes <= max(nodes), (spec, kind, algo, est, max(nodes))
        assert est.nodes >= 1 + topo.num_ranks + 1


def test_narrow_fits_is_the_compilers_rule_for_every_profile():
    """The encodings ask guards (below them) what the compiler asks emit: the same answer, and
    the guards' limits are the exec runtime's (a profile change would show here)."""
    from synth.emit import compile as C
    from synth.emit import runtimes
    from synth.emit import xml_write as W

    assert runtimes.PROFILES["exec"].max_steps == guards.MAX_STEPS
    assert guards.MAX_NODES == W.MAX_NODES and guards.MAX_COUNT == W.MAX_COUNT
    assert guards.MAX_OFFSET == W.MAX_OFFSET
    for profile, lim in runtimes.PROFILES.items():
        for n in (2, 8, 64, 512, 2048):
            for ops in (0, 1, 63, 64, 65, 1000, 3000, 3700, 4000, 5000):
                want = C.narrow_fits(n, ops, profile)
                assert guards.narrow_fits(n, ops, lim.max_steps) == want, (profile, n, ops)
                if profile == "exec":
                    assert guards.narrow_fits(n, ops) == want
    assert guards.narrow_fits(8, 3900) and not guards.narrow_fits(8, 4030)


def _one_chunk_per_step(chunks: int) -> Schedule:
    """2 ranks swapping one chunk per step: nothing aggregates, one receive node per chunk."""
    topo = load_topology("fully_connected:2")
    coll = make_collective("allgather", 2, chunks)
    steps = tuple(Step((Transfer(0, 1, c), Transfer(1, 0, chunks + c))) for c in range(chunks))
    return Schedule(coll, topo.name, topo.content_hash, steps, "one_by_one", "baseline")


def test_candidate_over_the_node_limit_is_passed_over_fast():
    big = _one_chunk_per_step(4500)
    ok = _one_chunk_per_step(8)
    start = time.perf_counter()
    with pytest.raises(TooBig, match=r"4,5\d\d receives.*MAX_NODES.*--no-xml"):
        guards.check_schedule(big, BIG)
    kept, notes = within_budget({"big": big, "ok": ok}, BIG)
    assert time.perf_counter() - start < 5
    assert list(kept) == ["ok"] and notes[0].startswith("big passed over:")
    guards.check_schedule(big, Budget(64 * guards.GB, None))  # --no-xml: it fits
    with pytest.raises(TooBig, match="no candidate fits"):
        within_budget({"big": big}, BIG)


def test_candidate_over_memory():
    sched = _one_chunk_per_step(64)
    with pytest.raises(TooBig, match="against --max-memory"):
        guards.check_schedule(sched, Budget(guards.BASE_BYTES + 1000, None))


def test_solver_models_refused_before_they_are_built():
    topo = load_topology("ring:4")
    coll = make_collective("allgather", 4)
    opts = Options(chunks=200_000, budget=Budget(64 * guards.GB, None))
    start = time.perf_counter()
    with pytest.raises(TooBig, match=r"smt with 200000 chunks.*variables"):
        run_encoding("smt", topo, coll, opts)
    assert time.perf_counter() - start < 5


def test_auto_steps_aside_and_says_so():
    topo = load_topology("ring:4")
    coll = make_collective("allgather", 4, 3000)   # 36,000 transfers a schedule: ~11 MB
    notes: list[str] = []
    room_for_one = Budget(guards.BASE_BYTES + 15 * guards.MB, None)
    found = run_encoding("auto", topo, coll, Options(chunks=3000, budget=room_for_one),
                         notes)
    assert len(found) == 1 and next(iter(found.values())).encoding == "baseline"
    assert any(n.startswith("trees stepped aside: ") for n in notes), notes
    assert any(n.startswith("smt stepped aside: ") for n in notes), notes
    notes.clear()
    tiny = Budget(guards.BASE_BYTES + 6 * guards.MB, None)
    with pytest.raises(SynthError, match="stepped aside"):
        run_encoding("auto", topo, coll, Options(chunks=3000, budget=tiny), notes)
    assert any(n.startswith("baseline stepped aside: ") for n in notes), notes


@pytest.mark.parametrize("extra", [[], ["--algo", "ring"], ["--no-xml", "--max-memory", "1GB"]])
def test_cli_refuses_100000_chunks_in_seconds(synth_cli, tmp_path, extra):
    start = time.perf_counter()
    r = synth_cli("solve", "--topo", "dgx1", "--coll", "allgather", "--chunks", "100000",
                  *extra, "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert time.perf_counter() - start < 60  # the bar is 5 s; a loaded CI box gets slack
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("synth: error:") and "Traceback" not in r.stderr
    assert ("--no-xml" in line) != ("--no-xml" in extra)
    assert "--chunks" in line
    assert not (tmp_path / "o").exists()


def test_solve_notes_what_the_guards_passed_over(tmp_path):
    """The notes of passed-over candidates reach the written result, and a refusal names them."""
    from synth.outputs import write_winners
    from synth.solve import solve

    topo = load_topology("fully_connected:2")
    coll = make_collective("allgather", 2)
    result = solve(topo, coll, encoding="baseline", budget=BIG)
    result.notes.append("big passed over: (a stand-in note)")
    written = write_winners(result, tmp_path)
    assert written.notes[0] == "big passed over: (a stand-in note)"
    # when no range can be emitted either, the refusal names what was passed over and --no-xml
    import synth.outputs as S

    def fail(*_a, **_k):
        raise SynthError("no configuration can be emitted for sizes 0..1")

    monkey = pytest.MonkeyPatch()
    monkey.setattr(S, "choose_ranges", fail)
    try:
        with pytest.raises(SynthError, match=r"passed over before: big passed over.*--no-xml"):
            write_winners(result, tmp_path / "again")
    finally:
        monkey.undo()
    assert not (tmp_path / "again").exists()


def test_threadblock_budget_floor():
    """Every peer a rank receives from (or sends to) needs a threadblock of its own: a schedule
    with more peers than --max-threadblocks is passed over before it is compiled."""
    topo = load_topology("switch:12")
    sched = baseline(topo, make_collective("allgather", 12), "direct")   # 11 peers each way
    est = guards.xml_estimate(sched)
    assert est.threadblocks == 11
    prog = compile_schedule(sched)
    assert min(len(g.tbs) for g in prog.gpus) >= est.threadblocks  # a floor of what is emitted
    guards.check_schedule(sched, Budget(64 * guards.GB, "exec", 1, 11))
    with pytest.raises(TooBig, match=r"11 peers in one direction.*--max-threadblocks is 8"):
        guards.check_schedule(sched, Budget(64 * guards.GB, "exec", 1, 8))
    with pytest.raises(TooBig, match=r"at least 22 threadblocks"):
        guards.check_schedule(sched, Budget(64 * guards.GB, "exec", 2, 16))


@pytest.mark.slow  # a 128-rank solve until the address space runs out
def test_the_memory_backstop_names_the_stage():
    """An allocation the estimates missed fails as one line naming the phase it struck in, exit 2
    (here the address space is capped below what the program model needs, as the backstop that
    `solve` sets from --max-memory would be on a smaller machine; ``--max-xml-steps 0`` so the
    step estimate does not pass the big candidates over before they are compiled)."""
    import subprocess
    import sys

    code = ("import resource\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1400 * 2**20, resource.RLIM_INFINITY))\n"
            "from synth.cli import main\n"
            "main(['solve', '--topo', 'dgx_h100', '--nodes', '16', '--coll', 'allgather',\n"
            "      '--encoding', 'trees', '--max-memory', '64GB', '--max-xml-steps', '0',\n"
            "      '--out', sys.argv[1]])\n")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-c", "import sys\n" + code, tmp + "/o"],
                           capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("synth: error: out of memory during solving allgather"), last
    assert "Traceback" not in r.stderr


def _program_steps(prog) -> int:
    """Threadblocks and steps over every rank of a compiled program (what XmlEstimate.steps
    under-counts)."""
    return sum(len(g.tbs) + sum(len(tb.steps) for tb in g.tbs) for g in prog.gpus)


def test_xml_steps_estimate_is_a_floor_of_the_whole_program():
    """The all-ranks count the work budget refuses by is never above what the compiler emits (so a
    refusal never overstates), and it is the per-rank counts summed (the busiest rank's is one of
    them)."""
    cases = [("dgx1", "allgather", "ring", 4), ("dgx1", "allreduce", "ring", 2),
             ("switch:5", "allgather", "direct", 2), ("dgx1", "broadcast", "binomial_tree", 4)]
    for spec, kind, algo, k in cases:
        topo, sched, est = _estimated(spec, kind, algo, k)
        assert est.nodes - 1 - topo.num_ranks <= est.steps <= _program_steps(
            compile_schedule(sched)), (spec, kind, algo, est)
        assert guards.xml_estimate(sched, 2).steps == 2 * est.steps


def _emit_forbidden(monkeypatch):
    """Any compile fails the test: the work budget must refuse before compiling."""
    import synth.select.program_scorer as PS

    def never(schedule, options):
        raise AssertionError(f"{schedule.algorithm} was compiled")
    monkeypatch.setattr(PS, "emit_verified_xml", never)


def test_candidate_over_the_xml_work_budget_steps_aside_before_compiling(monkeypatch, tmp_path):
    """A candidate whose program is estimated above the work budget (MAX_XML_STEPS, lowered here
    to what a 16-rank ring's file takes) is passed over with a one-line note naming it and the
    estimate, before it is verified or compiled; the run goes on with the candidates that fit, and
    when none does it refuses in one line naming --no-xml (exit 2), having compiled nothing."""
    from synth.solve import SolveRequest, run

    topo = load_topology("ring:16")
    ring = baseline(topo, make_collective("allgather", 16), "ring")
    direct = baseline(topo, make_collective("allgather", 16), "direct")
    small, large = sorted((ring, direct), key=lambda s: guards.xml_estimate(s).steps)
    limit = guards.xml_estimate(small).steps
    assert guards.xml_estimate(large).steps > limit
    budget = Budget(64 * guards.GB, "exec", max_xml_steps=limit)
    kept, notes = within_budget({"small": small, "large": large}, budget)
    assert list(kept) == ["small"]
    [note] = notes
    est = guards.xml_estimate(large).steps
    assert note.startswith(f"large passed over: {large.algorithm}: its program is estimated at "
                           f"{est:,} MSCCL-IR steps over its 16 ranks")
    assert f"over the {limit:,} one file" in note and "--no-xml" in note and "\n" not in note
    assert within_budget({"large": large}, Budget(64 * guards.GB, None, max_xml_steps=limit))[0]
    # the command: every candidate over the budget -> exit 2, one line, nothing compiled
    monkeypatch.setattr(guards, "MAX_XML_STEPS", 10)
    _emit_forbidden(monkeypatch)
    with pytest.raises(TooBig, match=r"no candidate fits: .*MSCCL-IR steps.*--no-xml") as exc:
        run(SolveRequest("ring:16", "allgather", encoding="baseline", algorithm="ring",
                         out_dir=tmp_path / "o", sizes=(1024, 2**20)))
    assert exc.value.exit_code == 2 and "\n" not in exc.value.message
    assert not (tmp_path / "o").exists()


def test_the_compile_phase_names_the_candidate(monkeypatch):
    """Every compile runs inside a progress phase naming its candidate and form, so a long one
    never shows as a bare "still running" (issue 32: minutes at 512 ranks)."""
    import synth.select.program_scorer as PS
    from synth import progress
    from synth.solve import solve

    result = solve(load_topology("ring:4"), make_collective("allgather", 4), encoding="baseline",
                   algorithm="ring", sizes=(1024,), budget=BIG, nccl=False)
    seen: list[str] = []
    real = PS.emit_verified_xml

    def spy(schedule, options):
        seen.append(progress.stage())
        return real(schedule, options)
    monkeypatch.setattr(PS, "emit_verified_xml", spy)
    cand = result.candidates[0]
    got = PS.compiled_xml({}, cand, XmlOptions(proto="LL", instances=2))
    assert not isinstance(got, str)
    assert seen == [f"XML of {cand.name} (LL x2, {cand.schedule.num_transfers:,} transfers): "
                    "compile and prove"]


def test_cli_max_xml_steps_refuses_in_one_line_and_0_lifts_it(synth_cli, tmp_path):
    """``--max-xml-steps`` is the work budget's knob: below a ring's estimate the solve exits 2 in
    one line naming the estimate and the knob; 0 lifts the limit and the file is written."""
    args = ("solve", "--topo", "ring:4", "--coll", "allgather", "--algo", "ring",
            "--sizes", "1KB,1MB", "--no-program-model")
    r = synth_cli(*args, "--max-xml-steps", "5", "--out", str(tmp_path / "a"))
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("synth: error: no candidate fits: ring passed over: ring: its program "
                           "is estimated at ") and "MSCCL-IR steps" in line, line
    assert "--max-xml-steps" in line and "--no-xml" in line
    assert not (tmp_path / "a").exists()
    r = synth_cli(*args, "--max-xml-steps", "0", "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "b").rglob("*.xml"))


@pytest.mark.slow  # plans dgx_h100 x 64's rail-striped trees (25-80 s on a shared 2-core machine)
def test_512_rank_trees_striped_is_refused_by_its_estimate_not_its_blocks():
    """Issue 32: dgx_h100 x 64 allgather's ``trees_striped`` fits the threadblocks and the node
    limit, so before the work budget it went on to a compile that ran for many minutes. Its
    estimate (seconds) is what passes it over now."""
    from synth.encodings.trees.encoding import TreesOptions, _striped

    topo = load_topology("dgx_h100", nodes=64)
    sched = _striped(topo, "allgather", make_collective("allgather", 512), TreesOptions.parse({}),
                     300.0)
    start = time.perf_counter()
    est = guards.xml_estimate(sched)
    assert est.threadblocks <= 64 and est.nodes <= guards.MAX_NODES
    assert est.steps > 3 * guards.MAX_XML_STEPS
    with pytest.raises(TooBig, match=r"trees_striped: its program is estimated at [\d,]+ MSCCL-IR "
                                     r"steps over its 512 ranks"):
        guards.check_schedule(sched, Budget.of("12GB", XmlOptions()))
    assert time.perf_counter() - start < 30


def test_xml_memory_is_sized_by_the_programs_steps():
    """A program's compile needs memory by its steps over all ranks (XML_BYTES_PER_STEP), which at
    many ranks is far above what its transfers alone suggest: a budget the transfers fit but the
    steps do not refuses before compiling, naming the estimate."""
    sched = baseline(load_topology("ring:16"), make_collective("allgather", 16), "ring")
    est = guards.xml_estimate(sched)
    by_transfers = guards.BASE_BYTES + sched.num_transfers * Budget(0).memory_per_transfer()
    by_steps = guards.BASE_BYTES + sched.num_transfers * guards.SCHEDULE_BYTES_PER_TRANSFER + \
        est.steps * guards.XML_BYTES_PER_STEP
    assert by_transfers < by_steps
    guards.check_schedule(sched, Budget(by_steps, "exec"))
    with pytest.raises(TooBig, match=rf"estimated at {est.steps:,} MSCCL-IR steps over its 16 "
                                     r"ranks, needs about .* with XML against --max-memory"):
        guards.check_schedule(sched, Budget(by_steps - 1, "exec"))
    guards.check_schedule(sched, Budget(by_transfers, None))    # --no-xml: no program to size
