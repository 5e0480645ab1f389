"""Where ``synth solve`` puts what it writes, so that a runtime can be pointed at a folder as is.

Layout of ``--out OUT``::

    OUT/msccl/             MSCCL-IR XML for the executor runtimes (exec profile): MSCCL_ALGO_DIR
    OUT/rccl/              the same for RCCL (--xml-profile rccl)
    OUT/msccl-legacy/      legacy-profile XML for microsoft/msccl, listed by OUT/msccl_config.xml
    OUT/msccl_config.xml   MSCCL_CONFIG for microsoft/msccl (beside its folder, never inside)
    OUT/mscclpp/           MSCCL++ execution plans: MSCCLPP_EXECUTION_PLAN_DIR
    OUT/neuron/            torch-neuronx modules (and NKI kernels) for Trainium: imported by the job
    OUT/jax/               JAX modules (shard_map + jax.lax) for TPU meshes
    OUT/schedules/         verified schedules (JSON)
    OUT/maps/              group rank -> global rank maps of --group runs
    OUT/reports/           the range tables a person reads
    OUT/synth-manifest.json  which run wrote which file (read by the next run)

Why: the executor runtimes enumerate *every* regular file in ``MSCCL_ALGO_DIR`` and abort
communicator initialisation on one they cannot parse (spec §0), so a runtime folder holds that
runtime's files and nothing else — the manifest too lives outside it.

A *run* is one (runtime folder, topology, collective): a later run of the same key replaces its
files, whatever options it was given, and removes those it no longer writes (a second run with
``--proto LL`` leaves no Simple file behind); runs of other collectives keep theirs, so one
``MSCCL_ALGO_DIR`` serves every collective solved into it. A file synth did not write (no
manifest entry) is never overwritten or removed: the run refuses instead. Each folder is replaced
as a whole (built beside it, then swapped in by one rename), so a job starting meanwhile sees the
old set or the new one, never a mix; the manifest is written first with both sets and last with
the new one, so a crash between leaves the next run able to clean up.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SynthError
from ..files import atomic_write, check_writable_dir, dumps_json, ensure_writable_dir, read_data

MANIFEST = "synth-manifest.json"
MANIFEST_FORMAT = "synth-manifest/1"
XML_FOLDERS = {"exec": "msccl", "rccl": "rccl", "legacy": "msccl-legacy"}
"""The folder each XML profile's files go to (the runtime that reads that profile)."""
PLAN_FOLDER = "mscclpp"
NEURON_FOLDER = "neuron"
JAX_FOLDER = "jax"
SCHEDULE_FOLDER = "schedules"
MAP_FOLDER = "maps"
REPORT_FOLDER = "reports"
CONFIG_FILE = "msccl_config.xml"
MAX_LEGACY_ALGOS = 4
"""``MSCCL_MAX_NUM_ALGOS`` of microsoft/msccl: algorithms kept per communicator (spec §6)."""


@dataclass(frozen=True)
class LegacyEntry:
    """One ``<load>`` of ``MSCCL_CONFIG``: a legacy file, its inclusive byte range, its protocol."""

    path: str
    """Relative to OUT."""
    lo: int
    hi: int
    """Inclusive; 0 = unbounded."""
    proto: str


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def read_manifest(out: Path) -> dict[str, Any]:
    """The manifest of ``out`` (an empty one where there is none); a malformed one is an error,
    since without it synth cannot tell its files from a user's."""
    path = out / MANIFEST
    if not path.exists():
        return {"format": MANIFEST_FORMAT, "runs": {}}
    data = read_data(path, "synth manifest", fmt="json")
    if not isinstance(data, Mapping) or data.get("format") != MANIFEST_FORMAT \
            or not isinstance(data.get("runs"), Mapping):
        raise SynthError(f"'{path}' is not a synth manifest ({MANIFEST_FORMAT}); move it away or "
                         "choose another --out")
    return {"format": MANIFEST_FORMAT, "runs": {str(k): dict(v) for k, v in data["runs"].items()
                                                if isinstance(v, Mapping)}}


