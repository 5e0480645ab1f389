"""Python's cyclic garbage collector held off while a phase builds or walks millions of objects.

The collector runs whenever allocations outnumber deallocations by its threshold, and each run
traces the objects of the generations it collects; every few runs it traces every live object.
The compiler, the interpreter and the program model's simulator allocate and keep millions of
small objects (a dgx_a100 x 8 ``trees`` file: about 500,000 steps), so the collector traced the
same live objects thousands of times while finding nothing to free: on that file's proof, 5,203
collections freed 0 objects and took 2.3 of its 9.6 s; on its simulation at 256 MiB, 28% of the
time. Those phases make no cyclic garbage of their own (the compiler unlinks its op graphs,
:class:`synth.emit.passes.Graphs`), so the collector is paused while they run and runs once
when they are over (it then finds nothing: 0 objects on both, in 0.2 s).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the ``with`` body, back on after it if it was on (a nested
    pause leaves it to the outer one)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
