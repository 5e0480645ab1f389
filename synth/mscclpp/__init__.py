"""MSCCL++ execution plans: read, verify (:mod:`.interpreter`) and emit (:mod:`.emit`) them.

The plan format is the JSON the MSCCL++ executor loads (``docs/mscclpp-plan-format.md``).
"""

from __future__ import annotations

from pathlib import Path

from ..files import read_input
from .interpreter import Report, verify_plan
from .plan import Plan, load_plan

__all__ = ["Plan", "Report", "is_plan_text", "load_plan", "verify_plan", "verify_plan_file"]


def is_plan_text(text: str) -> bool:
    """True when ``text`` looks like an MSCCL++ plan (a JSON object with ``gpus`` and ``protocol``)."""
    head = text.lstrip()[:1]
    return head == "{" and '"gpus"' in text and '"protocol"' in text


def verify_plan_file(path: str | Path) -> tuple[Plan, Report]:
    """Load and verify the plan in ``path``."""
    plan = load_plan(read_input(path, "plan"), str(path))
    return plan, verify_plan(plan)
