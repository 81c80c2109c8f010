"""VanishingGradient: a gradient whose mean absolute value fell below a threshold."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules.builtin._common import (
    GRADIENT_PREFIXES,
    fire_nonfinite,
    loss_names,
    names_in,
    scalar,
)
from tensortap.rules.finding import Severity
from tensortap.rules.rule import Rule

#: A loss under this share of its first value: the model is at (or near) a minimum.
_CONVERGED = 0.05


class VanishingGradient(Rule):
    """Fires when the mean |gradient| of any tensor in ``gradients`` is below ``threshold``.

    The gradients of biases are not judged when there are others: a bias feeding a
    normalisation layer (Conv -> BatchNorm) has a gradient of ~0 by construction, and a
    vanishing gradient shows in the weights. Frozen parameters (``requires_grad=False``) have
    no saved gradient. A NaN or infinite gradient is a problem (non-finite), never "vanishing"
    or fine. Works from the raw gradients or from a saved ``mean`` reduction on absolute values.

    Severity: a problem, unless the loss (where saved) has come down to under 5% of its
    first saved value: a model at its minimum has small gradients by nature (advice).
    """

    collections_needed = ("gradients",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        cls.check_param("threshold", threshold, threshold >= 0, "a number >= 0")

    def __init__(self, base_trial: Any, threshold: float = 1e-7) -> None:
        super().__init__(base_trial)
        self.threshold = threshold
        self._first_loss: float | None = None
        self._looked = False

    def invoke_at_step(self, step: int) -> bool:
        names = names_in(self.base_trial, "gradients", step)
        if not names:
            raise self.skip("no gradients saved at this step")
        biases = names_in(self.base_trial, "biases", step)
        if biases:  # their gradients are not judged (see the docstring)
            of_biases = {p + b for b in biases for p in GRADIENT_PREFIXES}
            names = [n for n in names if n not in of_biases] or names
        # every gradient of the step in one read and one vectorised reduction
        means = self.base_trial.step_block(step).reduce(names, "mean", abs=True)
        bad = [n for n, m in zip(names, means.tolist(), strict=True) if not math.isfinite(m)]
        if bad:
            return fire_nonfinite(self, bad, "the gradient")
        i = int(np.argmin(means))
        worst, smallest = names[i], float(means[i])
        fired = smallest < self.threshold
        verb = "is below" if fired else "is above"
        severity, note = Severity.PROBLEM, ""
        # the first step's loss is the reference; after it, the loss matters only when firing
        loss = self._loss_share(step) if fired or not self._looked else None
        if loss is not None and loss < _CONVERGED:
            severity = Severity.ADVICE
            note = (
                f"; the loss is {100 * loss:.2g}% of where it started, and small gradients are "
                "expected at a minimum"
            )
        self.explain(
            f"smallest mean |gradient| is {smallest:.3g} ({worst}), which {verb} the "
            f"threshold {self.threshold:g}{note}",
            tensors=[worst],
            value=smallest,
            threshold=self.threshold,
            severity=severity,
            cause="vanishing_gradient",
        )
        return fired

    def _loss_share(self, step: int) -> float | None:
        """The loss at ``step`` as a share of the first loss this rule saw (None: no loss)."""
        self._looked = True
        names = loss_names(self.base_trial, True, None, step)
        if not names:
            return None
        loss = float(np.mean([scalar(self.base_trial.tensor(n), step) for n in names]))
        if self._first_loss is None:
            self._first_loss = loss
        first = self._first_loss
        return loss / first if first > 0 and math.isfinite(loss) else None
