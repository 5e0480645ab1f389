"""``synth topo import``: published NCCL topology files become topologies --topo accepts."""

from __future__ import annotations

import re
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
    with pytest.raises(SynthError, match=r"hint file .*no NVLink fabric.*--gpu"):
        import_topology(str(DUMPS / "azure-ndv5-topo.xml"), "nccl-xml")
    with pytest.raises(SynthError, match=r"states no speed.*--assume-nic-gbps"):
        import_topology(str(DUMPS / "azure-ndv5-topo.xml"), "nccl-xml", gpu="h100")
    m, topo, _ = import_topology(str(DUMPS / "azure-ndv5-topo.xml"), "nccl-xml",
                                 gpu="h100", assume_nic_gbps=400)
    assert topo.num_ranks == 8 and topo.switches[0].ports[0].lanes == 18
    assert len(m.assumed) >= 2 and all(abs(n.bandwidth_GBps - 50) < 1e-9 for n in topo.nics)


def test_pcie_only_hint_models_the_pcie_tree():
    _m, topo, _ = import_topology(str(DUMPS / "azure-ndv4-topo.xml"), "nccl-xml",
                                 gpu="none", assume_nic_gbps=200)
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


def test_nvidia_smi_matrix():
    _, h100, _ = import_topology(str(DUMPS / "nvidia-smi-dgx-h100.txt"), "nvidia-smi", gpu="h100")
    assert h100.num_ranks == 8 and h100.switches[0].ports[0].lanes == 18
    shipped = _allgather_slope(load_topology("dgx_h100"))
    assert _allgather_slope(h100) == pytest.approx(shipped)
    with pytest.raises(SynthError, match="does not name the GPU"):
        import_topology(str(DUMPS / "nvidia-smi-dgx-h100.txt"), "nvidia-smi")
    m, pair, _ = import_topology(str(DUMPS / "nvidia-smi-2x5090-phb.txt"), "nvidia-smi")
    assert pair.num_ranks == 2 and pair.switches[0].name.startswith("pcie_PHB")
    assert any("PCIe ports x16" in a for a in m.assumed)


def test_rocm_smi_matrices():
    _, topo, _ = import_topology(str(DUMPS / "rocm-smi-4gpu-pcie.txt"), "rocm-smi")
    assert topo.num_ranks == 4 and topo.switches[0].name.startswith("sockets")
    assert all(topo.channel(a, b) for a in topo.ranks for b in topo.ranks if a != b)


def test_rocm_smi_xgmi_needs_the_gpu(tmp_path):
    rows = ["=== Weight between two GPUs ===", "  GPU0 GPU1 GPU2",
            "GPU0 0 15 30", "GPU1 15 0 15", "GPU2 30 15 0",
            "=== Link Type between two GPUs ===", "  GPU0 GPU1 GPU2",
            "GPU0 0 XGMI XGMI", "GPU1 XGMI 0 XGMI", "GPU2 XGMI XGMI 0"]
    path = tmp_path / "xgmi.txt"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(SynthError, match="--gpu mi300x"):
        import_topology(str(path), "rocm-smi")
    _, topo, _ = import_topology(str(path), "rocm-smi", gpu="mi300x")
    # weight 30 = two xGMI hops: 0 and 2 are not directly linked
    assert sorted((lk.src, lk.dst) for lk in topo.links) == [(0, 1), (1, 0), (1, 2), (2, 1)]


def test_neuron_ls_matches_shipped_trn2():
    _, topo, _ = import_topology(str(DUMPS / "neuron-ls-trn2-48xl.json"), "neuron-ls")
    shipped = load_topology("trn2_64")
    assert topo.num_ranks == 64
    assert sorted((lk.src, lk.dst) for lk in topo.links) == sorted(
        (lk.src, lk.dst) for lk in shipped.links)
    assert _allgather_slope(topo) == pytest.approx(_allgather_slope(shipped))


@pytest.mark.parametrize("fmt, text, message", [
    ("neuron-ls", "[{\"neuron_device\": 0, \"nc_count\": 2, \"connected_to\": [5]}]",
     "connected_to 5"),
    ("neuron-ls", "[\n  {\"neuron_device\": 0,\n ...\n]", ":3: not valid JSON"),
    ("nvidia-smi", "hello\n", "no `nvidia-smi topo -m` header"),
    ("nvidia-smi", "\tGPU0\tGPU1\nGPU0\t X \tQQQ\nGPU1\tPHB\t X\n", "unknown cell 'QQQ'"),
    ("rocm-smi", "nothing here\n", "no 'Link Type between two GPUs'"),
])
def test_bad_tool_outputs(tmp_path, fmt, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(SynthError, match=re.escape(message)):
        import_topology(str(path), fmt)


def test_import_is_deterministic():
    texts = {import_topology(str(DUMPS / "ibm-gx3d-8xh100.xml"), "nccl-xml")[2] for _ in range(2)}
    assert len(texts) == 1
