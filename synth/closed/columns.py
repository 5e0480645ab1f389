"""Unit programs on a column axis: one closed-stack program for every message size.

A strategy's program (:mod:`.strategies`, :mod:`.lower`) is built for concrete shapes, yet its data
movement never depends on the size: every op treats its tensor as rows and moves whole rows. So a
strategy is built once as a **unit program**, for a 1-D input of ``U`` elements (one per row it
moves: :func:`unit_elements`), and every value is given a trailing **column** axis of width ``C``:
the same op on a ``(…, C)`` tensor does to each column what the unit program does to a unit input.

The collectives are column-separable too, so a rank's tensor of any size maps onto ``(U, C)``
(:func:`columns_for`) and back, the emitted module doing it at run time from the tensor's own shape
(torch-xla and JAX trace per shape, so the program compiles once per size it is called with):

* allgather, allreduce: the tensor flattened and zero-padded to ``U·C`` elements, viewed as
  ``(U, C)``; the allgather result ``(N·U, C)`` is rank-major, each rank's part cut back to its size;
* reducescatter, alltoall: the tensor's leading dim padded to a multiple of ``N`` (the runtimes'
  padding, :func:`synth.closed.reference.expected`), each rank's block flattened and padded to
  ``U/N · C`` elements, so the ``N`` blocks are rows of ``(U, C)`` in rank order.

So the strategies are priced at any size on one unit program (:func:`synth.closed.cost.estimate`
with ``columns``), and proven on the stand-ins at small column counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SynthError
from ..topology import Topology
from .ir import Program, TensorSpec
from .lower import LoweredPlan, lower_schedule, unit_elements
from .mesh import Mesh
from .strategies import Context, Plan, build_program

BLOCKED = ("reducescatter", "alltoall")
"""Collectives whose input is N blocks, one per rank (the others: one flat buffer)."""


@dataclass(frozen=True)
class Unit:
    """A strategy's unit program: ``elements`` rows of one element each per rank."""

    plan: Plan | LoweredPlan
    program: Program
    elements: int

    @property
    def name(self) -> str:
        return self.plan.name


def plan_elements(plan: Plan, mesh: Mesh) -> int:
    """The smallest input a composed plan moves without internal padding: a multiple of its pieces,
    of N blocks (reducescatter, alltoall), of the groups it scatters over (allreduce)."""
    n = mesh.size
    if plan.collective in BLOCKED:
        return n * plan.pieces
    if plan.collective == "allreduce":
        return plan.pieces * math.prod(mesh.group_size(lv.axes) for lv in plan.levels)
    return plan.pieces


def build_unit(plan: Plan | LoweredPlan, mesh: Mesh, topology: Topology | None, dtype: str,
               reduce_op: str = "add") -> Unit:
    """``plan``'s unit program (one 1-D tensor of :func:`plan_elements` / :func:`unit_elements`)."""
    if plan.bundling != "single":
        raise SynthError(f"strategy '{plan.name}' bundles tensors; a unit program takes one")
    if isinstance(plan, LoweredPlan):
        u = unit_elements(plan.schedule)
        program = lower_schedule(plan.schedule, mesh, [TensorSpec((u,), dtype)], reduce_op, topology)
    else:
        u = plan_elements(plan, mesh)
        program = build_program(plan, Context(mesh, topology), [TensorSpec((u,), dtype)], reduce_op)
    return Unit(plan, program, u)


def per_rank_elements(kind: str, nbytes: int, world: int, itemsize: int) -> int:
    """Elements of each rank's input at a message size quoted the nccl-tests way (the full output
    of allgather, the buffer otherwise: :mod:`synth.closed.search`)."""
    per_rank = nbytes // world if kind == "allgather" else nbytes
    return max(1, per_rank // itemsize)


def columns_for(kind: str, elements: int, unit: int, world: int) -> int:
    """The column count ``C`` a 1-D input of ``elements`` per rank runs at (module docstring)."""
    if kind in BLOCKED:
        width = -(-elements // world)
        return max(1, -(-width // (unit // world)))
    return max(1, -(-elements // unit))


# ---------------------------------------------------------------- the reference of the mapping
def to_columns(kind: str, x: np.ndarray, unit: int, world: int) -> np.ndarray:
    """One rank's tensor as the ``(unit, C)`` matrix its range program runs on (NumPy; the
    emitters write the same steps in torch and jax.numpy)."""
    if kind in BLOCKED:
        s0, rest = x.shape[0], math.prod(x.shape[1:])
        width = -(-s0 // world) * rest
        per = unit // world
        c = max(1, -(-width // per))
        blocks = np.pad(x.reshape(-1), (0, world * width - s0 * rest)).reshape(world, width)
        return np.pad(blocks, ((0, 0), (0, per * c - width))).reshape(unit, c)
    m = math.prod(x.shape)
    c = max(1, -(-m // unit))
    return np.pad(x.reshape(-1), (0, unit * c - m)).reshape(unit, c)


def from_columns(kind: str, y: np.ndarray, shape: tuple[int, ...], world: int) -> np.ndarray:
    """A range program's ``(·, C)`` result as the collective's output for an input of ``shape``."""
    if kind == "allgather":
        m = math.prod(shape)
        return y.reshape(world, -1)[:, :m].reshape((world * shape[0], *shape[1:]))
    if kind == "allreduce":
        return y.reshape(-1)[:math.prod(shape)].reshape(shape)
    rows = -(-shape[0] // world)
    width = rows * math.prod(shape[1:])
    if kind == "reducescatter":
        return y.reshape(-1)[:width].reshape((rows, *shape[1:]))
    return y.reshape(world, -1)[:, :width].reshape((world * rows, *shape[1:]))


def interpret_columns(program: Program, xs: list[np.ndarray], unit: int) -> list[np.ndarray]:
    """The unit program run column by column on stacked inputs of any shape (the reference the
    emitted modules are compared with in tests): ``xs[0][r]`` is rank r's tensor."""
    from .reference import interpret

    kind, world = program.collective, program.mesh.size
    x = xs[0]
    cols = np.stack([to_columns(kind, x[r], unit, world) for r in range(world)])
    outs = [interpret(program, [cols[:, :, c]])[0] for c in range(cols.shape[2])]
    y = np.stack(outs, axis=-1)
    return [np.stack([from_columns(kind, y[r], tuple(x.shape[1:]), world) for r in range(world)])]
