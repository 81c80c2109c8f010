"""PoorWeightInitialization: signs in the first steps that the initial weights are badly scaled."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import (
    fire_nonfinite,
    has_raw,
    loss_names,
    names_in,
    nonfinite_names,
    scalar,
    step_mode,
)
from tensortap.rules.finding import Severity
from tensortap.rules.rule import Rule


class PoorWeightInitialization(Rule):
    """Looks at the first ``steps`` TRAIN steps only, and fires on any of:

    - the variance of the activation inputs (``activation_inputs_regex``) differs by more than
      ``threshold`` times between layers (well-scaled initialisation keeps it similar);
    - the gradients of all layers together span less than ``distribution_range`` between their
      5th and 95th percentiles (they barely move anything);
    - the loss has not decreased ``patience`` steps after the first saved step.

    Severity: the variances are the mark of a badly scaled initialisation (a problem); a
    narrow gradient spread or a slow first few steps also happen in healthy models (an
    autoencoder with a sigmoid output, a warm-up), so they are warnings. Non-finite activation
    inputs are a problem (non-finite).
    """

    collections_needed = ("relu_activations", "gradients", "losses")

    def __init__(
        self,
        base_trial: Any,
        activation_inputs_regex: list[str] | None = None,
        threshold: float = 10.0,
        distribution_range: float = 0.001,
        patience: int = 5,
        steps: int = 10,
    ) -> None:
        super().__init__(base_trial)
        self.check_param("threshold", threshold, threshold > 1, "a ratio > 1")
        self.check_param(
            "distribution_range", distribution_range, distribution_range >= 0, "a number >= 0"
        )
        self.check_param("patience", patience, patience >= 1, "an integer >= 1")
        self.check_param("steps", steps, steps >= 1, "an integer >= 1")
        self.activation_inputs_regex = activation_inputs_regex or [
            ".*relu_input",
            ".*tanh_input",
            ".*sigmoid_input",
        ]
        self.threshold = threshold
        self.distribution_range = distribution_range
        self.patience = patience
        self.steps = steps
        self._first_loss: tuple[int, float] | None = None

    def _activation_inputs(self, step: int) -> list[str]:
        names: set[str] = set()
        for regex in self.activation_inputs_regex:
            names.update(self.base_trial.tensor_names(step=step, regex=regex))
        return sorted(names)

    def _variance_ratio(self, step: int) -> tuple[float, list[str]] | None:
        variances = []
        for name in self._activation_inputs(step):
            tensor = self.base_trial.tensor(name)
            if has_raw(tensor, step):
                variances.append((float(np.var(tensor.value(step), dtype=np.float64)), name))
        if len(variances) < 2:
            return None
        (low, low_name), (high, high_name) = min(variances), max(variances)
        ratio = high / low if low > 0 else math.inf
        return ratio, [high_name, low_name]

    def _gradient_range(self, step: int) -> float | None:
        grads = [
            self.base_trial.tensor(n).value(step).ravel()
            for n in names_in(self.base_trial, "gradients", step)
            if has_raw(self.base_trial.tensor(n), step)
        ]
        if not grads:
            return None
        low, high = np.percentile(np.concatenate(grads), [5, 95])
        return float(high - low)

    def invoke_at_step(self, step: int) -> bool:
        mode, s = step_mode(self.base_trial, step)
        if mode != ModeKeys.TRAIN:
            self.explain("only TRAIN steps are judged")
            return False
        if s >= self.steps:
            self.explain(f"only the first {self.steps} training steps are judged")
            return False
        checked = False
        inputs = self._activation_inputs(step)
        bad = nonfinite_names(self.base_trial, inputs, step)
        if bad:
            return fire_nonfinite(self, bad, "the activation input")
        ratio = self._variance_ratio(step)
        if ratio is not None:
            checked = True
            if ratio[0] > self.threshold:
                self.explain(
                    f"activation input variance differs {ratio[0]:.3g}x between {ratio[1][0]} "
                    f"and {ratio[1][1]} (limit {self.threshold:g}x)",
                    tensors=ratio[1],
                    value=ratio[0],
                    threshold=self.threshold,
                )
                return True
        spread = self._gradient_range(step)
        if spread is not None:
            checked = True
            if spread < self.distribution_range:
                self.explain(
                    f"gradients span only {spread:.3g} between their 5th and 95th percentiles "
                    f"(limit {self.distribution_range:g})",
                    value=spread,
                    threshold=self.distribution_range,
                    severity=Severity.WARNING,
                )
                return True
        losses = loss_names(self.base_trial, True, None, step)
        if losses:
            checked = True
            loss = float(np.mean([scalar(self.base_trial.tensor(n), step) for n in losses]))
            if self._first_loss is None:
                self._first_loss = (s, loss)
            first_step, first = self._first_loss
            if s >= first_step + self.patience and loss >= first:
                self.explain(
                    f"loss {loss:.4g} at step {s} is no lower than {first:.4g} at step "
                    f"{first_step}",
                    tensors=losses,
                    value=loss,
                    threshold=first,
                    severity=Severity.WARNING,
                )
                return True
        if not checked:
            raise self.skip("no activation inputs, gradients or losses saved at this step")
        self.explain(
            "activation variances, gradient spread and loss look like a sound initialisation",
            value=None if ratio is None else ratio[0],
            threshold=self.threshold,
        )
        return False
