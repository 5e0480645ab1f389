"""Collectives as pre/postconditions over global chunks (SCCL's model).

A collective on ``n`` ranks names global chunks ``0..num_chunks-1``. ``pre[c]`` are the ranks that
hold chunk c at the start and ``post[c]`` the ranks that must hold it at the end. In a *combining*
collective (reduce, reducescatter, allreduce) every rank in ``pre[c]`` holds its own contribution to
c and ``post`` ranks must hold the sum of all of them; in a non-combining one every holder has the
same value. The buffer layout (which chunk sits in which slot of each rank's input and output
buffer) is part of the collective, because emitters need it and it is fixed by the API contract.

Message size convention (nccl-tests): ``bytes`` is the size of the buffer whose name the collective
is usually quoted by — the full output of allgather/gather, the full input of reducescatter/scatter,
the buffer of allreduce/broadcast/reduce, the per-rank buffer of alltoall — and it holds
``buffer_chunks`` chunks, so one chunk is ``bytes / buffer_chunks``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SynthError, unknown_name
from .schema import short, validate
from .topology import MAX_RANKS

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce", "gather",
         "scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
COMBINING = ("reducescatter", "allreduce", "reduce")


@dataclass(frozen=True)
class Collective:
    """One collective instance: ranks, chunks, conditions and buffer layout."""

    kind: str
    num_ranks: int
    chunks_per_rank: int
    num_chunks: int
    pre: tuple[tuple[int, ...], ...]
    post: tuple[tuple[int, ...], ...]
    combining: bool
    buffer_chunks: int
    inputs: tuple[tuple[int, ...], ...]
    """``inputs[r]``: the chunk in each slot of rank r's input buffer."""
    outputs: tuple[tuple[int, ...], ...]
    """``outputs[r]``: the chunk each slot of rank r's output buffer must hold at the end."""
    root: int | None = None
    inplace: bool = False
    custom: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    """For a custom collective: the file's data, kept so the JSON form can restore it."""

    @property
    def name(self) -> str:
        return self.kind if self.root is None else f"{self.kind}(root={self.root})"

    def to_dict(self) -> dict[str, Any]:
        if self.custom is not None:
            return {"kind": "custom", "spec": self.custom, "inplace": self.inplace}
        return {"kind": self.kind, "ranks": self.num_ranks, "chunks_per_rank": self.chunks_per_rank,
                "root": self.root, "inplace": self.inplace}


MAX_GLOBAL_CHUNKS = 2**20
"""The most chunks a collective may name in all (ranks x chunks per rank; x ranks again for alltoall).
Building the pre/postconditions of 2^20 chunks takes about 0.5 s and 300 MB here; every encoding
then needs far more, so a larger count is refused while parsing, before anything is built."""


