"""Facts about what the losses are fed, part of the training loop's facts (see
:mod:`tensortap.pytorch._loop_facts`): a regression loss given a prediction and a target of
shapes that broadcast to another shape (``loss_shape_mismatch``), a classification loss given
probabilities rather than logits (``softmax_before_loss``), and a classification loss that
weights its classes (``class_weights``: the largest weight over the smallest).

Two ways to see them. A registered loss module's inputs, whose values are read (a sync) on a
module's first few calls and on steps where ``training_loop`` is due, until it showed its
fault. And the autograd graph of what a backward pass runs on, whatever computed the loss
(``F.mse_loss``, ``F.cross_entropy``, a loss module, a script's own sum): a few nodes below
its root are read, names and shapes only (no values, no sync), on the first backward passes
and on due steps. ``NllLossBackward`` fed by ``SoftmaxBackward`` (through a ``LogSoftmax`` or
not) is a softmax before a loss that applies its own; ``MseLossBackward`` (or Huber, smooth L1)
fed by an ``ExpandBackward`` that grew the prediction is a broadcast of shapes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from tensortap.pytorch._outcome import REGRESSION_LOSS_MODULES
from tensortap.pytorch._registry import Registry
from tensortap.pytorch._weight_stats import local as _local

_CLASS_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


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
        if isinstance(module, REGRESSION_LOSS_MODULES):
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

    def on_backward(self, tensor: torch.Tensor) -> None:
        """A backward pass is about to run on ``tensor``: read the loss nodes of its graph
        (names and shapes only) for a softmax fed to a loss that applies its own, or a
        regression loss whose prediction was broadcast to the target's shape."""
        root = tensor.grad_fn
        if root is None:
            return
        for node in loss_nodes(root):
            kind = type(node).__name__
            fed = _fed_by(node)
            if fed is None:
                continue
            if kind in _NLL:
                log = type(fed).__name__ == "LogSoftmaxBackward0"  # cross_entropy's own
                name = "cross_entropy" if log else "nll_loss"
                below = _fed_by(fed) if log else fed
                if type(below).__name__ == _SOFTMAX and not self._softmax:
                    self._softmax.add(name)
                    self._note(f"softmax_before_loss/{name}", 1)
                    self._note("softmax_before_loss", len(self._softmax))
            elif type(fed).__name__ == "ExpandBackward0" and not self._mismatched:
                given = tuple(int(v) for v in getattr(fed, "_saved_self_sym_sizes", ()))
                target = getattr(node, "_saved_target", None)
                grown = getattr(node, "_saved_self", None)
                if not given or not isinstance(target, torch.Tensor) or grown is None:
                    continue
                if grown.numel() < 2 * max(int(np.prod(given)), 1):
                    continue  # an expand that did not grow the prediction (a size-1 batch)
                name = _REGRESSION_NODES[kind]
                self._mismatched.add(name)
                self._note(f"loss_shape_mismatch/{name}/input", np.asarray(given, np.int64))
                self._note(
                    f"loss_shape_mismatch/{name}/target",
                    np.asarray(_original_shape(target), np.int64),
                )
                self._note("loss_shape_mismatch", len(self._mismatched))

    def _weights(self, module: nn.Module) -> None:
        """A classification loss module's class weights, once: the ratio of the largest to
        the smallest (``class_weights``), when they differ (the loss handles an imbalance)."""
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.numel() < 2:
            return
        values = _local(weight).detach().float()
        low, high = (float(v) for v in torch.aminmax(values))
        if low > 0 and high > low * (1 + 1e-6):
            self._class_weights = max(self._class_weights or 1.0, high / low)
            self._note("class_weights", self._class_weights)
            if values.numel() <= MAX_CLASS_WEIGHTS:  # each class's, to tell which way they lean
                self._note("class_weights/values", values.cpu().numpy().ravel())


#: Class weights kept whole (``class_weights/values``) up to this many classes.
MAX_CLASS_WEIGHTS = 1024
#: Graph nodes read below a backward pass's root, at most (the loss sits near the root).
GRAPH_NODES = 24
_NLL = frozenset({"NllLossBackward0", "NllLoss2DBackward0"})
_REGRESSION_NODES = {
    "MseLossBackward0": "mse_loss",
    "HuberLossBackward0": "huber_loss",
    "SmoothL1LossBackward0": "smooth_l1_loss",
}
_SOFTMAX = "SoftmaxBackward0"


