"""Closed stacks: every strategy's program computes exactly the collective.

Three executions are compared bit for bit with the collective's definition
(:func:`synth.closed.reference.expected`): the IR interpreter, the emitted torch-neuronx module
under the NumPy ``xm`` stand-in, and the emitted JAX module under the NumPy ``lax`` stand-in.
Inputs include shapes that do not divide by the group sizes and non-float dtypes; their sums are
exact, so the reduction order cannot change a bit.
"""

from __future__ import annotations

import random
from functools import cache

import numpy as np
import pytest

from synth.closed.constraints import violations
from synth.closed.emit import emit
from synth.closed.ir import TensorSpec
from synth.closed.lower import baseline_plans, lower_schedule
from synth.closed.mesh import mesh_for_topology, resolve_topology
from synth.closed.reference import expected, interpret, random_inputs
from synth.closed.standin import run_jax_standin, run_neuron_standin
from synth.closed.strategies import COLLECTIVES, Context, all_plans, base_plans, build_program
from synth.closed.winner import emit_closed_program

TOPOLOGIES = [("trn1_32", 1), ("trn1_32", 2), ("trn2_64", 1), ("tpu_v5e_4x4", 1)]
SHAPES = {1: [(5, 3)], 3: [(7,), (2, 3), (1,)]}


@cache
def setup(name: str, nodes: int):
    topo = resolve_topology(name, nodes)
    mesh = mesh_for_topology(topo)
    return topo, mesh, Context(mesh, topo)


def check_equal(coll, xs, ys, op="add", what=""):
    assert len(xs) == len(ys)
    for x, y in zip(xs, ys, strict=True):
        want = expected(coll, x, op)
        y = np.asarray(y)
        assert y.shape == want.shape and y.dtype == want.dtype, (what, y.shape, want.shape, y.dtype)
        assert np.array_equal(y, want), what


@pytest.mark.parametrize("name,nodes", TOPOLOGIES)
@pytest.mark.parametrize("coll", COLLECTIVES)
def test_every_strategy_interprets_to_the_collective(name, nodes, coll):
    """The whole space (every order, level grouping, ring, pipelining, bundling, lowering)."""
    topo, mesh, ctx = setup(name, nodes)
    for tensors in (1, 3):
        shapes = SHAPES[tensors]
        specs = [TensorSpec(s, "float32") for s in shapes]
        xs = random_inputs(shapes, "float32", mesh.size, seed=tensors)
        plans = all_plans(coll, mesh, tensors)
        if nodes > 1 and tensors > 1:
            plans = random.Random(7).sample(plans, 40)
        for plan in plans:
            prog = build_program(plan, ctx, specs)
            check_equal(coll, xs, interpret(prog, xs), what=plan.name)
    if mesh.size <= 32:
        xs = random_inputs([(5, 3)], "float32", mesh.size, seed=9)
        for lp in baseline_plans(coll, topo, mesh):
            prog = lower_schedule(lp.schedule, mesh, [TensorSpec((5, 3), "float32")], "add", topo)
            check_equal(coll, xs, interpret(prog, xs), what=lp.name)


def _sample(coll, mesh, k, seed):
    plans = base_plans(coll, mesh)
    fams: dict = {}
    for p in plans:
        for f in p.families(mesh):
            fams.setdefault(f, p)
    chosen = list(dict.fromkeys(list(fams.values()) + random.Random(seed).sample(plans, min(k, len(plans)))))
    return chosen


def _run_both(topo, mesh, prog, coll, xs, op="add"):
    ran = []
    if not violations(prog, "neuron", topo):
        check_equal(coll, xs, run_neuron_standin(emit(prog, "neuron"), xs, topology=topo), op,
                    f"neuron {prog.name}")
        ran.append("neuron")
    if not violations(prog, "jax", topo):
        check_equal(coll, xs, run_jax_standin(emit(prog, "jax"), xs), op, f"jax {prog.name}")
        ran.append("jax")
    return ran


@pytest.mark.parametrize("name,nodes", TOPOLOGIES)
@pytest.mark.parametrize("coll", COLLECTIVES)
def test_emitted_programs_match_on_the_standins(name, nodes, coll):
    """All base strategies on the 16/32-rank meshes; on 64 ranks the best of every family plus a
    random sample. Float32 with a non-divisible shape."""
    topo, mesh, ctx = setup(name, nodes)
    plans = base_plans(coll, mesh) if mesh.size <= 32 else _sample(coll, mesh, 2, 1)
    xs = random_inputs([(5, 3)], "float32", mesh.size, seed=3)
    for plan in plans:
        prog = build_program(plan, ctx, [TensorSpec((5, 3), "float32")])
        assert _run_both(topo, mesh, prog, coll, xs), plan.name


