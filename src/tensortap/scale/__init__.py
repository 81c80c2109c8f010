"""Rules over many trials: :func:`run_rules` evaluates built-in and custom rules as tasks on
local processes (``engine="local"``) or Ray (``engine="ray"``, ``pip install
'tensortap[ray]'``), and returns the findings as Arrow tables."""

from __future__ import annotations

from tensortap.scale._run import ENGINES, TIME_LIMIT, RuleResults, run_rules
from tensortap.scale._tasks import Task, evaluate

__all__ = ["ENGINES", "TIME_LIMIT", "RuleResults", "Task", "evaluate", "run_rules"]
