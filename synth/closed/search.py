"""Ranking strategies: the library behind ``synth strategies``, and the choice
:mod:`synth.closed.winner` writes (``emit_closed_program``).

Message size convention (nccl-tests, as in :mod:`synth.collectives`): ``nbytes`` is the size of
the buffer a collective is quoted by, per tensor: the full output of allgather (so each rank
contributes ``nbytes / N``), the full input of reducescatter, the buffer of allreduce, the per-rank
buffer of alltoall. With ``tensors`` = M, there are M such tensors (e.g. one per microbatch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SynthError
from ..topology import Topology
from .constraints import Violation, violations
from .cost import CostModel, Estimate, estimate, explain, load_model
from .ir import Program, TensorSpec
from .lower import LoweredPlan, baseline_plans, lower_schedule
from .mesh import Mesh, mesh_for_topology
from .strategies import COLLECTIVES, Context, Plan, all_plans, build_program

LOWER_MAX_RANKS = 64
"""Baseline schedules are lowered to permute programs up to this many ranks (one tensor)."""

DEFAULT_BYTES = 1 << 20


@dataclass
class Scored:
    plan: Plan | LoweredPlan
    program: Program | None
    estimate: Estimate | None
    problems: list[Violation] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return self.program is not None and not self.problems

    @property
    def name(self) -> str:
        return self.plan.name

    def families(self, mesh: Mesh) -> tuple[str, ...]:
        return self.plan.families(mesh)


@dataclass
class Ranking:
    topology: Topology
    mesh: Mesh
    collective: str
    platform: str
    nbytes: int
    tensors: int
    dtype: str
    reduce_op: str
    model: CostModel
    ranked: list[Scored]
    infeasible: list[Scored]

    @property
    def best(self) -> Scored:
        if not self.ranked:
            reasons = sorted({str(p) for s in self.infeasible for p in s.problems})
            raise SynthError(f"no strategy for {self.collective} on {self.topology.name} is valid on "
                             f"{self.platform}: {'; '.join(reasons[:4])}")
        return self.ranked[0]

    def best_of(self, family: str) -> Scored | None:
        return next((s for s in self.ranked if family in s.families(self.mesh)), None)

    def reason(self) -> str:
        best = self.best
        assert best.estimate is not None
        t0 = best.estimate.time_us
        ties = [s for s in self.ranked[1:] if s.estimate and s.estimate.time_us <= t0 * 1.0005]
        others = [s for s in self.ranked[1:] if s.estimate and s.estimate.time_us > t0 * 1.0005]
        if not others:
            return f"{best.name} is the only valid strategy" + (
                f" (ties with {len(ties)})" if ties else "")
        runner = others[0]
        text = explain(best.estimate, runner.estimate, "the winner", f"the next best ({runner.name})")
        if ties:
            text = (f"{len(ties)} strateg{'y' if len(ties) == 1 else 'ies'} tie with the winner "
                    f"(e.g. {ties[0].name}); " + text)
        flat = self.best_of("flat")
        if flat is not None and flat is not best and flat is not runner and flat.estimate:
            text += "; against flat: " + explain(best.estimate, flat.estimate, "it", "flat")
        return text

    def bundling_gain(self) -> dict[str, Any] | None:
        if self.tensors <= 1:
            return None
        bundled = self.best_of("bundled")
        per = self.best_of("per-tensor")
        if bundled is None or per is None:
            return None
        assert bundled.estimate is not None and per.estimate is not None
        return {"bundled": bundled.name, "bundled_us": bundled.estimate.time_us,
                "per_tensor": per.name, "per_tensor_us": per.estimate.time_us,
                "gain": per.estimate.time_us / bundled.estimate.time_us,
                "launch_saved_us": per.estimate.launch_us - bundled.estimate.launch_us,
                "calls": (per.estimate.calls, bundled.estimate.calls)}

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        rows = self.ranked if limit is None else self.ranked[:limit]
        return {
            "topology": self.topology.name, "ranks": self.mesh.size, "mesh": self.mesh.describe(),
            "collective": self.collective, "platform": self.platform, "bytes": self.nbytes,
            "tensors": self.tensors, "dtype": self.dtype, "reduce": self.reduce_op,
            "cost_model": self.model.source,
            "winner": self.best.name, "reason": self.reason(),
            "bundling": self.bundling_gain(),
            "families": {f: (s.name if (s := self.best_of(f)) else None) for f in families_seen(self)},
            "strategies": [{"rank": i + 1, "name": s.name, "families": list(s.families(self.mesh)),
                            "predicted_us": round(s.estimate.time_us, 4) if s.estimate else None,
                            "terms": s.estimate.to_dict() if s.estimate else None}
                           for i, s in enumerate(rows)],
            "infeasible": [{"name": s.name, "families": list(s.families(self.mesh)),
                            "reasons": [str(p) for p in s.problems]} for s in self.infeasible],
        }


def families_seen(r: Ranking) -> list[str]:
    seen: list[str] = []
    for s in r.ranked:
        for f in s.families(r.mesh):
            if f not in seen:
                seen.append(f)
    return seen


def input_specs(collective: str, nranks: int, nbytes: int, tensors: int,
                dtype: str = "float32") -> list[TensorSpec]:
    """Per-rank input tensors for ``nbytes`` per tensor (the nccl-tests convention above)."""
    item = np.dtype(dtype).itemsize
    per_rank = nbytes // nranks if collective == "allgather" else nbytes
    elems = max(1, per_rank // item)
    return [TensorSpec((elems,), dtype) for _ in range(tensors)]


MAX_TENSORS = 4096
"""The most tensors per call site: every strategy is built and run on the NumPy stand-in for each
tensor (measured here: 1,000 tensors took 40 s on trn1_32 allgather), so more is refused at once."""


def rank_strategies(topology: Topology, collective: str, platform: str = "neuron",
                    nbytes: int = DEFAULT_BYTES, tensors: int = 1,
                    calibration: str | Path | dict | None = None, *, dtype: str = "float32",
                    reduce_op: str = "add", shapes: Sequence[tuple[int, ...]] | None = None,
                    pieces: Sequence[int] = (2, 4), lowered: bool = True) -> Ranking:
    """Build, check and score every strategy; feasible ones sorted by predicted time."""
    if collective not in COLLECTIVES:
        from ..errors import unknown_name
        raise unknown_name("closed-stack collective", collective, COLLECTIVES)
    if platform not in ("neuron", "jax"):
        from ..errors import unknown_name
        raise unknown_name("platform", platform, ("neuron", "jax"))
    if reduce_op not in ("add", "min", "max"):
        raise SynthError(f"reduction '{reduce_op}' is not supported on closed stacks (add, min, max)")
    if not 1 <= tensors <= MAX_TENSORS:
        raise SynthError(f"--tensors must be in 1..{MAX_TENSORS} (MAX_TENSORS), got {tensors}")
    if nbytes < 1:
        raise SynthError(f"--bytes must be at least 1, got {nbytes}")
    try:
        np.dtype(dtype)
    except TypeError:
        raise SynthError(f"unknown dtype '{dtype}'") from None
    mesh = mesh_for_topology(topology)
    model = load_model(topology, mesh, calibration)
    ctx = Context(mesh, topology)
    specs = ([TensorSpec(tuple(s), dtype) for s in shapes] if shapes is not None
             else input_specs(collective, mesh.size, nbytes, tensors, dtype))
    tensors = len(specs)
    ranked: list[Scored] = []
    infeasible: list[Scored] = []
    plans: list[Plan | LoweredPlan] = list(all_plans(collective, mesh, tensors, pieces))
    if lowered and tensors == 1 and mesh.size <= (LOWER_MAX_RANKS if collective != "alltoall" else 32):
        plans += baseline_plans(collective, topology, mesh)
    for plan in plans:
        try:
            if isinstance(plan, LoweredPlan):
                prog = lower_schedule(plan.schedule, mesh, specs, reduce_op, topology)
            else:
                prog = build_program(plan, ctx, specs, reduce_op)
        except SynthError as exc:
            infeasible.append(Scored(plan, None, None, [Violation("structure", exc.message)]))
            continue
        problems = violations(prog, platform, topology)
        if problems:
            infeasible.append(Scored(plan, prog, None, problems))
            continue
        ranked.append(Scored(plan, prog, estimate(prog, model)))
    ranked.sort(key=lambda s: (s.estimate.time_us, s.estimate.calls, s.name))  # type: ignore[union-attr]
    return Ranking(topology, mesh, collective, platform, nbytes, tensors, dtype, reduce_op, model,
                   ranked, infeasible)