def _walk(root: Any, descend: Callable[[Any], bool] = lambda node: True) -> Iterator[Any]:
    """The first :data:`GRAPH_NODES` nodes of an autograd graph below ``root``, breadth first
    (what a script did to a loss sits near the root); below a node only where ``descend``."""
    frontier, seen = [root], 0
    visited: set[int] = set()
    while frontier and seen < GRAPH_NODES:
        node = frontier.pop(0)
        if node is None or id(node) in visited:
            continue
        visited.add(id(node))
        seen += 1
        yield node
        if descend(node):
            frontier.extend(n for n, _ in getattr(node, "next_functions", ()))


def _is_loss(node: Any) -> bool:
    kind = type(node).__name__
    return kind in _NLL or kind in _REGRESSION_NODES


def loss_nodes(root: Any) -> Iterator[Any]:
    """The loss nodes among the first :data:`GRAPH_NODES` of an autograd graph below ``root``
    (what fed a loss is the model: not walked)."""
    return (node for node in _walk(root, lambda node: not _is_loss(node)) if _is_loss(node))


def reaches(root: Any, target: Any) -> bool:
    """Whether ``target`` (an autograd node) is among the first :data:`GRAPH_NODES` nodes of the
    graph below ``root``: a backward pass from ``root`` runs through it again."""
    return any(node is target for node in _walk(root))


def summed_into(root: Any, target: Any) -> bool:
    """Whether ``target`` (a loss's autograd node) enters ``root``'s value with weight 1: through
    additions only (``loss + 1e-4 * l2``, ``loss + aux_loss``), never a division or a product
    (``loss / accumulation_steps``), among the first :data:`GRAPH_NODES` nodes."""
    return any(node is target for node in _walk(root, _adds))


def apart(nodes: list[Any]) -> bool:
    """Whether the graphs below ``nodes`` (losses' autograd nodes) share no node among the first
    :data:`GRAPH_NODES` of each but the parameters' own (``AccumulateGrad``): losses of
    micro-batches each forwarded on its own, not of one sequence's steps chained through a
    hidden state (whose graphs meet a few nodes down)."""
    seen: set[int] = set()
    for node in nodes:
        mine = {id(n) for n in _walk(node) if type(n).__name__ != "AccumulateGrad"}
        if mine & seen:
            return False
        seen |= mine
    return True


def negated(root: Any, target: Any) -> bool:
    """Whether ``target`` (a loss's autograd node) enters ``root``'s value with its sign flipped:
    ``-loss``, ``loss * -1``, ``-(loss / accumulation_steps)``, alone or plus other terms,
    among the first :data:`GRAPH_NODES` nodes."""
    return any(_sign_to(node, target) < 0 for node in _walk(root, _adds))


#: The most negations and scalings by a constant between a term of the sum and the loss.
_CHAIN = 4


def _sign_to(node: Any, target: Any) -> int:
    """The sign with which ``target`` enters ``node``'s value through negations and scalings by
    a constant (0: not so, or not within :data:`_CHAIN` links)."""
    sign = 1
    for _ in range(_CHAIN + 1):
        if node is target:
            return sign
        kind = type(node).__name__
        if kind == "NegBackward0":
            sign = -sign
        elif kind in ("DivBackward0", "MulBackward0"):
            factor = _constant(node)
            if not factor:  # not a constant (None), or 0
                return 0
            sign = -sign if factor < 0 else sign
        else:
            return 0
        inputs = [n for n, _ in getattr(node, "next_functions", ()) if n is not None]
        if len(inputs) != 1:
            return 0
        node = inputs[0]
    return 0


def _constant(node: Any) -> float | None:
    """The constant a product or division by one (a number, or a 0-d tensor on the CPU that
    needs no gradient) scales by, else None."""
    try:
        other = getattr(node, "_saved_other", None)
    except RuntimeError:  # saved values already freed
        return None
    if isinstance(other, torch.Tensor) and other.dim() == 0 and other.device.type == "cpu":
        try:
            return float(other)
        except (TypeError, ValueError, RuntimeError):  # a complex number, say
            return None
    return None


def _adds(node: Any) -> bool:
    """Whether ``node`` is an addition (each of its inputs enters the sum with weight 1)."""
    return type(node).__name__ == "AddBackward0"


def _fed_by(node: Any) -> Any:
    """The node that computed a loss node's input (its first input)."""
    inputs = getattr(node, "next_functions", ())
    return inputs[0][0] if inputs else None


def _original_shape(t: torch.Tensor) -> tuple[int, ...]:
    """The shape a broadcast view was expanded from: its dimensions of stride 0 were 1, and
    leading ones dropped."""
    shape = [1 if stride == 0 else size for size, stride in zip(t.shape, t.stride(), strict=True)]
    while len(shape) > 1 and shape[0] == 1:
        shape.pop(0)
    return tuple(shape)


def _broadcast(a: Iterable[int], b: Iterable[int]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
