"""``python -m synth`` is the ``synth`` command."""

from .cli import main

main()
