"""A guard's options, checked once when it is made (see :mod:`tensortap.pytorch._guard`).

:class:`GuardOptions` holds what :class:`~tensortap.pytorch._guard.Guard` takes besides the
optimizer and the model, and refuses a bad value with what it expected;
:meth:`GuardOptions.undo_for` chooses how an optimizer's update is undone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tensortap.core._rollback_target import RollbackTarget
from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import SkipBudget
from tensortap.pytorch._guard_device import SIGNALS, UNDO_MODES
from tensortap.pytorch._guard_flight import MAX_LAG

ACTIONS = ("skip", "stop", "record")


@dataclass(frozen=True)
class GuardOptions:
    """The guard's options, as :class:`~tensortap.pytorch._guard.Guard` takes them (its
    signature holds their defaults and its docstring says what each is)."""

    action: str
    spike_z: float
    spike_ratio: float
    window: int
    warmup: int
    keep: int
    names: str | None
    max_recordings: int
    signals: Sequence[str]
    budget: SkipBudget | None
    rollback: RollbackTarget | None
    on_trip: Callable[[Any], None] | None
    history: int
    flight_budget_bytes: int
    undo: str

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise InvalidConfigError(f"Guard action must be one of {ACTIONS}, got {self.action!r}")
        for label, value, low in (
            ("spike_z", self.spike_z, 0),
            ("spike_ratio", self.spike_ratio, 1),
        ):
            if not (isinstance(value, (int, float)) and value > low):
                raise InvalidConfigError(f"Guard {label} must be a number > {low}, got {value!r}")
        for label, count in (("window", self.window), ("warmup", self.warmup), ("keep", self.keep)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidConfigError(f"Guard {label} must be an int >= 1, got {count!r}")
        for label, count, low, what in (
            (
                "max_recordings",
                self.max_recordings,
                0,
                "how many flight recordings at most; 0 records none",
            ),
            ("history", self.history, MAX_LAG + 2, "steps of statistics kept"),
            (
                "flight_budget_bytes",
                self.flight_budget_bytes,
                0,
                "bytes of raw copies; 0 keeps statistics only",
            ),
        ):
            if isinstance(count, bool) or not isinstance(count, int) or count < low:
                raise InvalidConfigError(
                    f"Guard {label} must be an int >= {low} ({what}), got {count!r}"
                )
        if isinstance(self.signals, str) or not set(self.signals) <= set(SIGNALS):
            raise InvalidConfigError(
                f"Guard signals must be a list drawn from {SIGNALS}, got {self.signals!r}"
            )
        budget, rollback = self.budget, self.rollback
        if budget is not None and not isinstance(budget, SkipBudget):
            raise InvalidConfigError(f"Guard budget must be a SkipBudget, got {budget!r}")
        if budget is not None and budget.then == "rollback" and rollback is None:
            raise InvalidConfigError(
                "Guard budget=SkipBudget(then='rollback') needs rollback=, an object with "
                "request(step, batches, reason) (a RollbackTarget)"
            )
        if rollback is not None and not callable(getattr(rollback, "request", None)):
            raise InvalidConfigError(
                f"Guard rollback must have request(step, batches, reason), got {rollback!r}"
            )
        if self.on_trip is not None and not callable(self.on_trip):
            raise InvalidConfigError(f"Guard on_trip must be callable, got {self.on_trip!r}")
        if self.undo not in ("auto", *UNDO_MODES[:2]):
            raise InvalidConfigError(
                f"Guard undo must be 'auto', 'snapshot' or 'optimizer', got {self.undo!r}"
            )
        self.name_filter()  # a bad regex is refused now

    def name_filter(self) -> Callable[[str], Any]:
        """Which parameters the flight recorder copies: those whose name ``names`` finds."""
        try:
            return re.compile(self.names).search if self.names else (lambda _n: True)
        except re.error as exc:
            raise InvalidConfigError(
                f"Guard names must be a regex, got {self.names!r}: {exc}"
            ) from None

    def undo_for(self, optimizer: Any) -> str:
        """How ``optimizer``'s update is undone: ``"none"`` when recording only, else
        ``"optimizer"`` (its own ``found_inf`` skip) or ``"snapshot"``; ``"auto"`` takes the
        first where the optimizer has one."""
        own_skip = bool(getattr(optimizer, "_step_supports_amp_scaling", False))
        if self.undo == "optimizer" and not own_skip:
            raise InvalidConfigError(
                "Guard undo='optimizer' needs an optimizer that skips its own step on a "
                f"found_inf flag (PyTorch's fused=True Adam, AdamW, SGD, Adagrad); {optimizer!r} "
                "does not: use undo='snapshot' (or 'auto')"
            )
        if self.action == "record":
            return "none"
        if self.undo == "auto":
            return "optimizer" if own_skip else "snapshot"
        return self.undo


__all__ = ["ACTIONS", "GuardOptions"]
