"""Per-cluster catalogs (``synth catalog``): the pipeline is :mod:`synth.catalog.build`.

The package itself imports nothing heavy, so a rerun whose inputs did not change
(:mod:`synth.catalog.cache`, :func:`synth.catalog.output.write_files`) starts in a fraction of a
second; the names of :mod:`.build` (``build_catalog``, ``CatalogResult`` ...) are loaded from it
on first use.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from . import build

    try:
        return getattr(build, name)
    except AttributeError:
        raise AttributeError(f"module 'synth.catalog' has no attribute {name!r}") from None
