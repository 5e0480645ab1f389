"""Closed stacks: primitive semantics, meshes, platform constraints, stand-in strictness."""

from __future__ import annotations

import numpy as np
import pytest

from synth.closed import reference as ref
from synth.closed.constraints import check, check_groups_symmetric, violations
from synth.closed.emit import emit
from synth.closed.ir import Builder, Op, Program, TensorSpec
from synth.closed.mesh import mesh_for_topology, resolve_topology, ring_cycle
from synth.closed.standin import FakeXM, _spmd, run_jax_standin, run_neuron_standin
from synth.errors import SynthError


def stacked(n, width=2, dtype=np.int64):
    return np.stack([np.full(width, r, dtype=dtype) for r in range(n)])


# ------------------------------------------------------------------------------------ primitives
def test_all_gather_uses_group_order_for_concatenation():
    x = stacked(4, 1)
    out = ref.all_gather(x, [[1, 0], [3, 2]], dim=0)
    assert out[0].tolist() == [1, 0] and out[1].tolist() == [1, 0]
    assert out[2].tolist() == [3, 2] and out[3].tolist() == [3, 2]


def test_reduce_scatter_gives_member_i_part_i_in_group_order():
    x = np.stack([np.arange(4) + 10 * r for r in range(4)])
    out = ref.reduce_scatter(x, [[2, 0], [1, 3]], dim=0, op="add")
    # group [2, 0]: sum = [20, 22, 24, 26]; rank 2 is member 0 -> first half
    assert out[2].tolist() == [20, 22] and out[0].tolist() == [24, 26]
    assert out[1].tolist() == [40, 42] and out[3].tolist() == [44, 46]
    assert ref.reduce_scatter(x, [[0, 1, 2, 3]], 0, "max")[3].tolist() == [33]


def test_all_to_all_splits_and_concatenates_in_group_order():
    x = np.stack([np.array([10 * r, 10 * r + 1]) for r in range(2)])
    out = ref.all_to_all(x, [[1, 0]], split_dim=0, concat_dim=0)
    # rank 1 is member 0: gets part 0 of member 0 (rank 1) then of member 1 (rank 0)
    assert out[1].tolist() == [10, 0] and out[0].tolist() == [11, 1]


def test_permute_gives_zeros_to_ranks_that_are_no_target():
    x = stacked(3, 2) + 1
    out = ref.collective_permute(x, [(0, 1), (1, 0)])
    assert out[1].tolist() == [1, 1] and out[0].tolist() == [2, 2] and out[2].tolist() == [0, 0]


def test_xla_rules_on_groups_and_pairs():
    x = stacked(4)
    with pytest.raises(SynthError, match="exactly once"):
        ref.all_reduce(x, [[0, 1], [1, 2]], "add")
    with pytest.raises(SynthError, match="same size"):
        ref.all_gather(x, [[0, 1, 2], [3]], 0)
    with pytest.raises(SynthError, match="share a target"):
        ref.collective_permute(x, [(0, 1), (2, 1)])
    with pytest.raises(SynthError, match="share a source"):
        ref.collective_permute(x, [(0, 1), (0, 2)])
    with pytest.raises(SynthError, match="not divisible"):
        ref.reduce_scatter(np.zeros((2, 3)), [[0, 1]], 0, "add")
    with pytest.raises(SynthError, match="add, min, max"):
        ref.all_reduce(x, [[0, 1, 2, 3]], "mul")


def test_expected_results_pad_reducescatter_and_alltoall():
    x = np.arange(2 * 3).reshape(2, 3)  # 2 ranks, 3 rows each (not divisible by 2)
    rs = ref.expected("reducescatter", x)
    assert rs.shape == (2, 2) and rs[0].tolist() == [3, 5] and rs[1].tolist() == [7, 0]
    a2a = ref.expected("alltoall", x)
    assert a2a[0].tolist() == [0, 1, 3, 4] and a2a[1].tolist() == [2, 0, 5, 0]


# ------------------------------------------------------------------------------------ meshes
def test_trn1_mesh_groups_match_the_documented_replica_groups():
    mesh = mesh_for_topology(resolve_topology("trn1_32"))
    assert mesh.names == ("row", "col", "core")
    assert mesh.groups(("core",))[:2] == ((0, 1), (2, 3))
    assert mesh.groups(("col",))[:3] == ((0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14))
    assert mesh.groups(("row",))[:2] == ((0, 8, 16, 24), (1, 9, 17, 25))
    two = mesh_for_topology(resolve_topology("trn1_32", 2))
    assert two.names == ("node", "row", "col", "core")
    assert two.groups(("node",))[0] == (0, 32)


def test_meshes_of_trn2_and_tpu():
    assert mesh_for_topology(resolve_topology("trn2_64")).shape == (4, 4, 4)
    tpu = resolve_topology("tpu_v5e_4x4")
    assert mesh_for_topology(tpu).names == ("x", "y") and tpu.num_ranks == 16
    assert resolve_topology("tpu_v5e:4x4").name == "tpu_v5e_4x4"
    with pytest.raises(SynthError):
        resolve_topology("tpu_v5e_4xq")


@pytest.mark.parametrize("axes", [("core",), ("col",), ("row", "col"), ("row", "col", "core")])
def test_rings_use_direct_links_only(axes):
    topo = resolve_topology("trn1_32")
    mesh = mesh_for_topology(topo)
    cyc = ring_cycle(mesh, axes, topo)
    assert cyc is not None and sorted(cyc) == list(range(mesh.group_size(axes)))
    for g in mesh.groups(axes):
        for i in range(len(cyc)):
            assert topo.has_channel(g[cyc[i]], g[cyc[(i + 1) % len(cyc)]])


