"""Shared fixtures: a CLI runner that goes through the real entry point (exit codes included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def run_synth(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``synth`` as a user would (a separate process), capturing output and the exit code."""
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture
def synth_cli():
    return run_synth
