"""GradientNormSpike: the global gradient norm jumped far above its recent baseline."""

from __future__ import annotations

import math

import numpy as np

from tensortap.rules.builtin._common import fire_nonfinite, names_in
from tensortap.rules.builtin._spike import SpikeRule


class GradientNormSpike(SpikeRule):
    """The global gradient norm (the L2 norm over every tensor in ``gradients``) against the
    median of its last ``window`` saved values: the early warning of divergence. Uses a saved
    ``l2`` norm of each gradient, or computes it from the raw gradient. A spike is a warning,
    however long (recurrent LSTM gradients spike 10x their median two saved steps in a row in
    healthy runs); the damage, when there is some, shows in the loss (LossSpike,
    LossNotDecreasing) and NaN/inf gradients are a problem.
    """

    collections_needed = ("gradients",)
    cause = "exploding_gradient"
    lasting_is_problem = False

    def invoke_at_step(self, step: int) -> bool:
        names = names_in(self.base_trial, "gradients", step)
        if not names:
            raise self.skip("no gradients saved at this step")
        norms = self.base_trial.step_block(step).reduce(names, "l2")
        if not np.isfinite(norms).all():
            bad = [n for n, v in zip(names, norms.tolist(), strict=True) if not math.isfinite(v)]
            return fire_nonfinite(self, bad, "the gradient")
        return self.judge(
            "global", math.sqrt(float(np.sum(norms**2))), "global gradient norm", names
        )
