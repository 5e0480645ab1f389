"""The consoles every command prints through: ``out`` (stdout) and ``err`` (stderr).

Command modules import them from here, never from the package root, so no module of
:mod:`synth.cli` imports back from :mod:`synth.cli` itself.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 10_000
"""Columns a console has when its stream is not a terminal (a log, a pipe, CI) and ``COLUMNS`` is
not set: wide enough that no table cell, file name or path is cut or folded; a table is only as
wide as its content."""


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=PIPED_WIDTH)
    return console


out = _console()
err = _console(stderr=True)


def stdout_console(piped_width: int = PIPED_WIDTH) -> Console:
    """A stdout console that is ``piped_width`` columns wide when stdout is not a terminal (wide
    tables stay on one line in logs), and as wide as the terminal otherwise."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=piped_width)
    return console
