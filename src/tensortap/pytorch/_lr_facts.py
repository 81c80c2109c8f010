"""Facts about how the learning rate is scheduled, part of the training loop's facts (see
:mod:`tensortap.pytorch._loop_facts`): per optimizer holding the model's parameters, how its
learning rate went (:class:`~tensortap.core._lr_track.RateTrack`: ``lr/<Optimizer>`` is its
first param group's whose rate is not 0); per scheduler of such an optimizer, its step count,
its steps per optimizer step and how many steps its schedule spans
(``scheduler_*/<Optimizer>/<Scheduler>``).

A learning rate is read at each optimizer step (one held on the device is not, as reading it
would wait for the device); the facts are noted when the training loop's facts are measured."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tensortap.core._lr_track import RateTrack


@dataclass
class _Scheduler:
    base_epoch: int
    base_steps: int


class LearningRates:
    """The learning rates of the optimizers, and the schedulers seen stepping them."""

    def __init__(self, note: Callable[[str, Any], None]) -> None:
        self._note = note  # keeps a fact (saved when training_loop is next due)
        self._rates: weakref.WeakKeyDictionary[torch.optim.Optimizer, RateTrack] = (
            weakref.WeakKeyDictionary()
        )
        self._schedulers: weakref.WeakKeyDictionary[Any, _Scheduler] = weakref.WeakKeyDictionary()

    def after_step(self, optimizer: torch.optim.Optimizer, steps: int) -> None:
        """``optimizer`` took its ``steps``-th step: read its learning rate."""
        rate = self._rates.get(optimizer)
        if rate is None:
            rate = self._rates[optimizer] = RateTrack()
        lr = _trained_rate(optimizer)
        if isinstance(lr, torch.Tensor):
            if lr.device.type != "cpu":
                return  # reading it would wait for the device
            lr = float(lr)
        if isinstance(lr, (int, float)):
            rate.see(float(lr), steps)

    def has_scheduler(self, scheduler: Any) -> bool:
        """Whether ``scheduler`` was seen stepping."""
        return scheduler in self._schedulers

    def add_scheduler(self, scheduler: Any, optimizer_steps: int) -> None:
        """``scheduler`` stepped for the first time (when it was made, as torch's do), after
        ``optimizer_steps`` steps of its optimizer."""
        self._schedulers[scheduler] = _Scheduler(int(scheduler.last_epoch), optimizer_steps)

    def read(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer``'s learning rate was read (its facts can be noted)."""
        rate = self._rates.get(optimizer)
        return rate is not None and rate.lr is not None

    def measure(self, optimizer: torch.optim.Optimizer, label: str, steps: int) -> None:
        """Note the facts of ``optimizer`` (named ``label``, after ``steps`` steps) and of its
        schedulers; only for an optimizer whose rate was :meth:`read`."""
        for name, value in self._rates[optimizer].facts(label, steps).items():
            self._note(name, value)
        for scheduler, seen in list(self._schedulers.items()):
            if getattr(scheduler, "optimizer", None) is not optimizer:
                continue
            key = f"{label}/{type(scheduler).__name__}"
            scheduler_steps = steps - seen.base_steps
            epochs = int(scheduler.last_epoch) - seen.base_epoch
            self._note(f"scheduler_steps/{key}", int(scheduler.last_epoch))
            if scheduler_steps > 0:
                self._note(f"scheduler_per_step/{key}", epochs / scheduler_steps)
            period = _period(scheduler)
            if period is not None:
                self._note(f"scheduler_period/{key}", period)


def _period(scheduler: Any) -> float | None:
    """How many scheduler steps its schedule spans, where the class says."""
    for attr in ("T_max", "step_size", "T_0", "total_iters"):
        value = getattr(scheduler, attr, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    milestones = getattr(scheduler, "milestones", None)
    if milestones:
        return float(max(milestones))
    return None


def _trained_rate(optimizer: torch.optim.Optimizer) -> Any:
    """The learning rate of the optimizer's first param group whose rate is not exactly 0 (a
    group frozen by a rate of 0 says nothing of how the others train), else of its first."""
    groups = optimizer.param_groups
    if not groups:
        return None
    for group in groups:
        lr = group.get("lr")
        if not (isinstance(lr, (int, float)) and lr == 0):
            return lr
    return groups[0].get("lr")
