"""A guard for Keras 3's ``model.fit``: a callback that judges each training batch's loss and
update norm against a robust window of the last accepted batches (the rule every tensortap
guard uses, :func:`tensortap.healing.score`) and undoes a bad batch's update.

::

    guard = tensortap.keras.Guard(budget=SkipBudget(skips=3, steps=100))
    model.fit(x, y, callbacks=[guard])
    guard.events        # each trip: its step, why, the batch (epoch, index in the epoch)

Keras 3 runs its train step compiled, on its backend, and gives a callback no hold on the step
itself; so the guard works between batches: before each batch it copies the model's variables
(weights, trainable or not), the optimizer's (its slots and its ``iterations``) and the
metrics' (the loss tracker's running total among them), with ``keras.ops.copy`` on the
backend's device; after it, it measures the update norm and the batch's own loss (from the loss
tracker's total and count), decides on the host (one read), and, where the batch trips, assigns
every copied variable back. The batch then leaves no trace: the weights, the optimizer's state
and step count, and the epoch's running loss are as they were before it (so one NaN batch does
not make every later ``logs["loss"]`` NaN), and so are the ``logs`` the later callbacks get.
Its cost is a copy of the model and the optimizer's state per batch, and a few eager ops per
variable: meant for the models Keras fits on one host; the Optax guard
(``tensortap.jax.Guard``) decides inside the compiled step instead. TensorFlow and torch
backends; the JAX backend is refused (its ``fit`` keeps the state outside the variables
between batches).

The gradient norm is not measured (the train step does not show it to a callback): the loss and
the update norm are judged. ``steps_per_execution`` above 1 runs several batches per call,
which the guard then judges (and undoes) together.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import SkipBudget
from tensortap.healing._events import GuardEvent, GuardLog, GuardStatus
from tensortap.healing._options import GuardSettings
from tensortap.healing._window import RobustWindow

log = logging.getLogger(__name__)
SIGNALS = ("loss", "update_norm")  # what a Keras guard can measure


class Guard(keras.callbacks.Callback):  # type: ignore[misc]
    """See the module docstring. ``action``, ``spike_z``, ``spike_ratio``, ``window``,
    ``warmup``, ``signals``, ``budget`` and ``rollback`` as in
    :class:`tensortap.healing.GuardSettings` (the PyTorch ``Guard``'s); ``"stop"`` and an
    exhausted ``SkipBudget(then="stop")`` set ``model.stop_training``."""

    def __init__(
        self,
        action: str = "skip",
        spike_z: float = 6.0,
        spike_ratio: float = 2.0,
        window: int = 50,
        warmup: int = 10,
        *,
        signals: Sequence[str] = SIGNALS,
        budget: SkipBudget | None = None,
        rollback: Any = None,
    ) -> None:
        super().__init__()
        self.settings = GuardSettings(
            action, spike_z, spike_ratio, window, warmup, tuple(signals), budget, rollback
        )
        if "grad_norm" in self.settings.signals:
            log.info(
                "tensortap keras guard: the gradient norm is not measured, only judged if given"
            )
        self._window = RobustWindow(
            window=window,
            warmup=warmup,
            spike_z=spike_z,
            spike_ratio=spike_ratio,
            signals=self.settings.signals,
        )
        self._log = GuardLog(self.settings)
        self.step = 0  #: training batches judged so far (across epochs and fits)
        self._epoch = 0
        self._variables: list[Any] = []
        self._trainable: list[int] = []  # positions of the trainable weights in _variables
        self._loss_tracker: Any = None
        self._saved: list[Any] = []  # backend tensors

    # -- the callback --
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if keras.backend.backend() == "jax":
            raise InvalidConfigError(
                "tensortap.keras.Guard cannot undo a batch on Keras's JAX backend: its fit "
                "carries the weights and optimizer state between batches outside the variables "
                "a callback can assign. Use the TensorFlow or torch backend, or an Optax loop "
                "with tensortap.jax.Guard"
            )
        if getattr(self.model, "steps_per_execution", 1) != 1:
            log.warning(
                "tensortap keras guard: steps_per_execution=%s runs several batches per call; "
                "the guard judges and undoes them together",
                self.model.steps_per_execution,
            )

    def _collect(self) -> list[Any]:
        """The variables a batch changes: the model's, the optimizer's, the metrics' (the
        optimizer and the metrics make theirs in the first step, so asked each batch)."""
        model = self.model
        metrics = [v for m in model.metrics for v in m.variables]
        variables = [*model.variables, *model.optimizer.variables, *metrics]
        trainable = {id(v) for v in model.trainable_variables}
        self._trainable = [i for i, v in enumerate(variables) if id(v) in trainable]
        self._loss_tracker = next(
            (m for m in model.metrics if m.name == "loss" and hasattr(m, "total")), None
        )
        return variables

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._variables = self._collect()
        # copies on the backend's device (a NumPy view of a TensorFlow variable on the CPU
        # shares its memory: the step would write into it)
        self._saved = [keras.ops.copy(v.value) for v in self._variables]

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        ops = keras.ops
        squares = [
            ops.sum(ops.square(ops.cast(self._variables[i].value - self._saved[i], "float32")))
            for i in self._trainable
        ]
        update_norm = float(ops.convert_to_numpy(ops.sqrt(ops.sum(ops.stack(squares)))))
        loss = self._batch_loss(logs)
        # an update of exactly zero is no update (gradient_accumulation_steps' micro-steps): not
        # judged, nor let into the window, where zeros would make every real update a spike
        norm = None if update_norm == 0 else update_norm
        row = self._window.judge([loss, None, norm], undo=self.settings.undoes)
        present = (loss is not None, False, norm is not None)
        event = self._log.take(self.step, row, batch=(self._epoch, batch), present=present)
        if event is not None and event.skipped:
            self._undo()
            self._restate(logs)
        boundary = getattr(self.settings.rollback, "boundary", None)
        if event is not None and callable(boundary):  # a RollbackCallback: restore now
            boundary()
        if self._log.should_stop:
            self.model.stop_training = True
        self.step += 1

    def _undo(self) -> None:
        """Every variable as before the batch; those the batch made (the optimizer's slots and
        the metrics', in the first step) to zeros, how Keras starts them."""
        saved = {id(v): value for v, value in zip(self._variables, self._saved, strict=True)}
        for variable in self._collect():
            value = saved.get(id(variable))
            if value is None:
                value = np.zeros(
                    tuple(variable.shape), dtype=keras.backend.standardize_dtype(variable.dtype)
                )
            variable.assign(value)

    def _restate(self, logs: dict[str, Any] | None) -> None:
        """The metrics in ``logs`` as the restored trackers now say (Keras hands every later
        callback the same dict, made before this one ran: a ProgbarLogger, a History or the
        user's own callback would otherwise read the undone batch's NaN)."""
        if not logs:
            return
        for metric in self.model.metrics:
            result = metric.result()
            values = result if isinstance(result, dict) else {metric.name: result}
            for name, value in values.items():
                if name in logs:
                    logs[name] = float(keras.ops.convert_to_numpy(value))

    def _batch_loss(self, logs: dict[str, Any] | None) -> float | None:
        """This batch's own loss: the change in the loss tracker's total over the change in its
        count (``logs["loss"]`` is the epoch's running mean); None when it cannot be told."""
        tracker = self._loss_tracker
        if tracker is None or "loss" not in self.settings.signals:
            return None
        index = {id(v): i for i, v in enumerate(self._variables)}
        total, count = (getattr(tracker, name, None) for name in ("total", "count"))
        if id(total) not in index or id(count) not in index:
            return None
        now, saved = (
            [float(keras.ops.convert_to_numpy(t)) for t in pair]
            for pair in (
                (total, count),
                (self._saved[index[id(total)]], self._saved[index[id(count)]]),
            )
        )
        d_total, d_count = now[0] - saved[0], now[1] - saved[1]
        return d_total / d_count if d_count > 0 else None

    # -- what it did --
    @property
    def events(self) -> list[GuardEvent]:
        """Every trip so far."""
        return list(self._log.events)

    @property
    def skipped(self) -> int:
        """Updates undone."""
        return self._log.skipped

    @property
    def should_stop(self) -> bool:
        """Whether training should stop (it also sets ``model.stop_training``)."""
        return self._log.should_stop

    @property
    def status(self) -> GuardStatus:
        """What the guard did so far."""
        return self._log.status


__all__ = ["SIGNALS", "Guard"]
