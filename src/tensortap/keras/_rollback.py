"""Rolling a Keras 3 ``model.fit`` back: a callback that keeps in-memory checkpoints of the
model's, the optimizer's and the metrics' variables every ``every`` batches, and restores the
last good one when asked (the shared :class:`~tensortap.healing.Rollback` decides: its budget,
its refusals, its events, the branch session).

::

    rollback = tensortap.keras.RollbackCallback(every=10)
    guard = tensortap.keras.Guard(budget=SkipBudget(2, 20, then="rollback"), rollback=rollback)
    model.fit(x, y, callbacks=[guard, rollback])

``fit`` owns its loop and its data: a restore puts the variables back as they were before the
checkpoint's batch and training goes on with the *next* batch; the batches between the
checkpoint and the fault are not trained again (a loop of your own can replay them:
:class:`~tensortap.healing.Rollback` with ``batches=``, docs/jax.md). What it undoes is the
damage a bad step did that the guard did not see at once (a weight change that only later makes
the loss non-finite). The guard restores at once when it asks (whatever the order of the
callbacks); a request from elsewhere (a rule's ``RollbackTraining``) is acted on at the end of
the next batch.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import keras
import numpy as np

from tensortap.exceptions import InvalidConfigError
from tensortap.healing._checkpoints import FunctionCheckpoints
from tensortap.healing._rollback import Rollback, RollbackEvent

log = logging.getLogger(__name__)


class RollbackCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """See the module docstring. ``every``: batches between checkpoints; ``keep``: the
    checkpoints held in memory (each one a copy of the model's and the optimizer's variables on
    the backend's device); ``max_rollbacks``: the rollbacks allowed per run (then training
    stops, ``model.stop_training``)."""

    def __init__(self, every: int = 50, *, keep: int = 2, max_rollbacks: int = 3) -> None:
        super().__init__()
        for name, value in (("every", every), ("keep", keep), ("max_rollbacks", max_rollbacks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfigError(
                    f"RollbackCallback: {name} must be an int >= 1, got {value!r}"
                )
        self.every, self.keep = every, keep
        self._copies: dict[int, list[Any]] = {}
        self.rollback = Rollback(
            FunctionCheckpoints(self._save, self._load), max_rollbacks=max_rollbacks
        )
        self.step = 0  #: training batches seen (across epochs and fits)
        self._epoch = 0

    # -- the seam a guard or a rule asks through --
    def request(self, step: int, batches: list[object], reason: str) -> None:
        """Ask for a rollback (see :meth:`tensortap.healing.Rollback.request`)."""
        self.rollback.request(step, batches, reason)

    def boundary(self) -> None:
        """Act on a pending request now (the guard calls it right after asking)."""
        if not self.rollback.pending:
            return
        self.rollback.restore()
        if self.rollback.should_stop and self.model is not None:
            self.model.stop_training = True

    # -- the callback --
    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.step % self.every == 0:
            self.rollback.checkpoint(self.step)
            for old in self.rollback.checkpoints.steps()[: -self.keep]:
                self.rollback.checkpoints.forget(old)
                self._copies.pop(old, None)
        batch_id: Hashable = (self._epoch, batch)
        self.rollback.trained(self.step, batch_id)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        self.boundary()

    # -- what it did --
    @property
    def events(self) -> list[RollbackEvent]:
        """Every rollback done or refused."""
        return list(self.rollback.events)

    @property
    def rollbacks(self) -> int:
        """Rollbacks done."""
        return int(self.rollback.rollbacks)

    # -- the checkpoints: copies of the variables, on the backend's device --
    def _variables(self) -> list[Any]:
        model = self.model
        metrics = [v for m in model.metrics for v in m.variables]
        return [*model.variables, *model.optimizer.variables, *metrics]

    def _save(self, step: int) -> None:
        self._copies[step] = [keras.ops.copy(v.value) for v in self._variables()]

    def _load(self, step: int) -> None:
        copies = self._copies[step]
        variables = self._variables()
        if len(copies) > len(variables):
            raise InvalidConfigError(
                f"RollbackCallback: the checkpoint of step {step} holds {len(copies)} variables, "
                f"the model now {len(variables)}"
            )
        for i, variable in enumerate(variables):
            # variables made after the checkpoint (the optimizer's, at its first step): zeros
            value = (
                copies[i]
                if i < len(copies)
                else np.zeros(
                    tuple(variable.shape), dtype=keras.backend.standardize_dtype(variable.dtype)
                )
            )
            variable.assign(value)


__all__ = ["RollbackCallback"]
