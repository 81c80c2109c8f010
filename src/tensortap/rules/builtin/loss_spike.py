"""LossSpike: a loss jumped far above its recent baseline."""

from __future__ import annotations

import math
from typing import Any

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import judges_mode, loss_names, scalar, step_mode
from tensortap.rules.builtin._spike import SpikeRule


class LossSpike(SpikeRule):
    """Each loss of ``mode`` steps (TRAIN by default; GLOBAL steps, of a script that never set
    a mode, too) against the median of its last ``window`` saved values. Losses: the
    ``losses`` collection (unless ``use_losses_collection`` is false) and tensors matching
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
            self.explain(f"{mode.name} losses are not judged (mode {self.mode.name})", judged=False)
            return False
        names = loss_names(self.base_trial, self.use_losses_collection, self.tensor_regex, step)
        if not names:
            raise self.skip("no loss saved at this step")
        fired = False
        for name in names:
            value = scalar(self.base_trial.tensor(name), step)
            if self.judge(name, value, "the loss" if not math.isfinite(value) else name, [name]):
                fired = True
                break
        return fired