# ------------------------------------------------------------------------------------ constraints
def _program(mesh, build, dtype="float32", shape=(8,)):
    b = Builder(mesh, [TensorSpec(shape, dtype)])
    y = build(b, b.inputs[0][0])
    return b.program("allreduce", [y], "add", "test", ("test",))


def test_neuron_rejects_permutes_that_are_not_rings_over_direct_links():
    topo = resolve_topology("trn1_32")
    mesh = mesh_for_topology(topo)
    path = _program(mesh, lambda b, x: b.call("permute", x, ("col",), perm=((0, 1), (1, 2))))
    assert violations(path, "jax", topo) == []
    rules = [v.rule for v in violations(path, "neuron", topo)]
    assert "neuron-permute-ring" in rules
    skip = _program(mesh, lambda b, x: b.call("permute", x, ("col",), perm=((0, 2), (2, 0))))
    assert any("not directly connected" in v.message for v in violations(skip, "neuron", topo))
    with pytest.raises(SynthError, match="ring-only"):
        check(path, "neuron", topo)


def test_neuron_limits_replica_group_configurations_to_16():
    topo = resolve_topology("trn1_32")
    mesh = mesh_for_topology(topo)

    def many(b, x):
        for k in range(1, 18):
            x = b.call("permute", x, ("row", "col", "core"),
                       perm=tuple((r, (r + k) % 32) for r in range(32)))
        return x

    prog = _program(mesh, many)
    assert "neuron-replica-groups" in [v.rule for v in violations(prog, "neuron", None)]
    assert "neuron-replica-groups" not in [v.rule for v in violations(prog, "jax", None)]


def test_integer_reduce_scatter_min_scatter_and_reductions():
    topo = resolve_topology("trn1_32")
    mesh = mesh_for_topology(topo)
    rs = _program(mesh, lambda b, x: b.call("reduce_scatter", x, ("core",), op="add"), dtype="int32")
    assert "neuron-integer-reduce-scatter" in [v.rule for v in violations(rs, "neuron", topo)]
    assert violations(rs, "jax", topo) == []
    mn = _program(mesh, lambda b, x: b.call("reduce_scatter", x, ("core",), op="min"))
    assert "jax-psum-scatter" in [v.rule for v in violations(mn, "jax", topo)]
    assert violations(mn, "neuron", topo) == []
    mul = _program(mesh, lambda b, x: b.call("all_reduce", x, ("core",), op="mul"))
    assert "reduction" in [v.rule for v in violations(mul, "neuron", topo)]


def test_divisibility_is_checked_and_symmetric_groups():
    topo = resolve_topology("trn1_32")
    mesh = mesh_for_topology(topo)
    bad = Program("alltoall", mesh, (("x0", TensorSpec((6,), "float32")),), ("t1",),
                  (Op("all_to_all", ("x0",), ("t1",), axes=("col",)),))
    found = violations(bad, "neuron", topo)
    assert [v.rule for v in found] == ["shape"] and "divisible" in found[0].message
    check_groups_symmetric([[0, 32], [1, 33]], 32)
    with pytest.raises(SynthError, match="symmetric"):
        check_groups_symmetric([[0, 33], [1, 32]], 32)


# ------------------------------------------------------------------------------------ stand-ins
def test_xm_standin_enforces_neuron_rules_and_spmd_agreement():
    xm = FakeXM(4)

    def bad_rs(r):
        return xm.reduce_scatter(xm.REDUCE_SUM, np.arange(4, dtype=np.int32), 1.0, 0, 4)

    with pytest.raises(SynthError, match="integer reduce_scatter"):
        _spmd(4, xm.rdv, bad_rs)
    xm = FakeXM(4)
    with pytest.raises(SynthError, match="not supported by Neuron"):
        _spmd(4, xm.rdv, lambda r: xm.all_reduce(xm.REDUCE_MUL, np.ones(2)))
    xm = FakeXM(4)
    with pytest.raises(SynthError, match="disagree"):
        _spmd(4, xm.rdv, lambda r: xm.all_gather(np.ones(2), dim=0,
                                                  groups=[[0, 1], [2, 3]] if r else [[0, 2], [1, 3]]))
    xm = FakeXM(4)
    with pytest.raises(SynthError, match="number of collective calls"):
        _spmd(4, xm.rdv, lambda r: xm.all_reduce(xm.REDUCE_SUM, np.ones(2)) if r else None)
    xm = FakeXM(4)
    out = _spmd(4, xm.rdv, lambda r: xm.collective_permute(np.full(1, r), [[0, 1], [1, 2], [2, 3], [3, 0]]))
    assert [o.tolist() for o in out] == [[3], [0], [1], [2]]


def test_emitted_modules_run_on_standins_for_a_handwritten_program():
    topo = resolve_topology("trn1_32")
    mesh = mesh_for_topology(topo)

    def build(b, x):
        y = b.call("all_gather", x, ("core",), dim=0)
        y = b.call("all_reduce", y, ("row", "col"), op="max")
        return b.take_rows(b.reshape(y, (2, 3)), ("core",), [[1], [0]])

    prog = _program(mesh, build, shape=(3,))
    prog = type(prog)(**{**prog.__dict__, "collective": "custom"})
    x = ref.random_inputs([(3,)], "float32", 32, seed=2)
    want = ref.interpret(prog, x)[0]
    assert np.array_equal(run_neuron_standin(emit(prog, "neuron"), x, topology=topo)[0], want)
    assert np.array_equal(run_jax_standin(emit(prog, "jax"), x)[0], want)
