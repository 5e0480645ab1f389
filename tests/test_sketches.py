"""Communication sketches: the file format, the global view, the fit checks, the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.builders import multinode
from synth.errors import SynthError
from synth.sketches import (
    HINTS,
    Relay,
    Sketch,
    SwitchPolicy,
    base_topology_name,
    check_sketch,
    load_sketch,
    parse_sketch,
    require_fit,
    rotate,
    shipped_sketches,
    sketch_for,
)
from synth.topology import Nic
from synth.topology_io import load_topology, shipped_names
from tests.strategies import connected_topologies

GOOD = """\
name: my-sketch
description: two ranks per node relay
topology: dgx2
nodes: [2]
chunks_per_rank: 2
intranode: {strategy: all}
internode:
  strategy: relay
  relays:
    - {sender: 1, receiver: 0, carries: [0, 1]}
    - {sender: 3, receiver: 2}
switches:
  - {switch: nvswitch, max_peers: 4}
symmetry: [[16, 32]]
hints: {time_limit_s: 30, mip_gap: 0.01}
"""


def write(tmp_path: Path, text: str, name: str = "sk.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def sk(**fields) -> Sketch:
    """A sketch for tests: direct, all intra-node channels, unless told otherwise."""
    base = {"name": "t", "description": "", "topology": "dgx1", "nodes": (1,)}
    return Sketch(**{**base, **fields})


# ---------------------------------------------------------------------------------------- shipped
SHIPPED = [(name, n) for name, s in shipped_sketches().items() for n in s.nodes]


@pytest.mark.parametrize(("name", "nodes"), SHIPPED)
def test_every_shipped_sketch_fits_every_node_count_it_lists(name, nodes):
    sketch = shipped_sketches()[name]
    topology = load_topology(sketch.topology, nodes)
    assert check_sketch(sketch, topology) == []
    assert sketch_for(topology) is not None


def test_shipped_sketches_cover_the_required_machines():
    covered = {(s.topology, n) for s in shipped_sketches().values() for n in s.nodes}
    required = {("trn1_32", 1), ("trn1_32", 2), ("trn2_64", 1), ("dgx1", 1), ("ndv2", 1),
                ("ndv2", 2), ("ndv2", 4), ("dgx2", 1), ("dgx2", 2), ("dgx_a100", 1),
                ("dgx_a100", 2), ("dgx_a100", 4), ("dgx_h100", 2), ("dgx_h100", 8)}
    assert required <= covered
    assert {t for t, _ in covered} == set(shipped_names())  # a sketch for every shipped topology
    for s in shipped_sketches().values():
        assert s.topology in shipped_names()
        assert s.name.startswith(s.topology + "-")
        assert len(s.description) > 80 and "TACCL" in s.description


def test_sketch_for_picks_by_base_name_and_node_count():
    assert sketch_for(load_topology("ndv2", 2)).name == "ndv2-relay"
    assert sketch_for(load_topology("ndv2", 4)).name == "ndv2-relay-x4"
    assert sketch_for(load_topology("ndv2x2", 2)).name == "ndv2-relay-x4"
    assert sketch_for(load_topology("ndv4")).name == "dgx_a100-switch"
    assert sketch_for(load_topology("dgx1")).name == "dgx1-mesh"
    assert sketch_for(load_topology("ndv2", 3)) is None
    assert sketch_for(load_topology("ring:4")) is None


def test_base_topology_name_reads_multinode_names_back():
    assert base_topology_name(load_topology("dgx_a100", 4)) == "dgx_a100"
    assert base_topology_name(load_topology("torus:2x2", 2)) == "torus:2x2"
    assert base_topology_name(load_topology("trn1_32")) == "trn1_32"


# ---------------------------------------------------------------------------------------- files
def test_good_file_loads_and_round_trips(tmp_path):
    sketch = load_sketch(write(tmp_path, GOOD))
    assert sketch.relays == (Relay(1, 0, (0, 1)), Relay(3, 2, ()))
    assert sketch.switch_policies == (SwitchPolicy("nvswitch", 4, None),)
    assert sketch.hints == {"mip_gap": 0.01, "time_limit_s": 30}
    again = parse_sketch(json.loads(json.dumps(sketch.to_dict())), "again")
    assert again == sketch and again.content_hash == sketch.content_hash
    assert hash(again) == hash(sketch)
    as_json = write(tmp_path, json.dumps(sketch.to_dict()), "sk.json")
    assert load_sketch(as_json) == sketch
    changed = dataclasses.replace(sketch, description="other words")
    assert changed.content_hash == sketch.content_hash
    assert dataclasses.replace(sketch, chunks_per_rank=1).content_hash != sketch.content_hash


@pytest.mark.parametrize(("text", "needle"), [
    ("name: [unclosed\n", "not valid YAML"),
    ("", "is empty"),
    (GOOD + "bogus: 1\n", "unknown field(s)"),
    (GOOD.replace("nodes: [2]", "nodes: []"), "field 'nodes'"),
    (GOOD.replace("chunks_per_rank: 2", "chunks_per_rank: 0"), "field 'chunks_per_rank'"),
    (GOOD.replace("{strategy: all}", "{strategy: some}"), "must be one of all, links"),
    (GOOD.replace("{strategy: all}", "{strategy: links}"), "strategy 'links' needs"),
    (GOOD.replace("{strategy: all}", "{strategy: all, links: [[0, 1]]}"), "only read with"),
    (GOOD.replace("strategy: relay", "strategy: direct"), "'relays' are only read"),
    (GOOD.replace("  relays:\n    - {sender: 1, receiver: 0, carries: [0, 1]}\n"
                  "    - {sender: 3, receiver: 2}\n", ""), "needs a 'relays' list"),
    (GOOD.replace("receiver: 2}", "receiver: 0}").replace("sender: 3", "sender: 1"),
     "declared twice"),
    (GOOD.replace("carries: [0, 1]", "carries: [1, 1]"), "twice"),
    (GOOD.replace("sender: 3", "sender: -3"), "field 'internode.relays.1.sender'"),
    (GOOD.replace("max_peers: 4", "max_peers: 2, min_peers: 3"), "min_peers 3 is more than"),
    (GOOD.replace("{switch: nvswitch, max_peers: 4}", "{switch: nvswitch}"),
     "needs max_peers, min_peers or both"),
    (GOOD.replace("[[16, 32]]", "[[12, 32]]"), "does not divide group size 32"),
    (GOOD.replace("[[16, 32]]", "[[32, 32]]"), "between 1 and group size"),
    (GOOD.replace("[[16, 32]]", "[[16]]"), "field 'symmetry.0'"),
    (GOOD.replace("mip_gap: 0.01", "mip_gap: 1.5"), "must be less than 1"),
    (GOOD.replace("time_limit_s: 30", "time_limit_s: 0"), "must be greater than 0"),
    (GOOD.replace("mip_gap: 0.01", "gap: 0.01"), "unknown field(s)"),
    (GOOD.replace("topology: dgx2", "topology: a/b"), "field 'topology'"),
])
def test_bad_sketch_file(tmp_path, text, needle):
    with pytest.raises(SynthError) as info:
        load_sketch(write(tmp_path, text))
    assert needle in info.value.message, info.value.message
    assert "sk.yaml" in info.value.message


def test_unknown_sketch_suggests_close_names():
    with pytest.raises(SynthError) as info:
        load_sketch("ndv2-rely")
    assert "unknown sketch 'ndv2-rely'" in info.value.message
    assert "did you mean ndv2-relay" in info.value.message


def test_missing_file_and_fit_on_load(tmp_path):
    with pytest.raises(SynthError, match="does not exist"):
        load_sketch(str(tmp_path / "nope.yaml"))
    with pytest.raises(SynthError, match="written for 2 node"):
        load_sketch("ndv2-relay", load_topology("ndv2"))
    assert load_sketch("ndv2-relay", load_topology("ndv2", 2)).name == "ndv2-relay"


def test_model_rejects_inconsistent_fields():
    assert {"time_limit_s", "mip_gap", "max_extra_hops"} <= set(HINTS)
    with pytest.raises(SynthError, match="unknown hint"):
        sk(hints={"speed": "max"})
    with pytest.raises(SynthError, match="only read with internode 'relay'"):
        sk(relays=(Relay(0, 1),))
    with pytest.raises(SynthError, match="only read with intranode 'links'"):
        sk(intranode_links=((0, 1),))
    with pytest.raises(SynthError, match="intranode must be one of"):
        sk(intranode="none")


# ---------------------------------------------------------------------------------------- global view
def test_relay_pairs_only_cross_nodes_as_declared():
    topo = load_topology("ndv2", 2)
    sketch = shipped_sketches()["ndv2-relay"]
    pairs = sketch.allowed_pairs(topo)
    inter = {(u, v) for u, v in pairs if topo.node_of[u] != topo.node_of[v]}
    assert inter == {(0, 9), (8, 1)}
    intra = {(u, v) for u in topo.ranks for v in topo.neighbors(u)
             if topo.node_of[u] == topo.node_of[v]}
    assert pairs - inter == intra


def test_relays_join_every_ordered_pair_of_distinct_nodes():
    topo = load_topology("dgx_a100", 3)
    sketch = sk(topology="dgx_a100", nodes=(3,), internode="relay", relays=(Relay(2, 5),))
    inter = {(u, v) for u, v in sketch.allowed_pairs(topo) if topo.node_of[u] != topo.node_of[v]}
    assert inter == {(a * 8 + 2, b * 8 + 5) for a in range(3) for b in range(3) if a != b}


def test_direct_allows_every_channel_and_links_mode_only_the_listed_links():
    topo = load_topology("dgx1")
    assert sk().allowed_pairs(topo) == frozenset(topo.graph().edges)
    ring = ((0, 1), (1, 3), (3, 2), (2, 6), (6, 7), (7, 5), (5, 4), (4, 0))
    sketch = sk(intranode="links", intranode_links=ring)
    assert sketch.allowed_pairs(topo) == frozenset(ring)
    assert check_sketch(sketch, topo) == []


def test_may_carry():
    topo = load_topology("dgx2", 2)
    sketch = shipped_sketches()["dgx2-relay"]
    assert sketch.may_carry(topo, 0, 1, 16)       # relay 1 -> 0 carries local 0 and 1
    assert sketch.may_carry(topo, 17, 1, 16)      # local index 1, from the other node
    assert not sketch.may_carry(topo, 2, 1, 16)   # local 2 belongs to relay 3 -> 2
    assert sketch.may_carry(topo, 2, 3, 18)
    assert not sketch.may_carry(topo, 0, 0, 17)   # not a relay pair at all
    assert sketch.may_carry(topo, 5, 0, 7)        # intra-node: always
    rail = shipped_sketches()["dgx_a100-rail"]
    assert rail.may_carry(load_topology("dgx_a100", 2), 5, 3, 11)  # empty carries: any data
    assert sk(topology="dgx2", nodes=(2,)).may_carry(topo, 0, 5, 20)  # direct
    carriers = sketch.carriers(topo)
    assert len(carriers) == 16 and carriers[(1, 16)] == frozenset({0, 1})
    assert set(rail.carriers(load_topology("dgx_a100", 2)).values()) == {None}
    assert sk().carriers(load_topology("dgx1")) == {}


def test_rotate_is_taccl_sym_rank():
    assert [rotate(r, 2, 8) for r in range(8)] == [2, 3, 4, 5, 6, 7, 0, 1]
    assert rotate(13, 8, 16) == 5 and rotate(21, 4, 8) == 17


# ---------------------------------------------------------------------------------------- checks
HALF_NIC = """\
name: halfnic
ranks: 2
link_classes:
  nv: {alpha_us: 1.0, bandwidth_GBps: 25}
  ib: {alpha_us: 3.0, bandwidth_GBps: 12.5}
