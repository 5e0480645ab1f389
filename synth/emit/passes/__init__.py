"""Compiler passes from a :class:`~synth.schedule.Schedule` to MSCCL-IR (MSCCLang, ASPLOS'23).

Each pass is a small function over one IR (:mod:`.ir`), one module per pass;
:mod:`synth.emit.compile` chains them::

    lower        Schedule -> Dag     per-rank send / recv / copy ops on buffer cells: the buffer
                                     layout (input ``i``, output ``o``, scratch ``s``) and liveness
    fuse         Dag -> Dag          a receive and the next step's send of the same value become
                                     one op: rcs (copy), rrs / rrcs (reduce, without / with store)
    agreement    Ir                  fused copies whose two message ends could not carry the same
                                     fields (spec E2) are split again (:func:`disagreements`)
    aggregate    Dag -> Ir           ops of chunks that travel the same route in the same steps and
                                     sit in contiguous cells at every hop become one op, cnt > 1
    order        Ir                  one global order every threadblock follows (FIFO-consistent)
    hazards      Ir                  same-rank data dependencies (RAW, WAR, WAW) on physical cells
    allocate     Ir -> threadblocks  channels per route, one tb per (send peer, recv peer, channel)
                 (allocate_connections, for a program over a limit: unfused, each connection's
                 ops in runs over as few channels as its length needs)
    progress     Ir                  a sufficient deadlock-freedom check under the FIFO model
    dependencies Ir -> tb step lists depid / deps / hasdep, extra dependencies as nops (a fused
                                     ``re`` run waits once, at its first op)
    replicate    tb step lists       ``instances`` copies on their own channels, chunks subdivided

Semantics carried over from the schedule (``synth.verify``): all transfers of a step read the
state at the start of the step and write at its end; each (rank, chunk) is one *slot* whose
successive values are *versions*. A version lives in one cell; the layout pass picks the cell so
that a program is correct with ``i``, ``o``, ``s`` disjoint (out-of-place) and, for the in-place
modes, under the runtime's aliasing (spec §3.4): writes go to the output cell of the chunk or to
scratch, never to the input buffer; a value still read in the step that overwrites it moves to a
second cell (so no step waits on a send of the same step); an output cell whose aliased input cell
holds a live value of another chunk (in-place alltoall) is written through scratch and copied
later.

Deadlock freedom (spec §5.3). Threadblocks run their ops in the global order: per step, initial
copies, then plain sends, then receives (sorted per receiving rank by sending peer, then by message
order), then final copies. A fused op's send happens at its receive. The ``progress`` pass executes
that order abstractly, op by op, with FIFOs of ``capacity`` messages and ``ceil(cnt / M)`` messages
per op; a plain send streams into a receiver that can run at that moment. An op that would block
is a violation; the driver then un-fuses the ops involved and recompiles. Without fused ops every
threadblock is send-only or receive-only and the check always passes (each receive's dependencies
are on earlier steps or on sends the order already completed), so the loop terminates with a
program that makes progress with any FIFO capacity.
"""

from .aggregate import aggregate
from .agreement import disagreements
from .allocate import PAIR_SETS, allocate, allocate_connections, pack
from .dependencies import dependencies, renumber
from .fuse import fuse
from .hazards import hazards
from .ir import (
    ALIASED_KINDS,
    BOTH,
    BUFFERS,
    CELL,
    IN,
    INF,
    INPLACE,
    LOCAL_OPS,
    MAX_COUNT,
    MAX_REDUCE_FUSION,
    MODES,
    OOP,
    OUT,
    SCRATCH,
    Copy,
    Dag,
    Graphs,
    IOp,
    Ir,
    Recv,
    Reduce,
    Send,
    Tb,
    physical,
)
from .lower import lower
from .order import order
from .progress import progress, progress_any_order, units_params
from .replicate import consistent_groups, replicate, split_bundles

__all__ = [
    "ALIASED_KINDS", "BOTH", "BUFFERS", "CELL", "IN", "INF", "INPLACE", "LOCAL_OPS", "MAX_COUNT",
    "MAX_REDUCE_FUSION", "MODES", "OOP", "OUT", "PAIR_SETS", "SCRATCH", "Copy", "Dag", "Graphs",
    "IOp", "Ir", "Recv", "Reduce", "Send", "Tb", "aggregate",
    "allocate", "allocate_connections", "consistent_groups", "dependencies", "disagreements", "fuse",
    "hazards", "lower", "order", "pack", "physical", "progress", "progress_any_order", "renumber",
    "replicate", "split_bundles", "units_params",
]