def _files_of(run: Mapping[str, Any]) -> dict[str, str]:
    files = run.get("files")
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, Mapping) else {}


def check_out(out: Path) -> Path:
    """Prove ``--out`` can hold a deployment, before any work: nothing is created."""
    out = Path(os.path.abspath(out))
    check_writable_dir(out)
    if out.exists():
        read_manifest(out)
    return out


def deploy(out: Path, key: str, files: Mapping[str, str | bytes],
           legacy: Sequence[LegacyEntry] = ()) -> tuple[list[Path], list[str]]:
    """Write one run's ``files`` (path relative to ``out`` -> content) as the run ``key``; returns
    the files written (absolute) and notes (what the legacy config dropped, foreign files found
    in a runtime folder). Module docstring: ownership, stale files, atomicity. A failure at any
    point puts back every folder already swapped and the old manifest, and removes the folders
    this call created: the disk is as it was."""
    out = check_out(out)
    manifest = read_manifest(out)
    runs: dict[str, Any] = manifest["runs"]
    before = _files_of(runs.get(key, {}))
    others = {rel for k, run in runs.items() if k != key for rel in _files_of(run)}
    for rel in files:
        p = out / rel
        if (p.exists() or p.is_symlink()) and rel not in before and rel not in others:
            raise SynthError(f"refusing to overwrite '{p}': synth did not write it (it is not in "
                             f"{out / MANIFEST}); move it away or choose another --out")
    old_manifest = (out / MANIFEST).read_bytes() if (out / MANIFEST).exists() else None
    old_top = {rel: (out / rel).read_bytes() for rel in [*files, *before]
               if len(Path(rel).parts) == 1 and (out / rel).is_file()}
    created = _missing(out)
    ensure_writable_dir(out)
    new_run = {"files": {rel: _sha(text) for rel, text in sorted(files.items())},
               "legacy": [e.__dict__ for e in legacy]}
    stale = {rel for rel in before if rel not in files and rel not in others}
    folders = sorted({Path(rel).parts[0] for rel in [*files, *stale] if len(Path(rel).parts) > 1})
    swapped: list[tuple[Path, Path | None]] = []
    notes: list[str] = []
    try:
        # first both sets are ours (a crash from here on leaves nothing unowned), last the new one
        runs[key] = {"files": {**before, **new_run["files"]},
                     "legacy": list(runs.get(key, {}).get("legacy", []))}
        _write_manifest(out, manifest)
        for folder in folders:
            mine = {rel: text for rel, text in files.items() if Path(rel).parts[0] == folder}
            gone = {rel for rel in [*stale, *before] if Path(rel).parts[0] == folder}
            foreign = _replace_folder(out / folder, folder, mine, gone, others, swapped)
            if foreign and folder in (*XML_FOLDERS.values(), PLAN_FOLDER, NEURON_FOLDER, JAX_FOLDER):
                notes.append(f"{out / folder} also holds {len(foreign)} file(s) synth did not "
                             f"write (e.g. {foreign[0]}): the runtime loads every file there")
        for rel, text in files.items():     # files at OUT's top
            if len(Path(rel).parts) == 1:
                atomic_write(out / rel, text)
        for rel in stale:
            if len(Path(rel).parts) == 1:
                (out / rel).unlink(missing_ok=True)
        runs[key] = new_run
        notes += _write_legacy_config(out, runs)
        _write_manifest(out, manifest)
    except BaseException:
        _roll_back(out, swapped, old_manifest, old_top, [*files, *before], created)
        raise
    for _, backup in swapped:
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    return sorted(out / rel for rel in files), notes


