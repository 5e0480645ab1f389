"""Every reader on the adversarial corpus, in a child process with a memory and a time limit.

``tests/data/bad_inputs/<kind>/`` holds the reproducers of a fuzz campaign's hangs, memory blow-ups
and tracebacks (huge integers, YAML alias bombs and recursion, float ranks, a one-rank topology,
a 16,384-port switch, MSCCL++ plan fields, truncated XML, ...; the README lists them). Each file runs
through every command that reads its kind, as ``synth`` on the command line, and must end within
:data:`TIME_LIMIT_S` seconds under an address-space limit of :data:`MEMORY_LIMIT` with exit 0 (it
works) or exit 2 and one line ``synth: error: ...``, never a traceback, a hang or an out-of-memory
kill. ``verify`` may also answer 1, its verdict on a file it read ("read correctly, but wrong"),
where :data:`VERDICTS` names the file.

One worker process imports synth once and forks a child per run (``resource.setrlimit`` on
``RLIMIT_AS`` in the child, killed at the time limit), so a run costs the command's own time, not
an interpreter start: the whole corpus takes about a minute, each test item a second or so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "bad_inputs"
REPO = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 2 * 2**30
TIME_LIMIT_S = 30.0
"""Generous for a loaded CI machine: the corpus answers in about a second per run here."""

SCHEDULE = DATA / "schedule" / "good.json"
"""A valid schedule (ring:4 allgather), for the commands that read a calibration beside it."""

READERS: dict[str, list[list[str]]] = {
    # kind (folder): the commands that read it; {f} the file, {o} a fresh output folder
    "topology": [["topo", "show", "{f}"],
                 ["solve", "--topo", "{f}", "--coll", "allgather", "--encoding", "baseline",
                  "--algo", "direct", "--no-xml", "--out", "{o}"],
                 ["sketch", "check", "dgx1-mesh", "--topo", "{f}"]],
    "calibration": [["solve", "--topo", "ring:4", "--coll", "allgather", "--encoding", "baseline",
                     "--algo", "ring", "--calibration", "{f}", "--out", "{o}"],
                    ["simulate", str(SCHEDULE), "--calibration", "{f}"],
                    ["strategies", "--topo", "trn1_32", "--coll", "allreduce", "--calibration",
                     "{f}"]],
    "sketch": [["sketch", "check", "{f}"], ["sketch", "show", "{f}"]],
    "collective": [["solve", "--topo", "ring:4", "--coll", "{f}", "--encoding", "baseline",
                    "--algo", "direct", "--no-xml", "--out", "{o}"]],
    "plan": [["verify", "{f}"]],
    "xml": [["verify", "{f}"], ["simulate", "{f}", "--topo", "ring:4"]],
    "schedule": [["verify", "{f}"], ["simulate", "{f}"]],
    "nccl_tests": [["calibrate", "{f}", "--format", "nccl-tests", "--topo", "dgx_h100", "--out",
                    "{o}/c.json"]],
    "nccom": [["calibrate", "{f}", "--format", "nccom-test", "--platform", "neuron", "--out",
               "{o}/c.json"]],
    "timings": [["calibrate", "{f}", "--format", "nccom-test", "--platform", "jax", "--out",
                 "{o}/c.json"]],
    "nccl_xml": [["topo", "import", "{f}", "--format", "nccl-xml", "--out", "{o}.yaml"]],
    "nvidia_smi": [["topo", "import", "{f}", "--format", "nvidia-smi", "--out", "{o}.yaml"]],
    "rocm_smi": [["topo", "import", "{f}", "--format", "rocm-smi", "--out", "{o}.yaml"]],
    "neuron_ls": [["topo", "import", "{f}", "--format", "neuron-ls", "--out", "{o}.yaml"]],
}

VERDICTS = {"xml/neg_offset.xml", "xml/huge_cnt.xml", "xml/huge_ngpus.xml"}
"""Files ``verify`` and ``simulate`` read and judge (exit 1): well-formed MSCCL-IR that breaks a
lint rule (an offset of -5, a count of 2^63 - 1, 10^12 GPUs declared and 4 given)."""

NEEDLES: dict[str, str] = {
    # what the one line must say for the reproducers of the campaign's kinds
    "topology/laughs.yaml": "YAML aliases expand the document",
    "topology/recursive_list.yaml": "recursive YAML document",
    "topology/recursive_map.yaml": "recursive YAML document",
    "topology/recursive_merge.yaml": "recursive YAML document",
    "topology/huge_int_ranks_digits.yaml": "too large a number",
    "topology/huge_int_alpha.yaml": "too large a number",
    "topology/float_rank_whole.yaml": "must be a whole number, got 2.0",
    "topology/float_rank_src.yaml": "must be a whole number, got 1.5",
    "topology/self_loop.yaml": "joins rank 1 to itself",
    "topology/duplicate_port_name.yaml": "declared twice",
    "topology/bytes_tag.yaml": "YAML tag",
    "calibration/huge_int_alpha.json": "too large a number",
    "calibration/terms_notlist.json": "'terms' must be a list",
    "sketch/huge_int_chunks.yaml": "must be at most 1024",
    "sketch/switch_16384_topo.yaml": "MAX_PAIRS",
    "sketch/laughs.yaml": "YAML aliases expand the document",
    "sketch/recursive.yaml": "recursive YAML document",
    "collective/name_slash.yaml": "not a plain name",
    "collective/name_nul.yaml": "not a plain name",
    "collective/name_builtin.yaml": "standard collective",
    "collective/float_rank_whole.yaml": "whole number",
    "plan/sem_init_huger.json": "too large a number",
    "plan/huge_input_chunks.json": "MAX_CELLS",
    "plan/many_tbg_sizes.json": "MAX_PARTS",
    "plan/neg_index.json": "'index' must be at least 0",
    "plan/missing_index.json": "a required field 'index' is missing",
    "xml/truncated_half.xml": "is it truncated?",
    "xml/truncated_lt.xml": "expected an element name after '<'",
    "xml/deep.xml": "nested 33 elements deep",
    "schedule/float_rank.json": "got 1.5",
    "schedule/rank_out_of_range.json": "(0..3), got 7",
    "nccom/huge_time.log": "TIME_RANGE_US",
    "neuron_ls/huge_nc.json": "MAX_RANKS",
}
OK = {"topology/one_rank.yaml": "topo show", "topology/one_rank_switch.yaml": "topo show",
      "topology/date_name.yaml": "topo show", "calibration/good.json": "solve",
      "plan/sem_init_huge.json": "verify", "schedule/good.json": "verify"}
"""Files that are valid, with a command that must accept them (exit 0). ``sem_init_huge``'s
semaphore starts at 10^12: the verifier once built a queue of 10^12 tokens for it."""


ELSEWHERE = {("calibration/terms_notlist.json", "strategies"),
             ("calibration/closed_params_text.json", "strategies")}
"""Runs that still end in a traceback because the closed-stack model reads a calibration file on
its own (``synth.closed.cost.load_model``: ``data.get("terms")`` iterated unchecked, ``float()``
of a ``parameters`` entry), outside this suite's files; reported for whoever owns it. Strict
xfails: fixing that reader turns them into failures here, to be removed."""


def _cases() -> list[tuple[str, int, list[str]]]:
    cases = []
    for kind, commands in READERS.items():
        for path in sorted((DATA / kind).iterdir()):
            for i, command in enumerate(commands):
                cases.append((f"{kind}/{path.name}", i, command))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def worker():
    """A process that imports synth once and runs each request in a forked, limited child."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "import tests.test_bad_input_readers as t; "
                             "t.serve()"], cwd=REPO, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    yield proc
    proc.stdin.close()
    proc.wait(timeout=30)


