"""LossSpike: a loss jumped far above its recent baseline."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Said
from tensortap.rules._numbers import Scalars
from tensortap.rules.builtin._common import judges_mode, loss_names, prefer_vital_loss
from tensortap.rules.builtin._spike import SpikeRule

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

    def declare_numbers(self) -> None:
        trial = self.base_trial

        def names(step: int | None) -> list[str]:
            return loss_names(trial, self.use_losses_collection, self.tensor_regex, step)

        self.reads(
            Scalars(names, none_saved=_NO_LOSS, pick=functools.partial(prefer_vital_loss, trial))
        )

    def not_judged(self, step: int) -> Said | None:
        mode = self.base_trial.mode(step)
        if judges_mode(self.mode, mode):
            return None
        return Said(f"{mode.name} losses are not judged (mode {self.mode.name})", judged=False)

    def judge(self, step: int, losses: Iterable[tuple[str, float]]) -> bool:
        for name, value in losses:
            what = "the loss" if not math.isfinite(value) else name
            if self.judge_value(name, value, what, [name]):
                return True
        return False
