"""VanishingGradient: a gradient whose mean absolute value fell below a threshold."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensortap.rules.builtin._common import names_in
from tensortap.rules.rule import Rule


class VanishingGradient(Rule):
    """Fires when the mean |gradient| of any tensor in ``gradients`` is below ``threshold``.

    Works from the raw gradients or from a saved ``mean`` reduction on absolute values.
    """

    collections_needed = ("gradients",)

    def __init__(self, base_trial: Any, threshold: float = 1e-7) -> None:
        super().__init__(base_trial)
        self.check_param("threshold", threshold, threshold >= 0, "a number >= 0")
        self.threshold = threshold

    def invoke_at_step(self, step: int) -> bool:
        names = names_in(self.base_trial, "gradients", step)
        if not names:
            raise self.skip("no gradients saved at this step")
        # every gradient of the step in one read and one vectorised reduction
        means = self.base_trial.step_block(step).reduce(names, "mean", abs=True)
        means[np.isnan(means)] = math.inf  # a NaN gradient is ExplodingTensor's to report
        i = int(np.argmin(means))
        worst, smallest = names[i], float(means[i])
        fired = smallest < self.threshold
        verb = "is below" if fired else "is above"
        self.explain(
            f"smallest mean |gradient| is {smallest:.3g} ({worst}), which {verb} the "
            f"threshold {self.threshold:g}",
            tensors=[worst],
            value=smallest,
            threshold=self.threshold,
        )
        return fired
