"""Facts about what the loss modules are fed, part of the training loop's facts (see
:mod:`tensortap.pytorch._loop_facts`): a regression loss given a prediction and a target of
shapes that broadcast to another shape (``loss_shape_mismatch``), a classification loss given
probabilities rather than logits (``softmax_before_loss``), and a classification loss that
weights its classes (``class_weights``: the largest weight over the smallest).

Reading the values of a loss's input is a sync: it happens on a module's first few calls and
on steps where ``training_loop`` is due, and stops for a module once it showed its fault."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from tensortap.pytorch._registry import Registry
from tensortap.pytorch._weight_stats import local as _local

_CLASS_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)
_REGRESSION_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss)


class LossFacts:
    """The facts (see the module docstring) each loss module's calls show."""

    def __init__(
        self,
        registry: Registry,
        note: Callable[[str, Any], None],
        due: Callable[[], bool],
        first_calls: int,
    ) -> None:
        self._registry = registry
        self._note = note  # keeps a fact (saved when training_loop is next due)
        self._due = due  # whether training_loop is due at this step
        self._first_calls = first_calls  # a module's calls whose values are read, due or not
        self._calls: Counter[int] = Counter()
        self._done: set[int] = set()  # modules whose fault was found
        self._weights_read: set[int] = set()
        self._mismatched: set[str] = set()
        self._softmax: set[str] = set()
        self._class_weights: float | None = None

    def on_loss(self, module: nn.Module, inputs: Any) -> None:
        """A registered loss module ran on ``inputs`` (prediction, target): note the facts it
        shows."""
        key = id(module)
        if key in self._done or not isinstance(inputs, tuple) or len(inputs) < 2:
            return
        x, target = inputs[0], inputs[1]
        if not isinstance(x, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        name = self._registry.names[module].path if module in self._registry.names else "loss"
        if isinstance(module, _REGRESSION_LOSSES):
            if x.shape != target.shape and _broadcast(x.shape, target.shape) != tuple(x.shape):
                self._done.add(key)
                self._mismatched.add(name)
                self._note(f"loss_shape_mismatch/{name}/input", np.asarray(x.shape, np.int64))
                self._note(f"loss_shape_mismatch/{name}/target", np.asarray(target.shape, np.int64))
                self._note("loss_shape_mismatch", len(self._mismatched))
            return
        if not isinstance(module, _CLASS_LOSSES) or not x.is_floating_point() or x.dim() == 0:
            return
        if key not in self._weights_read:
            self._weights_read.add(key)
            self._weights(module)
        self._calls[key] += 1
        if self._calls[key] > self._first_calls and not self._due():
            return  # reading the values is a sync: only at first, and on due steps
        dim = 1 if x.dim() >= 2 else 0
        if x.shape[dim] < 2 or x.numel() == 0:
            return
        x = x.detach()
        rows = x.sum(dim)
        if bool((x.min() >= 0) & ((rows - 1).abs().max() <= 1e-3)):
            self._done.add(key)
            self._softmax.add(name)
            self._note(f"softmax_before_loss/{name}", 1)
            self._note("softmax_before_loss", len(self._softmax))

    def _weights(self, module: nn.Module) -> None:
        """A classification loss module's class weights, once: the ratio of the largest to
        the smallest (``class_weights``), when they differ (the loss handles an imbalance)."""
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.numel() < 2:
            return
        low, high = (float(v) for v in torch.aminmax(_local(weight).detach().float()))
        if low > 0 and high > low * (1 + 1e-6):
            self._class_weights = max(self._class_weights or 1.0, high / low)
            self._note("class_weights", self._class_weights)


def _broadcast(a: Iterable[int], b: Iterable[int]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
