"""The targets of the batch a model is about to read, for an evaluation that computes no loss.

Many evaluation loops count ``(model(x).argmax(1) == y)`` themselves and never call a loss: the
outcome tap (:mod:`tensortap.pytorch._outcome`), which reads what a classification loss
compares, then saves nothing for the EVAL step, and a run whose validation sits at chance is
not judged at chance. Under zero code change (:func:`watch_loaders`, called by
``_events.install``) each batch a ``DataLoader`` yields is looked at for its targets (``(x,
y)``, ``(x, ..., y)``, or a mapping's ``labels``/``label``/``y``/``target``/``targets``:
integer classes, one per sample); the hook takes them (:func:`take`) when a registered model's
forward begins, so they belong to the first forward after their batch was fetched only, and
offers the model's scores for them where the step's outcome is wanted (a loss of the step wins).
Looking costs a few attribute reads a batch: nothing is copied or read from the device.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import torch

#: Keys of a mapping batch that hold the targets, in the order they are looked for.
TARGET_KEYS = ("labels", "label", "y", "target", "targets")

_lock = threading.Lock()
_watching = False
_last: torch.Tensor | None = None  # the targets of the batch fetched last, until taken


def batch_target(batch: Any) -> torch.Tensor | None:
    """The batch's targets: one integer class per sample (a 1-D integer tensor), else None."""
    found: Any = None
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        found = batch[-1]
    elif isinstance(batch, Mapping):
        found = next((batch[k] for k in TARGET_KEYS if k in batch), None)
    if not isinstance(found, torch.Tensor) or found.dim() != 1 or not found.numel():
        return None
    if found.is_floating_point() or found.is_complex() or found.dtype == torch.bool:
        return None
    return found


def take() -> torch.Tensor | None:
    """The targets of the batch fetched last, where none took them since (then None)."""
    global _last
    found, _last = _last, None
    return found


def watch_loaders() -> None:
    """Look at every batch a ``DataLoader`` yields for its targets (once per process)."""
    global _watching
    from torch.utils.data import dataloader

    with _lock:
        if _watching:
            return
        base = dataloader._BaseDataLoaderIter
        base.__next__ = _watched(base.__next__)  # type: ignore[method-assign,assignment]
        _watching = True


def _watched(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        global _last
        batch = original(self)
        try:
            _last = batch_target(batch)
        except Exception:  # a batch of the script's own kind: never the script's failure
            _last = None
        return batch

    return __next__


def class_scores(output: Any, target: torch.Tensor) -> torch.Tensor | None:
    """The scores per class in a model's ``output`` for ``target``: a floating-point matrix
    (or a model output's ``logits``) with one row per target and at least two columns; None
    otherwise. (Whether the targets are classes of these columns is asked where the outcome is
    saved: it reads the targets.)"""
    scores = getattr(output, "logits", None) if not isinstance(output, torch.Tensor) else output
    if (
        isinstance(scores, torch.Tensor)
        and scores.dim() == 2
        and scores.shape[0] == target.shape[0]
        and scores.shape[1] >= 2
        and scores.is_floating_point()
    ):
        return scores
    return None


def targets_are_classes(scores: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether ``target`` holds classes of ``scores``' columns (0 to columns - 1): a read of the
    targets, so asked only where the outcome is saved; False where they cannot be read (meta,
    sharded)."""
    try:
        return int(target.min()) >= 0 and int(target.max()) < int(scores.shape[1])
    except Exception:
        return False
