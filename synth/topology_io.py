"""Loading topologies: shipped files, user files, builder specs; schema validation on load.

A topology file is YAML (or JSON) checked against :data:`TOPOLOGY_SCHEMA` with jsonschema, then
against the facts a schema cannot state (ranks in range, classes defined, the graph connected).
Every problem is reported as a :class:`SynthError` naming the file, the field and what is wrong.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from . import builders
from .errors import SynthError, unknown_name
from .files import load_yaml, parse_data, read_data
from .groups import GROUP_NAME, concurrent_group, induced, parse_group, spec_of_label
from .schema import validate
from .topology import (
    MAX_CLASSES,
    MAX_PARALLEL,
    MAX_RANKS,
    Link,
    Nic,
    Port,
    Switch,
    Topology,
    beta_from_bandwidth,
    check_link_figures,
    check_size,
)

_RANK = {"type": "integer", "minimum": 0}
_RANKS = {"type": "array", "items": _RANK, "minItems": 1}
_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_.@-]+$", "maxLength": 100}
"""A topology, switch, port or NIC name: it becomes part of file names (at most 255 bytes) and of
resource keys, so it is short and plain."""
_CLASS = {"type": "string", "minLength": 1, "maxLength": 100}

TOPOLOGY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "ranks", "link_classes"],
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "aliases": {"type": "array", "items": _NAME},
        "description": {"type": "string", "maxLength": 100_000},
        "sources": {"type": "array", "items": {"type": "string", "maxLength": 10_000},
                    "maxItems": 1000},
        "ranks": {"type": "integer", "minimum": 1, "maximum": MAX_RANKS},
        "nodes": {"type": "array", "items": _RANKS, "minItems": 1},
        "link_classes": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": MAX_CLASSES,
            "propertyNames": _CLASS,
            "additionalProperties": {
                "type": "object",
                "required": ["alpha_us"],
                "additionalProperties": False,
                "properties": {
                    "alpha_us": {"type": "number", "minimum": 0},
                    "bandwidth_GBps": {"type": "number", "exclusiveMinimum": 0},
                    "beta_us_per_mb": {"type": "number", "exclusiveMinimum": 0},
                    "note": {"type": "string", "maxLength": 10_000},
                },
                "oneOf": [{"required": ["bandwidth_GBps"]}, {"required": ["beta_us_per_mb"]}],
            },
        },
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["class"],
                "additionalProperties": False,
                "properties": {
                    "between": {"type": "array", "items": _RANK, "minItems": 2, "maxItems": 2},
                    "src": _RANK,
                    "dst": _RANK,
                    "class": _CLASS,
                    "count": {"type": "integer", "minimum": 1, "maximum": MAX_PARALLEL},
                },
                "oneOf": [{"required": ["between"]}, {"required": ["src", "dst"]}],
            },
        },
        "switches": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "class", "ports"],
                "additionalProperties": False,
                "properties": {
                    "name": _NAME,
                    "class": _CLASS,
                    "ports": {
                        "oneOf": [
                            {"const": "per_rank"},
                            {"type": "array", "minItems": 2, "items": {
                                "type": "object", "required": ["ranks"],
                                "additionalProperties": False,
                                "properties": {"name": _NAME, "ranks": _RANKS,
                                               "lanes": {"type": "integer", "minimum": 1,
                                                         "maximum": MAX_PARALLEL}}}},
                        ]
                    },
                    "lanes": {"type": "integer", "minimum": 1, "maximum": MAX_PARALLEL},
                },
            },
        },
        "nics": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "ranks", "class"],
                "additionalProperties": False,
                "properties": {"name": _NAME, "ranks": _RANKS, "class": _CLASS},
            },
        },
        "meta": {"type": "object"},
    },
}


def parse_topology(data: Any, source: str) -> Topology:
    """Validate plain data (a parsed file) and build the Topology; ``source`` names it in errors."""
    validate(data, TOPOLOGY_SCHEMA, source)
    n = data["ranks"]
    classes = data["link_classes"]

    def klass(name: str, where: str) -> tuple[float, float]:
        if name not in classes:
            defined = sorted(map(str, classes))
            shown = ", ".join(defined[:10]) + (f", ... ({len(defined)} in all)"
                                               if len(defined) > 10 else "")
            raise SynthError(f"{source}: field '{where}': link class '{name}' is not defined in "
                             f"link_classes (defined: {shown})")
        c = classes[name]
        beta = c["beta_us_per_mb"] if "beta_us_per_mb" in c else beta_from_bandwidth(c["bandwidth_GBps"])
        check_link_figures(float(c["alpha_us"]), float(beta), f"{source}: field 'link_classes.{name}'")
        return float(c["alpha_us"]), float(beta)

    def check_ranks(ranks: list[int], where: str) -> tuple[int, ...]:
        for r in ranks:
            if r >= n:
                raise SynthError(f"{source}: field '{where}': rank {r} is out of range "
                                 f"(the topology has ranks 0..{n - 1})")
        if len(set(ranks)) != len(ranks):
            twice = next(r for i, r in enumerate(ranks) if r in ranks[:i])
            raise SynthError(f"{source}: field '{where}': rank {twice} is listed twice")
        return tuple(ranks)

    def unique_name(names: set[str], name: str, what: str, where: str) -> None:
        if name in names:
            raise SynthError(f"{source}: field '{where}': {what} is declared twice; names must be "
                             "unique (they key the bandwidth each one carries)")
        names.add(name)

    check_size(source, n, sum(1 if "src" in spec else 2 for spec in data.get("links", [])))
    links: dict[tuple[int, int], Link] = {}
    for i, spec in enumerate(data.get("links", [])):
        where = f"links.{i}"
        alpha, beta = klass(spec["class"], f"{where}.class")
        a, b = spec["between"] if "between" in spec else (spec["src"], spec["dst"])
        if a == b:
            raise SynthError(f"{source}: field '{where}': the link joins rank {a} to itself; a "
                             "link joins two different ranks")
        check_ranks([a, b], where)
        pairs = [(a, b), (b, a)] if "between" in spec else [(a, b)]
        for src, dst in pairs:
            if (src, dst) in links:
                raise SynthError(f"{source}: field '{where}': link {src}->{dst} is declared twice; "
                                 "use 'count' for parallel links")
            links[(src, dst)] = Link(src, dst, alpha, beta, spec.get("count", 1), spec["class"])

    switches = []
    switch_names: set[str] = set()
    for i, spec in enumerate(data.get("switches", [])):
        where = f"switches.{i}"
        unique_name(switch_names, spec["name"], f"switch '{spec['name']}'", f"{where}.name")
        alpha, beta = klass(spec["class"], f"{where}.class")
        lanes = spec.get("lanes", 1)
        if spec["ports"] == "per_rank":  # one port per rank, named p<rank>: nothing to check
            ports = [Port(f"p{r}", (r,), beta, lanes) for r in range(n)]
        else:
            ports, seen, port_names = [], set(), set()
            for j, p in enumerate(spec["ports"]):
                ranks = check_ranks(p["ranks"], f"{where}.ports.{j}.ranks")
                if seen & set(ranks):
                    raise SynthError(f"{source}: field '{where}.ports.{j}': rank "
                                     f"{min(seen & set(ranks))} is on two ports of one switch")
                seen |= set(ranks)
                name = p.get("name", f"p{j}")
                unique_name(port_names, name, f"port '{name}' of switch '{spec['name']}'",
                            f"{where}.ports.{j}")
                ports.append(Port(name, ranks, beta, p.get("lanes", lanes)))
        switches.append(Switch(spec["name"], alpha, tuple(ports), spec["class"]))

    nics = []
    nic_names: set[str] = set()
    for i, spec in enumerate(data.get("nics", [])):
        unique_name(nic_names, spec["name"], f"NIC '{spec['name']}'", f"nics.{i}.name")
        alpha, beta = klass(spec["class"], f"nics.{i}.class")
        nics.append(Nic(spec["name"], check_ranks(spec["ranks"], f"nics.{i}.ranks"), alpha, beta,
                        spec["class"]))

    nodes = tuple(check_ranks(m, f"nodes.{i}") for i, m in enumerate(data.get("nodes", [])))
    if nodes and sorted(r for m in nodes for r in m) != list(range(n)):
        raise SynthError(f"{source}: field 'nodes': the nodes must partition ranks 0..{n - 1}")
    topo = Topology(
        name=data["name"], num_ranks=n, links=tuple(links[k] for k in sorted(links)),
        switches=tuple(switches), nodes=nodes or (tuple(range(n)),), nics=tuple(nics),
        description=data.get("description", ""), sources=tuple(data.get("sources", [])),
        meta=tuple(sorted(data.get("meta", {}).items())),
    )
    check_connected(topo, source)
    return topo


def check_connected(topo: Topology, source: str) -> None:
    """Every rank must reach every other rank (possibly through switches).

    The reach is that of :meth:`Topology.physical_graph` (rank -> out-port -> switch -> in-port ->
    rank, and the links), decided by SciPy's strongly-connected components on a sparse matrix. On
    3,000 switches of 64 ports each (192,000 ports), measured side by side on a loaded two-core
    machine: 0.5-0.8 s here, 25 s for networkx on the physical graph (33-51x).
    """
    if topo.num_ranks == 1:
        return
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = topo.num_ranks
    src: list[int] = [lk.src for lk in topo.links]
    dst: list[int] = [lk.dst for lk in topo.links]
    vertex = n
    for switch in topo.switches:
        hub = vertex
        vertex += 1
        for port in switch.ports:
            out_v, in_v = vertex, vertex + 1
            vertex += 2
            src += [out_v, hub]
            dst += [hub, in_v]
            for r in port.ranks:
                src += [r, in_v]
                dst += [out_v, r]
    graph = coo_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(vertex, vertex))
    _, labels = connected_components(graph, directed=True, connection="strong")
    rank_labels = labels[:n]
    if len(set(rank_labels.tolist())) > 1:
        comps: dict[int, list[int]] = {}
        for r, label in enumerate(rank_labels.tolist()):
            comps.setdefault(label, []).append(r)
        ordered = sorted(comps.values(), key=min)
        a, b = frozenset(ordered[0]), frozenset(ordered[1])
        raise SynthError(f"{source}: the topology is disconnected: ranks {_short(a)} and ranks "
                         f"{_short(b)} cannot reach each other ({len(ordered)} components)")


def _short(ranks: frozenset[int]) -> str:
    s = sorted(ranks)
    return "{" + ", ".join(map(str, s[:6])) + (", ..." if len(s) > 6 else "") + "}"


def _topology_dir() -> Any:
    """Where the shipped topology files are.

    Installed, they are the package ``synth.topologies`` (setuptools maps the repository's
    ``topologies/`` folder onto it). Imported straight from a source checkout (``python -m``
    from the repository root puts the checkout first on the path), that package does not exist
    and the files are read from ``topologies/`` beside ``synth/``.
    """
    try:
        return resources.files("synth.topologies")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "topologies"


@cache
def shipped_files() -> dict[str, str]:
    """Shipped topology name (and alias) -> resource file name."""
    names: dict[str, str] = {}
    for entry in sorted(_topology_dir().iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            data = load_yaml(entry.read_text(encoding="utf-8"), f"topologies/{entry.name}")
            names[data["name"]] = entry.name
            for alias in data.get("aliases", []):
                names[alias] = entry.name
    return names


def shipped_names() -> list[str]:
    """Canonical names of the shipped topologies (no aliases), sorted."""
    return sorted({Path(f).stem for f in shipped_files().values()})


@cache
def _load_shipped(file_name: str) -> Topology:
    entry = _topology_dir().joinpath(file_name)
    source = f"topologies/{file_name}"
    return parse_topology(parse_data(entry.read_text(encoding="utf-8"), source), source)


def _resolvable(spec: str) -> bool:
    if spec in shipped_files():
        return True
    kind, sep, _ = spec.partition(":")
    if sep and kind in builders.BUILDERS:
        try:
            builders.build(spec)
        except SynthError:
            return False
        return True
    return False


def load_topology(spec: str, nodes: int = 1) -> Topology:
    """Resolve a topology by shipped name/alias, builder spec (``ring:8``) or file path.

    ``nodes > 1`` joins that many copies through their NICs (:func:`synth.builders.multinode`).
    """
    if nodes < 1:
        raise SynthError(f"--nodes must be at least 1, got {nodes}")
    grouped = GROUP_NAME.fullmatch(spec)
    if grouped and not _resolvable(spec) and not Path(spec).exists():
        # 'dgx_h100x8.g-stride-8' is how a process group's machine names itself
        base = load_topology(grouped.group("base"), nodes)
        group = parse_group(spec_of_label(grouped.group("label")), base)
        if grouped.group("part"):
            return concurrent_group(base, group, spec_of_label(grouped.group("part")))
        return induced(base, group)
    multi = re.fullmatch(r"(.+?)-?x([0-9]{1,9})", spec)
    if multi and not _resolvable(spec) and _resolvable(multi.group(1)):
        # 'dgx_a100x4' is how a multi-node topology names itself; read it back the same way
        return load_topology(multi.group(1), int(multi.group(2)) * nodes)
    if spec in shipped_files():
        topo = _load_shipped(shipped_files()[spec])
    elif ":" in spec and spec.split(":", 1)[0] in builders.BUILDERS:
        topo = builders.build(spec)
    elif Path(spec).suffix in (".yaml", ".yml", ".json") or Path(spec).exists():
        path = Path(spec)
        topo = parse_topology(read_data(path, "topology file"), str(path))
    else:
        raise unknown_name("topology", spec,
                           list(shipped_files()) + [f"{b}:N" for b in builders.BUILDERS])
    return builders.multinode(topo, nodes) if nodes > 1 else topo


def load_group(spec: str, nodes: int = 1, group: str | None = None,
               partition: str | None = None) -> tuple[Topology, Any]:
    """``load_topology`` restricted to a process group (``--group``): the induced topology and
    the :class:`~synth.groups.Group` (None without a group, the whole topology then). With a
    ``partition`` (``--concurrent``) the group is one of its groups and sees the ports it shares
    with the others at its share of their bandwidth (:func:`synth.groups.concurrent`)."""
    topo = load_topology(spec, nodes)
    if group is None:
        if partition is not None:
            raise SynthError("--concurrent needs --group (one of its groups), or use "
                             "`synth solve --concurrent` to solve every group")
        return topo, None
    members = parse_group(group, topo)
    if partition is not None:
        return concurrent_group(topo, members, partition), members
    return induced(topo, members), members


def group_spec(spec: str, group: Any, partition: str | None = None) -> str:
    """A topology spec that :func:`load_topology` resolves to the group's induced machine (for
    workers that reload the topology by spec); ``spec`` itself without a group."""
    if group is None:
        return spec
    from .groups import partition_label

    tail = f".c-{partition_label(partition)}" if partition else ""
    return f"{spec}.g-{group.label}{tail}"