DTYPE_CASES = [
    ("allgather", "uint8", (3, 2)), ("allgather", "bool", (5,)), ("allgather", "int32", (1,)),
    ("alltoall", "int32", (9,)), ("alltoall", "uint8", (33, 2)),
    ("allreduce", "int32", (7,)), ("allreduce", "float16", (3, 5)),
    ("reducescatter", "int32", (37,)), ("reducescatter", "float16", (4, 3)),
]


@pytest.mark.parametrize("coll,dtype,shape", DTYPE_CASES)
def test_non_float_dtypes_and_odd_shapes(coll, dtype, shape):
    """Integer reduce-scatter is rejected on Neuron: its programs use all-reduce + slice there."""
    topo, mesh, ctx = setup("trn1_32", 1)
    xs = random_inputs([shape], dtype, mesh.size, seed=5)
    ran = {"neuron": 0, "jax": 0}
    for plan in _sample(coll, mesh, 3, 2):
        prog = build_program(plan, ctx, [TensorSpec(shape, dtype)])
        check_equal(coll, xs, interpret(prog, xs), what=plan.name)
        for t in _run_both(topo, mesh, prog, coll, xs):
            ran[t] += 1
    assert ran["neuron"] and ran["jax"]


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("coll", ["allreduce", "reducescatter"])
def test_min_max_reductions(coll, op):
    topo, mesh, ctx = setup("tpu_v5e_4x4", 1)
    xs = random_inputs([(6,)], "int32", mesh.size, seed=6)
    ran = set()
    for plan in base_plans(coll, mesh):
        prog = build_program(plan, ctx, [TensorSpec((6,), "int32")], op)
        check_equal(coll, xs, interpret(prog, xs), op, plan.name)
        ran |= set(_run_both(topo, mesh, prog, coll, xs, op))
    assert ran == {"neuron", "jax"}


@pytest.mark.parametrize("name,nodes", [pytest.param(*t, marks=pytest.mark.slow) if t == ("trn1_32", 2) else t
                                        for t in TOPOLOGIES])
def test_emit_closed_program_winners_run_on_the_standins(tmp_path, name, nodes):
    """What `synth solve --format neuron|jax` writes: the winner for small and large messages,
    for one tensor and for 4 bundled-or-not tensors."""
    topo, mesh, _ = setup(name, nodes)
    cases = [("neuron", 4096, 1), ("jax", 64 << 20, 1), ("neuron", 1024, 4), ("jax", 1024, 4)]
    for coll in COLLECTIVES:
        for target, nbytes, tensors in cases:
            if True:
                shapes = [(5, 3)] * tensors if tensors == 1 else [(3,), (6, 2), (1,), (4,)]
                files = emit_closed_program(topo, coll, target, tmp_path / f"{coll}{target}{nbytes}",
                                            nbytes=nbytes, tensors=tensors, shapes=shapes,
                                            pieces=(2, 4) if tensors == 1 else ())
                assert files[0].suffix == ".py" and files[1].name.endswith(".strategy.json")
                xs = random_inputs(shapes, "float32", mesh.size, seed=nbytes % 97)
                source = files[0].read_text()
                run = (run_neuron_standin(source, xs, topology=topo) if target == "neuron"
                       else run_jax_standin(source, xs))
                check_equal(coll, xs, run, what=f"{target} {coll} {nbytes}")


def test_lowered_schedules_split_into_rings_neuron_accepts():
    """Every baseline schedule (a tree's and a direct one's steps are no rings) lowers into permutes
    that are rings over direct links (rotations along a mesh axis, the step itself, or 2-ring
    exchanges) and runs on both stand-ins."""
    topo, mesh, _ = setup("tpu_v5e_4x4", 1)
    xs = random_inputs([(5,)], "float32", mesh.size, seed=8)
    for coll in COLLECTIVES:
        lowered = {lp.name: lp for lp in baseline_plans(coll, topo, mesh)}
        assert "lowered-schedule(ring)" in lowered and "lowered-schedule(direct)" in lowered
        for lp in lowered.values():
            prog = lower_schedule(lp.schedule, mesh, [TensorSpec((5,), "float32")], "add", topo)
            assert not violations(prog, "neuron", topo), lp.name
            assert _run_both(topo, mesh, prog, coll, xs) == ["neuron", "jax"], lp.name
