"""The sketch file format: a JSON schema, and turning validated data into a :class:`Sketch`.

A sketch file is YAML or JSON. The schema states the shape; :func:`parse_sketch` adds what a schema
cannot say (no repeated relay or switch policy, offsets dividing their group). Whether a sketch fits
a given machine is :func:`synth.sketches.check_sketch`'s job, since the same file serves several
node counts. Every problem is a :class:`SynthError` naming the file, the field and what is wrong.

Example (TACCL's NDv2 two-node sketch, in this format)::

    name: ndv2-relay
    description: GPU 0 of each node sends to GPU 1 of the other node ...
    topology: ndv2
    nodes: [2]
    chunks_per_rank: 1
    intranode: {strategy: all}
    internode:
      strategy: relay
      relays: [{sender: 0, receiver: 1}]
    symmetry: [[8, 16]]                          # (offset, group_size) rotations
    hints: {time_limit_s: 300}

On a machine with an NVSwitch, ``switches: [{switch: "*", max_peers: 3}]`` caps each rank's
distinct peers through every intra-node switch.
"""

from __future__ import annotations

from typing import Any

from ..errors import SynthError
from ..schema import validate
from ..topology import MAX_RANKS
from .model import HINTS, INTERNODE_MODES, INTRANODE_MODES, Relay, Sketch, SwitchPolicy

# node-local indices and node counts are bounded by the largest topology (MAX_RANKS ranks): a
# bigger number can fit no machine, and bounding it here keeps every later product small
_INDEX = {"type": "integer", "minimum": 0, "maximum": MAX_RANKS - 1}
_PAIR = {"type": "array", "items": _INDEX, "minItems": 2, "maxItems": 2}
_PEERS = {"type": "integer", "minimum": 1, "maximum": MAX_RANKS}
_SIZE = {"type": "integer", "minimum": 1, "maximum": MAX_RANKS}

SKETCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "topology", "nodes"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_.@-]+$", "maxLength": 100},
        "description": {"type": "string", "maxLength": 100_000},
        "topology": {"type": "string", "pattern": "^[A-Za-z0-9_.@:-]+$", "maxLength": 200},
        "nodes": {"type": "array", "items": _SIZE, "minItems": 1, "maxItems": 1024},
        "chunks_per_rank": {"type": "integer", "minimum": 1, "maximum": 1024},
        "intranode": {
            "type": "object",
            "required": ["strategy"],
            "additionalProperties": False,
            "properties": {
                "strategy": {"enum": list(INTRANODE_MODES)},
                "links": {"type": "array", "items": _PAIR},
                "between": {"type": "array", "items": _PAIR},
            },
            "if": {"properties": {"strategy": {"const": "links"}}},
            "then": {"anyOf": [{"required": ["links"]}, {"required": ["between"]}]},
            "else": {"not": {"anyOf": [{"required": ["links"]}, {"required": ["between"]}]}},
        },
        "internode": {
            "type": "object",
            "required": ["strategy"],
            "additionalProperties": False,
            "properties": {
                "strategy": {"enum": list(INTERNODE_MODES)},
                "relays": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["sender", "receiver"],
                        "additionalProperties": False,
                        "properties": {
                            "sender": _INDEX,
                            "receiver": _INDEX,
                            "carries": {"type": "array", "items": _INDEX},
                        },
                    },
                },
            },
            "if": {"properties": {"strategy": {"const": "relay"}}},
            "then": {"required": ["relays"]},
            "else": {"not": {"required": ["relays"]}},
        },
        "switches": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["switch"],
                "additionalProperties": False,
                "properties": {
                    "switch": {"type": "string", "minLength": 1, "maxLength": 100},
                    "max_peers": _PEERS,
                    "min_peers": _PEERS,
                },
                "anyOf": [{"required": ["max_peers"]}, {"required": ["min_peers"]}],
            },
        },
        "symmetry": {"type": "array", "items": {
            "type": "array", "items": _SIZE, "minItems": 2, "maxItems": 2}},
        "hints": {
            "type": "object",
            "additionalProperties": False,
            "properties": {key: schema for key, (schema, _) in HINTS.items()},
        },
    },
}


