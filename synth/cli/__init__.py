"""The ``synth`` command line: parse arguments, call the library, print. Nothing else lives here.

One module per command group (:mod:`.topo`, :mod:`.solve` with verify and simulate, :mod:`.smt`
with pareto and analyze, :mod:`.closed` with strategies and calibrate, :mod:`.sketch`,
:mod:`.catalog`); the consoles are in :mod:`.console`. This root only assembles the group and is
the console script's entry point (``synth = "synth.cli:main"``).

User errors surface as one line on stderr and a non-zero exit code (2 for bad input, 1 for a
schedule that fails verification, 3 for a solver limit); never as a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from .. import __version__
from ..errors import SynthError
from .console import err

__all__ = ["COMMANDS", "cli", "main"]

COMMANDS: dict[str, tuple[str, str, str]] = {
    "analyze": ("smt", "analyze", "Lower bounds of the SMT encoding: least steps, rounds, chunks."),
    "calibrate": ("closed", "calibrate", "Fit a cost model from a benchmark log (nccl-tests, "
                                         "nccom-test, MSCCL times)."),
    "catalog": ("catalog", "catalog", "Regenerate the per-cluster catalog of verified files."),
    "pareto": ("smt", "pareto", "The latency/bandwidth Pareto frontier of SCCL's encoding."),
    "simulate": ("solve", "simulate", "Predict a schedule's or an MSCCL-IR file's time over sizes."),
    "sketch": ("sketch", "sketch", "Communication sketches (TACCL): list, show, check."),
    "solve": ("solve", "solve", "Synthesize verified schedules and write the fastest per size."),
    "strategies": ("closed", "strategies", "Rank the vendor-primitive strategies of a closed "
                                           "stack (Trainium, TPU)."),
    "topo": ("topo", "topo", "Inspect and import the topologies synth knows."),
    "verify": ("solve", "verify_cmd", "Verify a schedule, MSCCL-IR XML or MSCCL++ plan."),
}
"""Command name -> (module in synth.cli, attribute, one-line help). A command's module is imported
only when that command runs (or its own --help is asked): each imports the library it drives at
its top, and the solver stack alone takes about a second to import, which ``synth --help`` and
``synth topo list`` should not pay."""


class _LazyGroup(click.Group):
    """The root group, loading each command's module on first use (see :data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=_LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="synth")
def cli() -> None:
    """Synthesize, verify and emit collective-communication schedules."""


def main(argv: list[str] | None = None) -> None:
    """Console entry point: turn SynthError into a one-line message and an exit code."""
    try:
        _main(argv)
    except MemoryError:
        pass    # reported below, once the exception (and the frames it holds) is released
    else:
        return
    import gc

    from .. import progress

    gc.collect()
    # plain stderr, not the rich console: rendering may import and allocate, and the address
    # space may still be nearly full
    sys.stderr.write(f"synth: error: out of memory during {progress.stage()}: the address-space "
                     "backstop (--max-memory plus slack) stopped an allocation the estimates "
                     "missed; raise --max-memory or make the problem smaller\n")
    sys.stderr.flush()
    sys.exit(2)


def _main(argv: list[str] | None) -> None:
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