def _missing(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    out = []
    while not path.exists() and path.parent != path:
        out.append(path)
        path = path.parent
    return out


def _roll_back(out: Path, swapped: list[tuple[Path, Path | None]], old_manifest: bytes | None,
               old_top: dict[str, bytes], top: Sequence[str], created: list[Path]) -> None:
    """Undo a failed :func:`deploy`: folders back, top files and manifest as they were."""
    for folder, backup in reversed(swapped):
        with contextlib.suppress(OSError):
            if backup is None:
                shutil.rmtree(folder)
            else:
                shutil.rmtree(folder)
                os.rename(backup, folder)
    with contextlib.suppress(OSError, SynthError):
        for rel in top:
            if len(Path(rel).parts) != 1:
                continue
            if rel in old_top:
                atomic_write(out / rel, old_top[rel])
            else:
                (out / rel).unlink(missing_ok=True)
        if old_manifest is None:
            (out / MANIFEST).unlink(missing_ok=True)
        else:
            atomic_write(out / MANIFEST, old_manifest)
    for path in created:
        with contextlib.suppress(OSError):
            path.rmdir()


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    atomic_write(out / MANIFEST, dumps_json(manifest, indent=2, sort_keys=True) + "\n")


def _replace_folder(folder: Path, name: str, files: Mapping[str, str | bytes], gone: set[str],
                    others: set[str], swapped: list[tuple[Path, Path | None]]) -> list[str]:
    """Build ``folder``'s new content beside it (what stays, hard-linked; this run's files,
    written) and swap it in, appending (folder, the old content's new place or None) to
    ``swapped``; returns the names of files in it that no run of synth wrote."""
    token = secrets.token_hex(4)
    tmp: Path | None = folder.parent / f".{folder.name}.tmp-{os.getpid()}-{token}"
    foreign: list[str] = []
    try:
        tmp.mkdir()
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                rel = f"{name}/{p.name}"
                if rel in gone and rel not in others:
                    continue
                if rel not in others and rel not in files:
                    foreign.append(p.name)
                if rel in files:
                    continue
                target = tmp / p.name
                if p.is_dir() and not p.is_symlink():
                    shutil.copytree(p, target, symlinks=True)
                else:
                    try:
                        os.link(p, target, follow_symlinks=False)
                    except OSError:
                        shutil.copy2(p, target, follow_symlinks=False)
        for rel, text in sorted(files.items()):
            atomic_write(folder.parent / tmp.name / Path(rel).relative_to(name), text)
        swapped.append((folder, swap_folder(tmp, folder, token, keep=True)))
        tmp = None      # swapped in; the old content is the backup now
    except OSError as exc:
        raise SynthError(f"cannot write '{folder}': {exc.strerror or exc}") from None
    finally:
        if tmp is not None and tmp.exists():
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp)
    return foreign


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False when the system cannot."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def swap_folder(tmp: Path, folder: Path, token: str, keep: bool = False) -> Path | None:
    """``tmp`` becomes ``folder`` in one rename where the system allows (renameat2 exchange),
    else in two (the old one renamed aside first). The old content is removed, or with ``keep``
    left where it now is, which is returned (None: there was no old folder)."""
    if not folder.exists():
        os.rename(tmp, folder)
        return None
    if exchange(tmp, folder):
        old = tmp
    else:
        old = folder.parent / f".{folder.name}.old-{os.getpid()}-{token}"
        os.rename(folder, old)
        os.rename(tmp, folder)
    if keep:
        return old
    shutil.rmtree(old, ignore_errors=True)
    return None


