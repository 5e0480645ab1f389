"""A topology as measured: a calibration file's link-class figures in place of the datasheet's.

Two kinds of figure apply. The file's own ``link_classes`` (an nccl-tests fit,
:mod:`synth.calibrate.link_fit`) replace a class's α and β directly
(:func:`synth.calibration.given_overrides`). A closed-stack fit (:mod:`synth.calibrate.closed_fit`)
has ``terms`` instead: each is a vendor primitive's α/β over a replica group on one link class,
not a link, so its ratio to what the closed-stack cost model (:mod:`synth.closed.cost`) predicts
from the topology's own figures says how far that class is off; the class's α and β are scaled by
those ratios (geometric mean over its terms). The ratios are taken against the topology the file
is applied to, so one fit serves every topology with those classes.

The file format itself is :mod:`synth.calibration`, below every model; relating ``terms`` to a
topology needs the closed-stack cost model, so it sits here, above it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .calibration import (
    Calibration,
    ClassParams,
    class_figures,
    given_overrides,
    load_calibration,
    topology_classes,
    with_class_figures,
)
from .closed.cost import default_model
from .closed.mesh import mesh_for_topology
from .errors import SynthError
from .topology import Topology


def class_overrides(topology: Topology, calibration: Calibration
                    ) -> tuple[dict[str, ClassParams], list[str]]:
    """The per-class figures that apply to ``topology``, and notes on what did not apply: the
    file's own, then those its closed-stack terms imply for the classes it gives no figure for."""
    out, notes = given_overrides(topology, calibration)
    if calibration.terms:
        scaled, more = closed_term_ratios(topology, calibration)
        notes += more
        figures = class_figures(topology)
        for k, (ra, rb) in scaled.items():
            if k not in out:  # an explicit class figure wins over a derived one
                a, b = figures[k]
                out[k] = ClassParams(a * ra if ra is not None else None,
                                     b * rb if rb is not None else None, "closed-stack ratio")
    return out, notes


def closed_term_ratios(topology: Topology, calibration: Calibration
                       ) -> tuple[dict[str, tuple[float | None, float | None]], list[str]]:
    """Per class: geometric-mean ratios (measured / modelled) of a closed-stack fit's α and β."""
    have = set(topology_classes(topology))
    mine = [t for t in calibration.terms if t.get("link_class") in have]
    if not mine:
        named = sorted({str(t.get("link_class")) for t in calibration.terms})
        return {}, [f"{calibration.source}: its closed-stack terms name link classes {named}, "
                    f"none of which '{topology.name}' has; nothing applied"]
    try:
        model = default_model(topology, mesh_for_topology(topology))
    except SynthError as exc:
        return {}, [f"{calibration.source}: closed-stack terms cannot be related to "
                    f"'{topology.name}' ({exc.message}); nothing applied"]
    logs: dict[str, tuple[list[float], list[float]]] = {}
    for t in mine:
        try:
            key = (str(t["primitive"]), (int(t["group"][0]), int(t["group"][1])), str(t["link_class"]))
            alpha, beta = float(t["alpha_us"]), float(t["beta_us_per_mb"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SynthError(f"{calibration.source}: malformed term {t}: {exc}") from None
        a0, b0 = model.key_default_terms(key)
        la, lb = logs.setdefault(key[2], ([], []))
        if a0 > 0 and alpha > 0:
            la.append(math.log(alpha / a0))
        if b0 > 0 and beta > 0:
            lb.append(math.log(beta / b0))
    return {k: (math.exp(sum(la) / len(la)) if la else None,
                math.exp(sum(lb) / len(lb)) if lb else None)
            for k, (la, lb) in sorted(logs.items())}, []


def apply_calibration(topology: Topology, calibration: Calibration | Mapping[str, Any] | str | Path
                      ) -> Topology:
    """``topology`` with every calibrated class's α and per-link/lane β replaced; what did not
    apply is added to the calibration's ``notes``."""
    cal = load_calibration(calibration)
    overrides, notes = class_overrides(topology, cal)
    known = set(cal.notes)
    cal.notes.extend(note for note in notes if note not in known)
    return with_class_figures(topology, overrides, cal.source or "calibration")