def max_chunks_per_rank(kind: str, num_ranks: int) -> int:
    """The most chunks per rank a standard collective of ``kind`` on ``num_ranks`` ranks may have
    (:data:`MAX_GLOBAL_CHUNKS`): an encoding that tries several chunkings stays within it."""
    per_chunk = num_ranks * num_ranks if kind == "alltoall" else num_ranks
    return max(1, MAX_GLOBAL_CHUNKS // max(1, per_chunk))


def _check_chunks(num_chunks: int, what: str) -> None:
    if num_chunks > MAX_GLOBAL_CHUNKS:
        raise SynthError(f"{what} names {num_chunks} chunks in all; synth handles at most "
                         f"{MAX_GLOBAL_CHUNKS} (MAX_GLOBAL_CHUNKS): use fewer --chunks")


def make_collective(kind: str, num_ranks: int, chunks_per_rank: int = 1, root: int | None = None,
                    inplace: bool = False) -> Collective:
    """Build a standard collective; bad parameters raise SynthError."""
    if kind not in KINDS:
        raise unknown_name("collective", kind, (*KINDS, "custom"))
    n, k = num_ranks, chunks_per_rank
    if n < 1:
        raise SynthError(f"a collective needs at least 1 rank, got {n}")
    if k < 1:
        raise SynthError(f"--chunks must be at least 1, got {k}")
    if kind in ROOTED:
        root = 0 if root is None else root
        if not 0 <= root < n:
            raise SynthError(f"--root {root} is out of range for {n} ranks (0..{n - 1})")
    elif root is not None:
        raise SynthError(f"{kind} has no root; --root applies to {', '.join(ROOTED)}")
    _check_chunks(n * n * k if kind == "alltoall" else n * k,
                  f"{kind} on {n} ranks with {k} chunk(s) per rank")
    everyone = tuple(range(n))
    own = [tuple(range(r * k, (r + 1) * k)) for r in range(n)]
    allc = tuple(range(n * k))
    if kind == "allgather":
        pre = tuple((c // k,) for c in allc)
        post = tuple(everyone for _ in allc)
        inputs, outputs = own, [allc] * n
    elif kind == "reducescatter":
        pre = tuple(everyone for _ in allc)
        post = tuple((c // k,) for c in allc)
        inputs, outputs = [allc] * n, own
    elif kind == "allreduce":
        pre = post = tuple(everyone for _ in allc)
        inputs = outputs = [allc] * n
    elif kind == "alltoall":
        # chunk (s, d, i) -> (s*n + d)*k + i: s sends its i-th piece for d
        allc = tuple(range(n * n * k))
        pre = tuple((c // (n * k),) for c in allc)
        post = tuple(((c // k) % n,) for c in allc)
        inputs = [tuple(range(r * n * k, (r + 1) * n * k)) for r in range(n)]
        outputs = [tuple((s * n + r) * k + i for s in range(n) for i in range(k)) for r in range(n)]
    elif kind == "broadcast":
        allc = tuple(range(k))
        pre = tuple((root,) for _ in allc)
        post = tuple(everyone for _ in allc)
        inputs = [allc if r == root else () for r in range(n)]
        outputs = [allc] * n
    elif kind == "reduce":
        allc = tuple(range(k))
        pre = tuple(everyone for _ in allc)
        post = tuple((root,) for _ in allc)
        inputs = [allc] * n
        outputs = [allc if r == root else () for r in range(n)]
    elif kind == "gather":
        pre = tuple((c // k,) for c in allc)
        post = tuple((root,) for _ in allc)
        inputs = own
        outputs = [allc if r == root else () for r in range(n)]
    else:  # scatter
        pre = tuple((root,) for _ in allc)
        post = tuple((c // k,) for c in allc)
        inputs = [allc if r == root else () for r in range(n)]
        outputs = own
    buffer_chunks = k if kind in ("broadcast", "reduce") else n * k
    return Collective(kind=kind, num_ranks=n, chunks_per_rank=k, num_chunks=len(allc), pre=pre,
                      post=post, combining=kind in COMBINING, buffer_chunks=buffer_chunks,
                      inputs=tuple(inputs), outputs=tuple(outputs), root=root, inplace=inplace)


_PAIRS = {"oneOf": [
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
    {"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2,
                                "prefixItems": [{"type": "integer"},
                                                {"type": "array", "items": {"type": "integer"}}]}},
]}
CUSTOM_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["ranks", "chunks", "pre", "post"], "additionalProperties": False,
    "properties": {
        # the name becomes the collective's kind: part of every output file name and of the cache
        # key, so it is a short plain word, and not a standard collective's (whose kind the
        # encodings, bounds and emitters would take at its word)
        "name": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_.-]*$", "maxLength": 64,
                 "not": {"enum": [*KINDS, "custom"]}},
        "ranks": {"type": "integer", "minimum": 1, "maximum": MAX_RANKS},
        "chunks": {"type": "integer", "minimum": 1, "maximum": MAX_GLOBAL_CHUNKS},
        "combining": {"type": "boolean"}, "pre": _PAIRS, "post": _PAIRS},
}


def _explain(err: Any) -> str | None:
    if err.validator == "not" and list(err.path) == ["name"]:
        return (f"'{err.instance}' is a standard collective; a custom collective needs a name of "
                "its own (or none: it is then called 'custom')")
    if err.validator == "pattern" and list(err.path) == ["name"]:
        return (f"{short(err.instance)} is not a plain name: start with a letter, then letters, "
                "digits, '_', '.' or '-' (it becomes part of file names)")
    return None


_CHUNK_KEY = re.compile(r"[0-9]{1,20}")


def custom_collective(data: Any, source: str, inplace: bool = False) -> Collective:
    """A collective from plain data: ``{name, ranks, chunks, combining, pre, post}``.

    ``pre``/``post`` map each chunk to the ranks that hold / must hold it, as a list of
    ``[chunk, [ranks...]]`` pairs or a mapping ``chunk: [ranks...]`` (a YAML key ``0`` or a JSON
    key ``"0"``). A chunk listed twice in one table is an error, not a merge.
    """
    validate(data, CUSTOM_SCHEMA, source, _explain)
    n, num = data["ranks"], data["chunks"]

    def table(key: str) -> dict[int, tuple[int, ...]]:
        """Chunk -> its ranks, for the chunks the table names (up to 2^20 chunks are declared;
        a table names a handful, so nothing here is sized by ``chunks``)."""
        raw = data[key]
        items = raw.items() if isinstance(raw, dict) else raw
        out: dict[int, tuple[int, ...]] = {}
        seen: set[int] = set()
        for key_c, ranks in items:
            if isinstance(key_c, int) and not isinstance(key_c, bool):
                c = key_c
            elif isinstance(key_c, str) and _CHUNK_KEY.fullmatch(key_c):
                c = int(key_c)
            else:
                raise SynthError(f"{source}: field '{key}': chunk {short(key_c)} is not a whole "
                                 "number")
            if not 0 <= c < num:
                raise SynthError(f"{source}: field '{key}': chunk {c} out of range 0..{num - 1}")
            if c in seen:
                raise SynthError(f"{source}: field '{key}': chunk {c} is listed twice; give each "
                                 "chunk once with all its ranks")
            seen.add(c)
            for r in ranks:
                if not 0 <= r < n:
                    raise SynthError(f"{source}: field '{key}': rank {r} out of range 0..{n - 1}")
            if ranks:
                out[c] = tuple(sorted(set(ranks)))
        return out

    pre_of, post_of = table("pre"), table("post")
    if all(set(ranks) <= set(pre_of.get(c, ())) for c, ranks in post_of.items()) \
            and not data.get("combining"):
        raise SynthError(f"{source}: field 'post': every chunk already is where the postcondition "
                         "wants it" + (" (the postcondition is empty)" if not post_of else "")
                         + "; a collective must move at least one chunk")
    if not post_of:
        raise SynthError(f"{source}: field 'post': the postcondition is empty; a collective must "
                         "require at least one chunk somewhere")
    for c in sorted(post_of):
        if c not in pre_of:
            raise SynthError(f"{source}: chunk {c} must end on ranks {_few(post_of[c])} "
                             "but no rank holds it at the start")
    pre: tuple[tuple[int, ...], ...] = tuple(pre_of.get(c, ()) for c in range(num))
    post: tuple[tuple[int, ...], ...] = tuple(post_of.get(c, ()) for c in range(num))
    inputs, outputs = _per_rank(pre, n), _per_rank(post, n)
    return Collective(kind=data.get("name", "custom"), num_ranks=n, chunks_per_rank=1,
                      num_chunks=num, pre=pre, post=post, combining=bool(data.get("combining")),
                      buffer_chunks=num, inputs=inputs, outputs=outputs, inplace=inplace,
                      custom=data)


def _few(ranks: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, ranks[:8])) + (", ...]" if len(ranks) > 8 else "]")


def load_collective(spec: str, num_ranks: int, chunks_per_rank: int = 1, root: int | None = None,
                    inplace: bool = False) -> Collective:
    """A standard collective by name, or a custom one from a YAML/JSON file path."""
    if spec in KINDS:
        return make_collective(spec, num_ranks, chunks_per_rank, root, inplace)
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json"):
        from .files import read_data
        coll = custom_collective(read_data(path, "collective file"), str(path), inplace)
        if coll.num_ranks != num_ranks:
            raise SynthError(f"{spec}: the collective is for {coll.num_ranks} ranks but the "
                             f"topology has {num_ranks}")
        return coll
    raise unknown_name("collective", spec, (*KINDS, "custom (a .yaml/.json file)"))


def _per_rank(holders: tuple[tuple[int, ...], ...], n: int) -> tuple[tuple[int, ...], ...]:
    """Chunk -> ranks turned into rank -> chunks, in one pass (not ranks x chunks membership tests,
    which took hours at the size limits)."""
    out: list[list[int]] = [[] for _ in range(n)]
    for c, ranks in enumerate(holders):
        for r in ranks:
            out[r].append(c)
    return tuple(map(tuple, out))


_STORED_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["kind"],
    "properties": {"kind": {"type": "string", "maxLength": 64}, "inplace": {"type": "boolean"}},
    "if": {"properties": {"kind": {"const": "custom"}}},
    "then": {"required": ["spec"], "properties": {"spec": {"type": "object"}}},
    "else": {"required": ["ranks", "chunks_per_rank"],
             "properties": {"ranks": {"type": "integer", "minimum": 1, "maximum": MAX_RANKS},
                            "chunks_per_rank": {"type": "integer", "minimum": 1},
                            "root": {"type": ["integer", "null"], "minimum": 0}}},
}
"""The ``collective`` object of a schedule file (:meth:`Collective.to_dict`)."""


def collective_from_dict(data: Any, source: str = "schedule") -> Collective:
    """Inverse of :meth:`Collective.to_dict`; ``source`` names the file in errors."""
    validate(data, _STORED_SCHEMA, source, at=("collective",))
    if data["kind"] == "custom":
        return custom_collective(data["spec"], f"{source}: collective.spec",
                                 data.get("inplace", False))
    return make_collective(data["kind"], data["ranks"], data["chunks_per_rank"], data.get("root"),
                           data.get("inplace", False))
