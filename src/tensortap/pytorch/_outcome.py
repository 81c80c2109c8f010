"""The outcome of a PyTorch step (see :mod:`tensortap.core._outcome`): what a classification
loss compares, taken where the loss meets it.

- A registered loss module (``nn.CrossEntropyLoss``, ``nn.NLLLoss``, ``nn.BCELoss``,
  ``nn.BCEWithLogitsLoss``; zero code change registers every loss module it meets): its inputs.
- Under zero code change, also the functional losses (``F.cross_entropy``, ``F.nll_loss``,
  ``F.binary_cross_entropy``, ``F.binary_cross_entropy_with_logits``), which the loss modules
  above, Hugging Face's models and Lightning modules call: :func:`patch_functional` wraps them
  (with the functional regression losses, whose inputs every hook saves: see
  :meth:`tensortap.pytorch.Hook.after_regression_loss`), and :func:`tap_classification` lets
  the classification losses hand their inputs on.

Only at steps where ``labels`` or ``predictions`` is due, gathering the losses of the step (a
trainer's evaluation run is one step of many batches) until the bound is reached: the
predicted class (``argmax`` over the class axis; ``logit > 0`` or
``p > 0.5`` for a binary loss) and the targets, without the ignored positions (``ignore_index``),
thinned on the device to at most :data:`tensortap.core._outcome.MAX_ROWS` positions a step
before they are copied to the host, choosing positions from the targets before any score is
read, and reading at most :data:`SCORES_READ` scores a call. On other steps a loss call costs
one check of the schedule (about 2.5 us with the wrapper): no device work, no host sync.
Regression losses are left to the rules that read their inputs. A script that saves ``labels``
or ``predictions`` itself keeps them: the tap stands aside for that step.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from tensortap.core._modes import ModeKeys
from tensortap.core._outcome import (
    FUNCTIONAL_REGRESSION_LOSSES,
    IGNORE_INDEX,
    LABELS,
    MAX_ROWS,
    PREDICTIONS,
    keep_rows,
    outcome_due,
    sample_outcome,
)
from tensortap.core._recorder import StepRecorder

#: How a loss reads its input: scores per class on axis 1 (PyTorch's losses) or on the last
#: axis (Hugging Face's LabelSmoother), a logit, a probability.
CLASSES, CLASSES_LAST = "classes", "classes_last"
LOGITS, PROBABILITIES = "logits", "probabilities"
_MODULE_KINDS: tuple[tuple[type[nn.Module], str], ...] = (
    (nn.CrossEntropyLoss, CLASSES),
    (nn.NLLLoss, CLASSES),
    (nn.BCEWithLogitsLoss, LOGITS),
    (nn.BCELoss, PROBABILITIES),
)
#: The regression loss modules: a registered one saves its own inputs, its prediction and
#: target (the functional regression losses' inputs are saved by the hook otherwise).
REGRESSION_LOSS_MODULES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss)
#: The kind of a functional regression loss: its input is the prediction.
REGRESSION = "regression"
#: The functional classification losses, and how each reads its input; their inputs are handed
#: on once :func:`tap_classification` was called (zero code change).
CLASSIFICATION_KINDS = {
    "cross_entropy": CLASSES,
    "nll_loss": CLASSES,
    "binary_cross_entropy_with_logits": LOGITS,
    "binary_cross_entropy": PROBABILITIES,
}
#: Every functional loss :func:`patch_functional` wraps, and its kind.
FUNCTIONAL_KINDS = {
    **CLASSIFICATION_KINDS,
    **dict.fromkeys(FUNCTIONAL_REGRESSION_LOSSES, REGRESSION),
}

Save = Callable[[str, Any, tuple[str, ...]], None]
#: What a wrapped functional loss hands on: (its name, its kind, input, target, ignore_index,
#: the loss).
FunctionalLoss = Callable[[str, str, Any, Any, "int | None", Any], None]
#: At most this many scores are read a loss call (positions x classes): a language model's
#: 50,257-token vocabulary gets 83 positions a call (5 where the vocabulary is not the innermost
#: axis), so a due step's cost stays bounded.
SCORES_READ = 1 << 22

logger = logging.getLogger(__name__)


class OutcomeTap:
    """Saves the outcome of the classification losses of each step where it is due, up to
    :data:`MAX_ROWS` positions a step."""

    def __init__(self, recorder: StepRecorder, save: Save) -> None:
        self._recorder = recorder
        self._save = save  # (name, NumPy array, collections): saves one tensor (replacing)
        self._step: tuple[ModeKeys, int] | None = None  # the step gathered below
        self._labels: list[np.ndarray] = []
        self._predictions: list[np.ndarray] = []
        self._rows = 0
        self._by_loss = False  # a loss of this step gave its outcome
        self._by_scores = False  # scores met outside a loss gave it (until a loss does)

    def room(self) -> int:
        """How many positions this step may still save (0 where its collections are not due:
        no device work, the schedule alone, asked once a step)."""
        recorder = self._recorder
        step = (recorder.mode, recorder.mode_step)
        if step != self._step:
            self._step, self._labels, self._predictions = step, [], []
            self._rows = 0 if outcome_due(recorder) else MAX_ROWS
            self._by_loss = self._by_scores = False
        return MAX_ROWS - self._rows

    def wants_scores(self) -> bool:
        """Whether this step's outcome may still come from scores met outside a loss: it is
        due, there is room, and no loss of the step gave one (a loss's inputs always win)."""
        return self.room() > 0 and not self._by_loss

    def on_scores(self, scores: Any, target: Any) -> None:
        """Scores per class (axis 1) and the targets of an evaluation that computed no loss
        (Lightning's ``validation_step`` counting ``argmax == y`` itself): its outcome, as a
        classification loss's would be, where :meth:`wants_scores`."""
        if self.wants_scores() and self._add(CLASSES, scores, target, None):
            self._by_scores = True

    def stand_aside(self) -> None:
        """The script saved ``labels`` or ``predictions`` itself this step: its values win, and
        the tap saves nothing more this step (a later loss call would replace them)."""
        recorder = self._recorder
        self._step, self._labels, self._predictions = (recorder.mode, recorder.mode_step), [], []
        self._rows = MAX_ROWS
        self._by_scores = False

    def on_module(self, module: nn.Module, inputs: Any) -> None:
        """A registered loss module ran on ``inputs`` (input, target). Where the functional
        losses hand their inputs on, the module's forward handed them on already (it calls
        them)."""
        if _classification_tapped:
            return
        kind = next((k for cls, k in _MODULE_KINDS if isinstance(module, cls)), None)
        if kind is None or not isinstance(inputs, tuple) or len(inputs) < 2:
            return
        ignore = getattr(module, "ignore_index", IGNORE_INDEX)
        self.on_loss(kind, inputs[0], inputs[1], ignore if isinstance(ignore, int) else None)

    def on_loss(self, kind: str, scores: Any, target: Any, ignore_index: int | None) -> None:
        """A loss of ``kind`` compared ``scores`` with ``target``: save the outcome if due."""
        self.room()  # a new step starts afresh
        if self._by_scores:  # what scores gave before a loss of the step gives way to it
            self._labels, self._predictions, self._rows = [], [], 0
            self._by_scores = False
        if self._add(kind, scores, target, ignore_index):
            self._by_loss = True

    def _add(self, kind: str, scores: Any, target: Any, ignore_index: int | None) -> bool:
        """Add the outcome of ``scores`` against ``target`` to the step's, and save it (False
        where nothing was added)."""
        room = self.room()
        if room <= 0 or not isinstance(scores, torch.Tensor):
            return False
        if not isinstance(target, torch.Tensor):
            return False
        found = _classes(kind, scores.detach(), target.detach(), ignore_index, room)
        if found is None:
            return False
        outcome = sample_outcome(found[0].numpy(), found[1].numpy(), ignore_index=None)
        if outcome is None:
            return False
        self._labels.append(outcome.labels)
        self._predictions.append(outcome.predictions)
        self._rows += outcome.labels.size
        self._save(LABELS, np.concatenate(self._labels), (LABELS,))
        self._save(PREDICTIONS, np.concatenate(self._predictions), (PREDICTIONS,))
        return True


def _classes(
    kind: str, scores: torch.Tensor, target: torch.Tensor, ignore_index: int | None, room: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(targets, predicted classes) as flat int64 CPU tensors of one length, of at most
    ``room`` positions; None where the shapes do not pair up. The positions are chosen from
    the targets first, and only their scores are read: a language model's logits
    ``[batch, vocabulary, positions]`` are never reduced or copied whole."""
    if scores.dim() == 0 or scores.numel() == 0 or target.numel() == 0:
        return None
    if kind in (CLASSES, CLASSES_LAST):
        axis = 1 if scores.dim() >= 2 and kind == CLASSES else scores.dim() - 1
        if scores.shape[axis] < 2:
            return None
        by_class = scores.movedim(axis, -1)  # a view: [..., classes]
        # a class axis that is not the innermost ([batch, vocabulary, positions]) costs a
        # cache line a score: a sixteenth as many
        budget = SCORES_READ if scores.stride(axis) == 1 else SCORES_READ // 16
        room = min(room, max(1, budget // int(scores.shape[axis])))
        if target.is_floating_point() and target.shape == scores.shape:  # class probabilities
            target = target.movedim(axis, -1).argmax(dim=-1)
            ignore_index = None
        elif target.is_floating_point() or tuple(target.shape) != tuple(by_class.shape[:-1]):
            return None
    elif target.shape != scores.shape:
        return None
    y = target.reshape(-1)
    index = _positions(y, ignore_index, room)
    if index is not None:
        y = y[index]
    if kind in (CLASSES, CLASSES_LAST):
        if index is None:
            p = scores.argmax(dim=axis).reshape(-1)  # in place: no copy of the scores
        else:
            coords = torch.unravel_index(index, tuple(target.shape))
            p = by_class[coords].argmax(dim=-1)  # only the chosen positions' scores
    else:
        flat = scores.reshape(-1)
        p = (flat if index is None else flat[index]) > (0.0 if kind == LOGITS else 0.5)
        y = y > 0.5
    return y.to("cpu", torch.int64), p.to("cpu", torch.int64)


def _positions(y: torch.Tensor, ignore_index: int | None, room: int) -> torch.Tensor | None:
    """The flat positions of ``y`` to keep (on its device): those not ``ignore_index``,
    thinned evenly to at most ``room``; None to keep them all."""
    kept: torch.Tensor | None = None
    if ignore_index is not None:
        kept = (y != ignore_index).nonzero().squeeze(1)  # a sync: this step saves its outcome
        if kept.numel() == y.numel():
            kept = None
    n = y.numel() if kept is None else kept.numel()
    rows = keep_rows(int(n), 8, room)
    if rows is None:
        return kept
    chosen = torch.from_numpy(rows).to(y.device)
    return chosen if kept is None else kept[chosen]


def tap_classification() -> None:
    """Let the wrapped functional classification losses hand their inputs on (zero code change:
    once per process; an explicit hook takes its outcome from the loss modules it registers)."""
    global _classification_tapped
    _classification_tapped = True


_classification_tapped = False


def patch_functional(on_loss: FunctionalLoss) -> None:
    """Wrap ``torch.nn.functional``'s losses of :data:`FUNCTIONAL_KINDS` so that each call
    computes the loss as before, then hands its name, kind, input, target, ``ignore_index`` and
    the loss itself to ``on_loss``: a regression loss always, a classification loss once
    :func:`tap_classification` was called (never inside ``torch.compile``'s tracing;
    ``on_loss`` must not raise). Once per process: a second call changes nothing."""
    for name, kind in FUNCTIONAL_KINDS.items():
        original = getattr(functional, name, None)
        if original is None or getattr(original, "__tensortap_outcome__", False):
            continue
        setattr(functional, name, _wrapped(original, name, kind, on_loss))


def _wrapped(
    original: Callable[..., Any], name: str, kind: str, on_loss: FunctionalLoss
) -> Callable[..., Any]:
    signature = inspect.signature(original)
    default = signature.parameters.get("ignore_index")
    ignore_default = default.default if default is not None else None
    regression = kind == REGRESSION

    @functools.wraps(original)
    def loss(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        value = original(input, target, *args, **kwargs)
        if (regression or _classification_tapped) and not torch.compiler.is_compiling():
            ignore = ignore_default
            if not regression and ("ignore_index" in kwargs or args):
                try:
                    bound = signature.bind(input, target, *args, **kwargs).arguments
                    ignore = bound.get("ignore_index", ignore_default)
                except TypeError:
                    ignore = None  # a call the original took that its signature does not say
            try:
                ignore = ignore if isinstance(ignore, int) else None
                on_loss(name, kind, input, target, ignore, value)
            except Exception:  # never the script's failure: the loss is computed already
                logger.debug("tensortap: a functional loss was not handed on", exc_info=True)
        return value

    loss.__tensortap_outcome__ = True  # type: ignore[attr-defined]
    return loss
