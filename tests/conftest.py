"""Shared fixtures: a CLI runner that goes through the real entry point (exit codes included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
"""Test data inside the repository (each source's README and license beside it)."""
XML_CORPUS_DIRS = (DATA / "xml-corpus", DATA / "msccl_ndv5")
"""The production MSCCL-IR corpus (Azure/msccl-scheduler, MIT): NCv4/NDv4 files in ``xml-corpus/``,
NDv5 files in ``msccl_ndv5/`` beside MSCCL's published times for them."""


def xml_corpus_files() -> list[Path]:
    """Every production XML file, sorted by name."""
    return sorted((p for d in XML_CORPUS_DIRS for p in d.glob("*.xml")), key=lambda p: p.name)


def xml_corpus_file(name: str) -> Path:
    """The corpus file called ``name`` (a missing one is an error, not a skip)."""
    for d in XML_CORPUS_DIRS:
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(f"{name} is in none of {[str(d) for d in XML_CORPUS_DIRS]}")


HANG_GUARD_S = 1800
"""How long a ``synth`` process may run in a test before it is taken for hung. A guard, not a
performance bound (performance is measured in ``benchmarks/``): CI machines differ, and the slow
end-to-end solves take 5 minutes on a 2-core machine and more on a slower one (a 300 s guard
failed CI once on such a machine)."""


def run_synth(*args: str, cwd: Path | None = None, timeout: float = HANG_GUARD_S
              ) -> subprocess.CompletedProcess[str]:
    """Run ``synth`` as a user would (a separate process), capturing output and the exit code."""
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """Commands run without a terminal print timestamped progress lines once they have lasted a
    few seconds (synth.progress); tests read stderr for the one-line error, so the lines are off
    unless a test turns them on (tests/test_progress.py)."""
    monkeypatch.setenv("SYNTH_PROGRESS", "off")


@pytest.fixture
def synth_cli():
    return run_synth
