"""The ``cbc`` backend: the CBC binary bundled with PuLP.

It runs as ``COIN_CMD`` on that path (which is what the deprecated ``PULP_CBC_CMD`` does, without
its warning). Bound and gap are parsed from CBC's closing report (``Lower bound:`` / ``Upper
bound:``), which CBC prints when it stops short of proving optimality; a proven optimum has bound
= objective. No live incumbent (CBC runs as a subprocess and writes its log buffered). CBC's
parallel mode is not repeatable, so ``threads > 1`` is passed as its deterministic parallel mode
(``100 + n``).
"""

from __future__ import annotations

import functools
import re
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from ...errors import SynthError
from .backend import EITHER, Backend, Matrix, Outcome, Request, pulp


@functools.cache
def _cbc_path() -> str | None:
    """PuLP's bundled CBC binary, if it runs here (checked once with a one-variable model)."""
    from pulp.apis import coin_api

    for path in (coin_api.pulp_cbc_path, "cbc"):
        solver = pulp.COIN_CMD(path=path, msg=False)
        if not solver.available():
            continue
        with warnings.catch_warnings():  # PuLP 3 deprecates building variables this way
            warnings.simplefilter("ignore", DeprecationWarning)
            probe = pulp.LpProblem("probe", pulp.LpMinimize)
            x = pulp.LpVariable("x", 0, 3, cat=pulp.LpInteger)
            probe += x
            probe += x >= 1, "c"
            try:
                probe.solve(solver)
            except pulp.PulpSolverError:
                continue
        if probe.status == pulp.LpStatusOptimal and x.varValue == 1:
            return str(path)
    return None


_CBC_BOUND = re.compile(r"^(?:Lower|Upper) bound:\s*(\S+)", re.MULTILINE)


class CbcBackend(Backend):
    name = "cbc"
    label = "CBC"
    # (PuLP's status, its solution status) -> synth's; None: any solution status
    STATUS_MAP: ClassVar[Mapping[tuple[int, int | None], str]] = {
        (pulp.LpStatusOptimal, pulp.LpSolutionOptimal): "optimal",
        (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible): "feasible",
        (pulp.LpStatusInfeasible, None): "infeasible",
        (pulp.LpStatusUnbounded, None): "unbounded",
        (pulp.LpStatusNotSolved, None): "no_solution",
    }

    def unavailable_reason(self) -> str | None:
        return None if _cbc_path() is not None else "PuLP's bundled CBC binary does not run here"

    def solve(self, problem: pulp.LpProblem, mat: Matrix, request: Request) -> Outcome:
        """Through PuLP, which leaves the incumbent in its variables. ``request.feasibility``
        keeps the PuLP objective: without one, PuLP's MPS file omits the columns of variables
        that appear in no constraint yet still bounds them, which CBC rejects."""
        path = _cbc_path()
        assert path is not None
        node_limit, threads = request.node_limit, request.threads
        with tempfile.TemporaryDirectory(prefix="synth-cbc-") as tmp:
            log = Path(tmp) / "cbc.log"
            # threads > 1: CBC's "100 + n" mode, its deterministic (repeatable) parallel search
            solver = pulp.COIN_CMD(path=path, mip=not request.relax, msg=False,
                                   timeLimit=request.time_limit_s, gapRel=request.gap,
                                   threads=100 + threads if threads > 1 else None,
                                   logPath=str(log), options=["randomSeed 1", "randomCbcSeed 1"]
                                   + ([f"maxNodes {int(node_limit)}"] if node_limit else []))
            solver.tmpDir = tmp
            failed: pulp.PulpSolverError | None = None
            try:
                problem.solve(solver)
            except pulp.PulpSolverError as exc:
                failed = exc
            text = log.read_text(errors="replace") if log.exists() else ""
        if failed is not None:
            # CBC's presolve can stop at "Problem is infeasible" without writing a solution file,
            # which PuLP reports as a failure to run.
            if re.search(r"^Problem is infeasible", text, re.MULTILINE):
                return Outcome("infeasible")
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise SynthError(f"CBC failed on this model: {failed} ({tail})") from failed
        status, sol_status = problem.status, problem.sol_status
        code = (status, sol_status) if (status, sol_status) in self.STATUS_MAP else (status, None)
        name = self.status(code, True, pulp.LpStatus.get(status, status))
        bound_match = _CBC_BOUND.search(text)
        bound = float(bound_match.group(1)) if bound_match else None
        missing = False
        if name == "optimal":
            missing = bound is None and "within gap tolerance" in text
        elif name == "feasible":
            missing = bound is None
        elif name == "infeasible" and "infeasible or unbounded" in text:
            name = EITHER
        if request.feasibility or request.relax:
            bound = None
        # CBC's closing line names what stopped it ("Exiting on maximum time/nodes")
        stopped_by = ("wall" if re.search(r"on maximum time", text)
                      else "work" if re.search(r"on maximum nodes", text) else "")
        return Outcome(name, None, bound, "CBC did not report its bound" if missing else "",
                       bound_missing=missing, stopped_by=stopped_by)