links:
  - {between: [0, 1], class: nv}
nics:
  - {name: ib0, ranks: [0], class: ib}
"""


def _case(kind: str, tmp_path: Path):
    a100x2 = load_topology("dgx_a100", 2)
    rails = tuple(Relay(i, i, (0,)) for i in range(8))
    cases = {
        "node count": (shipped_sketches()["ndv2-relay"], load_topology("ndv2"),
                       "written for 2 node(s), the topology has 1"),
        "chunks": (sk(chunks_per_rank=0), load_topology("dgx1"), "chunks_per_rank must be"),
        "link index": (sk(intranode="links", intranode_links=((0, 9),)), load_topology("dgx1"),
                       "local index 9 is out of range"),
        "link absent": (sk(intranode="links", intranode_links=((0, 5),)), load_topology("dgx1"),
                        "intranode link 0->5 does not exist"),
        "relay no channel": (sk(topology="halfnic", nodes=(2,), internode="relay",
                                relays=(Relay(1, 0),)),
                             load_topology(write(tmp_path, HALF_NIC, "halfnic.yaml"), 2),
                             "no inter-node channel"),
        "relay index": (sk(topology="dgx_a100", nodes=(2,), internode="relay",
                           relays=(Relay(0, 8),)), a100x2, "receiver: local index 8"),
        "carries index": (sk(topology="dgx_a100", nodes=(2,), internode="relay",
                             relays=(Relay(0, 0, (9,)),)), a100x2, "carries: local index 9"),
        "unknown switch": (sk(topology="dgx_a100", switch_policies=(SwitchPolicy("nvswtch", 3),)),
                           load_topology("dgx_a100"), "did you mean nvswitch"),
        "no switch": (sk(switch_policies=(SwitchPolicy("*", 3),)), load_topology("dgx1"),
                      "no intra-node switch"),
        "min over max": (sk(topology="dgx_a100", switch_policies=(SwitchPolicy("*", 2, 4),)),
                         load_topology("dgx_a100"), "min_peers 4 is more than max_peers 2"),
        "min over possible": (sk(topology="dgx_a100",
                                 switch_policies=(SwitchPolicy("nvswitch", None, 8),)),
                              load_topology("dgx_a100"), "more than the 7 peer(s)"),
        "max over possible": (sk(topology="dgx_a100", switch_policies=(SwitchPolicy("*", 9),)),
                              load_topology("dgx_a100"), "restricts nothing"),
        "group size": (sk(symmetry=((1, 5),)), load_topology("dgx1"),
                       "group size 5 does not divide the 8 ranks"),
        "offset": (sk(symmetry=((3, 8),)), load_topology("dgx1"), "does not divide group size 8"),
        "not automorphism": (sk(symmetry=((2, 8),)), load_topology("dgx1"),
                             "which the sketch does not allow"),
        "ports": (sk(topology="trn1_32", nodes=(2,), symmetry=((2, 8),)),
                  load_topology("trn1_32", 2), "share no port"),
        "carries symmetry": (sk(topology="dgx_a100", nodes=(2,), internode="relay", relays=rails,
                                symmetry=((1, 8),)), a100x2, "does not respect the relays' carries"),
        "unreachable": (sk(intranode="links", intranode_links=((0, 1),)), load_topology("dgx1"),
                        "rank 0 cannot reach rank 2"),
        "carries delivery": (sk(topology="dgx_a100", nodes=(2,), internode="relay", relays=rails),
                             a100x2, "the relays' carries cannot deliver"),
    }
    return cases[kind]


@pytest.mark.parametrize("kind", [
    "node count", "chunks", "link index", "link absent", "relay no channel", "relay index",
    "carries index", "unknown switch", "no switch", "min over max", "min over possible",
    "max over possible", "group size", "offset", "not automorphism", "ports", "carries symmetry",
    "unreachable", "carries delivery",
])
def test_check_sketch_catches(kind, tmp_path):
    sketch, topology, needle = _case(kind, tmp_path)
    problems = check_sketch(sketch, topology)
    assert any(needle in p for p in problems), problems
    with pytest.raises(SynthError) as info:
        require_fit(sketch, topology)
    assert needle in info.value.message and "\n" not in info.value.message


# ---------------------------------------------------------------------------------------- properties
@st.composite
def topology_and_sketch(draw):
    node = draw(connected_topologies(min_ranks=2, max_ranks=6))
    n = node.num_ranks
    nics = tuple(Nic(f"nic{r}", (r,), 3.0, 40.0) for r in range(n))
    count = draw(st.integers(1, 3))
    topology = multinode(dataclasses.replace(node, nics=nics), count)
    index = st.integers(0, n - 1)
    links = draw(st.lists(st.tuples(index, index), max_size=3 * n))
    relays = draw(st.lists(st.builds(Relay, index, index, st.lists(index, max_size=2).map(tuple)),
                           max_size=3, unique_by=lambda r: (r.sender, r.receiver)))
    intranode = draw(st.sampled_from(["all", "links"]))
    internode = draw(st.sampled_from(["direct", "relay"]))
    sketch = Sketch(
        name="random", description="", topology=node.name, nodes=(count,),
        intranode=intranode,
        intranode_links=tuple((a, b) for a, b in links if a != b) if intranode == "links" else (),
        internode=internode, relays=tuple(relays) if internode == "relay" else (),
        symmetry=draw(st.sampled_from([(), ((1, n),)] if n > 1 else [()])),
    )
    return topology, sketch


@settings(max_examples=60, deadline=None)
@given(topology_and_sketch())
def test_allowed_pairs_are_channels_the_sketch_declares(case):
    topology, sketch = case
    pairs = sketch.allowed_pairs(topology)
    local = {r: i for members in topology.nodes for i, r in enumerate(members)}
    for u, v in pairs:
        assert topology.channel(u, v) is not None
        same = topology.node_of[u] == topology.node_of[v]
        if same and sketch.intranode == "links":
            assert (local[u], local[v]) in sketch.intranode_links
        if not same and sketch.internode == "relay":
            assert any((r.sender, r.receiver) == (local[u], local[v]) for r in sketch.relays)
        if same:
            assert sketch.may_carry(topology, 0, u, v)
    problems = check_sketch(sketch, topology)
    assert all(isinstance(p, str) and p for p in problems)
    if sketch.intranode == "all" and sketch.internode == "direct" and not sketch.symmetry:
        assert pairs == frozenset(topology.graph().edges) and problems == []
    assert parse_sketch(sketch.to_dict(), "round trip") == sketch


# ---------------------------------------------------------------------------------------- CLI
def test_cli_list_and_show(synth_cli):
    result = synth_cli("sketch", "list", "--json")
    assert result.returncode == 0, result.stderr
    assert {row["name"] for row in json.loads(result.stdout)} == set(shipped_sketches())
    result = synth_cli("sketch", "show", "dgx2-relay", "--topo", "dgx2", "--nodes", "2")
    assert result.returncode == 0, result.stderr
    assert "inter-node" in result.stdout and "16" in result.stdout and "512" in result.stdout


def test_cli_show_json_is_a_loadable_sketch(synth_cli, tmp_path):
    result = synth_cli("sketch", "show", "trn1_32-relay", "--json")
    assert result.returncode == 0, result.stderr
    path = tmp_path / "mine.json"
    path.write_text(result.stdout)
    assert load_sketch(str(path)) == shipped_sketches()["trn1_32-relay"]
    result = synth_cli("sketch", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: sketch 'trn1_32-relay' fits trn1_32x2")


@pytest.mark.parametrize(("args", "needle"), [
    (["sketch", "check", "ndv2-relay", "--nodes", "1"], "written for 2 node(s)"),
    (["sketch", "check", "dgx1-mesh", "--topo", "line:8"], "does not fit topology 'line:8'"),
    (["sketch", "show", "ndv2-rely"], "did you mean ndv2-relay"),
    (["sketch", "check", "missing.yaml"], "does not exist"),
])
def test_cli_bad_input_exit_2(synth_cli, args, needle):
    result = synth_cli(*args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_cli_bad_file_exit_2(synth_cli, tmp_path):
    bad = write(tmp_path, GOOD.replace("[[16, 32]]", "[[12, 32]]"))
    result = synth_cli("sketch", "check", bad)
    assert result.returncode == 2 and "symmetry.0" in result.stderr
    assert "Traceback" not in result.stderr
    unknown_topo = write(tmp_path, GOOD.replace("topology: dgx2", "topology: mybox"), "u.yaml")
    result = synth_cli("sketch", "check", unknown_topo)
    assert result.returncode == 2 and "pass --topo" in result.stderr
