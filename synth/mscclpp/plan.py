"""Read an MSCCL++ execution plan (JSON) into resolved, checked operations.

The format and every rule below follow the executor's own parser and kernel at
microsoft/mscclpp@1f5f065d7b13ab02df32c22568f38785d1eeec01 (``src/core/executor/execution_plan.cc``,
``src/core/executor/executor.cc``, ``src/core/include/execution_kernel.hpp``,
``src/core/include/execution_common.hpp``); ``docs/mscclpp-plan-format.md`` in this repository
writes them down. What this module resolves, so that the interpreter never looks at raw JSON:

* a buffer reference ``{type, index, size}`` is local; ``{buffer_id, ...}`` indexes the
  threadblock's ``remote_buffer_refs`` of the op's channel type, which index the GPU's
  ``remote_buffers`` (owner rank and buffer type); ``{switch_channel_id, ...}`` indexes the
  threadblock's switch channels, which index the GPU's switch channels (one per rank group) and
  address that buffer on every rank of the group;
* a ``channel_ids`` entry indexes the threadblock's channels of the op's type, which index the
  GPU's channels of that type flattened over ``connected_to``; the executor connects the k-th
  channel rank r lists to peer p with the k-th channel p lists to r (per-peer tags in
  ``Executor::Impl::setupConnections``), so a channel is named by ``(peer, k)``;
* ``tbg_info`` splits every buffer range of an op between the blocks of a group
  (``ExecutionPlan::Impl::calcOffset``): cells are chunk parts, ``parts`` per chunk.

Malformed JSON (missing keys, wrong types, a count written ``1.5`` or ``"1"``) is an input error
(exit 2); a well-formed plan that the executor would reject or that breaks a rule is a
:class:`~synth.errors.VerificationError` (exit 1) naming the rank, threadblock and operation. Sizes
the verifier would have to materialise (chunks times ``tbg_info`` parts, :data:`MAX_CELLS`) are
bounded here, so a plan declaring 10^12 chunks is refused at once instead of filling memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from typing import Any

from ..errors import SynthError, VerificationError
from ..schema import short

# execution_common.hpp limits
MAX_OPERATION = 64
MAX_CHANNEL = 16
MAX_CHANNEL_PER_OPERATION = 8
MAX_LOCAL_BUFFER_PER_OPERATION = 2
MAX_DEVICE_SYNCERS = 16
MAX_DEVICE_SEMAPHORES = 16

MAX_CELLS = 2**22
"""The most buffer cells (chunks x ``tbg_info`` parts, summed over the ranks' input, output and
scratch buffers) the verifier holds: about 4 million, a few hundred megabytes of symbolic state.
The shipped and upstream plans use at most thousands."""

MAX_PARTS = 4096
"""The most parts a chunk may be split into: the least common multiple of every ``tbg_size``.
Group sizes are block counts (a few dozen), but the multiple of ten distinct primes near 1000 is
10^29."""

BUFFERS = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch")

OP_NAMES = frozenset((
    "nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res",
    "rre", "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres",
    "gstore", "gstorepkt", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release",
))
"""The names ``getOpType`` in execution_plan.cc accepts; any other name makes the executor throw."""


@dataclass(frozen=True)
class Where:
    """The position of an operation, for messages."""

    rank: int
    tb: int
    op: int
    name: str

    def __str__(self) -> str:
        return f"rank {self.rank}, threadblock {self.tb}, op {self.op} ({self.name})"


@dataclass(frozen=True)
class Access:
    """``n`` consecutive cells of buffer ``buf`` on ``rank`` starting at cell ``start``."""

    rank: int
    buf: str
    start: int
    n: int
    pkt: bool = False
    """Read or written in LL packet format (data + flag)."""


@dataclass(frozen=True)
class Chan:
    """A channel end: its type, the peer, and which channel to that peer (k-th of the type)."""

    type: str
    peer: int
    k: int


@dataclass(frozen=True)
class Move:
    """``dsts[x] := ⊕ srcs[x]`` cell by cell; ``port`` is the channel whose proxy carries it."""

    srcs: tuple[Access, ...]
    dsts: tuple[Access, ...]
    port: Chan | None = None


@dataclass(frozen=True)
class Op:
    """A resolved operation: data moves, then channel signals / waits / flushes, or a sync."""

    where: Where
    kind: str
    """``data``, ``signal``, ``wait``, ``flush``, ``barrier``, ``sem_acquire``, ``sem_release``,
    ``nop``."""
    moves: tuple[Move, ...] = ()
    chans: tuple[Chan, ...] = ()
    relaxed: bool = False
    ids: tuple[int, ...] = ()
    """Semaphore ids, or (barrier id, number of blocks)."""
    signal_after: bool = False
    flush_after: bool = False


@dataclass(frozen=True)
class Gpu:
    rank: int
    chunks: dict[str, int]
    tbs: tuple[tuple[Op, ...], ...]
    semaphores: tuple[int, ...]
    channels: dict[str, tuple[Chan, ...]]


@dataclass(frozen=True)
class Plan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    min_message_size: int
    max_message_size: int
    parts: int
    gpus: tuple[Gpu, ...]

    @property
    def num_ranks(self) -> int:
        return len(self.gpus)

    @property
    def num_ops(self) -> int:
        return sum(len(tb) for g in self.gpus for tb in g.tbs)


def _malformed(source: str, what: str) -> SynthError:
    return SynthError(f"{source}: not an MSCCL++ execution plan: {what}")


def _bad(reason: str, where: Where | str, message: str) -> VerificationError:
    return VerificationError(reason, f"{where}: {message}")


def load_plan(text: str, source: str = "plan") -> Plan:
    """Parse and resolve a plan; see the module docstring for what is checked here.

    The JSON is read by :func:`synth.files.parse_data` (duplicate keys, non-finite numbers, numbers
    past 2^64, deep nesting: one-line errors); a field missing or of the wrong kind anywhere below
    is reported as "not an MSCCL++ execution plan" with the field.
    """
    from ..files import parse_data

    obj = parse_data(text, source, "json")
    try:
        return _Parser(obj, source).plan()
    except KeyError as e:
        raise _malformed(source, f"a required field {short(e.args[0])} is missing") from None
    except (TypeError, ValueError, IndexError, AttributeError) as e:
        text = " ".join(str(e).split())
        raise _malformed(source, text if len(text) <= 200 else text[:197] + "...") from None


def _int(value: Any, what: str, lo: int | None = None) -> int:
    """A whole number of the plan (JSON ``2``, not ``2.0``, ``"2"`` or ``true``), at least ``lo``;
    anything else is a TypeError/ValueError that :func:`load_plan` reports as malformed."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"'{what}' must be a whole number, got {short(value)}")
    if lo is not None and value < lo:
        raise ValueError(f"'{what}' must be at least {lo}, got {value}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"'{what}' must be a list, got {short(value)}")
    return value


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"'{what}' must be an object, got {short(value)}")
    return value


