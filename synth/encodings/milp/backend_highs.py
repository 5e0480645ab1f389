"""The ``highs`` backend (the default): HiGHS through the copy of highspy's ``_core`` bindings that
SciPy ships (``scipy.optimize._highspy._core``, HiGHS 1.12, statically linked).

The model is copied column-wise into a ``HighsLp`` in one call (PuLP's own ``HiGHS`` wrapper adds
rows one Python call at a time, drops the objective constant and reports time-limit stops as
"optimal"). Bound and gap come from ``getInfo()`` (``mip_dual_bound``); live incumbents and bounds
from HiGHS's MIP callbacks, which also make Ctrl-C stop the search promptly. HiGHS's MIP search is
deterministic and independent of its thread count (measured: identical node and simplex iteration
counts with 1, 2 and 4 threads; more threads were only slower).

Why not the ``highspy`` wheel itself: highspy and OR-Tools each ship a *different* HiGHS build
under the same soname ``libhighs.so.1``. Whichever is loaded first wins, and the other then fails
to import (undefined symbols) — so loading highspy would break CP-SAT (here and in the SMT engine)
for the rest of the process. ``import pulp`` itself tries ``import highspy``; :mod:`.backend`
therefore loads OR-Tools *before* PuLP, which makes that attempt fail harmlessly. Code that imports
PuLP or highspy before the solver layer loses CP-SAT; :func:`.solvers.available_solvers` then says
so. The ``highspy`` wheel is used only when SciPy lacks the bundled bindings (SciPy < 1.15).

HiGHS also settles, for every backend, a model its solver calls "infeasible or unbounded"
(:func:`unbounded_or_infeasible`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from ...errors import SynthError
from .backend import EITHER, STOPPED, Backend, Matrix, Outcome, Request, pulp


@functools.cache
def highs_core() -> ModuleType | None:
    """SciPy's statically linked copy of highspy's ``_core`` (no soname clash), else highspy's."""
    try:
        import scipy.optimize._highspy._core as core

        return core
    except ImportError:  # pragma: no cover - SciPy < 1.15
        pass
    try:  # pragma: no cover
        import highspy._core as core

        return core
    except ImportError:  # pragma: no cover
        return None


