"""``synth topo import``: published NCCL topology files become topologies --topo accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from synth.bounds import lower_bound
from synth.collectives import make_collective
from synth.errors import SynthError
from synth.topo_import import import_topology
from synth.topology_io import load_topology

DUMPS = Path(__file__).parent / "data" / "topo-dumps"


def _allgather_slope(topo):
    return lower_bound(topo, make_collective("allgather", topo.num_ranks)).inv_bandwidth_us_per_byte


def test_published_8xh100_matches_shipped_dgx_h100():
    machine, topo, _text = import_topology(str(DUMPS / "ibm-gx3d-8xh100.xml"), "nccl-xml")
    assert topo.num_ranks == 8
    (nvs,) = topo.switches
    assert [p.lanes for p in nvs.ports] == [18] * 8
    assert abs(nvs.ports[0].bandwidth_GBps - 450) < 1e-9
    assert len(topo.nics) == 8 and all(len(n.ranks) == 1 for n in topo.nics)
    assert all(abs(n.bandwidth_GBps - 25.0) < 1e-9 for n in topo.nics)  # speed="200000" Mbit/s
    shipped = _allgather_slope(load_topology("dgx_h100"))
    assert abs(_allgather_slope(topo) - shipped) <= 0.05 * shipped
    assert "rank attributes" in " ".join(machine.inferred)


def test_partial_h200_dump_imports_what_it_shows():
    _machine, topo, _ = import_topology(str(DUMPS / "nccl-tests-256-h200-baremetal-partial.xml"),
                                       "nccl-xml")
    assert topo.num_ranks == 3 and len(topo.nics) == 3
    assert [p.lanes for p in topo.switches[0].ports] == [18, 18, 18]
    vm, vm_topo, _ = import_topology(str(DUMPS / "nccl-tests-256-h200-vm-partial.xml"), "nccl-xml")
    assert vm_topo.num_ranks == 1 and any("only GPU 0" in r for r in vm.read)


def test_hint_file_is_refused_unless_assumptions_are_given():
    with pytest.raises(SynthError, match=r"hint file .*no NVLink fabric.*--assume-nvlink"):
        import_topology(str(DUMPS / "azure-ndv5-topo.xml"), "nccl-xml")
    with pytest.raises(SynthError, match=r"states no speed.*--assume-nic-gbps"):
        import_topology(str(DUMPS / "azure-ndv5-topo.xml"), "nccl-xml", assume_nvlink="h100")
    m, topo, _ = import_topology(str(DUMPS / "azure-ndv5-topo.xml"), "nccl-xml",
                                 assume_nvlink="h100", assume_nic_gbps=400)
    assert topo.num_ranks == 8 and topo.switches[0].ports[0].lanes == 18
    assert len(m.assumed) >= 2 and all(abs(n.bandwidth_GBps - 50) < 1e-9 for n in topo.nics)


def test_pcie_only_hint_models_the_pcie_tree():
    _m, topo, _ = import_topology(str(DUMPS / "azure-ndv4-topo.xml"), "nccl-xml",
                                 assume_nvlink="none", assume_nic_gbps=200)
    assert topo.num_ranks == 8 and not topo.links
    assert any(s.name == "sockets" for s in topo.switches)
    # every pair of GPUs is joined by exactly one switch: their lowest common PCIe ancestor
    for a in topo.ranks:
        for b in topo.ranks:
            if a != b:
                assert topo.channel(a, b) is not None


@pytest.mark.parametrize("text, message", [
    ("<system version='1'><cpu numaid='0'></cpu></system>", "has no GPUs"),
    ("<system><cpu><pci busid='0:1' class='0x030200' vendor='0x10de' device='0x9999'>"
     "<gpu dev='0' rank='0'><nvlink target='x' count='2' tclass='0x068000'/></gpu></pci></cpu>"
     "</system>", "unknown NVIDIA PCI device id 0x9999"),
    ("<system><cpu><pci busid='0:1'>\n<gpu dev='0' sm='90'>\n</pci></cpu></system>",
     ":3: not well-formed XML"),
    ("<system>\n<cpu>\n<gizmo/></cpu></system>", ":3: <gizmo>: unknown element"),
    ("<topology/>", "root element"),
    ("<system><cpu><pci busid='0:1' class='0x030200' vendor='0x10de'>"
     "<gpu dev='0' sm='75' rank='0'/></pci></cpu></system>", "sm=75 is not one synth knows"),
])
def test_bad_dumps_are_refused_with_a_line(tmp_path, text, message):
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(SynthError, match=message):
        import_topology(str(path), "nccl-xml")


def test_cli_writes_a_topology_that_solve_accepts(synth_cli, tmp_path):
    out = tmp_path / "h100.yaml"
    r = synth_cli("topo", "import", str(DUMPS / "ibm-gx3d-8xh100.xml"), "--format", "nccl-xml",
                  "--out", str(out), "--nodes", "2")
    assert r.returncode == 0, r.stderr
    assert "inferred: NVSwitch fabric" in r.stdout and "16 ranks" in r.stdout
    assert load_topology(str(out)).num_ranks == 8
    bad = synth_cli("topo", "import", str(DUMPS / "azure-ndv4-topo.xml"), "--format", "nccl-xml",
                    "--out", str(tmp_path / "x.yaml"))
    assert bad.returncode == 2 and "hint file" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.slow
def test_imported_h100_two_nodes_allreduce_verified(synth_cli, tmp_path):
    out = tmp_path / "h100.yaml"
    assert synth_cli("topo", "import", str(DUMPS / "ibm-gx3d-8xh100.xml"), "--format", "nccl-xml",
                     "--out", str(out)).returncode == 0
    r = synth_cli("solve", "--topo", str(out), "--nodes", "2", "--coll", "allreduce", "--out",
                  str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    assert "XML verified by the interpreter" in r.stdout