def _write_legacy_config(out: Path, runs: Mapping[str, Any]) -> list[str]:
    """``OUT/msccl_config.xml`` from every run's legacy files, at most
    :data:`MAX_LEGACY_ALGOS` of them (the runtime keeps no more per communicator): each run's
    range serving the largest sizes first, one run after another, then their next ranges; the
    notes name what is left out. No legacy file: no config (a stale one is removed)."""
    per_run = [[LegacyEntry(**e) for e in reversed(run.get("legacy", []))]
               for _, run in sorted(runs.items()) if run.get("legacy")]
    path = out / CONFIG_FILE
    if not per_run:
        if path.exists() and any(CONFIG_FILE in _files_of(r) for r in runs.values()):
            path.unlink()
        return []
    order: list[LegacyEntry] = []
    depth = max(len(r) for r in per_run)
    for i in range(depth):
        order += [r[i] for r in per_run if i < len(r)]
    kept, dropped = order[:MAX_LEGACY_ALGOS], order[MAX_LEGACY_ALGOS:]
    for e in kept:
        if any(ch in str(out / e.path) for ch in '"<>&\t\n\r'):
            raise SynthError(f"the path '{out / e.path}' contains a character MSCCL_CONFIG cannot "
                             "hold")
    lines = [f'  <load path="{out / e.path}" minbytes="{e.lo}" maxbytes="{e.hi + 1 if e.hi else -1}"'
             f' proto="{e.proto}"/>\n' for e in sorted(kept, key=lambda e: (e.path, e.lo))]
    atomic_write(path, "<msccl_algos>\n" + "".join(lines) + "</msccl_algos>\n")
    if not dropped:
        return []
    return [f"{CONFIG_FILE} lists {len(kept)} of {len(order)} legacy files: microsoft/msccl keeps "
            f"at most {MAX_LEGACY_ALGOS} algorithms per communicator (MSCCL_MAX_NUM_ALGOS), so "
            f"{', '.join(Path(e.path).name for e in dropped)} "
            f"{'is' if len(dropped) == 1 else 'are'} left out (their sizes run NCCL's own)"]


NEURON_LAUNCH = ("torchrun --nproc_per_node={ranks}{nodes} {module}   # torch-neuronx: one "
                 "process per NeuronCore; the module checks itself (add sizes in bytes); in a job: "
                 "import it and call run(tensors) on every rank")
"""How a torch-neuronx module runs: torchrun with one process per NeuronCore (32 on trn1.32xlarge,
64 on trn2.48xlarge at LNC=2; ``--nnodes/--node_rank/--master_addr/--master_port`` for several
instances), the 'xla' process group over PJRT, torch-xla's only runtime (AWS Neuron docs, "PyTorch
Neuron programming guide": ``torchrun --nproc_per_node=32``; "Introducing PyTorch 2.x": PJRT is the
sole Torch-XLA runtime, its device found automatically)."""
JAX_LAUNCH = "python {module} [bytes]   # JAX: run(tensors, mesh) on global arrays; main checks one size"


def runtime_lines(out: Path, folders: Sequence[str], modules: Sequence[Path] = (),
                  ranks_per_node: int = 0, nodes: int = 1) -> list[str]:
    """The environment each runtime needs to load what is in ``folders`` (relative to ``out``);
    ``modules``: the program files of the ``neuron``/``jax`` folders, with the ranks per node and
    the nodes their launch needs."""
    out = Path(os.path.abspath(out))
    lines = []
    for module in modules:
        folder = Path(module).parent.name
        if folder == NEURON_FOLDER and not Path(module).stem.endswith("_nki"):
            multi = (f" --nnodes={nodes} --node_rank=<i> --master_addr=<node 0> --master_port=<port>"
                     if nodes > 1 else "")
            lines.append(NEURON_LAUNCH.format(ranks=ranks_per_node, nodes=multi, module=module))
        elif folder == JAX_FOLDER:
            lines.append(JAX_LAUNCH.format(module=module))
    if XML_FOLDERS["exec"] in folders:
        lines.append(f"NCCL_MSCCL_ENABLE=1 MSCCL_ALGO_DIR={out / XML_FOLDERS['exec']}   "
                     "# msccl-executor-nccl (MSCCL_ENABLE is on by default there)")
    if XML_FOLDERS["rccl"] in folders:
        lines.append(f"RCCL_MSCCL_ENABLE=1 MSCCL_ALGO_DIR={out / XML_FOLDERS['rccl']}   # RCCL")
    if XML_FOLDERS["legacy"] in folders:
        lines.append(f"NCCL_ALGO=MSCCL,RING,TREE MSCCL_CONFIG={out / CONFIG_FILE}   "
                     "# microsoft/msccl")
    if PLAN_FOLDER in folders:
        lines.append(f"MSCCLPP_EXECUTION_PLAN_DIR={out / PLAN_FOLDER} MSCCLPP_ENABLE_NCCL_FALLBACK="
                     "TRUE LD_PRELOAD=<mscclpp>/lib/libmscclpp_nccl.so   # MSCCL++'s NCCL shim")
    return lines

