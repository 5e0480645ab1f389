"""The shipped topology files: they load, validate, and say what the hardware documents say."""

from __future__ import annotations

import jsonschema
import networkx as nx
import pytest
import yaml

from synth.topology import Topology
from synth.topology_io import (
    TOPOLOGY_SCHEMA,
    _topology_dir,
    load_topology,
    shipped_files,
    shipped_names,
)

SHIPPED = ["dgx1", "dgx2", "dgx_a100", "dgx_h100", "mi300x", "ndv2", "trn1_32", "trn2_64"]

# SCCL's DGX1 NVLink multiplicities (msccl-tools, msccl/topologies/nvidia.py, dgx1()).
DGX1_MATRIX = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]


def _raw(name: str) -> dict:
    entry = _topology_dir().joinpath(shipped_files()[name])
    return yaml.safe_load(entry.read_text())


def _ranks_connected(topo: Topology) -> bool:
    """Every rank reaches every other rank in the physical graph (switch and port vertices included)."""
    g = topo.physical_graph()
    for comp in nx.strongly_connected_components(g):
        ranks = {v for v in comp if isinstance(v, int)}
        if ranks:
            return len(ranks) == topo.num_ranks
    return False


def _link_counts(topo: Topology) -> dict[tuple[int, int], int]:
    return {(lk.src, lk.dst): lk.count for lk in topo.links}


# ---------------------------------------------------------------------------- names and loading
def test_shipped_names_are_exactly_the_eight():
    assert shipped_names() == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_loads_and_validates(name):
    raw = _raw(name)
    jsonschema.Draft202012Validator(TOPOLOGY_SCHEMA).validate(raw)
    topo = load_topology(name)
    assert topo.name == name
    assert topo.num_ranks == raw["ranks"]
    assert topo.description and topo.sources
    assert topo.nics, "every shipped topology needs NICs so that --nodes works"
    assert _ranks_connected(topo)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_link_class_is_documented_and_used(name):
    raw = _raw(name)
    used = {spec["class"] for key in ("links", "switches", "nics") for spec in raw.get(key, [])}
    assert used == set(raw["link_classes"])
    for cls in raw["link_classes"].values():
        assert cls.get("note")


def test_alias_ndv4_resolves_to_dgx_a100():
    assert shipped_files()["ndv4"] == shipped_files()["dgx_a100"]
    ndv4 = load_topology("ndv4")
    assert ndv4.name == "dgx_a100"
    assert ndv4.content_hash == load_topology("dgx_a100").content_hash
    assert "ndv4" not in shipped_names()


# ---------------------------------------------------------------------------- Trainium tori
@pytest.mark.parametrize("name, ranks, per_link_GBps", [("trn1_32", 32, 96.0), ("trn2_64", 64, 256.0)])
def test_trainium_chips_form_the_documented_torus(name, ranks, per_link_GBps):
    topo = load_topology(name)
    meta = dict(topo.meta)
    rows, cols = meta["torus"]
    per_chip = meta["ranks_per_chip"]
    assert meta["chips"] == rows * cols == 16
    assert topo.num_ranks == ranks == meta["chips"] * per_chip

    def chip(rank: int) -> int:
        return rank // per_chip

    neighbours: dict[int, set[int]] = {c: set() for c in range(meta["chips"])}
    chip_bw: dict[tuple[int, int], float] = {}
    for lk in topo.links:
        a, b = chip(lk.src), chip(lk.dst)
        if a == b:
            continue
        neighbours[a].add(b)
        chip_bw[(a, b)] = chip_bw.get((a, b), 0.0) + lk.bandwidth_GBps
    for c in range(meta["chips"]):
        r, k = divmod(c, cols)
        expected = {r * cols + (k + 1) % cols, r * cols + (k - 1) % cols,
                    ((r + 1) % rows) * cols + k, ((r - 1) % rows) * cols + k}
        assert neighbours[c] == expected, f"chip {c} at ({r}, {k})"
    # each NeuronLink keeps its documented per-link bandwidth, however it is split over ranks
    assert len(chip_bw) == 2 * 32
    assert all(bw == pytest.approx(per_link_GBps) for bw in chip_bw.values())
    # the cores of one chip are directly linked to each other
    for c in range(meta["chips"]):
        members = range(c * per_chip, (c + 1) * per_chip)
        for a in members:
            for b in members:
                if a != b:
                    assert topo.channel(a, b) is not None and topo.channel(a, b).via == "link"


