"""Overfit: the validation loss has drifted above the training loss."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import (
    fire_nonfinite,
    loss_names,
    metric_at,
    metric_pair,
    scalar,
    step_mode,
)
from tensortap.rules.finding import Severity
from tensortap.rules.rule import Rule

#: The validation loss this far (relative) above its best, training still falling: overfitting.
_RISEN = 0.1


class Overfit(Rule):
    """Compares the mean validation (EVAL) loss of each evaluation phase with the mean training
    loss of the training phase before it; fires when ``(val - train) / train`` exceeds
    ``ratio_threshold`` in ``patience`` consecutive evaluation phases, from global step
    ``start_step`` on. A phase is a run of consecutive steps of one mode.

    A validation loss somewhat above the training loss is normal (smdebug's default ratio of
    0.1 is exceeded by most healthy runs), so exceeding it is a *warning*. It is a *problem*
    when the model is overfitting as it trains: the gap exceeds the ratio while the validation
    loss has risen more than 10% above its best and the training loss went on falling. A NaN
    or infinite loss is a problem.

    With ``training_metric`` and ``validation_metric`` (regexes of scalars saved at the same
    steps, such as XGBoost's ``train-logloss`` and ``validation-logloss``), each step compares
    the two metrics instead, and is its own phase.
    """

    collections_needed = ("losses",)

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        start_step: int = 0,
        patience: int = 1,
        ratio_threshold: float = 0.1,
        training_metric: str = "",
        validation_metric: str = "",
    ) -> None:
        super().__init__(base_trial)
        self.training_metric, self.validation_metric = metric_pair(
            self, training_metric, validation_metric
        )
        self.check_param("patience", patience, patience >= 1, "an integer >= 1")
        self.check_param("start_step", start_step, start_step >= 0, "an integer >= 0")
        self.tensor_regex = tensor_regex or []
        self.start_step = start_step
        self.patience = patience
        self.ratio_threshold = ratio_threshold
        self._train: list[float] = []  # losses of the current (or last) training phase
        self._val: list[float] = []  # losses of the current evaluation phase
        self._last_mode: ModeKeys | None = None
        self._exceeded: list[bool] = []  # per evaluation phase, latest verdict
        # (validation, training) means of each completed evaluation phase: the trend is judged
        # on whole passes only (a pass's first batches may be easier or harder than the rest)
        self._phases: list[tuple[float, float]] = []

    def _loss(self, step: int) -> float | None:
        names = loss_names(self.base_trial, True, self.tensor_regex, step)
        if not names:
            return None
        return float(np.mean([scalar(self.base_trial.tensor(n), step) for n in names]))

    def invoke_at_step(self, step: int) -> bool:
        if self.training_metric:
            return self._compare_metrics(step)
        mode, _ = step_mode(self.base_trial, step)
        loss = self._loss(step)
        if loss is None:
            raise self.skip("no loss saved at this step")
        if not np.isfinite(loss):
            names = loss_names(self.base_trial, True, self.tensor_regex, step)
            return fire_nonfinite(self, names, "the loss")
        new_phase = mode != self._last_mode
        self._last_mode = mode
        if mode == ModeKeys.TRAIN:
            if new_phase:
                self._train = []
            self._train.append(loss)
            self.explain("training step: its loss joins the training baseline")
            return False
        if mode != ModeKeys.EVAL:
            self.explain(f"{mode.name} steps are not compared")
            return False
        if new_phase:
            if self._val and self._train:
                self._phases.append((float(np.mean(self._val)), float(np.mean(self._train))))
            self._val = []
            self._exceeded.append(False)
        self._val.append(loss)
        if not self._train:
            self.explain("no training loss before this evaluation yet")
            return False
        return self._judge(step, float(np.mean(self._train)), float(np.mean(self._val)))

    def _compare_metrics(self, step: int) -> bool:
        train = metric_at(self.base_trial, self.training_metric, step)
        val = metric_at(self.base_trial, self.validation_metric, step)
        if train is None or val is None:
            raise self.skip("the training or validation metric was not saved at this step")
        if not (np.isfinite(train) and np.isfinite(val)):
            return fire_nonfinite(self, [self.training_metric, self.validation_metric], "a metric")
        self._exceeded.append(False)
        self._phases.append((val, train))
        return self._judge(step, train, val)

    def _judge(self, step: int, train: float, val: float) -> bool:
        ratio = (val - train) / abs(train) if train else float("inf") * (val > 0)
        self._exceeded[-1] = step >= self.start_step and ratio > self.ratio_threshold
        run = 0
        for exceeded in reversed(self._exceeded):
            if not exceeded:
                break
            run += 1
        fired = run >= self.patience
        best = min(self._phases, default=None)
        last = self._phases[-1] if self._phases else None
        overfitting = (
            best is not None
            and last is not None
            and last[0] > best[0] * (1 + _RISEN)
            and last[1] < best[1]
        )
        severity = Severity.PROBLEM if overfitting else Severity.WARNING
        trend = (
            f"; the validation loss rose from its best {best[0]:.4g} to {last[0]:.4g} while "
            f"the training loss fell from {best[1]:.4g} to {last[1]:.4g}: overfitting"
            if overfitting and best is not None and last is not None
            else ""
        )
        self.explain(
            f"validation loss {val:.4g} vs training loss {train:.4g}: ratio {ratio:.3g} "
            f"({'above' if ratio > self.ratio_threshold else 'within'} {self.ratio_threshold:g}; "
            f"{run} of {self.patience} evaluation phases in a row){trend}",
            value=ratio,
            threshold=self.ratio_threshold,
            severity=severity,
        )
        return fired
