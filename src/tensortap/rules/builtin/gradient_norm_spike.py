"""GradientNormSpike: the global gradient norm jumped far above its recent baseline."""

from __future__ import annotations

import functools

from tensortap.core._vitals import Vital
from tensortap.rules._numbers import GlobalNorm, Norm
from tensortap.rules.builtin._common import fire_nonfinite, names_in
from tensortap.rules.builtin._spike import SpikeRule

_NO_GRADIENTS = "no gradients saved at this step"


class GradientNormSpike(SpikeRule):
    """The global gradient norm (the L2 norm over every tensor in ``gradients``) against the
    median of its last ``window`` saved values: the early warning of divergence. Uses a saved
    ``l2`` norm of each gradient, or computes it from the raw gradient. A spike is a warning,
    however long (recurrent LSTM gradients spike 10x their median two saved steps in a row in
    healthy runs); the damage, when there is some, shows in the loss (LossSpike,
    LossNotDecreasing) and NaN/inf gradients are a problem. Where the vital sign
    ``vitals/grad_norm`` was saved (the total norm before clipping, at every step) it is the
    global norm, and no gradient is read.
    """

    collections_needed = ("gradients",)
    cause = "exploding_gradient"
    lasting_is_problem = False

    def declare_numbers(self) -> None:
        trial = self.base_trial
        names = functools.partial(names_in, trial, "gradients")
        self.reads(GlobalNorm(names, _NO_GRADIENTS, vital=Vital.GRAD_NORM))

    def judge(self, step: int, norm: Norm) -> bool:
        if norm.nonfinite:
            return fire_nonfinite(self, list(norm.nonfinite), "the gradient")
        return self.judge_value("global", norm.value, "global gradient norm", list(norm.tensors))
