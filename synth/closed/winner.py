"""The ranked winner as a Python module: build it for the tensors asked for, prove it on the NumPy
stand-in, and write it with its ranking report (``emit_closed_program``).

Ranking (:mod:`.search`) decides *which* program; this module turns it into a file through the
emitters (:mod:`.emit`), so it sits above both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SynthError, VerificationError, unknown_name
from ..sizes import format_size
from ..topology import Topology
from .constraints import violations
from .emit import emit, module_name, write_module
from .ir import TensorSpec
from .lower import LoweredPlan, lower_schedule
from .reference import expected, random_inputs
from .search import DEFAULT_BYTES, Scored, rank_strategies
from .standin import run_jax_standin, run_neuron_standin
from .strategies import Context, build_program

PROVE_MAX_BYTES = 64 << 20
"""Largest total input (all ranks) on which the emitted module itself is executed before writing."""
PROVE_SMALL_SHAPE = (5, 3)
"""Shape for proving a strategy whose real tensors are too large to execute here: not divisible by
any group size, so padding and unpadding are exercised too."""


def prove_module(text: str, program: Any, target: str, topology: Topology) -> None:
    """Execute emitted module text on the NumPy stand-in and compare with the collective's result.

    Raises VerificationError on any difference (shape, dtype or value), so a wrong program is never
    written. Inputs are random small integers, exact in every dtype's arithmetic.
    """
    specs = [spec for _, spec in program.inputs]
    xs = random_inputs([s.shape for s in specs], specs[0].dtype, program.mesh.size, seed=0)
    run = (run_neuron_standin(text, xs, topology=topology) if target == "neuron"
           else run_jax_standin(text, xs))
    for i, (x, y) in enumerate(zip(xs, run, strict=True)):
        want = expected(program.collective, x, program.reduce_op)
        if y.shape != want.shape or y.dtype != want.dtype or not np.array_equal(y, want):
            raise VerificationError("postcondition", f"the emitted {target} program for "
                                    f"{program.collective} gives a wrong result for tensor {i}")


def _input_bytes(program: Any) -> int:
    return program.mesh.size * sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize
                                   for _, s in program.inputs)


def emit_closed_program(topology: Topology, collective_kind: str, target: str, out_dir: str | Path,
                        nbytes: int | None = None, tensors: int = 1,
                        calibration: str | Path | dict | None = None, *, dtype: str = "float32",
                        reduce_op: str = "add", shapes: Sequence[tuple[int, ...]] | None = None,
                        pieces: Sequence[int] = (2, 4)) -> list[Path]:
    """Rank the strategies for ``target`` (``neuron`` or ``jax``), emit the winner as a Python module
    in ``out_dir`` and a JSON report beside it; returns [module path, report path].

    The program is built for 1-D tensors of ``nbytes`` each (``tensors`` of them), or for the given
    per-rank ``shapes``; with both, the strategy is chosen for ``nbytes`` and built for ``shapes``.
    """
    if target not in ("neuron", "jax"):
        raise unknown_name("target", target, ("neuron", "jax"))
    rank_shapes = shapes if nbytes is None else None
    if shapes is not None:
        tensors = len(shapes)
    ranking = rank_strategies(topology, collective_kind, target, nbytes or DEFAULT_BYTES, tensors,
                              calibration, dtype=dtype, reduce_op=reduce_op, shapes=rank_shapes,
                              pieces=pieces)
    best = ranking.best
    assert best.program is not None and best.estimate is not None
    if shapes is not None and rank_shapes is None:
        specs = [TensorSpec(tuple(s), dtype) for s in shapes]
        if isinstance(best.plan, LoweredPlan):
            program = lower_schedule(best.plan.schedule, ranking.mesh, specs, reduce_op, topology)
        else:
            program = build_program(best.plan, Context(ranking.mesh, topology), specs, reduce_op)
        problems = violations(program, target, topology)
        if problems:
            raise SynthError(f"{best.name} is not valid on {target} for shapes {list(shapes)}: "
                             + "; ".join(map(str, problems)))
        best = Scored(best.plan, program, best.estimate)
    size = (f"{format_size(ranking.nbytes)} x {ranking.tensors} tensor(s)" if rank_shapes is None
            else f"shapes {list(shapes or [])}")
    note = (f"{best.estimate.time_us:.2f} µs for {size} on {target} ({best.estimate.calls} "
            f"call(s); cost model: {ranking.model.source})")
    text = emit(best.program, target, note)
    if _input_bytes(best.program) <= PROVE_MAX_BYTES:
        prove_module(text, best.program, target, topology)
    else:
        # too large to execute here: prove the same strategy, through the same emitter, on
        # small tensors of the same dtype (one per real tensor)
        small = [TensorSpec(PROVE_SMALL_SHAPE, spec.dtype) for _, spec in best.program.inputs]
        if isinstance(best.plan, LoweredPlan):
            probe = lower_schedule(best.plan.schedule, ranking.mesh, small, reduce_op, topology)
        else:
            probe = build_program(best.plan, Context(ranking.mesh, topology), small, reduce_op)
        prove_module(emit(probe, target, note), probe, target, topology)
    name = module_name(topology.name, collective_kind, target)
    module = write_module(text, Path(out_dir), name)
    report = ranking.to_dict(limit=10)
    report["module"] = str(module)
    rpath = write_module(json.dumps(report, indent=2) + "\n", Path(out_dir),
                         name.replace(".py", ".strategy.json"))
    return [module, rpath]
