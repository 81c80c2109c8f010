"""The skip budget, shared by every framework's guard.

It is defined in :mod:`tensortap.pytorch._guard_budget` (framework-free: that module imports
no torch, and ``tensortap.pytorch`` imports no framework until a name is used) and re-exported
here, so one :class:`SkipBudget` class serves the PyTorch, JAX and Keras guards alike. The
module moves here when the PyTorch guard's files are moved.
"""

from __future__ import annotations

from tensortap.pytorch._guard_budget import BUDGET_ACTIONS, Exhausted, SkipBudget, SkipWindow

__all__ = ["BUDGET_ACTIONS", "Exhausted", "SkipBudget", "SkipWindow"]
