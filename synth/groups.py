"""Process groups: the ranks a collective runs on, and the machine they see.

Training jobs run collectives on process groups (tensor-parallel inside a node, data-parallel
across nodes). An MSCCL communicator involves only its members, so a schedule for a group may
relay only through members: synth synthesizes it on the topology the group *induces* — its
members renumbered ``0..k-1``, the links among them, and every switch and NIC with only its
members' ports (a port keeps its full bandwidth: in isolation the group has it to itself).

Group specs (``--group``): an explicit list ``0,8,16``; ``stride:S`` (ranks 0, S, 2S, ...;
``stride:S+O`` starts at O);
``node:K`` (the ranks of node K); ``rail:R`` (local rank R of every node). Partition specs
(``--concurrent``): ``stride:S`` (the S stride groups), ``rail`` (one group per local rank),
``node`` (one group per node), or explicit groups ``0,1|2,3``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import networkx as nx

from .errors import SynthError
from .topology import Link, Nic, Port, Switch, Topology


@dataclass(frozen=True)
class Group:
    """A process group: ``members[i]`` is the global rank of group rank ``i``."""

    spec: str
    members: tuple[int, ...]

    @property
    def label(self) -> str:
        """The spec as a name part (``stride:8`` -> ``stride-8``, ``0,8`` -> ``0_8``)."""
        return self.spec.replace(":", "-").replace(",", "_")

    def mapping(self) -> dict[str, object]:
        """The group-rank -> global-rank map written beside a schedule (``<file>.ranks.json``)."""
        return {"group": self.spec, "size": len(self.members),
                "global_ranks": list(self.members),
                "note": "group rank i is global rank global_ranks[i]; ngpus in the XML is size"}


def _int(text: str, spec: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text.strip()):
        raise SynthError(f"group '{spec}': expected a whole number, got '{text.strip()}'")
    return int(text)


def _local(topo: Topology) -> list[tuple[int, ...]]:
    """Nodes of the topology (one node when it declares none)."""
    return [tuple(n) for n in topo.nodes] or [tuple(topo.ranks)]


SHAPE_META = frozenset({"torus", "ranks_per_chip", "sockets", "nodes", "ici", "rings",
                        "rings_note", "sccl_name"})
"""Meta keys that describe the whole machine's shape, not a group's; an induced topology drops them
(hardware facts such as ``gpu`` stay)."""


def parse_group(spec: str, topo: Topology) -> Group:
    """The members of ``spec`` on ``topo``; a SynthError for an empty, duplicate or bad group."""
    spec = spec.strip()
    n = topo.num_ranks
    kind, sep, arg = spec.partition(":")
    if sep and kind == "stride":
        step, plus, offset = arg.partition("+")
        s, o = _int(step, spec), (_int(offset, spec) if plus else 0)
        if s < 1 or o >= s:
            raise SynthError(f"group '{spec}': the stride must be at least 1 and the offset "
                             "smaller than the stride")
        members = tuple(range(o, n, s))
    elif sep and kind == "node":
        k, nodes = _int(arg, spec), _local(topo)
        if k >= len(nodes):
            raise SynthError(f"group '{spec}': node {k} is out of range (the topology has "
                             f"{len(nodes)} node(s), 0..{len(nodes) - 1})")
        members = nodes[k]
    elif sep and kind == "rail":
        r, nodes = _int(arg, spec), _local(topo)
        if any(r >= len(node) for node in nodes):
            raise SynthError(f"group '{spec}': local rank {r} is out of range (nodes have "
                             f"{min(len(x) for x in nodes)} ranks)")
        members = tuple(node[r] for node in nodes)
    elif sep:
        raise SynthError(f"group '{spec}': unknown kind '{kind}' (known: stride:S, node:K, rail:R, "
                         "or a list such as 0,8,16)")
    else:
        if not spec:
            raise SynthError("--group is empty; give ranks such as 0,8,16 or stride:S")
        members = tuple(_int(x, spec) for x in spec.split(","))
    for r in members:
        if r >= n:
            raise SynthError(f"group '{spec}': rank {r} is out of range (the topology has ranks "
                             f"0..{n - 1})")
    if len(set(members)) != len(members):
        dup = next(r for r in members if members.count(r) > 1)
        raise SynthError(f"group '{spec}': rank {dup} is listed twice")
    if len(members) < 2:
        raise SynthError(f"group '{spec}' has {len(members)} rank(s); a collective needs at least 2")
    return Group(spec, members)


def parse_partition(spec: str, topo: Topology) -> list[Group]:
    """All groups of a ``--concurrent`` partition; a SynthError when groups overlap."""
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    if spec == "rail":
        width = min(len(node) for node in _local(topo))
        groups = [parse_group(f"rail:{r}", topo) for r in range(width)]
    elif spec == "node":
        groups = [parse_group(f"node:{k}", topo) for k in range(len(_local(topo)))]
    elif sep and kind == "stride":
        s = _int(arg, spec)
        if s < 1:
            raise SynthError(f"partition '{spec}': the stride must be at least 1")
        groups = [parse_group(f"stride:{s}+{o}", topo) for o in range(s)]
    elif "|" in spec or re.fullmatch(r"[0-9, ]+", spec):
        groups = [parse_group(part, topo) for part in spec.split("|")]
    else:
        raise SynthError(f"partition '{spec}': expected stride:S, rail, node or groups such as "
                         "0,1|2,3")
    seen: dict[int, str] = {}
    for g in groups:
        for r in g.members:
            if r in seen:
                raise SynthError(f"partition '{spec}': rank {r} is in two groups ({seen[r]} and "
                                 f"{g.spec}); concurrent groups must not overlap")
            seen[r] = g.spec
    return groups


def induced(topo: Topology, group: Group) -> Topology:
    """The machine ``group`` sees: its members as ranks ``0..k-1``, the links among them, and the
    switches and NICs restricted to member ports (empty ports and one-port switches dropped).

    Refuses a group whose members cannot reach each other without relaying through non-members.
    """
    index = {g: i for i, g in enumerate(group.members)}
    links = tuple(Link(index[lk.src], index[lk.dst], lk.alpha_us, lk.beta_us_per_mb, lk.count,
                       lk.kind)
                  for lk in topo.links if lk.src in index and lk.dst in index)
    switches = []
    for sw in topo.switches:
        ports = tuple(Port(p.name, tuple(index[r] for r in p.ranks if r in index),
                           p.beta_us_per_mb, p.lanes, p.domain)
                      for p in sw.ports if any(r in index for r in p.ranks))
        # a port that reaches no other member port (the fabric inside one node) carries nothing
        ports = tuple(p for p in ports if any(p.reaches(q) for q in ports))
        if len(ports) >= 2:
            switches.append(Switch(sw.name, sw.alpha_us, ports, sw.kind))
    nics = tuple(Nic(nic.name, tuple(index[r] for r in nic.ranks if r in index), nic.alpha_us,
                     nic.beta_us_per_mb, nic.kind)
                 for nic in topo.nics if any(r in index for r in nic.ranks))
    nodes = tuple(tuple(index[r] for r in node if r in index) for node in topo.nodes)
    sub = Topology(
        name=f"{topo.name}.g-{group.label}", num_ranks=len(group.members), links=links,
        switches=tuple(switches), nodes=tuple(n for n in nodes if n), nics=nics,
        description=f"process group {group.spec} of {topo.name} (global ranks "
                    f"{_short(group.members)})",
        sources=topo.sources,
        meta=(*((k, v) for k, v in topo.meta if k not in SHAPE_META),
              ("group", group.spec), ("global_ranks", list(group.members))),
    )
    reach = nx.strongly_connected_components(sub.physical_graph())
    parts = [sorted(r for r in c if isinstance(r, int)) for c in reach]
    parts = sorted(p for p in parts if p)
    if len(parts) > 1:
        a, b = ([group.members[i] for i in p] for p in parts[:2])
        raise SynthError(f"group '{group.spec}' of {topo.name}: members {_short(tuple(a))} and "
                         f"{_short(tuple(b))} are joined only through non-members; an MSCCL "
                         "communicator relays only through its members, so the group cannot run a "
                         "collective on its own")
    return sub


GROUP_NAME = re.compile(
    r"(?P<base>.+)\.g-(?P<label>(?:stride|node|rail)-[0-9]+(?:\+[0-9]+)?|[0-9]+(?:_[0-9]+)+)"
    r"(?:\.c-(?P<part>stride-[0-9]+|rail|node|[0-9]+(?:_[0-9]+)*(?:~[0-9]+(?:_[0-9]+)*)+))?")
"""How an induced topology names itself: ``dgx_h100x8.g-stride-8``; read back by
:func:`synth.topology_io.load_topology` so ``synth verify`` finds the group's machine."""


