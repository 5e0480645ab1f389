"""Write a catalog folder as a whole: built beside the target, then swapped in atomically.

Layout of ``OUT``::

    msccl-algorithms/   the winners' XML files (executor/RCCL profile): MSCCL_ALGO_DIR; none for
                        sizes left to NCCL (synth.select.nccl.with_nccl)
    legacy/             their legacy-profile twins, listed by msccl_config.xml
    msccl_config.xml    MSCCL_CONFIG for microsoft/msccl (absolute paths: the runtime opens them
                        relative to the job's working directory otherwise)
    catalog.json        every candidate, its knobs, predicted times, verification, cache keys
    catalog.md          the table a person reads
    plots/<coll>.png    algorithm bandwidth vs size, envelope highlighted
    mscclpp-plans/      with ``--format mscclpp``: each XML's twin as a verified MSCCL++ execution
                        plan (same schedule, protocol, instances; the range as min/max_message_size)
    maps/               with ``--group``: each XML's group rank -> global rank map

The XML files live in their own folder because the executor runtimes parse *every* file in
``MSCCL_ALGO_DIR`` and abort initialisation on one they cannot parse (spec §0).

**Atomicity.** Everything is written into ``.OUT.tmp-<pid>-<random>`` in the same parent folder,
then exchanged with ``OUT`` by ``renameat2(RENAME_EXCHANGE)`` — one atomic step, so a reader or a
crash sees the old catalog or the new one, never a mix or nothing — and the old one (now under the
temporary name) is removed. Without ``RENAME_EXCHANGE`` (not Linux, old kernel or filesystem) the
old folder is renamed aside first and the new one renamed in (two steps; a crash between them
leaves the old catalog complete under ``.OUT.old-...``, which the next run puts back). Temporary
folders of processes that died (killed mid-run) are removed by the next run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SynthError
from ..files import check_writable_dir, ensure_writable_dir
from ..groups import Group, rank_maps

if TYPE_CHECKING:
    from .build import CatalogResult

MARKER = "catalog.json"
"""A folder holding this file is a catalog and may be replaced as a whole."""


def check_out_dir(out: Path) -> Path:
    """The absolute output folder, after proving it can be (re)placed; nothing is written or
    created (:func:`write_catalog` creates the parent folders when it writes)."""
    out = Path(os.path.abspath(out))
    check_writable_dir(out)
    check_writable_dir(out.parent)  # the folder is replaced by a rename inside its parent
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise SynthError(f"output path '{out}' exists and is not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise SynthError(f"refusing to replace '{out}': it is not empty and holds no {MARKER} "
                             "(not a synth catalog); choose another --out")
        if not os.access(out, os.W_OK | os.X_OK):
            raise SynthError(f"output folder '{out}' is not writable")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out: Path) -> None:
    """Remove leftovers of killed runs; put an aside-renamed old catalog back if ``out`` is gone."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(tmp|old)-(\d+)-[0-9a-f]+$")
    for p in sorted(out.parent.iterdir()):
        m = pattern.match(p.name)
        if not m or not p.is_dir() or _alive(int(m.group(2))):
            continue
        if m.group(1) == "old" and not out.exists() and (p / MARKER).is_file():
            os.rename(p, out)
        else:
            shutil.rmtree(p, ignore_errors=True)


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode, **({} if isinstance(data, bytes) else {"encoding": "utf-8", "newline": "\n"})) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def render(result: CatalogResult, out: Path, group: Group | None = None
           ) -> dict[str, str | bytes]:
    """Every file of the catalog (relative path -> content), nothing written yet; with a process
    ``group``, each XML's group rank -> global rank map in ``maps/`` (never beside the XML: the
    executor runtimes parse every file in ``MSCCL_ALGO_DIR``)."""
    from ..outputs.layout import MAP_FOLDER
    from .plot import plot_collective  # matplotlib: not loaded by a warm rerun (write_files)
    from .report import (
        CONFIG_FILE,
        LEGACY_DIR,
        PLAN_DIR,
        PLOT_DIR,
        XML_DIR,
        catalog_json,
        catalog_md,
        dumps,
        xml_name,
    )

    files: dict[str, str | bytes] = {}
    config_paths: dict[str, str] = {}
    loads: list[str] = []
    for cr in result.results:
        for i, e in enumerate(cr.emitted):
            name = xml_name(cr.kind, i, e.range.config)
            files[f"{XML_DIR}/{name}"] = e.exec_xml
            if e.plan_json is not None:
                files[f"{PLAN_DIR}/{name.removesuffix('.xml')}.json"] = e.plan_json
            if e.legacy_xml is not None:
                files[f"{LEGACY_DIR}/{name}"] = e.legacy_xml
                config_paths[name] = f"{LEGACY_DIR}/{name}"
                loads.append(f'  <load path="{out / LEGACY_DIR / name}" minbytes="{e.range.lo}" '
                             f'maxbytes="{e.range.hi + 1}" proto="{e.range.config.proto}"/>')
    if any(c in str(out) for c in '"<>&\t\n\r'):
        raise SynthError(f"the catalog path '{out}' contains a character MSCCL_CONFIG cannot hold")
    files[CONFIG_FILE] = "<msccl_algos>\n" + "".join(line + "\n" for line in loads) + "</msccl_algos>\n"
    data = catalog_json(result, XML_DIR, config_paths)
    files["catalog.json"] = dumps(data)
    files["catalog.md"] = catalog_md(result, data, str(out))
    for cr in result.results:
        title = (f"{cr.kind} on {result.topology.name} ({result.topology.num_ranks} ranks): "
                 "predicted algorithm bandwidth")
        files[f"{PLOT_DIR}/{cr.kind}.png"] = plot_collective(
            cr, result.buckets, title, [c.time_us for c in cr.nccl] if cr.nccl is not None else None)
    if group is not None:
        xml = [rel for rel in files if rel.endswith(".xml")]
        files.update({f"{MAP_FOLDER}/{name}": text for name, text in rank_maps(xml, group).items()})
    return files


def write_catalog(result: CatalogResult, out: Path, group: Group | None = None) -> list[Path]:
    """Write the catalog folder atomically (module docstring); returns the files, sorted."""
    out = check_out_dir(out)
    return write_files(render(result, out, group), out)


def write_files(files: dict[str, str | bytes], out: Path) -> list[Path]:
    """Write a rendered catalog folder (:func:`render`'s mapping, or the one a warm rerun takes
    from the cache) atomically in place of ``out``; returns the files, sorted."""
    out = check_out_dir(out)
    ensure_writable_dir(out.parent)
    clean_stale(out)
    from ..outputs.layout import swap_folder  # loads synth.outputs: only when writing

    token = secrets.token_hex(4)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{token}"
    try:
        tmp.mkdir()
        for rel, content in sorted(files.items()):
            _write(tmp / rel, content)
        swap_folder(tmp, out, token)
    except OSError as exc:
        raise SynthError(f"cannot write the catalog '{out}': {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp)
    return sorted(out / rel for rel in files)