def test_trn1_efa_devices_are_shared_by_two_chips():
    topo = load_topology("trn1_32")
    assert len(topo.nics) == 8
    assert sorted(r for nic in topo.nics for r in nic.ranks) == list(range(32))
    assert all(len(nic.ranks) == 4 and nic.bandwidth_GBps == pytest.approx(12.5) for nic in topo.nics)


def test_trn2_has_one_efa_device_per_chip():
    topo = load_topology("trn2_64")
    assert [nic.ranks for nic in topo.nics] == [tuple(range(4 * d, 4 * d + 4)) for d in range(16)]
    assert all(nic.bandwidth_GBps == pytest.approx(25.0) for nic in topo.nics)


# ---------------------------------------------------------------------------- NVLink cube-mesh
@pytest.mark.parametrize("name", ["dgx1", "ndv2"])
def test_cube_mesh_matches_the_sccl_dgx1_matrix(name):
    topo = load_topology(name)
    counts = _link_counts(topo)
    for a in range(8):
        for b in range(8):
            assert counts.get((a, b), 0) == DGX1_MATRIX[a][b], (a, b)
        assert sum(counts.get((a, b), 0) for b in range(8)) == 6
    assert not topo.switches


def test_dgx1_nominal_bandwidth():
    topo = load_topology("dgx1")
    assert all(lk.bandwidth_GBps == pytest.approx(25.0 * lk.count) for lk in topo.links)
    assert all(topo.send_bandwidth_GBps(r) == pytest.approx(150.0) for r in topo.ranks)
    assert [len(nic.ranks) for nic in topo.nics] == [2, 2, 2, 2]


def test_ndv2_one_nic_shared_by_all_gpus_with_taccl_profile():
    topo = load_topology("ndv2")
    (nic,) = topo.nics
    assert nic.ranks == tuple(range(8))
    assert nic.beta_us_per_mb == pytest.approx(105.0) and nic.alpha_us == pytest.approx(2.6)
    double = topo.channel(0, 1)
    assert double is not None and double.beta_us_per_mb == pytest.approx(23.0)  # TACCL's invbw1
    single = topo.channel(0, 2)
    assert single is not None and single.beta_us_per_mb == pytest.approx(46.0)  # TACCL's invbw2


def test_mi300x_is_fully_connected_by_seven_links():
    topo = load_topology("mi300x")
    for r in topo.ranks:
        out = [lk for lk in topo.links if lk.src == r]
        assert len(out) == 7 and all(lk.count == 1 for lk in out)
        assert topo.send_bandwidth_GBps(r) == pytest.approx(7 * 64.0)


# ---------------------------------------------------------------------------- NVSwitch budgets
@pytest.mark.parametrize("name, ranks, nvswitch_GBps, nic_GBps, ranks_per_nic", [
    ("dgx2", 16, 150.0, 12.5, 2),
    ("dgx_a100", 8, 300.0, 25.0, 1),
    ("dgx_h100", 8, 450.0, 50.0, 1),
])
def test_nvswitch_send_bandwidth_matches_the_documented_figure(name, ranks, nvswitch_GBps, nic_GBps,
                                                               ranks_per_nic):
    one = load_topology(name)
    assert one.num_ranks == ranks
    for r in one.ranks:
        assert one.send_bandwidth_GBps(r) == pytest.approx(nvswitch_GBps)
        assert one.recv_bandwidth_GBps(r) == pytest.approx(nvswitch_GBps)
    assert all(len(nic.ranks) == ranks_per_nic for nic in one.nics)
    assert all(nic.bandwidth_GBps == pytest.approx(nic_GBps) for nic in one.nics)
    two = load_topology(name, nodes=2)
    share = nic_GBps / ranks_per_nic
    for r in two.ranks:
        assert two.send_bandwidth_GBps(r) == pytest.approx(nvswitch_GBps + share)


# ---------------------------------------------------------------------------- multi-node
def test_multinode_sizes():
    assert load_topology("dgx_a100", nodes=4).num_ranks == 32
    assert load_topology("trn1_32", nodes=2).num_ranks == 64


@pytest.mark.parametrize("name", SHIPPED)
def test_every_multinode_topology_is_connected(name):
    one = load_topology(name)
    for nodes in (2, 3):
        multi = load_topology(name, nodes=nodes)
        assert multi.num_ranks == nodes * one.num_ranks
        assert multi.num_nodes == nodes
        assert _ranks_connected(multi)
        # a rank of node 0 reaches node 1 through the fabric, never by a direct link
        far = one.num_ranks
        assert multi.channel(0, far) is None or multi.channel(0, far).via == "fabric"
