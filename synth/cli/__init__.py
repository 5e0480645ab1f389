"""The ``synth`` command line (the console script ``synth = "synth.cli:main"``)."""

from .solve import cli, main

__all__ = ["cli", "main"]
