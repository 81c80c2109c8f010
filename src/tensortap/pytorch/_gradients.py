"""Which gradients the PyTorch hook saves, and how: every trained parameter's ``.grad``,
unscaled when a GradScaler scaled the loss; none of a frozen parameter (``requires_grad=False``:
a ``.grad`` left from before it was frozen is not this step's gradient). Gradients that are
clipped are saved before the clip, and the clip's threshold with them (``gradient_clip``)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from tensortap.core._recorder import StepRecorder
from tensortap.pytorch._convert import TorchConverter
from tensortap.pytorch._naming import GRADIENT_COLLECTIONS, GRADIENT_PREFIX

#: The scalar each clipping function's threshold is saved as (in ``gradient_clip``), by the
#: name of the function's threshold argument.
CLIP_NAMES = {"max_norm": "gradient_clip/max_norm", "clip_value": "gradient_clip/max_value"}


def clip_threshold(threshold_name: str, threshold: Any) -> tuple[str, float] | None:
    """``(name, value)`` of a clip's threshold to save; None when it clips nothing (an infinite
    norm: the Hugging Face Trainer computes the gradient norm so) or is not a number."""
    if isinstance(threshold, torch.Tensor) and threshold.numel() == 1:
        threshold = threshold.item()
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        return None
    value = float(threshold)
    if not math.isfinite(value):
        return None
    return CLIP_NAMES[threshold_name], value


def inverse_scale(scaler: Any) -> torch.Tensor | None:
    """1 / the loss scale of an enabled ``torch.amp.GradScaler`` (None without one)."""
    if scaler is None or not scaler.is_enabled():
        return None
    scale = getattr(scaler, "_scale", None)
    if not isinstance(scale, torch.Tensor):
        return None
    return scale.double().reciprocal()


def save_gradients(
    recorder: StepRecorder,
    converter: TorchConverter,
    params: Iterable[tuple[str, nn.Parameter, tuple[str, ...]]],
    inverse: torch.Tensor | None,
    contain: Callable[[BaseException, str], None],
) -> None:
    """Save ``gradient/<name>`` of every trained parameter whose gradients are due, multiplied
    by ``inverse`` when given; a failure loses that gradient only (``contain`` reports it)."""
    with converter.together(replicated=True):  # as a group, before the optimizer runs
        for name, param, _ in params:
            grad = param.grad
            if grad is None or not param.requires_grad:
                continue
            gname = GRADIENT_PREFIX + name
            try:
                plan = recorder.begin(gname, GRADIENT_COLLECTIONS)
                if plan is None:
                    continue
                if inverse is not None:
                    grad = grad.detach() * inverse.to(grad.device, grad.dtype)
                recorder.put(gname, converter.records(gname, grad, plan))
            except Exception as exc:
                contain(exc, f"saving {gname!r}")
