"""VanishingGradient: a gradient whose mean absolute value fell below a threshold."""

from __future__ import annotations

import math
from typing import Any

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

    def set_required_tensors(self, step: int) -> None:
        for name in names_in(self.base_trial, "gradients", step):
            self.req_tensors.add(name, [step])

    def invoke_at_step(self, step: int) -> bool:
        names = names_in(self.base_trial, "gradients", step)
        if not names:
            raise self.skip("no gradients saved at this step")
        worst, smallest = names[0], math.inf
        for name in names:
            value = self.base_trial.tensor(name).reduction_value(step, "mean", abs=True)
            if value < smallest:
                worst, smallest = name, value
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
