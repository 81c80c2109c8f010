"""A guard's skip budget: too many skipped updates within a window of steps stop training or
ask for a rollback (see :mod:`tensortap.pytorch._guard`).

:class:`SkipBudget` is the user's setting; :class:`SkipWindow` keeps the skips within its last
``steps`` steps and says, each tripped step, whether the budget ran out (:class:`Exhausted`):
the guard acts on the answer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from tensortap.exceptions import InvalidConfigError

BUDGET_ACTIONS = ("stop", "rollback")


@dataclass(frozen=True)
class SkipBudget:
    """``skips`` skipped updates within the last ``steps`` steps exhaust the budget; then the
    guard stops training (``then="stop"``: :attr:`Guard.should_stop`) or asks its rollback
    target to roll back (``then="rollback"``)."""

    skips: int
    steps: int
    then: str = "stop"

    def __post_init__(self) -> None:
        for label, count in (("skips", self.skips), ("steps", self.steps)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidConfigError(f"SkipBudget {label} must be an int >= 1, got {count!r}")
        if self.steps < self.skips:
            raise InvalidConfigError(
                f"SkipBudget needs steps >= skips ({self.skips} skips cannot happen within "
                f"{self.steps} steps), got steps={self.steps}"
            )
        if self.then not in BUDGET_ACTIONS:
            raise InvalidConfigError(
                f"SkipBudget then must be one of {BUDGET_ACTIONS}, got {self.then!r}"
            )


class MicroBatches(tuple):  # type: ignore[type-arg]
    """The ids of the micro-batches one optimizer step accumulated (``Guard.observe`` called
    more than once in the step): a tuple, flattened where a rollback is asked to skip them."""

    __slots__ = ()


def flatten(batches: list[Any]) -> list[Any]:
    """Each micro-batch's id where a step accumulated several (:class:`MicroBatches`)."""
    flat: list[Any] = []
    for batch in batches:
        flat.extend(batch if isinstance(batch, MicroBatches) else (batch,))
    return flat


@dataclass(frozen=True)
class TrainedAt:
    """The batch trained at ``step``, where the guard was not told its id: a rollback that
    follows the loop's steps (:meth:`~tensortap.healing.Rollback.trained`) knows it."""

    step: int


@dataclass(frozen=True)
class Exhausted:
    """The budget ran out: the skips it counted (first step, each step's batch) and why."""

    then: str
    first_step: int
    batches: list[Any]
    reason: str


class SkipWindow:
    """The skips within ``budget``'s window (every skip when there is no budget), and how many
    times it ran out. Not thread-safe: the guard calls it under its lock."""

    def __init__(self, budget: SkipBudget | None) -> None:
        self.budget = budget
        self.skips: deque[tuple[int, Any]] = deque()
        self.exhausted = 0  #: how many times the budget ran out
        self.rollbacks = 0  #: of those, rollbacks asked for

    def skipped(self, step: int, batch: Any) -> None:
        """``step``'s update (its batch ``batch``) was skipped."""
        self.skips.append((step, batch))

    def spend(self, step: int, trip: str | None) -> Exhausted | None:
        """After ``step`` is read (``trip``: its trip's reason, None when it did not trip):
        drop the skips older than the window; whether the budget ran out at this trip."""
        assert self.budget is not None
        skips = self.skips
        while skips and skips[0][0] <= step - self.budget.steps:
            skips.popleft()
        if len(skips) < self.budget.skips or trip is None:
            return None
        taken = list(skips)
        skips.clear()
        self.exhausted += 1
        if self.budget.then == "rollback":
            self.rollbacks += 1
        return Exhausted(
            self.budget.then,
            taken[0][0],
            flatten([TrainedAt(s) if b is None else b for s, b in taken]),
            f"{len(taken)} updates skipped within {self.budget.steps} steps "
            f"(steps {[s for s, _ in taken]}; the last: {trip})",
        )


__all__ = [
    "BUDGET_ACTIONS",
    "Exhausted",
    "MicroBatches",
    "SkipBudget",
    "SkipWindow",
    "TrainedAt",
    "flatten",
]
