"""The outcome of a validation that computes no loss.

Many ``validation_step``\\ s count ``(self.model(x).argmax(1) == y)`` themselves, or feed
torchmetrics, and never call a loss: the outcome tap, which reads what a classification loss
compares, then saves nothing for the EVAL step, and a run whose validation sits at chance is
not judged at chance. Where the step's outcome is due and no loss gave it, the callback takes
the targets from the batch (``(x, y)``, ``(x, ..., y)``, or a mapping's ``labels``/``label``/
``y``/``target``/``targets``: integer classes, one per sample) and the model's scores from
the last output of any module in the batch's forward passes that has one row per target and
a column per class (floating point, at least two columns, more than the largest target): what
``argmax`` would read. A process-wide forward hook is held for the batch only, and only while
the outcome is wanted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook

from tensortap.pytorch._batch_targets import (
    batch_target,
    class_scores,
    take,
    targets_are_classes,
)

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from tensortap.pytorch._hook import Hook


class ValidationScores:
    """Watches one validation batch's module outputs for the scores beside its targets."""

    def __init__(self) -> None:
        self._handle: RemovableHandle | None = None
        self._target: torch.Tensor | None = None
        self._scores: torch.Tensor | None = None

    def start(self, hook: Hook, batch: Any) -> None:
        """A validation batch begins: watch its forward passes where the outcome is wanted."""
        self.stop()
        take()  # the batch's targets are judged here, not again by the hook's model output
        target = batch_target(batch)
        if target is None or not hook.wants_scores():
            return
        self._target = target

        def seen(module: nn.Module, inputs: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor) and class_scores(output, target) is not None:
                self._scores = output

        self._handle = register_module_forward_hook(seen)

    def end(self, hook: Hook) -> None:
        """The batch ended: its scores and targets to the hook (which keeps a loss's instead)."""
        scores, target = self._scores, self._target
        self.stop()
        if scores is None or target is None:
            return
        if targets_are_classes(scores, target):  # else: not classes of these scores
            hook.after_scores(scores.detach(), target.detach())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.remove()
        self._handle, self._target, self._scores = None, None, None
