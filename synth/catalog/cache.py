"""The solve cache: content-addressed schedules, so an unchanged catalog re-solves nothing.

A solve is one call of a registered encoding on (topology, collective, options). Its key is the
SHA-256 of everything its result can depend on:

* **code** — :func:`code_fingerprint`: the synth version and the bytes of every encoding module,
  every shipped sketch (the MILP encoding reads them) and the core modules schedules are built from
  (collectives, schedule, cost, topology, builders, verify). Any edit there re-solves everything:
  coarse, but never stale.
* **topology** — :func:`topology_key`. For most encodings the full
  :attr:`~synth.topology.Topology.content_hash` (every α, β, count, lane, port). Encodings listed in
  :data:`STRUCTURAL_ENCODINGS` build their schedules from the machine's *structure* only, so they are
  keyed on it: ranks, links and their counts, switch ports with their ranks, lanes and domains,
  nodes, NICs, ``meta`` (e.g. a torus shape), and which switch each rank pair's traffic takes —
  everything but the α and β values. The baselines are such (:mod:`synth.encodings.baseline.algorithms`:
  adjacency, BFS trees, Hamiltonian cycles that prefer staying inside a node, and rounds from
  :func:`synth.steps.make_step`, which counts chunks against link counts and port lanes; no α or β
  is read). The channel choice between two switches joining one pair *does* compare port β
  (:meth:`Topology.channel`), so the per-pair choice is part of the structure key whenever a pair
  is reachable through more than one switch (and a topology too large to list its pairs falls back
  to the full hash). Changing one link class's α/β therefore re-solves the α/β-aware encodings
  (trees, flow, smt, milp) and reuses every baseline.
* **collective** — its canonical dict (kind, ranks, chunks per rank, root, pre/postconditions).
* **options** — encoding, chunks per rank, time limit, and ``extra``; for ``milp`` also the sketch
  files named in ``extra`` by path (their bytes), beside the shipped ones in the code fingerprint.

Entries are JSON files ``<cache-dir>/solves/<key[:2]>/<key>.json`` written atomically. Results
that depend only on their inputs are stored: schedules, "not applicable", and input errors. A crash
inside an encoding (a bug) is not stored, so the next run tries again. A cached schedule is
re-verified against the current topology every time it is used (:mod:`synth.catalog.candidates`).

Interpreter-verified XML is stored the same way under ``xml/`` (:func:`xml_key`): keyed by the
schedule's exact bytes, the emission options (profile, protocol, instances, byte range) and the
sources of the compiler and the interpreter (:func:`emit_fingerprint`). Compiling and executing a
file is a deterministic function of exactly those, so a stored verdict is the verdict a rerun
would reach; the stored text is checked against its SHA-256 before use. ``--no-xml-cache``
re-runs every emission and interpretation.

A whole catalog is stored too, under ``catalogs/`` (:func:`catalog_key`): the SHA-256 of every
file of the folder (the bytes themselves under ``blobs/``, content-addressed, so runs share them)
and the lines ``synth catalog`` printed, keyed by everything the folder can depend on -- the bytes
of every synth source and shipped data file (:func:`package_fingerprint`), the versions of the
solver and numeric libraries, the topology (its content hash, name and meta), the request (spec,
collectives, sizes, tuner, seed, time limit, memory budget, format), the calibration file's bytes
and the output path (``msccl_config.xml`` holds absolute paths). A rerun whose inputs did not change
(the warm rerun of a cluster's catalog) writes that folder again without solving, tuning,
compiling or timing anything: every file in it was verified by the run that stored it, and that
run's inputs are this run's. A run with a failed solve (not cached, so retried) is not stored.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import SynthError
from ..files import atomic_write
from ..topology import Topology

CACHE_FORMAT = "synth-catalog-solve/1"
XML_FORMAT = "synth-catalog-xml/1"
RUN_FORMAT = "synth-catalog-run/1"
FORMATS = {"solves": CACHE_FORMAT, "xml": XML_FORMAT, "compiled": XML_FORMAT,
           "catalogs": RUN_FORMAT}
"""The format tag of each section of the cache."""
LIBRARIES = ("highspy", "ortools", "z3-solver", "pulp", "networkx", "numpy", "scipy", "lxml",
             "matplotlib", "optuna")
"""Distributions whose release can change a catalog's bytes (solvers' incumbents, numerics,
plots): part of :func:`package_fingerprint`."""
STRUCTURAL_ENCODINGS = frozenset({"baseline"})
"""Encodings whose schedules depend on the topology's structure, not its α/β values."""
MAX_PAIRS_FOR_STRUCTURE = 1 << 18
"""Beyond this many rank pairs the per-pair channel signature is not listed (full hash instead)."""
_SYNTH_ROOT = Path(__file__).resolve().parent.parent
_CODE_DIRS = ("encodings", "sketches")
_CODE_FILES = ("collectives.py", "schedule.py", "steps.py", "sizes.py", "timing/lockstep.py",
               "topology.py", "builders.py", "verify.py", "errors.py")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/synth``, else ``~/.cache/synth``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "synth"


