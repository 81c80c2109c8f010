"""LossSpike: a loss jumped far above its recent baseline."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Finding, Outcome, StepRun
from tensortap.rules.builtin._bulk import modes_of, one_numbers, steps_array
from tensortap.rules.builtin._common import (
    judges_mode,
    loss_names,
    prefer_vital_loss,
    scalar,
    step_mode,
)
from tensortap.rules.builtin._spike import SpikeRule, Values

_NO_LOSS = "no loss saved at this step"


class LossSpike(SpikeRule):
    """Each loss of ``mode`` steps (TRAIN by default; GLOBAL steps, of a script that never set
    a mode, too) against the median of its last ``window`` saved values. Losses: the
    ``losses`` collection (unless ``use_losses_collection`` is false; the vital sign
    ``vitals/loss`` instead where it was saved: the loss of every step) and tensors matching
    ``tensor_regex``.
    """

    collections_needed = ("losses",)

    def __init__(
        self,
        base_trial: Any,
        window: int = 20,
        warmup: int = 10,
        z_threshold: float = 6.0,
        min_ratio: float = 2.0,
        tensor_regex: list[str] | None = None,
        use_losses_collection: bool = True,
        mode: ModeKeys = ModeKeys.TRAIN,
    ) -> None:
        super().__init__(base_trial, window, warmup, z_threshold, min_ratio)
        self.tensor_regex = tensor_regex or []
        self.use_losses_collection = use_losses_collection
        self.mode = mode

    def invoke_at_step(self, step: int) -> bool:
        mode, _ = step_mode(self.base_trial, step)
        if not judges_mode(self.mode, mode):
            self.explain(self._not_judged(mode), judged=False)
            return False
        names = loss_names(self.base_trial, self.use_losses_collection, self.tensor_regex, step)
        if not names:
            raise self.skip(_NO_LOSS)
        fired = False
        for name in names:
            value = scalar(self.base_trial.tensor(name), step)
            if self.judge_value(
                name, value, "the loss" if not math.isfinite(value) else name, [name]
            ):
                fired = True
                break
        return fired

    def _not_judged(self, mode: ModeKeys) -> str:
        return f"{mode.name} losses are not judged (mode {self.mode.name})"

    def judge_steps(self, steps: Sequence[int]) -> Iterator[Finding | StepRun]:
        """Each step's one-element losses from the series path, replayed through the
        baselines; a step with another kind of loss (or a non-finite one) is evaluated."""
        at = steps_array(steps)
        trial = self.base_trial
        modes = modes_of(trial, at)
        losses: list[list[tuple[str, float]] | None] | None = [[]] * len(at)
        if any(judges_mode(self.mode, mode) for mode in modes):  # else no loss is asked for
            with self.asking():
                names = loss_names(trial, self.use_losses_collection, self.tensor_regex, None)
            losses = prefer_vital_loss(trial, one_numbers(trial, names, at))
        if losses is None:
            yield from super().judge_steps(steps)
            return
        inputs: list[Values | StepRun | None] = []
        with trial.no_refresh():
            for i, mode in enumerate(modes):
                if not judges_mode(self.mode, mode):
                    said = self._not_judged(mode)
                    inputs.append(StepRun(self.rule_name, at[i : i + 1], Outcome.OK, said, False))
                elif losses[i] == []:
                    inputs.append(self.skipped(at[i : i + 1], _NO_LOSS))
                else:
                    inputs.append(losses[i])
        yield from self.replay(at, inputs)
