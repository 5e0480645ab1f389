"""Program-model times kept on disk, content-addressed, so reruns do not simulate again.

:func:`synth.timing.program.cached_times` remembers every simulated time in the process; a
:class:`TimingStore` keeps them across processes (a catalog's warm rerun, a second ``solve`` of the
same files). One entry holds every size timed so far for one (file, machine, figures) group:
``<root>/<key[:2]>/<key>.json``, written atomically, where ``key`` (:func:`group_key`) is the
SHA-256 of

* the file's text less its byte bounds (its SHA-256: :func:`text_digest`),
* the topology's :attr:`~synth.topology.Topology.content_hash` (every rank, link, port, α, β),
* the model's figures (:func:`model_figures`: protocol, floors, link scaling -- what a
  calibration changes),
* the runtime profile (it decides the slicing), and
* the simulator's code (:func:`code_fingerprint`: the sources a time depends on), so an edit to
  the simulator never reads a stale time.

The same pattern as the catalog's solve cache (:mod:`synth.catalog.cache`); put it beside that
cache with :meth:`TimingStore.beside`. An unreadable or foreign entry is a miss.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..emit.xml_write import ALGO_BOUNDS
from ..errors import SynthError
from ..files import atomic_write
from .program_machine import ProgramModel

FORMAT = "synth-program-times/2"
"""Bumped when a key's meaning changes (2: the text's byte bounds left out of its digest)."""
_SYNTH_ROOT = Path(__file__).resolve().parent.parent
_CODE = ("timing/program_machine.py", "timing/fair_share.py", "emit/interpreter.py",
         "emit/interp_fold.py", "emit/xml_parse.py", "emit/runtimes.py", "topology.py")
"""What a simulated time depends on besides its key's inputs: the machine, the fair sharing, the
folding of blocks and the runtime constants (interpreter), the parser, the runtimes' profiles,
channels."""


@cache
def code_fingerprint() -> str:
    """SHA-256 over the synth version and the simulator's sources (:data:`_CODE`)."""
    h = hashlib.sha256(f"synth {__version__}\n".encode())
    for rel in _CODE:
        path = _SYNTH_ROOT / rel
        h.update(f"{rel}\n".encode())
        if path.exists():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def text_digest(text: str) -> str:
    """SHA-256 of a program's text less the ``minBytes``/``maxBytes`` of its ``<algo>`` tag (its
    identity in every timing key).

    Why the bounds are left out: they only say at which sizes a runtime selects the file (spec
    §3.1); the simulation never reads them (:mod:`.program_machine`), so a range's file -- the
    compile the scorer timed with only its bounds set (:func:`synth.emit.variants.program_for_sizes`)
    -- has that compile's times to the bit and is not simulated again. Measured on ``synth solve
    --topo dgx_a100 --nodes 8 --coll allgather``: the report timed every range's in-place file
    anew after the scorer had, 54 s of the solving process's CPU (``trees`` Simple x1 at five
    sizes: 40 s)."""
    end = text.find(">") + 1 if text.startswith("<algo ") else 0
    h = hashlib.sha256(ALGO_BOUNDS.sub("", text[:end]).encode())
    h.update(text[end:].encode())
    return h.hexdigest()


def model_figures(model: ProgramModel) -> tuple:
    """Every figure of ``model`` a simulated time depends on (not its ``source`` text)."""
    p = model.proto
    return (p.name, p.efficiency, p.launch_us, p.hop_intra_us, p.hop_inter_us, p.channel_GBps,
            p.chunk_bytes, model.launch_us, model.step_us, model.exposed_receive,
            model.cut_through, model.nvlink_efficiency, model.reduce_streams)


def group_key(digest: str, topology_hash: str, figures: tuple, profile: str) -> str:
    """The on-disk key of one (file, topology, figures, profile) group (module docstring)."""
    blob = json.dumps({"format": FORMAT, "code": code_fingerprint(), "program": digest,
                       "topology": topology_hash, "model": [repr(x) for x in figures],
                       "profile": profile}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class TimingStore:
    """Simulated times under ``root``: one JSON file per group, ``{"times": {bytes: µs}}``."""

    root: Path

    @classmethod
    def beside(cls, cache_root: Path) -> TimingStore:
        """The store in a solve cache's folder (``<cache>/timings``)."""
        return cls(Path(cache_root) / "timings")

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[int, float]:
        """The sizes timed so far in group ``key`` ({} when none: missing or unreadable)."""
        try:
            data = json.loads(self.path(key).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
            return {}
        times = data.get("times")
        if not isinstance(times, dict):
            return {}
        try:
            return {int(n): _as_time(t) for n, t in times.items()}
        except (TypeError, ValueError):
            return {}

    def put(self, key: str, times: dict[int, float]) -> None:
        """Store ``times`` (merged with what the group holds already)."""
        merged = {**self.get(key), **times}
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SynthError(f"cannot create timing cache folder '{path.parent}': "
                             f"{exc.strerror or exc}") from None
        doc: dict[str, Any] = {"format": FORMAT, "key": key,
                               "times": {str(n): _to_json(t) for n, t in sorted(merged.items())}}
        atomic_write(path, json.dumps(doc, sort_keys=True) + "\n")


def _to_json(t: float) -> float | str:
    return t if math.isfinite(t) else "inf"


def _as_time(t: Any) -> float:
    if t == "inf":
        return math.inf
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise TypeError(t)
    return float(t)
