"""JAX programs: the module a TPU (or JAX-on-Neuron) job imports.

``synth solve`` on a TPU mesh writes one Python module per (topology, collective) into the
``jax/`` runtime folder (:data:`synth.outputs.layout.JAX_FOLDER`): ``run(tensors, mesh=None)`` on
global arrays, ``body`` the per-device function under ``shard_map``, each tensor going to the
program of its size range (:func:`synth.closed.emit.emit_ranges`). The code is generated in
:mod:`synth.closed`; this module names the file and reads it back, loaded with ``jax`` answered by
the NumPy stand-in (:mod:`synth.closed.standin`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..files import read_input
from .layout import JAX_FOLDER
from .neuron import module_stem


def module_path(topology: str, collective: str, tag: str = "") -> str:
    """Where the module goes, relative to ``--out``."""
    return f"{JAX_FOLDER}/{module_stem(topology, collective, tag)}.py"


def run_module(path: str | Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run a written module's ``body`` on stacked inputs (``inputs[i][r]``: device r's tensor i)
    with the ``jax.lax`` stand-in."""
    from ..closed.standin import run_jax_standin

    return run_jax_standin(read_input(path, "JAX module"), inputs)
