"""NumPy stand-ins for ``torch_xla.core.xla_model`` (with a NumPy ``torch``) and for ``jax.lax``.

An emitted module runs **unchanged**: it is executed with its ``import`` statements answered by
the stand-ins, one Python thread per rank. Every collective is a rendezvous of all ranks: each
rank deposits its tensor and its call's arguments, the arguments must agree (SPMD), rank 0
computes the result with :mod:`synth.closed.reference` and every rank takes its own part. So a
program is checked against the exact primitive semantics (group order, concatenation order, zeros
for ranks no permute targets) without the hardware.

The ``xm`` stand-in also enforces what the Neuron runtime rejects (reductions other than
add/min/max, integer reduce-scatter, permutes that are not rings, more than 16 replica-group
configurations); the ``lax`` stand-in enforces XLA's rules (psum_scatter sums only, permute pairs
unique).
"""

from __future__ import annotations

import builtins
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import SynthError
from . import reference as ref
from .mesh import Axis, Mesh

TIMEOUT_S = 120.0


class _Broken(Exception):
    """Another rank failed, so this one stops waiting."""


class _Rendezvous:
    """All ranks meet at every collective; the last to arrive computes, everyone reads its row."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.cond = threading.Condition()
        self.slots: list[Any] = [None] * n
        self.arrived = 0
        self.gen = 0
        self.broken = False
        self.finished = 0
        self.results: dict[int, Any] = {}
        self.local = threading.local()

    @property
    def rank(self) -> int:
        return self.local.rank

    def done(self) -> None:
        """A rank returned: ranks still waiting at a collective will never be joined by it."""
        with self.cond:
            self.finished += 1
            if self.arrived and self.arrived + self.finished >= self.n:
                self.broken = True
                self.mismatch = True
                self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            self.broken = True
            self.cond.notify_all()

    def exchange(self, key: tuple, value: np.ndarray, compute: Callable[[np.ndarray], Any]) -> Any:
        rank = self.rank
        with self.cond:
            if self.broken:
                raise _Broken()
            gen = self.gen
            self.slots[rank] = (key, np.asarray(value))
            self.arrived += 1
            if self.finished and self.arrived + self.finished >= self.n:
                self.broken = True
                self.cond.notify_all()
                raise SynthError(f"ranks disagree on the number of collective calls (call {gen})")
            if self.arrived == self.n:
                try:
                    keys = {k for k, _ in self.slots}
                    if len(keys) != 1:
                        raise SynthError(f"ranks disagree on collective call {gen}: "
                                         f"{sorted(map(str, keys))[:2]}")
                    vals = [v for _, v in self.slots]
                    if len({(v.shape, v.dtype.str) for v in vals}) != 1:
                        raise SynthError(f"ranks pass tensors of different shapes to {key[0]}")
                    self.results[gen] = ("ok", compute(np.stack(vals)))
                except Exception as exc:
                    self.results[gen] = ("error", exc)
                self.results.pop(gen - 2, None)
                self.slots = [None] * self.n
                self.arrived = 0
                self.gen += 1
                self.cond.notify_all()
            else:
                while self.gen == gen and not self.broken:
                    if not self.cond.wait(TIMEOUT_S):
                        self.broken = True
                        self.cond.notify_all()
                        raise SynthError(f"rank {rank} waited {TIMEOUT_S:.0f} s at a collective")
                if self.gen == gen:
                    if getattr(self, "mismatch", False):
                        raise SynthError("ranks disagree on the number of collective calls")
                    raise _Broken()
            status, out = self.results[gen]
        if status == "error":
            raise out
        return out[rank]


def _spmd(n: int, rdv: _Rendezvous, fn: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * n
    errors: list[BaseException | None] = [None] * n

    def worker(r: int) -> None:
        rdv.local.rank = r
        try:
            results[r] = fn(r)
            rdv.done()
        except _Broken as exc:
            errors[r] = exc
        except BaseException as exc:
            errors[r] = exc
            rdv.abort()

    rdv.finished = 0
    rdv.broken = False
    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S * 2)
    real = [e for e in errors if e is not None and not isinstance(e, _Broken)]
    if real:
        raise real[0]
    if any(e is not None for e in errors):
        raise SynthError("a rank stopped at a collective the others never reached")
    return results


# ------------------------------------------------------------------------------------ neuron
class FakeXM:
    """``torch_xla.core.xla_model`` on NumPy arrays, for ``world`` ranks run as threads."""

    REDUCE_SUM = "sum"
    REDUCE_MIN = "min"
    REDUCE_MAX = "max"
    REDUCE_MUL = "mul"
    _OPS: ClassVar[dict[str, str]] = {"sum": "add", "min": "min", "max": "max"}

    def __init__(self, world: int, neuron_rules: bool = True, topology=None) -> None:
        self.world = world
        self.rdv = _Rendezvous(world)
        self.neuron_rules = neuron_rules
        self.topology = topology
        self.configs: set = set()

    def get_ordinal(self) -> int:
        return self.rdv.rank

    def xrt_world_size(self) -> int:
        return self.world

    def _groups(self, groups) -> tuple[tuple[int, ...], ...]:
        if groups is None:
            groups = [list(range(self.world))]
        g = tuple(tuple(int(r) for r in grp) for grp in groups)
        ref.check_groups(g, self.world)
        self._count(("groups", g))
        return g

    def _count(self, config) -> None:
        if self.rdv.rank == 0:
            self.configs.add(config)
            if self.neuron_rules and len(self.configs) > 16:
                raise SynthError("more than 16 replica-group configurations in one graph (Neuron limit)")

    def _op(self, reduce_type: str) -> str:
        if reduce_type not in self._OPS:
            raise SynthError(f"reduce type '{reduce_type}' is not supported by Neuron (sum, min, max)")
        return self._OPS[reduce_type]

    def all_gather(self, value, dim=0, groups=None, output=None, pin_layout=True):
        g = self._groups(groups)
        return self.rdv.exchange(("all_gather", dim, g), value,
                                 lambda x: ref.all_gather(x, g, dim))

    def reduce_scatter(self, reduce_type, input, scale, scatter_dim, shard_count, groups=None,
                       output=None, pin_layout=True):
        g = self._groups(groups)
        op = self._op(reduce_type)
        if shard_count != len(g[0]):
            raise SynthError(f"reduce_scatter: shard_count {shard_count} != group size {len(g[0])}")
        if scale != 1.0:
            raise SynthError("reduce_scatter: the stand-in supports scale=1.0 only")
        if self.neuron_rules and not np.issubdtype(np.asarray(input).dtype, np.floating):
            raise SynthError(f"Neuron rejects integer reduce_scatter ({np.asarray(input).dtype})")
        return self.rdv.exchange(("reduce_scatter", op, scatter_dim, g), input,
                                 lambda x: ref.reduce_scatter(x, g, scatter_dim, op))

    def all_reduce(self, reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
        g = self._groups(groups)
        op = self._op(reduce_type)
        if scale != 1.0:
            raise SynthError("all_reduce: the stand-in supports scale=1.0 only")
        if isinstance(inputs, (list, tuple)):
            raise SynthError("all_reduce: the stand-in takes one tensor")
        return self.rdv.exchange(("all_reduce", op, g), inputs, lambda x: ref.all_reduce(x, g, op))

    def all_to_all(self, value, split_dimension, concat_dimension, split_count, groups=None,
                   pin_layout=True):
        g = self._groups(groups)
        if split_count != len(g[0]):
            raise SynthError(f"all_to_all: split_count {split_count} != group size {len(g[0])}")
        return self.rdv.exchange(("all_to_all", split_dimension, concat_dimension, g), value,
                                 lambda x: ref.all_to_all(x, g, split_dimension, concat_dimension))

    def collective_permute(self, value, pairs):
        p = tuple(tuple(int(v) for v in pair) for pair in pairs)
        ref.check_pairs(p, self.world)
        self._count(("permute", tuple(sorted(p))))
        if self.neuron_rules:
            from .constraints import _neuron_ring
            bad = _neuron_ring(list(p), self.topology)
            if bad:
                raise SynthError(str(bad[0]))
        return self.rdv.exchange(("permute", p), value, lambda x: ref.collective_permute(x, p))


def fake_torch() -> types.SimpleNamespace:
    """The few ``torch`` functions an emitted neuron module uses, on NumPy arrays."""

    def cat(tensors, dim=0):
        return np.concatenate(list(tensors), axis=dim)

    def permute(t, dims):
        return np.transpose(t, tuple(dims))

    def split(t, split_size_or_sections, dim=0):
        if isinstance(split_size_or_sections, int):
            size = split_size_or_sections
            cuts = list(range(size, t.shape[dim], size))
        else:
            cuts = list(np.cumsum(split_size_or_sections)[:-1])
        return tuple(np.split(t, cuts, axis=dim))

    def pad(t, pad, mode="constant", value=0):
        if mode != "constant":
            raise SynthError("the torch stand-in pads with constants only")
        widths = [(0, 0)] * t.ndim
        for i in range(len(pad) // 2):
            widths[t.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
        return np.pad(t, widths, constant_values=value)

    def tensor(data, device=None, dtype=None):
        return np.asarray(data, dtype=dtype if dtype is not None else np.int64)

    def index_copy(base, dim, index, source):
        if dim != 0:
            raise SynthError("the torch stand-in indexes dim 0 only")
        if len(set(np.asarray(index).tolist())) != len(index):
            raise SynthError("index_copy with a repeated index (the result would depend on order)")
        out = np.array(base, copy=True)
        out[np.asarray(index)] = source
        return out

    def index_add(base, dim, index, source):
        if dim != 0:
            raise SynthError("the torch stand-in indexes dim 0 only")
        out = np.array(base, copy=True)
        np.add.at(out, np.asarray(index), np.asarray(source, dtype=out.dtype))
        return out

    functional = types.SimpleNamespace(pad=pad)
    nn = types.SimpleNamespace(functional=functional)
    return types.SimpleNamespace(cat=cat, permute=permute, split=split, minimum=np.minimum,
                                 maximum=np.maximum, tensor=tensor, index_copy=index_copy,
                                 index_add=index_add, nn=nn, __name__="torch")


# ------------------------------------------------------------------------------------ jax
class FakeLax:
    """``jax.lax`` collectives over named mesh axes, on NumPy arrays, ranks as threads."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.rdv = _Rendezvous(mesh.size)

    def _axes(self, axis_name) -> tuple[str, ...]:
        names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
        for n in names:
            self.mesh.axis(n)
        return names

    def axis_index(self, axis_name) -> int:
        return self.mesh.position(self.rdv.rank, self._axes(axis_name))

    def all_gather(self, x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, **_):
        if axis_index_groups is not None:
            raise SynthError("the lax stand-in does not take axis_index_groups")
        axes = self._axes(axis_name)
        g = self.mesh.groups(axes)
        x = np.asarray(x)
        if tiled:
            return self.rdv.exchange(("all_gather", axes, axis), x, lambda s: ref.all_gather(s, g, axis))
        x = np.expand_dims(x, axis)
        return self.rdv.exchange(("all_gather", axes, axis, "stack"), x,
                                 lambda s: ref.all_gather(s, g, axis))

    def psum_scatter(self, x, axis_name, *, scatter_dimension=0, axis_index_groups=None,
                     tiled=False):
        axes = self._axes(axis_name)
        g = self.mesh.groups(axes)
        d = scatter_dimension
        out = self.rdv.exchange(("psum_scatter", axes, d), np.asarray(x),
                                lambda s: ref.reduce_scatter(s, g, d, "add"))
        if not tiled:
            if out.shape[d] != 1:
                raise SynthError("psum_scatter(tiled=False) needs the dim size equal to the axis size")
            out = np.squeeze(out, d)
        return out

    def _reduce(self, x, axis_name, op):
        axes = self._axes(axis_name)
        g = self.mesh.groups(axes)
        return self.rdv.exchange((f"p{op}", axes), np.asarray(x), lambda s: ref.all_reduce(s, g, op))

    def psum(self, x, axis_name, *, axis_index_groups=None):
        return self._reduce(x, axis_name, "add")

    def pmin(self, x, axis_name, *, axis_index_groups=None):
        return self._reduce(x, axis_name, "min")

    def pmax(self, x, axis_name, *, axis_index_groups=None):
        return self._reduce(x, axis_name, "max")

    def all_to_all(self, x, axis_name, split_axis, concat_axis, *, axis_index_groups=None,
                   tiled=False):
        axes = self._axes(axis_name)
        g = self.mesh.groups(axes)
        x = np.asarray(x)
        if not tiled and x.shape[split_axis] != len(g[0]):
            raise SynthError("all_to_all(tiled=False) needs the split axis size equal to the axis size")
        return self.rdv.exchange(("all_to_all", axes, split_axis, concat_axis), x,
                                 lambda s: ref.all_to_all(s, g, split_axis, concat_axis))

    def ppermute(self, x, axis_name, perm):
        axes = self._axes(axis_name)
        pairs = ref.global_pairs(self.mesh, axes, [tuple(p) for p in perm])
        ref.check_pairs([tuple(p) for p in perm], self.mesh.group_size(axes))
        return self.rdv.exchange(("ppermute", axes, tuple(map(tuple, perm))), np.asarray(x),
                                 lambda s: ref.collective_permute(s, pairs))


