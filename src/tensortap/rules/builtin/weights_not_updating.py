"""WeightsNotUpdating: parameters with a gradient that did not change after the update."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from tensortap.rules._finding import Said
from tensortap.rules._numbers import DOUBT, Numbers, Skipped
from tensortap.rules._rule import Rule, StepSkipped
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    fire_nonfinite,
    gradients_by_parameter,
    has_raw,
    loss_is_zero,
    nonfinite_names,
    optional_names_in,
    step_mode,
    trained_parameters,
    training_step,
    zero_gradients,
)

_NO_GRADIENT = (
    "no parameter has a saved gradient at this step: all frozen (requires_grad=False), or "
    "gradients not saved"
)


class ParameterGradients(Numbers[dict[str, str]]):
    """``{parameter: its gradient}`` of the weights and biases saved with a gradient at a
    step (:func:`gradients_by_parameter`); skipped where none is. In bulk, a trial that saved
    no weight and no bias has none at any step."""

    def read(self, step: int) -> dict[str, str]:
        every = gradients_by_parameter(self.trial, step)
        if not every:
            raise StepSkipped(_NO_GRADIENT)
        return every

    def gather(self, steps: np.ndarray) -> Iterator[dict[str, str] | Skipped | Any]:
        trial = self.trial
        if optional_names_in(trial, "weights") or optional_names_in(trial, "biases"):
            return itertools.repeat(DOUBT, len(steps))
        none = Skipped(_NO_GRADIENT, frozenset({"weights", "biases", "gradients"}))
        return itertools.repeat(none, len(steps))


class WeightsNotUpdating(Rule):
    """At a TRAIN (or GLOBAL) step where a parameter (``weights``/``biases``) has a non-zero
    gradient, its value must differ from its previous saved step of that mode: the optimizer
    applied that gradient.
    Fires when it is bit-for-bit unchanged — a missing ``optimizer.step()``, a parameter
    left out of the optimizer, a zero learning rate — and when every parameter's gradient is
    exactly 0 (nothing can train: a loss multiplied by 0, a detached output; unless the loss
    itself is exactly 0, at its minimum).

    Parameters with no saved gradient (frozen on purpose, ``requires_grad=False``) are not
    judged, and a trial where no parameter has one ends NoData ("frozen"), never "all
    gradients zero". Nor are those whose gradient is negligible: against the others' (1e-6 of
    the step's median), or, for a bias, against its own layer's weights' (1e-3: a bias feeding
    BatchNorm has a gradient of ~0 by construction and its update falls below one float32
    ulp). A parameter holding NaN or inf is a problem of its own (never "unchanged").
    Findings name ``details["cause"] = "not_updating"`` (or ``nonfinite``).
    """

    collections_needed = ("weights", "biases", "gradients")

    def __init__(self, base_trial: Any) -> None:
        super().__init__(base_trial)
        self.reads(ParameterGradients())

    def not_judged(self, step: int) -> Said | None:
        if training_step(self.base_trial, step) is not None:
            return None
        mode = step_mode(self.base_trial, step)[0]
        return Said(NOT_TRAINING.format(mode=mode.name), judged=False)

    def judge(self, step: int, every: dict[str, str]) -> bool:
        trial = self.base_trial
        training = training_step(trial, step)
        if training is None:  # (not_judged says what a step of another mode is)
            return False
        mode, s = training
        if zero_gradients(trial, step, every):
            return self._zero(step, sorted(every))
        pairs = sorted(trained_parameters(trial, step, every).items())
        if not pairs:
            raise self.skip("no parameter with a gradient worth judging at this step")
        bad = nonfinite_names(self.base_trial, [p for p, _ in pairs], step)
        if bad:
            return fire_nonfinite(self, bad, "the parameter")
        stuck, judged = [], 0
        for param, grad in pairs:
            tensor = self.base_trial.tensor(param)
            earlier = [p for p in tensor.steps(mode=mode) if p < s]
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
            cause="not_updating",
        )
        return bool(stuck)

    def _zero(self, step: int, params: list[str]) -> bool:
        if loss_is_zero(self.base_trial, step):
            self.explain(
                f"every gradient of the {len(params)} parameters is 0, as the loss is: a "
                "minimum, nothing to learn from this batch"
            )
            return False
        self.explain(
            f"every gradient of the {len(params)} parameters with one is exactly 0: nothing "
            "can train (a loss multiplied by 0, an output detached from the graph, a loss that "
            "does not depend on the parameters)",
            tensors=params,
            value=len(params),
            threshold=0,
            cause="not_updating",
            zero_gradients=True,
        )
        return True
