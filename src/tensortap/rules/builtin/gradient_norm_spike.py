"""GradientNormSpike: the global gradient norm jumped far above its recent baseline."""

from __future__ import annotations

import math

from tensortap.rules.builtin._common import names_in
from tensortap.rules.builtin._spike import SpikeRule


class GradientNormSpike(SpikeRule):
    """The global gradient norm (the L2 norm over every tensor in ``gradients``) against the
    median of its last ``window`` saved values: the early warning of divergence. Uses a saved
    ``l2`` norm of each gradient, or computes it from the raw gradient.
    """

    collections_needed = ("gradients",)

    def set_required_tensors(self, step: int) -> None:
        for name in names_in(self.base_trial, "gradients", step):
            self.req_tensors.add(name, [step])

    def invoke_at_step(self, step: int) -> bool:
        names = names_in(self.base_trial, "gradients", step)
        if not names:
            raise self.skip("no gradients saved at this step")
        total = sum(self.base_trial.tensor(n).reduction_value(step, "l2") ** 2 for n in names)
        return self.judge("global", math.sqrt(total), "global gradient norm", names)