# ------------------------------------------------------------------------------------ loading
def load_module(source: str, fakes: dict[str, Any], name: str = "synth_program") -> types.ModuleType:
    """Execute module source with the imports in ``fakes`` answered by the stand-ins."""
    real_import = builtins.__import__
    roots = {k.split(".")[0] for k in fakes}

    def hook(mod_name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and mod_name.split(".")[0] in roots:
            if mod_name not in fakes:
                raise ImportError(f"the stand-in has no module '{mod_name}'")
            return fakes[mod_name] if fromlist else fakes[mod_name.split(".")[0]]
        return real_import(mod_name, globals, locals, fromlist, level)

    env = dict(vars(builtins))
    env["__import__"] = hook
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = env
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def _ns(**kw: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**kw)


def neuron_fakes(xm: FakeXM, torch: types.SimpleNamespace) -> dict[str, Any]:
    """The imports of a torch-neuronx module, answered by the stand-ins."""
    core = _ns(xla_model=xm)
    return {"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": torch.nn.functional,
            "torch_xla": _ns(core=core), "torch_xla.core": core, "torch_xla.core.xla_model": xm}


def run_neuron_standin(source: str, inputs: Sequence[np.ndarray], *, neuron_rules: bool = True,
                       topology=None, program_index: int | None = None) -> list[np.ndarray]:
    """Run an emitted neuron module on stacked inputs; returns stacked outputs. ``program_index``:
    a size-range module (:func:`synth.closed.emit.emit_ranges`) runs that range's program."""
    world = int(inputs[0].shape[0])
    xm = FakeXM(world, neuron_rules=neuron_rules, topology=topology)
    module = load_module(source, neuron_fakes(xm, fake_torch()), "neuron_program")
    if program_index is not None:  # reach one range's program whatever the tensors' size
        chosen = module._PROGRAMS[program_index]
        module._range_for = lambda nbytes: (chosen[1], chosen[2])
    if world != module.WORLD:
        raise SynthError(f"the program is for {module.WORLD} ranks, inputs have {world}")
    outs = _spmd(world, xm.rdv, lambda r: module.run([np.array(x[r]) for x in inputs]))
    return [np.stack([np.asarray(outs[r][i]) for r in range(world)]) for i in range(len(outs[0]))]


def run_jax_standin(source: str, inputs: Sequence[np.ndarray], *,
                    program_index: int | None = None) -> list[np.ndarray]:
    """Run an emitted JAX module's ``body`` per rank with the lax stand-in; stacked in and out."""
    probe = load_module(source, _jax_fakes(None), "jax_probe")
    mesh = Mesh(tuple(Axis(n, s, "") for n, s in zip(probe.AXES, probe.MESH_SHAPE, strict=True)))
    lax = FakeLax(mesh)
    module = load_module(source, _jax_fakes(lax), "jax_program")
    if program_index is not None:
        chosen = module._PROGRAMS[program_index]
        module._range_for = lambda nbytes: (chosen[1], chosen[2])
    world = mesh.size
    if int(inputs[0].shape[0]) != world:
        raise SynthError(f"the program is for {world} ranks, inputs have {inputs[0].shape[0]}")
    outs = _spmd(world, lax.rdv, lambda r: module.body(*[np.array(x[r]) for x in inputs]))
    return [np.stack([np.asarray(outs[r][i]) for r in range(world)]) for i in range(len(outs[0]))]


def _jax_fakes(lax: FakeLax | None) -> dict[str, Any]:
    def unavailable(*_a, **_k):
        raise SynthError("the JAX stand-in runs body() only; use real JAX for run()")

    sharding = _ns(Mesh=unavailable, PartitionSpec=unavailable)
    jax = _ns(numpy=np, lax=lax, sharding=sharding, jit=unavailable, devices=unavailable,
              shard_map=unavailable)
    return {"jax": jax, "jax.numpy": np, "jax.lax": lax, "jax.sharding": sharding}


# ------------------------------------------------------------------------------------ nki
class NkiTensor(np.ndarray):
    """A NumPy array that remembers the NKI memory it was allocated in (views keep it)."""

    buffer: str = "io"
    label: str = ""

    def __array_finalize__(self, obj: Any) -> None:
        self.buffer = getattr(obj, "buffer", "io")
        self.label = getattr(obj, "label", "")


class FakeNki:
    """``nki``, ``nki.language``, ``nki.isa`` and ``nki.collectives`` on NumPy, ranks as threads.

    New buffers start as NaN (floats), so a kernel that reads a row it never wrote gives a wrong
    result. ``collective_permute`` follows the NKI API (Neuron SDK 2.30+): one source and one
    destination tensor (coalescing is not supported), both in HBM allocated by the kernel (a
    collective cannot touch IO tensors) and named (the nki-library tests name every collective
    buffer); explicit (source, target) rank pairs, no two sharing a source or a target; a target's
    destination receives its source's tensor; with ``neuron_rules`` the pairs must also be rings
    over direct links (the runtime's Permute rule, :mod:`synth.closed.constraints`)."""

    shared_hbm = "shared_hbm"
    hbm = "hbm"
    sbuf = "sbuf"

    def __init__(self, world: int, topology=None, neuron_rules: bool = True) -> None:
        self.rdv = _Rendezvous(world)
        self.topology = topology
        self.neuron_rules = neuron_rules

    @staticmethod
    def jit(fn: Callable) -> Callable:
        return fn

    def ndarray(self, shape, dtype, buffer="sbuf", name="", address=None) -> NkiTensor:
        dt = np.dtype(dtype)
        fill = np.nan if np.issubdtype(dt, np.floating) else 0
        out = np.full(tuple(shape), fill, dtype=dt).view(NkiTensor)
        out.buffer, out.label = buffer, name
        return out

    @staticmethod
    def dma_copy(dst, src, **_: Any) -> None:
        if np.size(dst) != np.size(src):
            raise SynthError(f"dma_copy of {np.shape(src)} into {np.shape(dst)}: element counts differ")
        dst[...] = np.asarray(src).reshape(np.shape(dst))

    @staticmethod
    def tensor_tensor(dst, data1, data2, op, **_: Any) -> None:
        if any(getattr(t, "buffer", "") != "sbuf" for t in (data1, data2)):
            raise SynthError("tensor_tensor reads SBUF tiles")
        dst[...] = op(np.asarray(data1), np.asarray(data2))

    def collective_permute(self, srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
        if len(srcs) != 1 or len(dsts) != 1:
            raise SynthError("collective_permute takes exactly one source and one destination tensor")
        src, dst = srcs[0], dsts[0]
        for t in (src, dst):
            if getattr(t, "buffer", "io") not in ("shared_hbm", "hbm") or not getattr(t, "label", ""):
                raise SynthError("collective_permute tensors must be named HBM buffers the kernel "
                                 "allocated (not SBUF, not an IO tensor)")
        pairs = tuple(tuple(int(v) for v in p) for p in source_target_pairs)
        ref.check_pairs(pairs, self.rdv.n)
        if self.neuron_rules:
            from .constraints import _neuron_ring
            bad = _neuron_ring(list(pairs), self.topology)
            if bad:
                raise SynthError(str(bad[0]))
        got = self.rdv.exchange(("nki_permute", pairs, np.shape(src)), np.asarray(src),
                                lambda x: ref.collective_permute(x, pairs))
        if self.rdv.rank in {d for _, d in pairs}:
            dst[...] = got


def run_nki_standin(source: str, inputs: Sequence[np.ndarray], *, topology=None,
                    program_index: int | None = None) -> list[np.ndarray]:
    """Run an emitted NKI module (:mod:`synth.closed.nki`) on stacked inputs; stacked outputs."""
    world = int(inputs[0].shape[0])
    xm = FakeXM(world, topology=topology)
    nki = FakeNki(world, topology)
    nki.rdv = xm.rdv
    language = _ns(ndarray=nki.ndarray, shared_hbm=nki.shared_hbm, hbm=nki.hbm, sbuf=nki.sbuf,
                   add=np.add, minimum=np.minimum, maximum=np.maximum)
    isa = _ns(dma_copy=nki.dma_copy, tensor_tensor=nki.tensor_tensor)
    collectives = _ns(collective_permute=nki.collective_permute)
    root = _ns(jit=nki.jit, language=language, isa=isa, collectives=collectives)
    fakes = {**neuron_fakes(xm, fake_torch()), "nki": root, "nki.language": language,
             "nki.isa": isa, "nki.collectives": collectives}
    module = load_module(source, fakes, "nki_program")
    if program_index is not None:
        chosen = module._PROGRAMS[program_index]
        module._range_for = lambda nbytes: (chosen[1], chosen[2])
    outs = _spmd(world, xm.rdv, lambda r: module.run([np.array(x[r]) for x in inputs]))
    return [np.stack([np.asarray(outs[r][i]) for r in range(world)]) for i in range(len(outs[0]))]