class _Parser:
    def __init__(self, obj: Any, source: str) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("gpus"), list):
            raise _malformed(source, "no 'gpus' list")
        self.obj = obj
        self.source = source
        self.protocol = str(obj.get("protocol"))
        self.gpus_json: list[dict[str, Any]] = [_obj(g, "gpus[]") for g in obj["gpus"]]
        self.n = len(self.gpus_json)
        self.parts = 1
        for g in self.gpus_json:
            for tb in _list(g["threadblocks"], "threadblocks"):
                for op in _flatten(_list(_obj(tb, "threadblocks[]")["ops"], "ops")):
                    if "tbg_info" in op:
                        info = _obj(op["tbg_info"], "tbg_info")
                        self.parts = lcm(self.parts, _int(info["tbg_size"], "tbg_size", 1))
                        if self.parts > MAX_PARTS:
                            raise SynthError(
                                f"{source}: the tbg_info group sizes split every chunk into "
                                f"{self.parts} or more parts (their least common multiple); the "
                                f"verifier handles at most {MAX_PARTS} (MAX_PARTS)")

    def plan(self) -> Plan:
        o = self.obj
        protocol = str(o["protocol"])
        if protocol not in ("Simple", "LL"):
            raise _bad("unsupported", "plan", f"protocol '{protocol}' (the executor knows Simple, LL)")
        for r, g in enumerate(self.gpus_json):
            if _int(g["id"], "id", 0) != r:
                raise _bad("unsupported", f"gpus[{r}]", f"id {g['id']} (the executor reads gpus[rank] "
                           "and requires id == rank)")
        self.chunks = [{b: _int(g[k], k, 0) for b, k in (("i", "input_chunks"),
                                                         ("o", "output_chunks"),
                                                         ("s", "scratch_chunks"))}
                       for g in self.gpus_json]
        cells = sum(c["i"] + c["o"] + 2 * c["s"] for c in self.chunks) * self.parts
        if cells > MAX_CELLS:
            raise SynthError(f"{self.source}: the buffers hold {cells} cells in all (chunks x "
                             f"{self.parts} part(s) per chunk, scratch counted twice for LL "
                             f"packets); the verifier handles at most {MAX_CELLS} (MAX_CELLS)")
        self.channels = [self._channels(r, g) for r, g in enumerate(self.gpus_json)]
        gpus = tuple(self._gpu(r, g) for r, g in enumerate(self.gpus_json))
        return Plan(name=str(o["name"]), collective=str(o["collective"]), protocol=protocol,
                    inplace=_bool(o["inplace"], "inplace"),
                    min_message_size=_int(o.get("min_message_size", 0), "min_message_size", 0),
                    max_message_size=_int(o.get("max_message_size", 2**64 - 1), "max_message_size",
                                          0), parts=self.parts,
                    gpus=gpus)

    # ---------------------------------------------------------------------------- per GPU
    def _channels(self, r: int, g: dict[str, Any]) -> dict[str, Any]:
        """Flattened channels per type: memory/port as Chan, switch as (buffer, ranks)."""
        out: dict[str, list[Any]] = {"memory": [], "port": [], "switch": []}
        seen: dict[tuple[str, int], int] = {}
        for ch in g["channels"]:
            t = ch["channel_type"]
            if t not in CHANNEL_TYPES:
                raise _bad("unsupported", f"rank {r}", f"channel type '{t}'")
            if t == "switch":
                buf = ch["buffer_type"]
                if buf not in BUFFERS:
                    raise _bad("unsupported", f"rank {r}", f"switch channel buffer '{buf}'")
                for group in ch["rank_groups"]:
                    ranks = tuple(_int(x, "rank_groups.ranks[]", 0) for x in group["ranks"])
                    if r not in ranks or any(not 0 <= x < self.n for x in ranks):
                        raise _bad("channel", f"rank {r}", f"switch group {list(ranks)} must contain "
                                   f"rank {r} and only ranks 0..{self.n - 1}")
                    out[t].append((buf, ranks))
                continue
            for peer in ch["connected_to"]:
                peer = _int(peer, "connected_to[]", 0)
                if not 0 <= peer < self.n or peer == r:
                    raise _bad("channel", f"rank {r}", f"{t} channel to rank {peer}")
                k = seen.get((t, peer), 0)
                seen[(t, peer)] = k + 1
                out[t].append(Chan(t, peer, k))
        return out

    def _gpu(self, r: int, g: dict[str, Any]) -> Gpu:
        remote = []
        for rb in g["remote_buffers"]:
            owner, buf = _int(rb["rank"], "remote_buffers.rank", 0), rb["type"]
            types = tuple(rb["access_channel_types"])
            if buf not in BUFFERS or not 0 <= owner < self.n:
                raise _bad("channel", f"rank {r}", f"remote buffer {rb}")
            for t in types:
                if t not in ("memory", "port"):
                    raise _bad("unsupported", f"rank {r}", f"remote buffer access over '{t}'")
                if not any(c.peer == owner for c in self.channels[r][t]):
                    raise _bad("channel", f"rank {r}", f"remote buffer '{buf}' of rank {owner} is "
                               f"accessed over {t} channels but rank {r} has no {t} channel to it")
            remote.append((owner, buf, types))
        sems = tuple(_int(_obj(s, "semaphores[]")["init_value"], "init_value", 0)
                     for s in _list(g.get("semaphores", []), "semaphores"))
        tbs_json = g["threadblocks"]
        for i, tb in enumerate(tbs_json):
            if _int(tb["id"], "threadblocks.id", 0) != i:
                raise _bad("unsupported", f"rank {r}", f"threadblocks[{i}] has id {tb['id']}")
        tbs = tuple(self._tb(r, tb, remote, len(sems)) for tb in tbs_json)
        return Gpu(rank=r, chunks=self.chunks[r], tbs=tbs, semaphores=sems,
                   channels={t: tuple(c for c in v if isinstance(c, Chan))
                             for t, v in self.channels[r].items() if t != "switch"})

    def _tb(self, r: int, tb: dict[str, Any], remote: list[tuple[int, str, tuple[str, ...]]],
            nsems: int) -> tuple[Op, ...]:
        tid = _int(tb["id"], "threadblocks.id", 0)
        chans: dict[str, list[Any]] = {"memory": [], "port": [], "switch": []}
        for ch in tb["channels"]:
            t = ch["channel_type"]
            if t not in CHANNEL_TYPES:
                raise _bad("unsupported", f"rank {r}, threadblock {tid}", f"channel type '{t}'")
            for cid in ch["channel_ids"]:
                glob = self.channels[r][t]
                if not 0 <= _int(cid, "channel_ids[]", 0) < len(glob):
                    raise _bad("channel", f"rank {r}, threadblock {tid}",
                               f"{t} channel id {cid} but rank {r} has {len(glob)} {t} channels")
                chans[t].append(glob[cid])
        for t, lst in chans.items():
            if len(lst) > MAX_CHANNEL:
                raise _bad("limit", f"rank {r}, threadblock {tid}",
                           f"{len(lst)} {t} channels > MAX_CHANNEL={MAX_CHANNEL}")
        rbufs: dict[str, list[tuple[int, str]]] = {"memory": [], "port": []}
        for ref in tb.get("remote_buffer_refs", []):
            t = ref["access_channel_type"]
            if t not in rbufs:
                raise _bad("unsupported", f"rank {r}, threadblock {tid}", f"remote access '{t}'")
            for bid in ref["remote_buffer_ids"]:
                if not 0 <= _int(bid, "remote_buffer_ids[]", 0) < len(remote) or t not in remote[bid][2]:
                    raise _bad("channel", f"rank {r}, threadblock {tid}",
                               f"remote buffer {bid} is not a {t}-accessible remote buffer of rank {r}")
                rbufs[t].append(remote[bid][:2])
        ops: list[Op] = []
        flat = list(_flatten(tb["ops"]))
        if len(flat) > MAX_OPERATION:
            raise _bad("limit", f"rank {r}, threadblock {tid}",
                       f"{len(flat)} operations > MAX_OPERATION={MAX_OPERATION} (the executor throws)")
        ctx = _OpContext(self, r, tid, chans, rbufs, nsems)
        for i, op in enumerate(flat):
            if op["name"] == "pipeline":
                continue  # its inner ops follow it in the flattened list, executed once (see module doc)
            try:
                ops.append(ctx.resolve(i, op))
            except KeyError as e:
                raise _malformed(self.source, f"rank {r}, threadblock {tid}, op {i}: a required "
                                 f"field {short(e.args[0])} is missing") from None
            except (TypeError, ValueError, IndexError, AttributeError) as e:
                raise _malformed(self.source, f"rank {r}, threadblock {tid}, op {i}: "
                                 f"{' '.join(str(e).split())[:200]}") from None
        return tuple(ops)


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"'{what}' must be true or false, got {short(value)}")
    return value


