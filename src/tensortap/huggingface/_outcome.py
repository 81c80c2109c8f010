"""The outcome under a Hugging Face ``Trainer`` that smooths its labels
(``label_smoothing_factor``): the Trainer then takes the labels out of the batch and computes
the loss with its ``LabelSmoother``, not the model's ``F.cross_entropy``, so the functional
losses never see them. :func:`patch_label_smoother` hands the smoother's logits (classes on the
last axis) and labels to the same outcome sampling (:mod:`tensortap.pytorch._outcome`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from tensortap.pytorch._outcome import CLASSES_LAST

OnLoss = Callable[[str, Any, Any, "int | None"], None]

logger = logging.getLogger(__name__)


def patch_label_smoother(on_loss: OnLoss) -> None:
    """Wrap ``LabelSmoother.__call__`` once per process (``on_loss`` must not raise)."""
    from transformers.trainer_pt_utils import LabelSmoother

    original: Callable[..., Any] = LabelSmoother.__call__
    if getattr(original, "__tensortap_outcome__", False):
        return

    @functools.wraps(original)
    def call(self: Any, model_output: Any, labels: Any, shift_labels: bool = False,
             *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        _hand_on(on_loss, model_output, labels, shift_labels, getattr(self, "ignore_index", None))
        return original(self, model_output, labels, shift_labels, *args, **kwargs)

    call.__tensortap_outcome__ = True  # type: ignore[attr-defined]
    LabelSmoother.__call__ = call  # type: ignore[method-assign]


def _hand_on(
    on_loss: OnLoss, model_output: Any, labels: Any, shift: bool, ignore_index: Any
) -> None:
    try:
        logits = model_output["logits"] if isinstance(model_output, dict) else model_output[0]
        if shift:  # as the smoother compares them: each position with the next label
            logits, labels = logits[..., :-1, :], labels[..., 1:]
    except Exception:  # an output the smoother itself will refuse
        return
    ignore = ignore_index if isinstance(ignore_index, int) else None
    try:
        on_loss(CLASSES_LAST, logits, labels, ignore)
    except Exception:  # never the script's failure
        logger.debug("tensortap: the label smoother's outcome was not handed on", exc_info=True)
