"""What the message-agreement rule (spec E2) costs: the same schedules compiled with and without it.

synth's compiler makes both ends of every copy message name one transfer
(:func:`synth.emit.passes.disagreements`), as the third-party MSCCL-XML-Verifier (github
dromniscience/MSCCL-XML-Verifier @ 22944ea) demands. Where a forward cannot agree -- an alltoall
relay lands in scratch while its sender reads the input -- the fused ``rcs`` is split into a receive
and a send, which costs pipelining. This script compiles each case twice, out of place: as shipped,
and with that splitting switched off (the split pass returns nothing; the result is still a valid
program for the runtimes, which ignore those fields, and the interpreter checks it), and times both with
synth's timed program model (:mod:`synth.timing.program`) on the case's topology.

    python benchmarks/agreement.py            # writes results/agreement.{json,md}
"""

from __future__ import annotations

from harness import load_average, python_version, write_results

from synth.collectives import make_collective
from synth.emit import passes as P
from synth.emit.agreement import disagreements
from synth.emit.compile import compile_schedule
from synth.emit.interpreter import verify_program
from synth.encodings.baseline.algorithms import baseline
from synth.timing.program import program_times_us
from synth.topology_io import load_topology

SIZES = (2**10, 2**20, 2**28)
CASES = [  # (topology, collective, baseline algorithm, chunks per rank)
    ("dgx1", "allgather", "ring", 1),
    ("dgx1", "allgather", "recursive_doubling", 1),
    ("dgx1", "alltoall", "direct", 1),
    ("ring:6", "alltoall", "bidir_ring", 2),
    ("line:4", "alltoall", "direct", 1),
    ("torus:2x3", "alltoall", "direct", 1),
    ("hypercube:3", "alltoall", "direct", 1),
    ("ring:6", "allreduce", "ring", 1),
]
PROTOS = ("Simple", "LL")


def _count(program, typ: str) -> int:
    return sum(st.type == typ for g in program.gpus for tb in g.tbs for st in tb.steps)


def _compile(schedule, proto: str, agree: bool):
    real = P.disagreements
    if not agree:
        P.disagreements = lambda ir: []
    try:
        program = compile_schedule(schedule, proto=proto, inplace=False)
    finally:
        P.disagreements = real
    verify_program(program)     # both are valid for the runtimes
    return program


def main() -> None:
    rows = []
    for topo, kind, algo, k in CASES:
        topology = load_topology(topo)
        schedule = baseline(topology, make_collective(kind, topology.num_ranks, k), algo)
        for proto in PROTOS:
            agreed = _compile(schedule, proto, True)
            loose = _compile(schedule, proto, False)
            t_agreed = program_times_us(agreed, topology, SIZES)
            t_loose = program_times_us(loose, topology, SIZES)
            rows.append({
                "topology": topo, "collective": kind, "algorithm": algo, "chunks": k,
                "proto": proto,
                "rcs": {"without_rule": _count(loose, "rcs"), "with_rule": _count(agreed, "rcs")},
                "disagreeing_messages_without_rule": len(disagreements(loose, limit=10**9)),
                "time_us": {str(z): {"without_rule": round(a, 3), "with_rule": round(b, 3)}
                            for z, a, b in zip(SIZES, t_loose, t_agreed, strict=True)},
                "ratio": {str(z): round(b / a, 4) for z, a, b in zip(SIZES, t_loose, t_agreed,
                                                                      strict=True)},
            })
            print(f"{topo:12s} {kind:10s} {algo:18s} {proto:6s} rcs "
                  f"{rows[-1]['rcs']['without_rule']:3d} -> {rows[-1]['rcs']['with_rule']:3d}  "
                  + "  ".join(f"{r:.3f}" for r in rows[-1]["ratio"].values()))
    data = {"sizes": list(SIZES), "rows": rows, "load_average": load_average(),
            "python": python_version(),
            "model": "synth.timing.program (uncalibrated), out-of-place files, profile exec"}
    write_results("agreement", data, indent=2)
    lines = [
        "# The cost of message agreement (spec E2)",
        "",
        "Produced by `python benchmarks/agreement.py`. Each schedule is compiled out of place twice: "
        "with synth's agreement pass (both ends of every copy message carry the same "
        "`srcbuf/srcoff/dstbuf/dstoff/cnt`, as github dromniscience/MSCCL-XML-Verifier @ 22944ea "
        "requires) and with its splitting of forwards that cannot agree switched off (valid for the "
        "runtimes, which ignore the receiver's source fields; heads still read the output copy in "
        "both, which costs nothing measurable here). Both programs pass synth's interpreter. Times "
        "are synth's timed program model (uncalibrated) on the case's topology; *ratio* = with / "
        "without the rule (> 1: the rule costs time). *disagreeing* = messages the verifier would "
        "reject without the rule.",
        "",
        "| topology | collective (algorithm) | chunks | proto | rcs without → with | disagreeing "
        "| " + " | ".join(f"{z} B ratio" for z in SIZES) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(SIZES),
    ]
    for r in rows:
        lines.append(f"| {r['topology']} | {r['collective']} ({r['algorithm']}) | {r['chunks']} | "
                     f"{r['proto']} | {r['rcs']['without_rule']} → {r['rcs']['with_rule']} | "
                     f"{r['disagreeing_messages_without_rule']} | "
                     + " | ".join(f"{v:.3f}" for v in r["ratio"].values()) + " |")
    cells = [(v, r) for r in rows for v in r["ratio"].values()]
    worst, best = max(cells, key=lambda c: c[0]), min(cells, key=lambda c: c[0])
    lines += ["", f"Worst ratio {worst[0]:.3f} ({worst[1]['topology']} {worst[1]['collective']} "
              f"{worst[1]['algorithm']} {worst[1]['proto']}), best {best[0]:.3f} "
              f"({best[1]['topology']} {best[1]['collective']} {best[1]['algorithm']} "
              f"{best[1]['proto']}); {sum(v == 1.0 for v, _ in cells)} of {len(cells)} cells "
              f"unchanged. Load average during the run: {data['load_average']}."]
    write_results("agreement", markdown="\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