def _flatten(ops: list[dict[str, Any]]):
    for op in ops:
        yield _obj(op, "ops[]")
        if op.get("name") == "pipeline":
            yield from (_obj(inner, "pipeline.ops[]") for inner in _list(op["ops"], "pipeline.ops"))


class _OpContext:
    """Resolves one threadblock's operations."""

    def __init__(self, parser: _Parser, rank: int, tb: int, chans: dict[str, list[Any]],
                 rbufs: dict[str, list[tuple[int, str]]], nsems: int) -> None:
        self.p = parser
        self.rank = rank
        self.tb = tb
        self.chans = chans
        self.rbufs = rbufs
        self.nsems = nsems

    def resolve(self, i: int, op: dict[str, Any]) -> Op:
        name = op["name"]
        if not isinstance(name, str):
            raise TypeError(f"'name' must be a string, got {short(name)}")
        w = Where(self.rank, self.tb, i, name)
        if name not in OP_NAMES:
            raise _bad("unsupported", w, f"operation '{name}' is unknown to the executor "
                       "(getOpType throws 'Invalid operation type')")
        self.w = w
        self.op = op
        self.ctype = op.get("channel_type")
        self.tbg = (0, 1)
        if "tbg_info" in op:
            size = _int(op["tbg_info"]["tbg_size"], "tbg_size", 1)
            tb_id = _int(op["tbg_info"]["tb_id"], "tb_id", 0)
            if tb_id >= size:
                raise _bad("range", w, f"tbg_info tb_id {tb_id} is not in the group of {size} "
                           "blocks (0..tbg_size-1)")
            self.tbg = (tb_id, size)
        srcs = op.get("src_buff", [])
        dsts = op.get("dst_buff", [])
        if len(srcs) > MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION or \
                len(dsts) > MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION:
            raise _bad("limit", w, f"{max(len(srcs), len(dsts))} buffers > "
                       f"{MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION}")
        if len(op.get("channel_ids", [])) > MAX_CHANNEL_PER_OPERATION:
            raise _bad("limit", w, f"{len(op['channel_ids'])} channels > "
                       f"MAX_CHANNEL_PER_OPERATION={MAX_CHANNEL_PER_OPERATION}")
        return getattr(self, "_" + name, self._data)(name, srcs, dsts)

    # ---------------------------------------------------------------------------- helpers
    def _chan_list(self, ctype: str | None = None) -> tuple[Chan, ...]:
        t = ctype or self.ctype
        if t not in ("memory", "port"):
            raise _bad("channel", self.w, f"channel_type '{t}' for a signal/wait/flush/put")
        out = []
        for cid in self.op.get("channel_ids", []):
            lst = self.chans[t]
            if not 0 <= _int(cid, "channel_ids[]", 0) < len(lst):
                raise _bad("channel", self.w, f"{t} channel {cid} but the threadblock has {len(lst)}")
            out.append(lst[cid])
        return tuple(out)

    def _cells(self, index: int, size: int) -> tuple[int, int]:
        parts = self.p.parts
        tb_id, tbg = self.tbg
        total = size * parts
        lo = index * parts + tb_id * total // tbg
        hi = index * parts + (tb_id + 1) * total // tbg
        return lo, hi - lo

    def _access(self, ref: dict[str, Any], pkt: bool = False) -> list[Access]:
        """The cells a buffer reference names: one Access, or one per switch-group rank."""
        index, size = _int(ref["index"], "index", 0), _int(ref["size"], "size", 1)
        if "switch_channel_id" in ref:
            sid = _int(ref["switch_channel_id"], "switch_channel_id", 0)
            if not 0 <= sid < len(self.chans["switch"]):
                raise _bad("channel", self.w, f"switch channel {sid} but the threadblock has "
                           f"{len(self.chans['switch'])}")
            buf, ranks = self.chans["switch"][sid]
            targets = [(q, buf) for q in ranks]
        elif "buffer_id" in ref:
            t = self.ctype
            lst = self.rbufs.get(t or "", [])
            bid = _int(ref["buffer_id"], "buffer_id", 0)
            if not 0 <= bid < len(lst):
                raise _bad("channel", self.w, f"remote buffer id {bid} but the threadblock has "
                           f"{len(lst)} {t} remote buffers")
            targets = [lst[bid]]
        else:
            buf = ref["type"]
            if buf not in BUFFERS:
                raise _bad("unsupported", self.w, f"buffer type '{buf}'")
            targets = [(self.rank, buf)]
        out = []
        for q, buf in targets:
            have = self.p.chunks[q][buf]
            if buf == "s" and not pkt and self.p.protocol == "LL":
                have *= 2  # LL sizes scratch for packets (data + flag): plain data may use it all
            if index + size > have:
                where = "its" if q == self.rank else f"rank {q}'s"
                raise _bad("range", self.w, f"chunks [{index}, {index + size}) of {where} buffer "
                           f"'{buf}', which has {have}")
            lo, n = self._cells(index, size)
            out.append(Access(q, buf, lo, n, pkt))
        return out

    def _one(self, ref: dict[str, Any], pkt: bool = False) -> Access:
        acc = self._access(ref, pkt)
        if len(acc) != 1:
            raise _bad("channel", self.w, "a switch-channel buffer where a single buffer is required")
        return acc[0]

    def _remote(self, ref: dict[str, Any], pkt: bool = False) -> Access:
        if "buffer_id" not in ref:
            raise _bad("channel", self.w, f"expected a remote buffer (buffer_id), got {ref}")
        return self._one(ref, pkt)

    def _local(self, ref: dict[str, Any], pkt: bool = False) -> Access:
        if "type" not in ref or "buffer_id" in ref:
            raise _bad("channel", self.w, f"expected a local buffer (type), got {ref}")
        return self._one(ref, pkt)

    def _need(self, srcs: list[Any], dsts: list[Any], ns: int, nd: int) -> None:
        if len(srcs) < ns or len(dsts) < nd:
            raise _bad("unsupported", self.w, f"needs at least {ns} source and {nd} destination "
                       f"buffers, has {len(srcs)} and {len(dsts)}")

    def _sized(self, moves: list[Move]) -> tuple[Move, ...]:
        for m in moves:
            sizes = {a.n for a in m.srcs + m.dsts}
            if len(sizes) != 1:
                raise _bad("range", self.w, "buffers of different sizes in one element-wise operation")
        return tuple(moves)

    def _mk(self, kind: str, **kw: Any) -> Op:
        return Op(where=self.w, kind=kind, **kw)

    # ---------------------------------------------------------------------------- syncs
    def _nop(self, *_: Any) -> Op:
        return self._mk("nop")

    def _signal(self, name: str, *_: Any) -> Op:
        chans = self._chan_list()
        if name.startswith("rlx") and self.ctype != "memory":
            raise _bad("channel", self.w, "relaxed signal/wait exist only on memory channels")
        return self._mk("signal", chans=chans, relaxed=name.startswith("rlx"))

    _rlxsignal = _signal

    def _wait(self, name: str, *_: Any) -> Op:
        chans = self._chan_list()
        if name.startswith("rlx") and self.ctype != "memory":
            raise _bad("channel", self.w, "relaxed signal/wait exist only on memory channels")
        return self._mk("wait", chans=chans, relaxed=name.startswith("rlx"))

    _rlxwait = _wait

    def _flush(self, *_: Any) -> Op:
        if self.ctype != "port":
            raise _bad("channel", self.w, "flush exists only on port channels")
        return self._mk("flush", chans=self._chan_list())

    def _barrier(self, *_: Any) -> Op:
        bid = _int(self.op["barrier_id"], "barrier_id", 0)
        nb = _int(self.op["num_threadblocks"], "num_threadblocks", 1)
        if not 0 <= bid < MAX_DEVICE_SYNCERS:
            raise _bad("limit", self.w, f"barrier id {bid} outside 0..{MAX_DEVICE_SYNCERS - 1}")
        if nb < 1:
            raise _bad("range", self.w, f"barrier over {nb} threadblocks")
        return self._mk("barrier", ids=(bid, nb))

    def _sem(self, kind: str) -> Op:
        ids = tuple(_int(x, "semaphore_ids[]", 0) for x in _list(self.op["semaphore_ids"],
                                                               "semaphore_ids"))
        if len(ids) > MAX_DEVICE_SEMAPHORES:
            raise _bad("limit", self.w, f"{len(ids)} semaphores in one operation > "
                       f"MAX_DEVICE_SEMAPHORES={MAX_DEVICE_SEMAPHORES}")
        for s in ids:
            if not 0 <= s < self.nsems:
                raise _bad("range", self.w, f"semaphore {s} but rank {self.rank} declares {self.nsems}")
        return self._mk(kind, ids=ids)

    def _sem_acquire(self, *_: Any) -> Op:
        return self._sem("sem_acquire")

    def _sem_release(self, *_: Any) -> Op:
        return self._sem("sem_release")

    # ---------------------------------------------------------------------------- data
    def _data(self, name: str, srcs: list[Any], dsts: list[Any]) -> Op:
        ll = name.endswith("pkt")
        if name == "copy":
            self._need(srcs, dsts, 1, 1)
            moves = [Move((self._local(srcs[0]),), (self._local(dsts[0]),))]
        elif name == "cpkt":
            self._need(srcs, dsts, 1, 1)
            moves = [Move((self._local(srcs[0]),), (self._local(dsts[0], True),))]
        elif name == "upkt":
            self._need(srcs, dsts, 1, 1)
            moves = [Move((self._local(srcs[0], True),), (self._local(dsts[0]),))]
        elif name == "get":
            self._need(srcs, dsts, 1, 1)
            if self.ctype != "memory":
                raise _bad("channel", self.w, "get exists only on memory channels")
            moves = [Move((self._remote(s),), (self._local(d),)) for s, d in zip(srcs, dsts, strict=False)]
        elif name in ("re", "rre", "res", "rres", "repkt", "respkt", "recpkt", "recspkt"):
            self._need(srcs, dsts, 1, 1)
            reads = [self._local(srcs[0])]
            for s in srcs[1:]:
                if name in ("rre", "rres"):
                    reads.append(self._remote(s))
                else:
                    reads.append(self._local(s, ll))
            writes = [self._local(dsts[0])]
            rest = dsts[1:]
            if name in ("recpkt", "recspkt"):
                self._need(srcs, dsts, 1, 2)
                writes.append(self._local(dsts[1], True))
                rest = dsts[2:]
            if rest and name in ("re", "rre", "repkt", "recpkt"):
                raise _bad("unsupported", self.w, f"'{name}' writes one local result, "
                           f"has {len(dsts)} destinations")
            for d in rest:
                if self.ctype != "memory":
                    raise _bad("channel", self.w, f"'{name}' sends over memory channels only")
                writes.append(self._remote(d, ll))
            moves = [Move(tuple(reads), tuple(writes))]
        elif name in ("put", "pws", "pwsf", "ppkt"):
            self._need(srcs, dsts, 1, 1)
            port = self.ctype == "port"
            if self.ctype not in ("memory", "port"):
                raise _bad("channel", self.w, f"'{name}' over '{self.ctype}'")
            if name in ("pws", "pwsf") and not port:
                raise _bad("channel", self.w, f"'{name}' exists only on port channels")
            chans = self._chan_list() if port else ()
            if port and len(chans) != len(dsts):
                raise _bad("channel", self.w, f"{len(dsts)} destinations but {len(chans)} channels")
            if len(srcs) != len(dsts):
                raise _bad("unsupported", self.w, f"{len(srcs)} sources for {len(dsts)} destinations")
            src_pkt = name == "ppkt" and port  # the proxy copies packets already in packet form
            if not port and len({str(x.get("type")) for x in srcs}) > 1:
                # handlePut takes the source buffer of src_buff[0] for every destination
                raise _bad("unsupported", self.w, "memory-channel puts from different local buffers "
                           "in one op (the kernel reads them all from the first one's buffer)")
            moves = []
            for x, (s, d) in enumerate(zip(srcs, dsts, strict=False)):
                dst = self._remote(d, name == "ppkt")
                if port and dst.rank != chans[x].peer:
                    raise _bad("channel", self.w, f"puts into rank {dst.rank}'s buffer over the "
                               f"port channel to rank {chans[x].peer}")
                moves.append(Move((self._local(s, src_pkt),), (dst,), chans[x] if port else None))
            return self._mk("data", moves=self._sized(moves), chans=chans,
                            signal_after=name in ("pws", "pwsf"), flush_after=name == "pwsf")
        elif name == "rppkt":
            self._need(srcs, dsts, 1, 1)
            port = self.ctype == "port"
            chans = self._chan_list() if port else ()
            src = self._local(srcs[0], True)
            moves = [Move((src,), (self._remote(d, True),), chans[x] if port else None)
                     for x, d in enumerate(dsts)]
        elif name in ("glres", "gstore", "gstorepkt"):
            self._need(srcs, dsts, 1, 1)
            if "switch_channel_id" not in dsts[0]:
                raise _bad("channel", self.w, f"'{name}' stores through a switch channel")
            if name == "glres":
                if "switch_channel_id" not in srcs[0]:
                    raise _bad("channel", self.w, "glres loads through a switch channel")
                moves = [Move(tuple(self._access(srcs[0])), tuple(self._access(dsts[0])))]
            else:
                pkt = name == "gstorepkt"
                moves = [Move((self._local(srcs[0], pkt),), tuple(self._access(dsts[0], pkt)))]
        else:  # pragma: no cover - OP_NAMES and this table are kept together
            raise _bad("unsupported", self.w, f"operation '{name}'")
        return self._mk("data", moves=self._sized(moves))