@cache
def code_fingerprint(dirs: tuple[str, ...] = _CODE_DIRS, files: tuple[str, ...] = _CODE_FILES) -> str:
    """SHA-256 over the synth version and the source files (under ``synth/``) a result depends on."""
    h = hashlib.sha256(f"synth {__version__}\n".encode())
    paths: list[Path] = []
    for d in dirs:
        paths += [p for p in (_SYNTH_ROOT / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")]
    paths += [_SYNTH_ROOT / f for f in files]
    for p in sorted(paths, key=lambda q: q.relative_to(_SYNTH_ROOT).as_posix()):
        rel = p.relative_to(_SYNTH_ROOT).as_posix()
        h.update(f"{rel}\n".encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


@cache
def package_fingerprint() -> str:
    """SHA-256 over every file of the synth package (sources and shipped data) and the releases
    of :data:`LIBRARIES`: what a whole catalog run depends on besides its request."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(f"synth {__version__}\n".encode())
    for p in sorted((q for q in _SYNTH_ROOT.rglob("*") if q.is_file() and "__pycache__" not in
                     q.parts and not q.name.endswith(".pyc")),
                    key=lambda q: q.relative_to(_SYNTH_ROOT).as_posix()):
        h.update(f"{p.relative_to(_SYNTH_ROOT).as_posix()}\n".encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    for dist in LIBRARIES:
        try:
            release = version(dist)
        except PackageNotFoundError:
            release = "-"
        h.update(f"{dist}=={release}\n".encode())
    return h.hexdigest()


def catalog_key(topology: Topology, request: dict[str, Any], calibration: Path | None) -> str:
    """The cache key of a whole catalog run (module docstring): ``request`` holds the CLI's
    resolved choices (spec, collectives, sizes, tuner, seed, time limit, memory budget, format,
    output path)."""
    cal = hashlib.sha256(calibration.read_bytes()).hexdigest() if calibration is not None else None
    return _digest({"format": RUN_FORMAT, "code": package_fingerprint(),
                    "topology": [topology.content_hash, topology.name, list(map(list, topology.meta))],
                    "request": request, "calibration": cal})


def emit_fingerprint() -> str:
    """The sources a verified XML file depends on: the compiler, printer, parser and interpreter
    (``synth/emit``) and the collective/schedule model they read."""
    return code_fingerprint(("emit",), ("collectives.py", "schedule.py", "errors.py"))


def xml_key(schedule_json: str, options: dict[str, Any]) -> str:
    """The cache key of one interpreter-verified emission: the schedule's bytes, the options."""
    return _digest({"format": XML_FORMAT, "code": emit_fingerprint(),
                    "schedule": hashlib.sha256(schedule_json.encode()).hexdigest(),
                    "options": options})


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"),
                                     default=str).encode()).hexdigest()


def structure_hash(topology: Topology) -> str:
    """Hash of the topology without its α/β values (module docstring: what is kept and why)."""
    data = topology.to_dict()
    for key in ("name", "description", "sources"):
        data.pop(key, None)
    for link in data["links"]:
        link.pop("alpha_us")
        link.pop("beta_us_per_mb")
    for sw in data["switches"]:
        sw.pop("alpha_us")
        for port in sw["ports"]:
            port.pop("beta_us_per_mb")
    for nic in data["nics"]:
        nic.pop("alpha_us")
        nic.pop("beta_us_per_mb")
    ambiguous = _pairs_with_several_switches(topology)
    if ambiguous is None:
        return topology.content_hash
    data["channels"] = [[a, b, topology.channel(a, b).via] for a, b in ambiguous]  # type: ignore[union-attr]
    return _digest(data)


def _pairs_with_several_switches(topology: Topology) -> list[tuple[int, int]] | None:
    """Rank pairs without a direct link that two or more switches join (None: too many to list)."""
    ports: dict[int, dict[int, list]] = {r: {} for r in topology.ranks}  # rank -> switch -> ports
    for s, sw in enumerate(topology.switches):
        for port in sw.ports:
            for r in port.ranks:
                ports[r].setdefault(s, []).append(port)
    if all(len(v) <= 1 for v in ports.values()):
        return []
    n = topology.num_ranks
    if n * n > MAX_PAIRS_FOR_STRUCTURE:
        return None
    direct = {(lk.src, lk.dst) for lk in topology.links}
    out = []
    for a in range(n):
        mine = ports[a]
        for b in range(n):
            if a == b or (a, b) in direct:
                continue
            theirs = ports[b]
            shared = sum(1 for s in mine.keys() & theirs.keys()
                         if any(x.reaches(y) for x in mine[s] for y in theirs[s]))
            if shared > 1:
                out.append((a, b))
    return out


def topology_key(topology: Topology, encoding: str) -> str:
    """The topology part of a solve key: structure only for :data:`STRUCTURAL_ENCODINGS`."""
    if encoding in STRUCTURAL_ENCODINGS:
        return "structure:" + structure_hash(topology)
    return "content:" + topology.content_hash


def solve_key(topology: Topology, collective: dict[str, Any], encoding: str, chunks: int | None,
              time_limit_s: float | None, extra: dict[str, Any] | None = None) -> str:
    """The cache key of one solve (module docstring)."""
    extra = dict(extra or {})
    sketch_bytes = None
    if encoding == "milp" and isinstance(extra.get("sketch"), str) and Path(extra["sketch"]).is_file():
        sketch_bytes = hashlib.sha256(Path(extra["sketch"]).read_bytes()).hexdigest()
    return _digest({"format": CACHE_FORMAT, "code": code_fingerprint(),
                    "topology": topology_key(topology, encoding), "collective": collective,
                    "encoding": encoding, "chunks": chunks, "time_limit_s": time_limit_s,
                    "extra": extra, "sketch": sketch_bytes})


@dataclass(frozen=True)
class SolveCache:
    """The on-disk store under ``root``: ``solves/``, ``xml/``, ``compiled/``, ``catalogs/`` and
    ``blobs/`` (created when first written)."""

    root: Path

    def path(self, key: str, section: str = "solves") -> Path:
        return self.root / section / key[:2] / f"{key}.json"

    def get(self, key: str, section: str = "solves") -> dict[str, Any] | None:
        """The stored record, or None (missing or unreadable entries are misses)."""
        fmt = FORMATS[section]
        p = self.path(key, section)
        try:
            data = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("format") != fmt or data.get("key") != key:
            return None
        return data

    def put_files(self, files: dict[str, str | bytes]) -> dict[str, str]:
        """Store each file's bytes under ``blobs/`` by its SHA-256; returns path -> digest."""
        digests: dict[str, str] = {}
        for rel, data in sorted(files.items()):
            raw = data.encode() if isinstance(data, str) else data
            digest = hashlib.sha256(raw).hexdigest()
            p = self.path(digest, "blobs").with_suffix("")
            if not p.is_file():
                self._mkdir(p.parent)
                atomic_write(p, raw)
            digests[rel] = digest
        return digests

    def get_files(self, digests: Any) -> dict[str, bytes] | None:
        """The files :meth:`put_files` stored (each checked against its digest), or None when one
        is missing, damaged or ``digests`` is not such a mapping (a miss)."""
        if not isinstance(digests, dict):
            return None
        files: dict[str, bytes] = {}
        for rel, digest in digests.items():
            if not isinstance(rel, str) or not isinstance(digest, str) or len(digest) != 64:
                return None
            try:
                raw = self.path(digest, "blobs").with_suffix("").read_bytes()
            except OSError:
                return None
            if hashlib.sha256(raw).hexdigest() != digest:
                return None
            files[rel] = raw
        return files

    def _mkdir(self, folder: Path) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SynthError(f"cannot create cache folder '{folder}': {exc.strerror or exc} "
                             "(choose another with --cache-dir)") from None

    def put(self, key: str, record: dict[str, Any], section: str = "solves") -> None:
        fmt = FORMATS[section]
        p = self.path(key, section)
        self._mkdir(p.parent)
        atomic_write(p, json.dumps({**record, "format": fmt, "key": key}, sort_keys=True) + "\n")


def check_cache_dir(root: Path) -> Path:
    """Fail early, with the option to change, when the cache folder cannot be used."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SynthError(f"cannot create cache folder '{root}': {exc.strerror or exc} "
                         "(choose another with --cache-dir)") from None
    if not root.is_dir() or not os.access(root, os.W_OK | os.X_OK):
        raise SynthError(f"cache folder '{root}' is not a writable folder (choose another with "
                         "--cache-dir)")
    return root
