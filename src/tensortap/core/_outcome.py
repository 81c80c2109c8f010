"""The outcome, sampled: what a step's loss compared (the targets and the model's predictions),
bounded, so that AccuracyAtChance, ClassImbalance and Confusion can judge a run whose script
saves nothing itself.

The framework adapters find the two values where the loss meets them (PyTorch: the inputs of a
classification loss module or of ``F.cross_entropy`` and its kin; Keras: ``compute_loss``'s
``y`` and ``y_pred``; XGBoost: the evaluation set's labels and the booster's predictions) and
hand them here, only at steps where the ``labels`` or ``predictions`` collection is due (a job
saves them at every EVAL step and every 10th TRAIN step: its schedule). This module turns them
into what the rules read, NumPy only:

- scores per class (one more axis than the targets, on the last axis) become the predicted
  class; one-hot or soft targets (each row summing to 1) become their class, and so do the
  scores beside them;
- positions whose target is ``ignore_index`` (-100: padding and prompt tokens of a language
  model) are dropped, and so are non-finite targets;
- at most :data:`MAX_ROWS` positions are kept per step (evenly spaced over the batch, so that a
  sequence's positions are all represented), and at most :data:`MAX_BYTES` bytes for both
  tensors together: a step's outcome costs at most 64 KiB whatever the batch or vocabulary. A
  step that computes several losses (a trainer's evaluation run, one step, computes one per
  batch) gathers them batch after batch until the bound is reached.

Labels are saved as ``labels`` (int32 classes) in the ``labels`` collection, predictions as
``predictions`` in ``predictions`` (int32 classes; float32 probabilities of class 1 where the
model gives one probability per target, as a sigmoid output does, which the rules cut at 0.5).
Shapes that do not pair up (a target per sample beside a score per token, say) are not saved:
:func:`sample_outcome` returns None, it never raises on odd input.

A regression's outcome is the two inputs of its loss, saved as a registered loss module's are
(``MSELoss_input_0``, the prediction, and ``MSELoss_input_1``, the target, in ``inputs``); for
the functional regression losses (:data:`FUNCTIONAL_REGRESSION_LOSSES`, which scripts call
with ``hook.record_loss`` and nothing else) the PyTorch hook saves them under the function's
name (``mse_loss_input_0``, ``mse_loss_input_1``), at most :data:`MAX_REGRESSION_VALUES`
values each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tensortap.core._recorder import StepRecorder

LABELS = "labels"
PREDICTIONS = "predictions"
#: The tensor names the adapters save the outcome under (and the collections they join).
OUTCOME_NAMES = (LABELS, PREDICTIONS)
#: The functional regression losses whose inputs (prediction, target) are saved as a loss
#: module's are, under the function's name: ``mse_loss_input_0``, ``mse_loss_input_1``.
FUNCTIONAL_REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")
#: A functional regression loss's inputs are saved only up to this many values each (a
#: reconstruction of images is no regression outcome to keep at every due step).
MAX_REGRESSION_VALUES = 1 << 16
#: At most this many positions (samples, or tokens of a sequence) per step.
MAX_ROWS = 4096
#: At most this many bytes per step, labels and predictions together.
MAX_BYTES = 64 * 1024
#: The target PyTorch's losses and Hugging Face's models ignore (padding, prompt tokens).
IGNORE_INDEX = -100


@dataclass(frozen=True)
class Outcome:
    """A step's sampled outcome: ``labels`` (int32 classes) and ``predictions`` (int32 classes,
    or float32 probabilities of class 1), flat and of one length."""

    labels: np.ndarray
    predictions: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.labels.nbytes + self.predictions.nbytes)


def outcome_due(recorder: StepRecorder) -> bool:
    """Whether ``labels`` or ``predictions`` is saved at this step (its own collection is due,
    or one that holds every tensor, as ``all``): the schedule alone, no value is read."""
    return (
        recorder.begin(LABELS, (LABELS,)) is not None
        or recorder.begin(PREDICTIONS, (PREDICTIONS,)) is not None
    )


def keep_rows(n: int, row_bytes: int = 8, rows: int = MAX_ROWS) -> np.ndarray | None:
    """The indices of ``n`` positions to keep (evenly spaced), or None to keep them all: at
    most ``rows`` (at most :data:`MAX_ROWS`), and at most :data:`MAX_BYTES` at ``row_bytes``
    a position."""
    cap = max(1, min(rows, MAX_ROWS, MAX_BYTES // max(row_bytes, 1)))
    if n <= cap:
        return None
    kept: np.ndarray = np.linspace(0, n - 1, cap).round().astype(np.int64)
    return kept


def sample_outcome(
    labels: Any, predictions: Any, ignore_index: int | None = IGNORE_INDEX
) -> Outcome | None:
    """The bounded outcome of a step from the targets and the model's predictions or scores
    (see the module docstring), or None where they do not pair up or hold nothing."""
    try:
        y = np.asarray(labels)
        p = np.asarray(predictions)
    except Exception:  # a framework value NumPy cannot read: not an outcome
        return None
    if y.dtype.kind not in "biuf" or p.dtype.kind not in "biuf" or not y.size or not p.size:
        return None
    if p.ndim == y.ndim + 1 and p.shape[-1] == 1 and p.shape[:-1] == y.shape:
        # one sigmoid output per sample beside a flat target (Keras' Dense(1, "sigmoid") with
        # labels of shape (N,)): before the scores per class, whose argmax of one column is
        # always class 0 (a stranger's Keras run at 97% accuracy was judged at chance)
        if not _binary_labels(y):
            return None  # one output for labels beyond 0 and 1: a regression (counts)
        p = _binary(p[..., 0])
    elif p.ndim == y.ndim + 1 and p.shape[:-1] == y.shape:  # scores per class
        p = np.argmax(p, axis=-1)
    elif p.shape == y.shape and y.ndim >= 2 and y.shape[-1] > 1 and _rows_sum_to_one(y):
        y, p = np.argmax(y, axis=-1), np.argmax(p, axis=-1)  # one-hot (or soft) targets
    elif y.ndim == p.ndim + 1 and y.shape[-1] == 1 and y.shape[:-1] == p.shape:
        y = y[..., 0]
    elif p.shape == y.shape and y.ndim >= 2 and y.shape[-1] == 1 and _binary_labels(y):
        p = _binary(p)  # (N, 1) beside (N, 1): one sigmoid output per sample
    if y.shape != p.shape:
        return None
    y, p = y.ravel(), p.ravel()
    keep = np.isfinite(y) if y.dtype.kind == "f" else np.ones(y.shape, dtype=bool)
    if ignore_index is not None:
        keep &= y != ignore_index
    if p.dtype.kind == "f":
        keep &= np.isfinite(p)
    if not keep.all():
        y, p = y[keep], p[keep]
    if not y.size or (y.dtype.kind == "f" and np.any(y % 1)):
        return None  # nothing left, or targets that are not classes (a regression)
    rows = keep_rows(y.size, 8)
    if rows is not None:
        y, p = y[rows], p[rows]
    predicted = p.astype(np.float32) if p.dtype.kind == "f" and np.any(p % 1) else p
    if predicted.dtype.kind != "f":
        predicted = predicted.astype(np.int32)
    return Outcome(np.ascontiguousarray(y.astype(np.int32)), np.ascontiguousarray(predicted))


def _binary(p: np.ndarray) -> np.ndarray:
    """One output per sample of a binary classifier: probabilities (within [0, 1]) kept for the
    rules to cut at 0.5; logits (beyond it) cut at 0 here, as a 0/1 class."""
    if p.dtype.kind == "f" and p.size and (float(np.nanmin(p)) < 0 or float(np.nanmax(p)) > 1):
        return (p > 0).astype(np.int32)
    return p


def _binary_labels(y: np.ndarray) -> bool:
    """Whether every label is 0 or 1 (NaN aside)."""
    if y.dtype.kind == "f":
        y = y[np.isfinite(y)]
    return bool(np.all((y == 0) | (y == 1)))


def _rows_sum_to_one(y: np.ndarray) -> bool:
    if y.dtype.kind != "f":
        return bool(np.all(y.sum(axis=-1) == 1)) and bool(np.all((y == 0) | (y == 1)))
    return bool(np.all(y >= 0)) and bool(np.allclose(y.sum(axis=-1), 1.0, atol=1e-3))
