"""Overtraining: the training or the validation loss has stopped improving."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import loss_names, metric_at, metric_pair, scalar, step_mode
from tensortap.rules.rule import Rule


class Overtraining(Rule):
    """Tracks the best loss of TRAIN and of EVAL steps (the mean of the loss tensors at a step).
    A new best must beat the old one by more than ``delta`` (an absolute amount, as Keras'
    ``EarlyStopping(min_delta=...)``). Fires when the training loss has not improved for
    ``patience_train`` saved training steps, or the validation loss for
    ``patience_validation`` saved evaluation steps: training on gains nothing more, and
    continuing risks overfitting.

    With ``training_metric`` and ``validation_metric`` (regexes of scalars saved at the same
    steps, such as XGBoost's ``train-rmse`` and ``validation-rmse``), both are tracked at every
    step instead of by mode.
    """

    collections_needed = ("losses",)

    def __init__(
        self,
        base_trial: Any,
        patience_train: int = 5,
        patience_validation: int = 10,
        delta: float = 0.1,
        tensor_regex: list[str] | None = None,
        training_metric: str = "",
        validation_metric: str = "",
    ) -> None:
        super().__init__(base_trial)
        self.training_metric, self.validation_metric = metric_pair(
            self, training_metric, validation_metric
        )
        for name, value in (
            ("patience_train", patience_train),
            ("patience_validation", patience_validation),
        ):
            self.check_param(name, value, value >= 1, "an integer >= 1")
        self.check_param("delta", delta, delta >= 0, "a number >= 0")
        self.patience = {ModeKeys.TRAIN: patience_train, ModeKeys.EVAL: patience_validation}
        self.delta = delta
        self.tensor_regex = tensor_regex or []
        self._best = {ModeKeys.TRAIN: math.inf, ModeKeys.EVAL: math.inf}
        self._since = {ModeKeys.TRAIN: 0, ModeKeys.EVAL: 0}

    def invoke_at_step(self, step: int) -> bool:
        if self.training_metric:
            train = metric_at(self.base_trial, self.training_metric, step)
            val = metric_at(self.base_trial, self.validation_metric, step)
            if train is None or val is None:
                raise self.skip("the training or validation metric was not saved at this step")
            fired_train = self._track(ModeKeys.TRAIN, train, [self.training_metric])
            explanation = self._explanation
            fired_val = self._track(ModeKeys.EVAL, val, [self.validation_metric])
            if fired_train and not fired_val:
                self._explanation = explanation  # say why it fired
            return fired_train or fired_val
        mode, _ = step_mode(self.base_trial, step)
        if mode not in self._best:
            self.explain(f"{mode.name} steps are not tracked")
            return False
        names = loss_names(self.base_trial, True, self.tensor_regex, step)
        if not names:
            raise self.skip("no loss saved at this step")
        loss = float(np.mean([scalar(self.base_trial.tensor(n), step) for n in names]))
        return self._track(mode, loss, names)

    def _track(self, mode: ModeKeys, loss: float, names: list[str]) -> bool:
        if loss < self._best[mode] - self.delta or math.isinf(self._best[mode]):
            self._best[mode], self._since[mode] = loss, 0
        else:
            self._since[mode] += 1
        which = "training" if mode == ModeKeys.TRAIN else "validation"
        since, patience = self._since[mode], self.patience[mode]
        self.explain(
            f"{which} loss {loss:.4g}; best {self._best[mode]:.4g}, not improved by more than "
            f"{self.delta:g} for {since} steps (patience {patience})",
            tensors=names,
            value=since,
            threshold=patience,
        )
        return since >= patience
