"""Process groups alone and all at once: bounds and synthesized costs, isolated vs concurrent.

For each case, a partition of a multi-node machine into process groups (``synth solve
--concurrent``). Per group: its lower bound on the machine it induces alone, and with every
group of the partition running (the ports and NICs groups share divided among them,
:func:`synth.groups.concurrent`). For the first group, a schedule is synthesized twice -- for the
machine alone and for its share of the concurrent machine -- and both are costed on the concurrent
machine (the α-β step model at 1 GiB): what contention costs a schedule that ignores it, and what
synthesis for the shared machine recovers.

Cases: 8 data-parallel groups on 8 DGX H100 (one per rail: no NIC shared); the same on a
hypothetical DGX H100 variant whose 8 GPUs share ONE 400 Gb/s NIC (every group on the one rail);
8 stride groups on 8 DGX-1 (a NIC serves 2 GPUs, so groups pair up on NICs); 8 tensor-parallel
groups (one per node) on 8 DGX H100; on 2 DGX-1, a 4-rank group {0,2,8,10} whose NIC ib0 (GPUs
0-1) it shares with a group {1,9} while its NIC ib1 (GPUs 2-3) is its own: there a schedule
synthesized for the shared machine can move its traffic onto the unshared NIC.

    python benchmarks/groups.py            # writes results/groups.{json,md}
"""

from __future__ import annotations

from dataclasses import replace

from harness import python_version, stopwatch, write_results

from synth.bounds import lower_bound
from synth.builders import multinode
from synth.collectives import make_collective
from synth.groups import concurrent, induced, parse_partition
from synth.solve import solve
from synth.timing.lockstep import schedule_times_us
from synth.topology import Nic, Topology
from synth.topology_io import load_topology

SIZE = 2**30
COLL = "allreduce"
TIME_LIMIT_S = 30.0


def one_rail_h100() -> Topology:
    """dgx_h100 with its 8 GPUs behind ONE 400 Gb/s NIC (hypothetical: every group shares it)."""
    base = load_topology("dgx_h100")
    nic = base.nics[0]
    return replace(base, name="dgx_h100_one_nic",
                   nics=(Nic("ib0", tuple(base.ranks), nic.alpha_us, nic.beta_us_per_mb, nic.kind),),
                   description="dgx_h100 with one 400 Gb/s NIC shared by its 8 GPUs (hypothetical)")


CASES = [  # (label, machine, partition)
    ("DP groups, rail-aligned", lambda: load_topology("dgx_h100", 8), "rail"),
    ("DP groups sharing one rail", lambda: multinode(one_rail_h100(), 8), "stride:8"),
    ("stride groups, NIC per 2 GPUs", lambda: load_topology("dgx1", 8), "stride:8"),
    ("TP groups, one per node", lambda: load_topology("dgx_h100", 8), "node"),
    ("a group sharing one of its two NICs", lambda: load_topology("dgx1", 2), "0,2,8,10|1,9"),
]


def _us(topo: Topology, n: int) -> float:
    """The bound at SIZE bytes (latency + bandwidth terms), µs."""
    b = lower_bound(topo, make_collective(COLL, n))
    return b.latency_us + b.inv_bandwidth_us_per_byte * SIZE


def run() -> dict:
    rows = []
    for label, build, partition in CASES:
        whole = build()
        groups = parse_partition(partition, whole)
        shared, shares = concurrent(whole, groups)
        alone = [induced(whole, g) for g in groups]
        n = len(groups[0].members)
        bounds = [{"group": g.spec, "ranks": len(g.members),
                   "alone_us": round(_us(a, len(g.members)), 3),
                   "concurrent_us": round(_us(c, len(g.members)), 3)}
                  for g, a, c in zip(groups, alone, shared, strict=True)]
        coll = make_collective(COLL, n)
        t0 = stopwatch()
        naive = solve(alone[0], coll, time_limit_s=TIME_LIMIT_S, sizes=[SIZE]).best.schedule
        aware = solve(shared[0], coll, time_limit_s=TIME_LIMIT_S, sizes=[SIZE]).best.schedule
        seconds = t0()
        rows.append({
            "case": label, "machine": whole.name, "partition": partition, "groups": len(groups),
            "shared_resources": len(shares),
            "example_share": (f"{shares[0].resource}: {' / '.join(shares[0].groups)}"
                              if shares else None),
            "bounds": bounds,
            "first_group": {
                "group": groups[0].spec,
                "alone_schedule_alone_us": round(schedule_times_us(naive, alone[0], [SIZE])[0], 3),
                "alone_schedule_concurrent_us": round(
                    schedule_times_us(naive, shared[0], [SIZE])[0], 3),
                "concurrent_schedule_concurrent_us": round(
                    schedule_times_us(aware, shared[0], [SIZE])[0], 3),
                "alone_algorithm": naive.algorithm, "concurrent_algorithm": aware.algorithm,
                "solve_seconds": round(seconds, 2)},
        })
    return {"collective": COLL, "bytes": SIZE, "time_limit_s": TIME_LIMIT_S,
            "python": python_version(), "cases": rows}


def write(data: dict) -> None:
    write_results("groups", data, indent=2)
    lines = ["# Process groups alone and concurrent", "",
             f"Generated by `python benchmarks/groups.py`. {COLL} of {SIZE // 2**20} MiB per group; "
             "times in µs from synth's α-β model (bounds: `synth.bounds.lower_bound` on the "
             "machine a group induces; concurrent: ports/NICs shared by groups divided among "
             "them, rank-fair). Predictions, not measurements: no GPU was available.", "",
             "| case | machine | partition | groups | shared ports/NICs | bound alone (µs) | "
             "bound concurrent (µs) | ratio (slowest group) |", "|---|---|---|---|---|---|---|---|"]
    for r in data["cases"]:
        a = sorted({b["alone_us"] for b in r["bounds"]})
        c = sorted({b["concurrent_us"] for b in r["bounds"]})
        fmt = lambda v: f"{v[0]:g}" if len(v) == 1 else f"{v[0]:g}..{v[-1]:g}"  # noqa: E731
        part = r['partition'].replace('|', '\\|')
        lines.append(f"| {r['case']} | {r['machine']} | {part} | {r['groups']} | "
                     f"{r['shared_resources']} | {fmt(a)} | {fmt(c)} | {c[-1] / a[-1]:.3g}x |")
    lines += ["", "First group of each case: a schedule synthesized for the group alone vs one "
              "synthesized for its share of the concurrent machine (both costed there).", "",
              "| case | group | alone schedule, alone (µs) | alone schedule, concurrent (µs) | "
              "concurrent schedule, concurrent (µs) | algorithms (alone / concurrent) |",
              "|---|---|---|---|---|---|"]
    for r in data["cases"]:
        f = r["first_group"]
        lines.append(f"| {r['case']} | {f['group']} | {f['alone_schedule_alone_us']:g} | "
                     f"{f['alone_schedule_concurrent_us']:g} | "
                     f"{f['concurrent_schedule_concurrent_us']:g} | {f['alone_algorithm']} / "
                     f"{f['concurrent_algorithm']} |")
    lines += ["", "Shared resources: " + "; ".join(
        f"{r['case']}: {r['example_share'] or 'none'}" for r in data["cases"]), ""]
    write_results("groups", markdown="\n".join(lines))


if __name__ == "__main__":
    write(run())
