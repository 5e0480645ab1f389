"""Do both ends of every copy message name the same transfer? (spec E2, a portability rule)

The MSCCL runtimes read only the sender's source and the receiver's destination of a message; the
other fields of each end are ignored by them. Tools that check files pair a message's two ends
and compare all of them: the third-party MSCCL-XML-Verifier (github dromniscience/MSCCL-XML-
Verifier, ``src/common/threadblock.cpp`` @ 22944ea) rejects a receive whose
``srcbuf/srcoff/dstbuf/dstoff/cnt`` differ from the sender's ("Message mismatch"), forwards an
``rcs`` message as ``(dst, dst)``, and rejects an ``rcs`` whose ``src`` and ``dst`` differ
(``src/common/instructions.cpp``). synth's compiler makes its files agree
(:func:`synth.emit.passes.disagreements`); this module checks any :class:`Program` for it, so a
regression is caught on every emitted file.

Scope, per message of a connection (the i-th send-type step of the sending block is received by
the i-th receive-type step of the receiving block, spec §5.3): the receive is an ``r`` or an
``rcs`` (reduce receives use ``src`` as their local operand, spec §4.1, and the VERIFIER has no
reduce steps). The message carries ``(srcbuf, srcoff, dstbuf, dstoff, cnt)`` of an ``s``, and
``(dstbuf, dstoff, dstbuf, dstoff, cnt)`` of a forwarding ``rcs``, ``rrs`` or ``rrcs`` (the value
it stored, or would store, at ``dst``). Production files do not all follow the rule (the MSCCL
scheduler's ``ag_hier_4_LL.xml`` keeps the sender's ``i`` location in its ``rcs`` steps), so for
files synth did not write it is advice, not a verdict.
"""

from __future__ import annotations

from .program import Instr, Program

SEND_TYPES = frozenset(("s", "rcs", "rrs", "rrcs"))
RECV_TYPES = frozenset(("r", "rcs", "rrs", "rrc", "rrcs"))
CHECKED_RECEIVES = frozenset(("r", "rcs"))


def _fields(st: Instr) -> tuple[str, int, str, int, int]:
    return (st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt)


def message_fields(st: Instr) -> tuple[str, int, str, int, int]:
    """What a send-type step's message says about the transfer (module docstring)."""
    if st.type == "s":
        return _fields(st)
    return (st.dstbuf, st.dstoff, st.dstbuf, st.dstoff, st.cnt)


def _show(f: tuple[str, int, str, int, int]) -> str:
    return f"{f[0]}[{f[1]}] -> {f[2]}[{f[3]}] cnt {f[4]}"


def disagreements(program: Program, limit: int = 10) -> list[str]:
    """Messages whose two ends disagree, one line each (at most ``limit``, then a count)."""
    sent: dict[tuple[int, int, int], list[tuple[int, int, Instr]]] = {}
    received: dict[tuple[int, int, int], list[tuple[int, int, Instr]]] = {}
    issues: list[str] = []
    for g in program.gpus:
        for tb in g.tbs:
            for st in tb.steps:
                if st.type in SEND_TYPES and tb.send >= 0:
                    sent.setdefault((g.id, tb.send, tb.chan), []).append((tb.id, st.s, st))
                if st.type in RECV_TYPES and tb.recv >= 0:
                    received.setdefault((tb.recv, g.id, tb.chan), []).append((tb.id, st.s, st))
                if st.type == "rcs" and (st.srcbuf, st.srcoff) != (st.dstbuf, st.dstoff):
                    issues.append(f"[E2] rank {g.id} tb {tb.id} step {st.s}: rcs names two "
                                  f"locations ({st.srcbuf}[{st.srcoff}] and {st.dstbuf}"
                                  f"[{st.dstoff}]); it forwards from where it stores")
    for key in sorted(sent.keys() & received.keys()):
        a, b, chan = key
        for (stb, ss, snd), (rtb, rs, rcv) in zip(sent[key], received[key], strict=False):
            if rcv.type not in CHECKED_RECEIVES:
                continue
            want = message_fields(snd)
            if _fields(rcv) != want:
                issues.append(f"[E2] rank {a} -> rank {b} channel {chan}: rank {a} tb {stb} step "
                              f"{ss} ({snd.type}) sends {_show(want)} but rank {b} tb {rtb} step "
                              f"{rs} ({rcv.type}) says {_show(_fields(rcv))}")
    if len(issues) > limit:
        issues = [*issues[:limit], f"[E2] ... and {len(issues) - limit} more"]
    return issues
