"""The consoles every command prints through: ``out`` (stdout) and ``err`` (stderr).

Command modules import them from here, never from the package root, so no module of
:mod:`synth.cli` imports back from :mod:`synth.cli` itself.
"""

from __future__ import annotations

from rich.console import Console

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def stdout_console(piped_width: int) -> Console:
    """A stdout console that is ``piped_width`` columns wide when stdout is not a terminal (wide
    tables stay on one line in logs), and as wide as the terminal otherwise."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=piped_width)
    return console
