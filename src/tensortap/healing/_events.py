"""The host-side record of a guard's decisions: each tripped step as a :class:`GuardEvent`, the
skips counted, the skip budget spent, and whether training should stop."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.healing._budget import Exhausted, SkipWindow
from tensortap.healing._options import GuardSettings
from tensortap.healing._window import BITS, GRAD_NORM, LOSS, MEDIAN, SKIPPED, UPDATE_NORM, Z

log = logging.getLogger(__name__)
_NAMES = ("loss", "gradient norm", "update norm")
_COLUMNS = (LOSS, GRAD_NORM, UPDATE_NORM)


@dataclass(frozen=True)
class GuardEvent:
    """One trip of a guard: its step (the optimizer steps before it, counted from 0), why, the
    batch where the loop named it, the three signals (None where not measured) and whether
    the update was undone."""

    step: int
    reason: str
    batch: Any = None
    loss: float | None = None
    grad_norm: float | None = None
    update_norm: float | None = None
    skipped: bool = False


@dataclass(frozen=True)
class GuardStatus:
    """What a guard did so far."""

    steps: int  #: steps whose decision was read
    trips: int  #: how many times it tripped
    skipped_updates: int  #: updates it undid
    skips_in_budget_window: int  #: skips within the budget's last ``steps`` steps
    budget_exhausted: int  #: how many times the skip budget ran out
    rollbacks_requested: int  #: of those, rollbacks asked for
    lost: int = 0  #: trips the device counted but whose rows were overwritten before a read


def reason(row: Sequence[float], spike_z: float) -> str:
    """Why a step with ``row`` (see :mod:`tensortap.healing._window`) tripped, in words."""
    bits = row[BITS : BITS + 6]
    for i, (name, column) in enumerate(zip(_NAMES, _COLUMNS, strict=True)):
        if bits[i] > 0:
            return f"the {name} is {row[column]}"
    for i, (name, column) in enumerate(zip(_NAMES, _COLUMNS, strict=True)):
        if bits[3 + i] > 0:
            value, median, z = row[column], row[MEDIAN + i], row[Z + i]
            return (
                f"the {name} {value:.4g} is a spike ({z:.1f} robust deviations above its "
                f"median {median:.4g}; spike_z={spike_z:g})"
            )
    return "tripped"


def _number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


class GuardLog:
    """The events of one guard, read on the host in step order with :meth:`take`; the skip
    budget spent and acted on (``"stop"``: :attr:`should_stop`; ``"rollback"``: the
    settings' rollback target asked)."""

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self.events: list[GuardEvent] = []
        self.steps = 0  #: decisions read
        self.skipped = 0  #: updates undone
        self.should_stop = False
        self.exhausted: list[Exhausted] = []
        self.lost = 0
        self._window = SkipWindow(settings.budget)

    def take(
        self,
        step: int,
        row: Sequence[float] | np.ndarray,
        batch: Any = None,
        *,
        present: Sequence[bool] = (),
    ) -> GuardEvent | None:
        """Read ``step``'s row; its event where it tripped. ``present``: whether each signal
        was measured (a NaN that was not measured is None in the event)."""
        row = [float(v) for v in row]
        self.steps += 1
        measured = list(present) or [not math.isnan(row[c]) for c in _COLUMNS]
        tripped = max(row[BITS : BITS + 6]) > 0
        event = None
        if tripped:
            loss, grad_norm, update_norm = (
                row[c] if m else None for c, m in zip(_COLUMNS, measured, strict=True)
            )
            skipped = row[SKIPPED] > 0
            why = reason(row, self.settings.spike_z)
            event = GuardEvent(step, why, batch, loss, grad_norm, update_norm, skipped)
            self.events.append(event)
            log.warning("tensortap guard at step %d (batch %r): %s", step, batch, event.reason)
            if skipped:
                self.skipped += 1
                self._window.skipped(step, batch)
            if self.settings.action == "stop":
                self.should_stop = True
        if self.settings.budget is not None:
            self._spend(step, event)
        return event

    def _spend(self, step: int, event: GuardEvent | None) -> None:
        exhausted = self._window.spend(step, None if event is None else event.reason)
        if exhausted is None:
            return
        self.exhausted.append(exhausted)
        log.warning("tensortap guard: skip budget exhausted at step %d: %s", step, exhausted.reason)
        if exhausted.then == "stop":
            self.should_stop = True
            return
        try:
            self.settings.rollback.request(
                exhausted.first_step, exhausted.batches, exhausted.reason
            )
        except Exception:
            log.exception("tensortap guard: the rollback request failed at step %d", step)

    @property
    def status(self) -> GuardStatus:
        """What the guard did so far, as read."""
        return GuardStatus(
            steps=self.steps,
            trips=len(self.events),
            skipped_updates=self.skipped,
            skips_in_budget_window=len(self._window.skips),
            budget_exhausted=self._window.exhausted,
            rollbacks_requested=self._window.rollbacks,
            lost=self.lost,
        )


__all__ = ["GuardEvent", "GuardLog", "GuardStatus", "reason"]
