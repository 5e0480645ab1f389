"""Calibration: measured α/β figures in place of datasheet ones, for the MSCCL and closed-stack paths.

* :mod:`.format` — the calibration file (``synth-calibration/1``): load it, apply it to a topology;
* :mod:`.nccl_fit` — fit per-link-class α/β from nccl-tests logs (the MSCCL path);
* :mod:`.closed_fit` — fit the closed-stack cost model's terms from nccom-test logs or timing JSON.

Both fits write the same file format, which ``solve``, ``pareto``, ``catalog`` and ``strategies``
read through :func:`.format.load_calibration` / :func:`.format.apply_calibration`.
"""
