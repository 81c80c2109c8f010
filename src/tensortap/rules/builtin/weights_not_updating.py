"""WeightsNotUpdating: parameters with a gradient that did not change after the update."""

from __future__ import annotations

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import (
    fire_nonfinite,
    gradients_by_parameter,
    has_raw,
    nonfinite_names,
    step_mode,
    trained_parameters,
)
from tensortap.rules.rule import Rule


class WeightsNotUpdating(Rule):
    """At a TRAIN step where a parameter (``weights``/``biases``) has a non-zero gradient, its
    value must differ from its previous saved TRAIN step: the optimizer applied that gradient.
    Fires when it is bit-for-bit unchanged — a missing ``optimizer.step()``, a parameter
    left out of the optimizer, a zero learning rate. Parameters with no saved gradient (frozen
    on purpose, ``requires_grad=False``) are not judged, nor those whose gradient is negligible
    against the others' (a bias feeding BatchNorm: its update falls below one float32 ulp).
    A parameter holding NaN or inf is a problem of its own (never "unchanged").
    """

    collections_needed = ("weights", "biases", "gradients")

    def invoke_at_step(self, step: int) -> bool:
        mode, s = step_mode(self.base_trial, step)
        if mode != ModeKeys.TRAIN:
            self.explain("parameters are updated only in TRAIN steps")
            return False
        trial = self.base_trial
        pairs = sorted(trained_parameters(trial, step, gradients_by_parameter(trial, step)).items())
        if not pairs:
            raise self.skip("no parameter with its gradient saved at this step")
        bad = nonfinite_names(self.base_trial, [p for p, _ in pairs], step)
        if bad:
            return fire_nonfinite(self, bad, "the parameter")
        stuck, judged = [], 0
        for param, grad in pairs:
            tensor = self.base_trial.tensor(param)
            earlier = [p for p in tensor.steps(mode=ModeKeys.TRAIN) if p < s]
            if not earlier or not has_raw(tensor, step):
                continue
            g = self.base_trial.tensor(grad)
            if float(g.reduction_value(step, "max", abs=True)) == 0.0:
                continue
            judged += 1
            if np.array_equal(tensor.value(s, mode=mode), tensor.value(earlier[-1], mode=mode)):
                stuck.append(param)
        if not judged:
            raise self.skip("no earlier saved step (or no non-zero gradient) to compare with")
        self.explain(
            f"{len(stuck)} of {judged} parameters with a non-zero gradient did not change"
            + (f": {', '.join(stuck[:5])}{' ...' if len(stuck) > 5 else ''}" if stuck else ""),
            tensors=stuck,
            value=len(stuck),
            threshold=0,
        )
        return bool(stuck)
