"""Calibration: measured figures in place of datasheet ones, for the MSCCL and closed-stack paths.

* log parsers — :mod:`.nccl_tests` (nccl-tests output) and :mod:`.closed_logs` (nccom-test output,
  timing JSON);
* fits — :mod:`.link_fit` (per-link-class α/β from nccl-tests logs: the MSCCL path),
  :mod:`.closed_fit` (the closed-stack cost model's terms from nccom-test logs or timing JSON) and
  :mod:`.nccl_fit` (NCCL's tuner model, :mod:`synth.timing.nccl`, against public measurements) and
  :mod:`.program_fit` (the timed program model's floors, :mod:`synth.timing.program`, against
  measured MSCCL times of known XML files: ``synth calibrate --format msccl``).

The link and closed-stack fits write the same file format (``synth-calibration/1``,
:mod:`synth.calibration`, below every time model that reads it), which ``solve``, ``pareto``,
``catalog``, ``simulate`` and ``strategies`` read through :func:`synth.calibration.load_calibration`
and apply through :func:`synth.calibrated.apply_calibration`.
"""
