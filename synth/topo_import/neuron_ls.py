"""Read ``neuron-ls --json-output`` (Trainium devices and their NeuronLink neighbours).

Each device lists ``connected_to`` (its NeuronLink peers) and ``nc_count`` (its NeuronCores, or
logical cores on Trn2 with ``logical_neuroncore_config``). As in the shipped ``trn1_32`` and
``trn2_64`` topologies, a rank is a (logical) NeuronCore, cores of one device share its HBM, and
each chip-to-chip link is split between the same-index cores of the two chips. neuron-ls reports
no EFA devices: their count and speed are taken from the instance family (assumed, printed).
"""

from __future__ import annotations

from ..errors import SynthError
from ..files import parse_data
from ..topology import MAX_RANKS
from .machine import Machine

FAMILIES = {
    # family: (hbm core-to-core GB/s, NeuronLink GB/s per chip link, EFA Gbit/s, chips per EFA,
    #          source) -- the figures of topologies/trn1_32.yaml and trn2_64.yaml, which cite them
    "trn1": (205.0, 96.0, 100.0, 2, "AWS Neuron docs (Trn1 architecture; as topologies/trn1_32.yaml): "
             "384 GB/s NeuronLink-v2 per chip over 4 links, 820 GB/s HBM, 8 x 100 Gbps EFA"),
    "trn2": (120.0, 256.0, 200.0, 1, "AWS Neuron docs (Trn2 architecture; as topologies/trn2_64.yaml): "
             "1,024 GB/s NeuronLink-v3 per chip over 4 links, 2.9 TB/s HBM, 16 x 200 Gbps EFAv3"),
}


def parse_neuron_ls(text: str, source: str, family: str | None) -> Machine:
    if not text.lstrip().startswith(("[", "{")):
        raise SynthError(f"{source}:1: not valid JSON; expected the output of "
                         "`neuron-ls --json-output`")
    data = parse_data(text, source, "json")
    if not isinstance(data, list) or not data:
        raise SynthError(f"{source}: expected a non-empty JSON list of Neuron devices")
    devices = {}
    for i, d in enumerate(data):
        if not isinstance(d, dict) or not _whole(d.get("neuron_device")) \
                or not _whole(d.get("nc_count")) or d["nc_count"] < 1 \
                or not isinstance(d.get("connected_to", []), list):
            raise SynthError(f"{source}: device entry {i} lacks an integer neuron_device, a "
                             "positive nc_count or a connected_to list")
        if d["neuron_device"] in devices:
            raise SynthError(f"{source}: device {d['neuron_device']} is listed twice")
        devices[d["neuron_device"]] = d
    ids = sorted(devices)
    if ids != list(range(len(ids))):
        raise SynthError(f"{source}: devices must be numbered 0..{len(ids) - 1}, got {ids[:8]}")
    cores = {d["nc_count"] for d in devices.values()}
    if len(cores) > 1:
        raise SynthError(f"{source}: devices with different core counts {sorted(cores)}")
    k = cores.pop()
    if k * len(ids) > MAX_RANKS:  # before the k^2 core pairs per device are listed
        raise SynthError(f"{source}: {len(ids)} device(s) x {k} core(s) is {k * len(ids)} ranks; "
                         f"synth handles at most {MAX_RANKS} (MAX_RANKS)")
    m = Machine(source=source, fmt="neuron-ls", ranks=k * len(ids))
    m.read.append(f"{len(ids)} Neuron device(s) x {k} NeuronCore(s)")
    if family is None:
        family = "trn2" if any("logical_neuroncore_config" in d for d in devices.values()) or \
            any(_whole(d.get("memory_size")) and d["memory_size"] > 64 * 2**30
                for d in devices.values()) else "trn1"
        why = "logical_neuroncore_config / 96 GiB devices" if family == "trn2" else "32 GiB devices"
        m.inferred.append(f"family {family} (from {why}; --gpu trn1|trn2 overrides)")
    if family not in FAMILIES:
        raise SynthError(f"--gpu {family} is not a Neuron family synth models (trn1, trn2)")
    hbm, link, efa, per_efa, source_note = FAMILIES[family]
    m.link_class("hbm_local", 1.0, hbm, "core-to-core copy in the chip's HBM (as the shipped "
                 "topology); alpha assumed")
    m.link_class("neuronlink", 1.5, link / k, f"1/{k} of a {link:g} GB/s chip-to-chip link per "
                 f"core pair ({source_note}); alpha assumed")
    for d in ids:
        base = d * k
        for i in range(k):
            for j in range(i + 1, k):
                m.links.append({"between": [base + i, base + j], "class": "hbm_local"})
    pairs = set()
    for d in ids:
        for peer in devices[d].get("connected_to", []):
            if not _whole(peer) or peer not in devices or peer == d:
                raise SynthError(f"{source}: device {d} is connected_to {peer!r}, not another "
                                 "device of the list")
            pairs.add((min(d, peer), max(d, peer)))
            if d not in devices[peer].get("connected_to", []):
                m.assumed.append(f"device {d} lists {peer} but not the reverse: linked both ways")
    for a, b in sorted(pairs):
        for i in range(k):
            m.links.append({"between": [a * k + i, b * k + i], "class": "neuronlink"})
    m.inferred.append(f"{len(pairs)} chip-to-chip NeuronLinks, each split over the {k} "
                      "same-index core pairs")
    m.link_class("efa", 15.0, efa / 8, f"EFA device {efa:g} Gbit/s (ASSUMED for {family}: "
                 f"{source_note}); alpha about 15 µs per inter-node hop (Neuron docs)")
    for e in range(0, len(ids), per_efa):
        chips = ids[e:e + per_efa]
        m.nics.append({"name": f"efa{e // per_efa}", "class": "efa",
                       "ranks": [c * k + i for c in chips for i in range(k)]})
    m.assumed.append(f"{len(m.nics)} EFA device(s) of {efa:g} Gbit/s, one per {per_efa} chip(s) "
                     f"(neuron-ls does not list them; {family} instance figures)")
    return m


def _whole(value: object) -> bool:
    """A JSON whole number (``true`` is not device 1)."""
    return isinstance(value, int) and not isinstance(value, bool)
