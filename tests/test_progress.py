"""Progress everywhere (issue 12): timestamped heartbeat lines when stderr is not a terminal."""

from __future__ import annotations

import io
import itertools
import re
import time

import pytest

from synth import progress

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d synth: ")


def _lines(buf: io.StringIO) -> list[str]:
    return [line for line in buf.getvalue().splitlines() if line]


def test_fake_slow_phase_gets_heartbeats_in_plain_mode():
    buf = io.StringIO()
    reporter = progress.Reporter("plain", stream=buf, heartbeat_s=0.1)
    with reporter.phase("fake slow phase"):
        reporter.detail("step 3 of 7")
        time.sleep(0.65)  # silent work: only the heartbeat thread can speak
    reporter.close()
    lines = _lines(buf)
    assert all(STAMP.match(line) for line in lines), lines
    beats = [line for line in lines if "still running" in line]
    assert len(beats) >= 3, lines
    assert all("step 3 of 7" in b for b in beats)
    # never silent longer than the heartbeat period (plus scheduling slack)
    stamps = [time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) for line in lines]
    assert max(b - a for a, b in itertools.pairwise(stamps)) <= 2


def test_nested_phases_and_end_line():
    buf = io.StringIO()
    reporter = progress.Reporter("plain", stream=buf, heartbeat_s=0.05)
    with reporter.phase("outer"):
        time.sleep(0.1)
        with reporter.phase("inner"):
            time.sleep(0.2)
    reporter.close()
    text = buf.getvalue()
    assert "outer › inner ..." in text and "outer › inner: still running" in text
    assert "in all)" in text  # the outer phase's elapsed time is reported too


def test_a_quick_run_prints_nothing():
    """Before one heartbeat period nothing is printed: a quick answer or refusal stays one line."""
    buf = io.StringIO()
    reporter = progress.Reporter("plain", stream=buf, heartbeat_s=5)
    with reporter.phase("quick"):
        reporter.note("a note")
        time.sleep(0.05)
    reporter.close()
    assert buf.getvalue() == ""


def test_heartbeat_stops_with_the_phase():
    buf = io.StringIO()
    reporter = progress.Reporter("plain", stream=buf, heartbeat_s=0.05)
    with reporter.phase("short"):
        pass
    time.sleep(0.2)
    assert "still running" not in buf.getvalue()
    assert reporter._thread is None or not reporter._thread.is_alive()


def test_off_by_default_and_module_functions_follow_activate(monkeypatch):
    assert progress.current().mode == "off"
    buf = io.StringIO()
    monkeypatch.setenv("SYNTH_PROGRESS_INTERVAL", "0.05")
    with progress.activate("plain", stream=buf) as rep:
        assert progress.current() is rep and rep.heartbeat_s == 0.05
        time.sleep(0.06)
        with progress.phase("library phase"):
            progress.note("a stage finished")
            time.sleep(0.15)
    assert progress.current().mode == "off"
    text = buf.getvalue()
    assert "library phase ..." in text and "a stage finished" in text and "still running" in text


@pytest.mark.parametrize("env,tty,quiet,mode", [
    ("", False, False, "plain"), ("", True, False, "rich"), ("", True, True, "off"),
    ("off", False, False, "off"), ("plain", True, False, "plain"), ("rich", False, False, "rich"),
])
def test_mode_choice(monkeypatch, env, tty, quiet, mode):
    monkeypatch.setenv("SYNTH_PROGRESS", env)

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    assert progress.choose_mode(Stream(), quiet_on_terminal=quiet) == mode


def test_rich_mode_draws_on_a_terminal_console():
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80)
    reporter = progress.Reporter("rich", console=console)
    with reporter.phase("solving"):
        reporter.detail("trees")
        time.sleep(0.2)
    reporter.close()
    assert "solving" in buf.getvalue()


