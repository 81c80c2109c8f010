"""Decisions from evidence inside a trainer (Hugging Face's ``Trainer``): a guard on the
optimizer the trainer built, a replayer of its steps, and remedies, following the rollback as
a plain PyTorch loop does (see :mod:`tensortap.healing._rollback`, "Decisions from evidence").

A trainer builds its optimizer when it starts (and a new one each time
``train_with_rollback`` trains again from a checkpoint), so :meth:`TrainerHealing.begin` is
called with the model and the optimizer of each run: the guard is made on that optimizer (a
new one per run: its window starts again after a restore), the one replayer (its budget kept
across runs) follows it and the rollback, and the one :class:`~tensortap.pytorch.Remedies`
moves to it, so a remedy the rollback turned on between two runs acts on the next run's
optimizer. The adapter tells it, per step: :meth:`capture` (the batch, before the forward
pass), :meth:`observe` (the loss, after the backward pass, before ``optimizer.step()``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import SkipBudget
from tensortap.healing._rollback import Rollback
from tensortap.pytorch._guard import Guard
from tensortap.pytorch._remedies import Remedies
from tensortap.pytorch._replay import Replayer

log = logging.getLogger(__name__)


class TrainerHealing:
    """A guard with ``budget`` on each run's optimizer, a replayer that recomputes a kept
    batch's loss with ``step_fn(model, batch)``, and ``Remedies(optimizer, **remedies)`` given
    to the rollback (``remedies=None``: none; a numerics fault then stops at once)."""

    def __init__(
        self,
        rollback: Rollback,
        step_fn: Callable[[nn.Module, Any], Any],
        *,
        budget: SkipBudget,
        remedies: dict[str, Any] | None,
        keep: int = 4,
    ) -> None:
        if not isinstance(budget, SkipBudget) or budget.then != "rollback":
            raise InvalidConfigError(
                "the guard's budget must be a SkipBudget that rolls back, e.g. "
                f"tt.SkipBudget(2, 10, then='rollback'), got {budget!r}"
            )
        if remedies is not None and not isinstance(remedies, dict):
            raise InvalidConfigError(
                "remedies must be None or the keyword arguments of tt.Remedies (e.g. "
                f"{{'lr_factor': 0.1, 'steps': 50}}), got {remedies!r}"
            )
        if remedies is not None and rollback.remedies is not None:
            raise InvalidConfigError(
                "the Rollback already has remedies=; the callback makes them on the trainer's "
                "optimizer: leave one of the two out"
            )
        self.rollback, self.step_fn, self.budget = rollback, step_fn, budget
        self._remedy_options, self.keep = remedies, keep
        #: The current run's guard, the replayer, the remedies (None until :meth:`begin`).
        self.guard: Guard | None = None
        self.replayer: Replayer | None = None
        self.remedies: Remedies | None = None

    def begin(self, model: nn.Module, optimizer: Any) -> None:
        """A run starts with ``model`` and the ``optimizer`` the trainer built."""
        optimizer = _unwrapped(optimizer)
        if self.replayer is None or self.replayer.model is not model:
            self.replayer = Replayer(model, self.step_fn, keep=self.keep)
        if self.guard is not None:
            self.guard.remove()
        self.guard = Guard(optimizer, model, budget=self.budget, rollback=self.rollback)
        self.replayer.follow(self.guard, rollback=self.rollback)
        if self._remedy_options is not None:
            if self.remedies is None:
                self.remedies = Remedies(optimizer, **self._remedy_options)
                self.rollback.remedies = self.remedies
            else:
                self.remedies.use(optimizer)

    def before_step(self) -> None:
        """At a step boundary: the guard's decisions read, the replays asked for run."""
        if self.replayer is not None:
            self.replayer.before_step()

    def capture(self, batch: Any, step: int, batch_id: Any) -> None:
        """Step ``step`` trains ``batch`` (``batch_id``: its id in the skip list)."""
        if self.replayer is not None:
            self.replayer.capture(batch, batch_id=batch_id, step=step)

    def observe(
        self,
        loss: torch.Tensor,
        step: int,
        batch_id: Any,
        *,
        step_loss: torch.Tensor | None = None,
    ) -> None:
        """Step ``step``'s loss, its gradients computed, before the optimizer's step (of an
        accumulated step: its last micro-batch's, ``step_loss`` the sum of every micro-batch's,
        which a replay of the whole step returns)."""
        if self.replayer is None or self.guard is None:
            return
        try:
            self.replayer.after_backward(loss if step_loss is None else step_loss)
        except InvalidConfigError:  # no capture this step (its forward pass was not seen)
            log.warning("tensortap: step %d was not captured for a replay", step)
        self.guard.observe(loss, batch=batch_id, step=step)

    def observe_micro(self, loss: torch.Tensor, step: int, batch_id: Any) -> None:
        """A micro-batch of step ``step`` that is not its last: its loss and id join the
        step's (the guard judges the step on its worst micro-batch, at the optimizer's step)."""
        if self.guard is not None:
            self.guard.observe(loss, batch=batch_id, step=step)

    def end(self) -> None:
        """A run ended: the guard's last decisions are read (its trips are replayed at the
        next boundary)."""
        if self.guard is not None:
            self.guard.flush()


def _unwrapped(optimizer: Any) -> Any:
    """The ``torch.optim.Optimizer`` inside an accelerator's wrapper (whose step hooks would
    not run)."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer
