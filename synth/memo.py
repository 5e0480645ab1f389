"""Results remembered per object, by identity: for arguments that are not hashable (a schema dict,
a program layout) or whose hash costs a pass over them (a file's text, hashed by SHA-256 next).

An entry holds its object as well as the result, so the object's ``id`` cannot be reused by
another object while the entry lives, and a hit is checked with ``is``. The table is emptied
when it grows past its limit: the callers ask about a few objects many times in a row (the file
being timed, the format's schema), not about many objects in turn.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TypeVar

Arg = TypeVar("Arg")
Result = TypeVar("Result")


def by_identity(limit: int) -> Callable[[Callable[[Arg], Result]], Callable[[Arg], Result]]:
    """Decorator: ``f(obj)`` computed once per object while it is remembered (at most ``limit``
    + 1 objects; past that, all are forgotten)."""
    def decorate(f: Callable[[Arg], Result]) -> Callable[[Arg], Result]:
        entries: dict[int, tuple[Arg, Result]] = {}

        @wraps(f)
        def remembered(obj: Arg) -> Result:
            hit = entries.get(id(obj))
            if hit is not None and hit[0] is obj:
                return hit[1]
            if len(entries) > limit:
                entries.clear()
            result = f(obj)
            entries[id(obj)] = (obj, result)
            return result
        return remembered
    return decorate
