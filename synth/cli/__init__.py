"""The ``synth`` command line: parse arguments, call the library, print. Nothing else lives here.

One module per command group (:mod:`.topo`, :mod:`.solve` with verify and simulate, :mod:`.smt`
with pareto and analyze, :mod:`.closed` with strategies and calibrate, :mod:`.sketch`,
:mod:`.catalog`); the consoles are in :mod:`.console`. This root only assembles the group and is
the console script's entry point (``synth = "synth.cli:main"``).

User errors surface as one line on stderr and a non-zero exit code (2 for bad input, 1 for a
schedule that fails verification, 3 for a solver limit); never as a traceback.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import SynthError
from .catalog import catalog
from .closed import calibrate, strategies
from .console import err
from .sketch import sketch
from .smt import analyze, pareto
from .solve import simulate, solve, verify_cmd
from .topo import topo

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="synth")
def cli() -> None:
    """Synthesize, verify and emit collective-communication schedules."""


for command in (topo, solve, verify_cmd, simulate, strategies, calibrate, pareto, analyze, sketch, catalog):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: turn SynthError into a one-line message and an exit code."""
    try:
        cli.main(args=argv, prog_name="synth", standalone_mode=False)
    except SynthError as exc:
        err.print(f"synth: error: {exc.message}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err.print("synth: aborted")
        sys.exit(130)
    except click.UsageError as exc:     # click's own is three lines (usage, hint, error)
        where = exc.ctx.command_path if exc.ctx is not None else "synth"
        text = " ".join(exc.format_message().split())
        err.print(f"{where}: error: {text} (see '{where} --help')", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("synth: interrupted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