def run(worker, args: list[str]) -> dict:
    worker.stdin.write(json.dumps(args) + "\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


@pytest.mark.parametrize(("name", "index", "command"), CASES,
                         ids=[f"{n}-{c[0]}{'-' + c[1] if c[0] in ('sketch', 'topo') else ''}"
                              for n, _, c in CASES])
def test_reader_answers_within_limits(worker, tmp_path, name, index, command):
    if (name, command[0]) in ELSEWHERE:
        pytest.xfail("synth.closed.cost.load_model reads calibrations unchecked (see ELSEWHERE)")
    args = [a.format(f=DATA / name, o=tmp_path / "out") for a in command]
    result = run(worker, args)
    words = " ".join(command[:2])
    assert not result["timed_out"], f"{name}: `synth {words}` ran past {TIME_LIMIT_S} s"
    assert "Traceback" not in result["stderr"], result["stderr"][-3000:]
    allowed = {0, 2} | ({1} if name in VERDICTS else set())
    assert result["code"] in allowed, (result["code"], result["stderr"][-2000:])
    if result["code"] == 2:
        lines = result["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("synth: error:"), result["stderr"][-2000:]
        assert len(lines[0]) < 1000, "the one line must be readable, not a dump of the input"
        if name in NEEDLES and index == 0:
            assert NEEDLES[name] in lines[0], lines[0]
    if OK.get(name) and " ".join(command).startswith(OK[name]):
        assert result["code"] == 0, result["stderr"]


def test_corpus_covers_every_kind():
    """Each kind of reproducer the campaign reported has files, and every file has its readers."""
    kinds = {p.name for p in DATA.iterdir() if p.is_dir()}
    assert kinds == set(READERS), kinds ^ set(READERS)
    assert all(any((DATA / k).iterdir()) for k in kinds)
    assert set(NEEDLES) <= {n for n, _, _ in CASES} and set(OK) <= {n for n, _, _ in CASES}


def test_a_16384_port_switch_is_answered_at_once(worker, tmp_path):
    """The explicit form of the campaign's 16,384-port switch (a file listing every port) through
    `sketch check`: refused by the pair bound before 2.7 * 10^8 pairs are listed."""
    topo = tmp_path / "big.json"
    topo.write_text(json.dumps({
        "name": "big", "ranks": 16384, "link_classes": {"nv": {"alpha_us": 1, "bandwidth_GBps": 25}},
        "switches": [{"name": "s", "class": "nv", "ports": [{"ranks": [i]} for i in range(16384)]}]}))
    result = run(worker, ["sketch", "check", str(DATA / "sketch" / "switch_16384_topo.yaml"),
                          "--topo", str(topo)])
    assert result["code"] == 2 and "MAX_PAIRS" in result["stderr"], result
    assert result["seconds"] < 10


# ------------------------------------------------------------------------------------ the worker
def serve() -> None:
    """Read a JSON argument list per line, run ``synth ARGS`` in a limited child, answer a line."""
    import synth.cli  # noqa: F401 - imported once, inherited by every child

    for line in sys.stdin:
        args = json.loads(line)
        sys.stdout.write(json.dumps(_run_child(args)) + "\n")
        sys.stdout.flush()


def _run_child(args: list[str]) -> dict:
    import resource
    import select
    import signal
    import tempfile
    import time

    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:  # the child: limits, redirected output, the real entry point
            code = 70
            try:
                resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
                os.dup2(err.fileno(), 2)
                os.dup2(out.fileno(), 1)
                from synth.cli import main

                try:
                    main(args)
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 71
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        start = time.monotonic()
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > TIME_LIMIT_S:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                timed_out, status = True, -1
                break
            select.select([], [], [], 0.02)
        code = os.waitstatus_to_exitcode(status) if status != -1 else -9
        err.seek(0)
        return {"code": code, "timed_out": timed_out, "seconds": time.monotonic() - start,
                "stderr": err.read().decode("utf-8", "replace")[-20000:]}
