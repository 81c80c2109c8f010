"""A guard's settings that do not depend on the framework, checked once when it is made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import SkipBudget
from tensortap.healing._window import SIGNALS

ACTIONS = ("skip", "stop", "record")


@dataclass(frozen=True)
class GuardSettings:
    """What a JAX or Keras guard decides with (the PyTorch ``Guard``'s defaults and meaning):
    ``action`` ``"skip"`` undoes a tripped update, ``"stop"`` does that and asks training to
    stop, ``"record"`` only records; ``spike_z``, ``spike_ratio``, ``window``, ``warmup`` and
    ``signals`` as in :func:`tensortap.healing.score`; ``budget``: a :class:`SkipBudget`;
    ``rollback``: what ``SkipBudget(then="rollback")`` asks (``request(step, batches,
    reason)``)."""

    action: str = "skip"
    spike_z: float = 6.0
    spike_ratio: float = 2.0
    window: int = 50
    warmup: int = 10
    signals: Sequence[str] = SIGNALS
    budget: SkipBudget | None = None
    rollback: Any = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise InvalidConfigError(f"Guard action must be one of {ACTIONS}, got {self.action!r}")
        for label, value, low in (
            ("spike_z", self.spike_z, 0),
            ("spike_ratio", self.spike_ratio, 1),
        ):
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > low):
                raise InvalidConfigError(f"Guard {label} must be a number > {low}, got {value!r}")
        for label, count in (("window", self.window), ("warmup", self.warmup)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidConfigError(f"Guard {label} must be an int >= 1, got {count!r}")
        if self.warmup > self.window:
            raise InvalidConfigError(
                f"Guard warmup must be <= window (the window holds at most {self.window} "
                f"values), got warmup={self.warmup}: lower warmup or raise window"
            )
        if isinstance(self.signals, str) or not set(self.signals) <= set(SIGNALS):
            raise InvalidConfigError(
                f"Guard signals must be a list drawn from {SIGNALS}, got {self.signals!r}"
            )
        budget = self.budget
        if budget is not None and not isinstance(budget, SkipBudget):
            raise InvalidConfigError(f"Guard budget must be a SkipBudget, got {budget!r}")
        if budget is not None and budget.then == "rollback" and self.rollback is None:
            raise InvalidConfigError(
                "Guard budget=SkipBudget(then='rollback') needs rollback=, an object with "
                "request(step, batches, reason) (a RollbackTarget)"
            )
        if self.rollback is not None and not callable(getattr(self.rollback, "request", None)):
            raise InvalidConfigError(
                f"Guard rollback must have request(step, batches, reason), got {self.rollback!r}"
            )

    @property
    def undoes(self) -> bool:
        """Whether a trip undoes the update (``"skip"`` and ``"stop"``)."""
        return self.action != "record"


__all__ = ["ACTIONS", "GuardSettings"]