def test_cli_solve_prints_timestamped_lines_without_a_terminal(tmp_path):
    """stderr captured (not a TTY), as in CI or a log file: plain lines, stdout untouched."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SYNTH_PROGRESS_INTERVAL": "0.02"}
    env.pop("SYNTH_PROGRESS", None)
    r = subprocess.run([sys.executable, "-m", "synth", "solve", "--topo", "ring:4", "--coll",
                        "allgather", "--encoding", "baseline", "--json", "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
    lines = [line for line in r.stderr.splitlines() if line]
    assert lines and all(STAMP.match(line) for line in lines), r.stderr
    assert any("solving allgather on ring:4 (baseline)" in line for line in lines)


@pytest.mark.filterwarnings("ignore:Constructing LpVariable:DeprecationWarning")  # PuLP 3
def test_milp_solves_report_to_the_current_reporter(monkeypatch):
    """No progress object is passed: each MILP solve is a stage of the command line's reporter,
    its result a line (plain mode), and nothing is asked of the solver while progress is off."""
    from synth.encodings.milp.solvers import solve_milp
    from tests.test_milp_solvers import scheduling

    assert progress.solver_progress() is None  # off: the solver need not report at all
    buf = io.StringIO()
    monkeypatch.setenv("SYNTH_PROGRESS_INTERVAL", "0.05")
    with progress.activate("plain", stream=buf):
        seen: list[str] = []
        rep = progress.current()
        monkeypatch.setattr(rep, "detail", lambda text: seen.append(text))
        time.sleep(0.06)
        with progress.phase("solving"):
            entered = rep.enter  # the stage opens as a phase of its own, without a start line

            def spy(label, **kw):
                seen.append(f"enter {label} {kw}")
                return entered(label, **kw)

            monkeypatch.setattr(rep, "enter", spy)
            result = solve_milp(scheduling(), "highs", stage="schedule")
    text = buf.getvalue()
    assert result.status == "optimal"
    assert "enter schedule (highs) {'announce': False}" in seen
    assert any(s.startswith("incumbent ") and "gap " in s for s in seen), seen
    assert "synth: schedule (highs): optimal, objective 11.234" in text
    assert "schedule (highs) ..." not in text  # no start line for a solver stage


@pytest.mark.filterwarnings("ignore:Constructing LpVariable:DeprecationWarning")  # PuLP 3
def test_milp_result_lines_on_a_terminal():
    from rich.console import Console

    from synth.encodings.milp.solvers import solve_milp
    from tests.test_milp_solvers import knapsack

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=200)
    with progress.activate("rich", console=console), progress.phase("solving"):
        solve_milp(knapsack(), "highs", stage="route")
    assert "✓" in buf.getvalue() and "route (highs): optimal, objective 1113" in buf.getvalue()
    assert progress.solver_info(10.0, 8.0) == "incumbent 10  bound 8  gap 20.00%"
    assert progress.solver_info(None, 8.0) == "bound 8"


def test_ledger_counts_phases_by_kind_exclusively():
    """Inside a ledger, each phase's time goes to its kind, minus what nested counted phases took;
    unclassified phases are transparent; outside a ledger nothing is counted."""
    with progress.span("unseen"):
        pass
    classify = {"outer": "encode"}.get
    with progress.ledger(classify) as book, progress.phase("outer"):   # classified by its label
        time.sleep(0.05)
        with progress.phase("transparent"):        # no kind: stays with "outer"
            time.sleep(0.05)
            with progress.span("parse"):           # a span: counted, never shown
                time.sleep(0.1)
        with progress.phase("given", kind="compile"):
            time.sleep(0.02)
    got = book.as_dict()
    assert set(got) == {"encode", "parse", "compile"}
    assert got["parse"]["wall_s"] >= 0.1 and got["compile"]["wall_s"] >= 0.02
    assert 0.1 <= got["encode"]["wall_s"] < 0.2        # 0.05 + 0.05, not the nested 0.12
    assert got["encode"]["count"] == 1
    with progress.span("after"):
        pass
    assert "after" not in book.as_dict() and "unseen" not in got