def spec_of_label(label: str) -> str:
    """Inverse of :attr:`Group.label` (and of :func:`partition_label`)."""
    if label[0].isalpha():
        return label.replace("-", ":", 1)
    return label.replace("_", ",").replace("~", "|")


def partition_label(spec: str) -> str:
    """A ``--concurrent`` spec as a name part (``stride:8`` -> ``stride-8``, ``0,1|2,3`` ->
    ``0_1~2_3``)."""
    return spec.strip().replace(":", "-").replace(",", "_").replace("|", "~").replace(" ", "")


def concurrent_group(topo: Topology, group: Group, partition: str) -> Topology:
    """The machine ``group`` sees while every group of ``partition`` runs (it must be one of them)."""
    groups = parse_partition(partition, topo)
    for i, g in enumerate(groups):
        if g.members == group.members:
            sub = concurrent(topo, groups)[0][i]
            return Topology(name=f"{sub.name}.c-{partition_label(partition)}",
                            num_ranks=sub.num_ranks, links=sub.links, switches=sub.switches,
                            nodes=sub.nodes, nics=sub.nics, description=sub.description,
                            sources=sub.sources,
                            meta=(*((k, v) for k, v in sub.meta if k != "group"),
                                  ("group", group.spec), ("partition", partition)))
    raise SynthError(f"group '{group.spec}' is not one of the groups of --concurrent "
                     f"'{partition}' ({', '.join(g.spec for g in groups)})")