@contextlib.contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null while native code runs.

    HiGHS 1.12 (the copy in SciPy and OR-Tools) prints a stray debug line
    (``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``) with printf
    even with output off; it would corrupt ``synth ... --json`` on stdout.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no usable fd 1
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class HighsBackend(Backend):
    name = "highs"
    label = "HiGHS"
    FAILED = "{label} failed on this model: {status}"
    # HighsModelStatus member names -> synth's
    STATUS_MAP: ClassVar[Mapping[str, str]] = {
        "kOptimal": "optimal",
        "kInfeasible": "infeasible",
        "kUnbounded": "unbounded",
        "kUnboundedOrInfeasible": EITHER,
        "kTimeLimit": STOPPED,
        "kIterationLimit": STOPPED,
        "kSolutionLimit": STOPPED,
        "kInterrupt": STOPPED,
        "kHighsInterrupt": STOPPED,
        "kObjectiveBound": STOPPED,
        "kObjectiveTarget": STOPPED,
        "kUnknown": STOPPED,
    }
    STOPPED_BY: ClassVar[Mapping[str, str]] = {"kTimeLimit": "wall", "kIterationLimit": "work",
                                                "kSolutionLimit": "work"}

    def unavailable_reason(self) -> str | None:
        return None if highs_core() is not None else "HiGHS bindings not found (scipy>=1.15 or highspy)"

    def solve(self, problem: pulp.LpProblem, mat: Matrix, request: Request) -> Outcome:
        core = highs_core()
        assert core is not None
        progress = request.progress
        h = _highs_model(core, mat)
        if request.start_point is not None:
            solution = core.HighsSolution()
            solution.col_value = request.start_point.tolist()
            solution.value_valid = True
            h.setSolution(solution)
        h.setOptionValue("threads", request.threads)
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("mip_rel_gap", request.gap)
        if request.node_limit is not None:
            h.setOptionValue("mip_max_nodes", int(request.node_limit))
        if request.time_limit_s is not None:
            h.setOptionValue("time_limit", float(request.time_limit_s))
        interrupted: list[BaseException] = []
        cbt = core.cb.HighsCallbackType

        def callback(kind: Any, _message: str, out: Any, data_in: Any, _user: Any) -> None:
            # Runs on the solver's thread with the GIL; a KeyboardInterrupt raised here would
            # unwind through C++, so it is recorded, the search told to stop, and re-raised after
            # run().
            try:
                if progress is not None:
                    if int(kind) == int(cbt.kCallbackMipImprovingSolution):
                        progress.update(incumbent=out.objective_function_value,
                                        bound=out.mip_dual_bound)
                    else:
                        progress.update(incumbent=out.mip_primal_bound, bound=out.mip_dual_bound)
            except BaseException as exc:
                interrupted.append(exc)
            if interrupted and data_in is not None:
                data_in.user_interrupt = True

        h.setCallback(callback, None)
        h.startCallback(cbt.kCallbackMipInterrupt)
        if progress is not None:
            h.startCallback(cbt.kCallbackMipImprovingSolution)
        with _c_stdout_silenced():
            status = h.run()
            if (status == core.HighsStatus.kError
                    and h.getModelStatus() == core.HighsModelStatus.kNotset):
                # HiGHS keeps one global thread pool; a solve asking for another size is refused
                # until the pool is rebuilt (our solves are sequential, so this is safe).
                core._Highs.resetGlobalScheduler(True)
                status = h.run()
        if interrupted:
            raise interrupted[0]
        model_status = h.getModelStatus()
        info = h.getInfo()
        mip = bool(mat.integer.any())
        has_point = info.primal_solution_status == 2  # kSolutionStatusFeasible
        name = self.status(model_status.name, has_point, h.modelStatusToString(model_status))
        values = None
        if name in ("optimal", "feasible"):
            values = np.array(h.getSolution().col_value, dtype=float)
        return Outcome(name, values, float(info.mip_dual_bound) if mip else None,
                       stopped_by=self.STOPPED_BY.get(model_status.name, ""),
                       nodes=int(info.mip_node_count) if mip else None)


def _highs_model(core: ModuleType, mat: Matrix) -> Any:
    """A HiGHS instance holding ``mat`` (one ``passModel`` call, column-wise)."""
    csc = mat.a.tocsc()
    lp = core.HighsLp()
    lp.num_col_ = mat.num_cols
    lp.num_row_ = mat.num_rows
    lp.col_cost_ = mat.cost
    lp.col_lower_ = mat.lb
    lp.col_upper_ = mat.ub
    lp.row_lower_ = mat.row_lo
    lp.row_upper_ = mat.row_hi
    lp.offset_ = mat.offset
    lp.sense_ = core.ObjSense.kMaximize if mat.maximize else core.ObjSense.kMinimize
    lp.a_matrix_.format_ = core.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = mat.num_cols
    lp.a_matrix_.num_row_ = mat.num_rows
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data
    if mat.integer.any():
        lp.integrality_ = [core.HighsVarType.kInteger if i else core.HighsVarType.kContinuous
                           for i in mat.integer.tolist()]
    h = core._Highs()
    h.setOptionValue("output_flag", False)
    if h.passModel(lp) == core.HighsStatus.kError:
        raise SynthError("HiGHS rejected the model (inconsistent bounds or NaN coefficients?)")
    return h


def unbounded_or_infeasible(mat: Matrix) -> str:
    """Tell the two apart (a solver's presolve may not): is there any feasible point at all?
    ``infeasible`` where the HiGHS bindings are missing (nothing else can tell)."""
    core = highs_core()
    if core is None:  # pragma: no cover - SciPy ships the bindings
        return "infeasible"
    probe = Matrix(mat.columns, mat.lb, mat.ub, np.zeros(mat.num_cols), mat.integer, mat.row_lo,
                   mat.row_hi, mat.a, 0.0, False)
    h = _highs_model(core, probe)
    h.setOptionValue("presolve", "off")
    with _c_stdout_silenced():
        h.run()
    return "unbounded" if h.getModelStatus() == core.HighsModelStatus.kOptimal else "infeasible"
