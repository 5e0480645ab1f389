"""What a caller may ask of an encoding (:class:`Options`), in a module of its own so that the
encodings can import it without importing the registry that imports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Options:
    """What a caller may ask of an encoding. Encodings ignore what does not concern them."""

    algorithm: str | None = None
    chunks: int | None = None
    """Chunks per rank the user fixed; None lets each algorithm use its natural count."""
    time_limit_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