def _short(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


def group_of(topo: Topology) -> Group:
    """The group an induced topology was built for (from its meta)."""
    meta = dict(topo.meta)
    return Group(meta["group"], tuple(meta["global_ranks"]))


def rank_maps(files: list, group: Group) -> dict[str, str]:
    """``<name>.ranks.json`` -> its text (group rank -> global rank), for each schedule, XML or
    plan file among ``files``; the caller puts them in a folder of their own (never beside the
    XML: the executor runtimes parse every file in ``MSCCL_ALGO_DIR``)."""
    from pathlib import Path

    from .files import dumps_json

    text = dumps_json(group.mapping(), indent=2) + "\n"
    return {f"{Path(f).name}.ranks.json": text for f in files
            if str(f).endswith((".xml", ".json")) and not str(f).endswith(".ranks.json")}


# ------------------------------------------------------------------------------ concurrent groups
@dataclass(frozen=True)
class Share:
    """A port or NIC several concurrent groups use, and each group's fraction of it."""

    resource: str
    groups: tuple[str, ...]
    fraction: tuple[float, ...]


def concurrent(topo: Topology, groups: list[Group]) -> tuple[list[Topology], list[Share]]:
    """The machine each of ``groups`` sees while all of them run at once.

    Links are never shared (both ends of a usable link are members of one group), and switches
    are non-blocking in synth's model, so contention is on switch *ports* and NICs: a port that
    members of several groups sit behind (a NIC serving GPUs of different groups, a PCIe uplink).
    Each group using such a port gets the fraction of its bandwidth proportional to its members
    on it (rank-fair sharing; equal division when each group has one rank there). A group
    "uses" a port when the port survives in its induced topology (it reaches another member).
    """
    alone = [induced(topo, g) for g in groups]
    users: dict[tuple[str, str], dict[int, int]] = {}
    for i, sub in enumerate(alone):
        for sw in sub.switches:
            for p in sw.ports:
                users.setdefault((sw.name, p.name), {})[i] = len(p.ranks)
    nic_users: dict[str, dict[int, int]] = {}
    for i, sub in enumerate(alone):
        used = {p.name for sw in sub.switches for p in sw.ports}
        for nic in sub.nics:
            if nic.name in used:
                nic_users.setdefault(nic.name, {})[i] = len(nic.ranks)
    shares = []
    for (sw, port), by in sorted(users.items()):
        if len(by) > 1:
            total = sum(by.values())
            shares.append(Share(f"{sw}:{port}", tuple(groups[i].spec for i in sorted(by)),
                                tuple(by[i] / total for i in sorted(by))))
    out = []
    for i, sub in enumerate(alone):
        def scale(by: dict[int, int] | None, beta: float, me: int = i) -> float:
            if not by or len(by) < 2:
                return beta
            return beta * sum(by.values()) / by[me]

        switches = tuple(Switch(sw.name, sw.alpha_us, tuple(
            Port(p.name, p.ranks, scale(users.get((sw.name, p.name)), p.beta_us_per_mb), p.lanes,
                 p.domain) for p in sw.ports), sw.kind) for sw in sub.switches)
        nics = tuple(Nic(n.name, n.ranks, n.alpha_us, scale(nic_users.get(n.name), n.beta_us_per_mb),
                         n.kind) for n in sub.nics)
        out.append(Topology(name=sub.name, num_ranks=sub.num_ranks, links=sub.links,
                            switches=switches, nodes=sub.nodes, nics=nics,
                            description=f"{sub.description}, sharing ports with "
                                        f"{len(groups) - 1} concurrent group(s)",
                            sources=sub.sources, meta=(*sub.meta, ("concurrent", len(groups)))))
    return out, shares
