"""WeightUpdateRatio: weight updates far too large or too small relative to the weights."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.core.collections import INITIAL_PREFIX, INITIAL_WEIGHTS
from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import (
    fire_nonfinite,
    gradients_by_parameter,
    names_in,
    nonfinite_names,
    step_mode,
    trained_parameters,
)
from tensortap.rules.rule import Rule


class WeightUpdateRatio(Rule):
    """Every ``num_steps`` TRAIN steps, for each tensor in ``weights``:
    ``ratio = ||w_s - w_p|| / (s - p) / (||w_p|| + epsilon)`` where p is the previous saved
    step (the mean update per step relative to the weight's size; healthy training sits near
    1e-3). Fires when a ratio exceeds ``large_threshold`` or falls below ``small_threshold``.

    The first saved step is compared with the weights before its update where the hook saved them
    (``initial_weights``), so the first update is judged too. Where gradients are saved, only the
    weights the optimizer is meant to move are judged: frozen ones (no gradient) and those whose
    gradient is negligible against the others' are left out. Weights holding NaN or inf are a
    problem (non-finite), not a ratio.
    """

    collections_needed = ("weights",)

    def __init__(
        self,
        base_trial: Any,
        num_steps: int = 100,
        large_threshold: float = 10.0,
        small_threshold: float = 1e-8,
        epsilon: float = 1e-9,
    ) -> None:
        super().__init__(base_trial)
        self.check_param("num_steps", num_steps, num_steps >= 1, "an integer >= 1")
        self.check_param(
            "small_threshold",
            small_threshold,
            0 <= small_threshold < large_threshold,
            f">= 0 and below large_threshold ({large_threshold})",
        )
        self.check_param("epsilon", epsilon, epsilon > 0, "a number > 0")
        self.num_steps = num_steps
        self.large_threshold, self.small_threshold = large_threshold, small_threshold
        self.epsilon = epsilon
        self._last_checked: int | None = None

    def invoke_at_step(self, step: int) -> bool:
        mode, s = step_mode(self.base_trial, step)
        if mode != ModeKeys.TRAIN:
            self.explain("weights change only in TRAIN steps")
            return False
        names = names_in(self.base_trial, "weights", step)
        if not names:
            raise self.skip("no weights saved at this step")
        if self._last_checked is not None and s < self._last_checked + self.num_steps:
            self.explain(f"not a check step (checked every {self.num_steps} steps)")
            return False
        pairs = gradients_by_parameter(self.base_trial, step)
        if pairs:  # judge only what the optimizer is meant to move
            trained = trained_parameters(self.base_trial, step, pairs)
            names = [n for n in names if n in trained]
            if not names:
                raise self.skip("no weight is being trained at this step (all frozen)")
        bad = nonfinite_names(self.base_trial, names, step)
        if bad:
            return fire_nonfinite(self, bad, "the weight")
        ratios: list[tuple[float, str]] = []
        snapshots = set(names_in(self.base_trial, INITIAL_WEIGHTS, step))
        for name in names:
            tensor = self.base_trial.tensor(name)
            earlier = [p for p in tensor.steps(mode=ModeKeys.TRAIN) if p < s]
            if earlier:
                p = earlier[-1]
                w_prev = tensor.value(p, mode=mode)
            elif INITIAL_PREFIX + name in snapshots:  # the weights before this step's update
                p = s - 1
                w_prev = self.base_trial.tensor(INITIAL_PREFIX + name).value(step)
            else:
                continue
            w = tensor.value(s, mode=mode)
            update = float(np.linalg.norm((w - w_prev).ravel())) / (s - p)
            ratios.append((update / (float(np.linalg.norm(w_prev.ravel())) + self.epsilon), name))
        if not ratios:
            raise self.skip("no earlier saved step of the weights to compare with")
        self._last_checked = s
        low, high = min(ratios), max(ratios)
        if high[0] > self.large_threshold:
            self.explain(
                f"update/weight ratio of {high[1]} is {high[0]:.3g}, "
                f"above {self.large_threshold:g}",
                tensors=[high[1]],
                value=high[0],
                threshold=self.large_threshold,
                direction="large",
            )
            return True
        if low[0] < self.small_threshold:
            self.explain(
                f"update/weight ratio of {low[1]} is {low[0]:.3g}, below {self.small_threshold:g}",
                tensors=[low[1]],
                value=low[0],
                threshold=self.small_threshold,
                direction="small",
            )
            return True
        self.explain(
            f"update/weight ratios between {low[0]:.3g} and {high[0]:.3g}",
            value=high[0],
            threshold=(self.small_threshold, self.large_threshold),
        )
        return False