def parse_sketch(data: Any, source: str) -> Sketch:
    """Validate plain data (a parsed file) and build the Sketch; ``source`` names it in errors."""
    validate(data, SKETCH_SCHEMA, source, _explain)

    def fail(where: str, message: str) -> SynthError:
        return SynthError(f"{source}: field '{where}': {message}")

    # listed twice: checked here with sets (jsonschema's uniqueItems is quadratic on values it
    # cannot sort)
    for where, values in [("nodes", data["nodes"])] + [
            (f"internode.relays.{i}.carries", r.get("carries", []))
            for i, r in enumerate(data.get("internode", {}).get("relays", []))]:
        if len(set(values)) != len(values):
            twice = next(v for i, v in enumerate(values) if v in values[:i])
            raise fail(where, f"lists {twice} twice")

    intra = data.get("intranode", {"strategy": "all"})
    links = [tuple(p) for p in intra.get("links", [])]
    for a, b in intra.get("between", []):
        links += [(a, b), (b, a)]
    for i, (a, b) in enumerate(links):
        if a == b:
            raise fail("intranode", f"link {a}->{b} joins a rank to itself (entry {i})")

    inter = data.get("internode", {"strategy": "direct"})
    relays, seen = [], set()
    for i, spec in enumerate(inter.get("relays", [])):
        key = (spec["sender"], spec["receiver"])
        if key in seen:
            raise fail(f"internode.relays.{i}", f"relay {key[0]}->{key[1]} is declared twice; "
                       "merge the carries lists")
        seen.add(key)
        relays.append(Relay(spec["sender"], spec["receiver"], tuple(spec.get("carries", []))))

    policies, named = [], set()
    for i, spec in enumerate(data.get("switches", [])):
        if spec["switch"] in named:
            raise fail(f"switches.{i}", f"switch '{spec['switch']}' has two policies; give one "
                       "policy with both max_peers and min_peers")
        named.add(spec["switch"])
        lo, hi = spec.get("min_peers"), spec.get("max_peers")
        if lo is not None and hi is not None and lo > hi:
            raise fail(f"switches.{i}", f"min_peers {lo} is more than max_peers {hi}")
        policies.append(SwitchPolicy(spec["switch"], hi, lo))

    symmetry = []
    for i, (offset, group) in enumerate(data.get("symmetry", [])):
        problem = symmetry_problem(offset, group)
        if problem:
            raise fail(f"symmetry.{i}", problem)
        symmetry.append((offset, group))

    return Sketch(
        name=data["name"], description=data.get("description", "").strip(),
        topology=data["topology"], nodes=tuple(data["nodes"]),
        intranode=intra["strategy"], intranode_links=tuple(links),
        switch_policies=tuple(policies), internode=inter["strategy"], relays=tuple(relays),
        symmetry=tuple(symmetry), chunks_per_rank=data.get("chunks_per_rank", 1),
        hints=data.get("hints", {}),
    )


def symmetry_problem(offset: int, group: int) -> str | None:
    """What is wrong with a rotation ``(offset, group)`` on its own, or None.

    The offset must lie strictly inside the group and divide it, so the rotation's orbits all
    have ``group / offset`` members and a representative set is ranks ``base .. base+offset-1``.
    """
    if not 0 < offset < group:
        return f"offset {offset} must be between 1 and group size {group} - 1"
    if group % offset:
        return f"offset {offset} does not divide group size {group}"
    return None


def _explain(err: Any) -> str | None:
    """The sketch's own rules (``if``/``then``/``else`` on the strategies), in its own words."""
    path = list(err.absolute_path)
    if err.validator == "anyOf" and path and path[0] == "switches":
        return "a switch policy needs max_peers, min_peers or both"
    if err.validator == "anyOf" and path == ["intranode"]:
        return "strategy 'links' needs 'links' (directed pairs) or 'between' (both directions)"
    if err.validator == "not" and path == ["intranode"]:
        return "'links'/'between' are only read with strategy 'links'"
    if err.validator == "required" and path == ["internode"] and "relays" in err.message:
        return "strategy 'relay' needs a 'relays' list"
    if err.validator == "not" and path == ["internode"]:
        return "'relays' are only read with strategy 'relay'"
    return None
