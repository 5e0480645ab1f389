"""torch-neuronx programs: the module a Trainium job imports, and its NKI kernel.

``synth solve`` on Trainium writes one Python module per (topology, collective) into the
``neuron/`` runtime folder (:data:`synth.outputs.layout.NEURON_FOLDER`): ``run(tensors)``, called on
every rank, sends each tensor to the program of its size range (:func:`synth.closed.emit.
emit_ranges`). Where a synthesized schedule serves a range on Trn2/Trn3, the same permutes are also
written as an NKI kernel beside it (``<stem>_nki.py``, :mod:`synth.closed.nki`). The code itself is
generated in :mod:`synth.closed`; this module names the files and reads them back: a written
module is loaded with its imports answered by the NumPy stand-ins (:mod:`synth.closed.standin`),
which is how synth checks what it wrote.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np

from ..files import read_input
from .layout import NEURON_FOLDER
from .schedule_json import _name_part

KERNEL_SUFFIX = "_nki"


def module_stem(topology: str, collective: str, tag: str = "") -> str:
    """``trn1-32_allgather`` (plus the calibration tag): one module per run."""
    return f"{_name_part(topology)}_{collective}" + (f"_{_name_part(tag)}" if tag else "")


def module_path(topology: str, collective: str, tag: str = "") -> str:
    """Where the module goes, relative to ``--out``."""
    return f"{NEURON_FOLDER}/{module_stem(topology, collective, tag)}.py"


def kernel_path(topology: str, collective: str, tag: str = "") -> str:
    """Where the NKI kernel module goes, relative to ``--out``."""
    return f"{NEURON_FOLDER}/{module_stem(topology, collective, tag)}{KERNEL_SUFFIX}.py"


def read_module(path: str | Path, topology=None) -> types.ModuleType:
    """A written torch-neuronx module, loaded with ``torch`` and ``torch_xla`` answered by the
    stand-ins (its ``run`` needs the stand-in's ranks: :func:`run_module`)."""
    from ..closed.standin import FakeXM, fake_torch, load_module, neuron_fakes

    text = read_input(path, "torch-neuronx module")
    world = _world(text)
    return load_module(text, neuron_fakes(FakeXM(world, topology=topology), fake_torch()),
                       Path(path).stem)


def run_module(path: str | Path, inputs: list[np.ndarray], topology=None) -> list[np.ndarray]:
    """Run a written module on stacked inputs (``inputs[i][r]``: rank r's tensor i) on the stand-in."""
    from ..closed.standin import run_neuron_standin

    return run_neuron_standin(read_input(path, "torch-neuronx module"), inputs, topology=topology)


def _world(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("WORLD = "):
            return int(line.split("=", 1)[1])
    from ..errors import SynthError
    raise SynthError("not a module synth wrote: it sets no WORLD")
