"""Shared by ClassImbalance, Confusion and AccuracyAtChance: the labels and predictions saved
at a step (a regression loss's targets and predictions)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core._outcome import FUNCTIONAL_REGRESSION_LOSSES
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import has_raw, names_in, optional_names_in

if TYPE_CHECKING:
    from tensortap.trials._trial import Trial


def find(rule: Rule, collection: str, regex: str, step: int, name: str | None = None) -> str | None:
    """The tensor ``name`` if given, else the tensor of ``collection`` (else the first matching
    ``regex``), saved raw at a step."""
    trial = rule.base_trial
    if name is not None:
        names = [name] if name in trial.tensor_names(step=step) else []
    else:
        names = names_in(trial, collection, step) or trial.tensor_names(step=step, regex=regex)
    names = [n for n in names if has_raw(trial.tensor(n), step)]
    return names[0] if names else None


def labels_and_predictions(
    rule: Rule,
    step: int,
    labels: str,
    predictions: str,
    argmax: bool,
    names: tuple[str | None, str | None] = (None, None),
    collections: tuple[str, str] = ("labels", "predictions"),
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(labels, predicted classes, tensor names); predictions that carry one more axis than
    the labels (scores per class), or any when ``argmax``, are reduced with argmax; fractional
    predictions in [0, 1] of the labels' shape are probabilities of class 1, cut at 0.5.
    ``labels``/``predictions`` are regexes, used when ``names`` (tensor names) are not given
    and the ``collections`` hold nothing at the step."""
    lname = find(rule, collections[0], labels, step, names[0])
    pname = find(rule, collections[1], predictions, step, names[1])
    if lname is None or pname is None:
        missing = "labels" if lname is None else "predictions"
        raise rule.skip(f"no {missing} saved at this step")
    y, p = as_classes(
        rule.base_trial.tensor(lname).value(step), rule.base_trial.tensor(pname).value(step), argmax
    )
    if y.shape != p.shape:
        raise rule.skip(f"{lname} has {y.size} labels but {pname} {p.size} predictions")
    return y, p, [lname, pname]


def as_classes(y: np.ndarray, p: np.ndarray, argmax: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Labels and predictions as flat int64 class ids: scores per class (one more axis than the
    labels, or any when ``argmax``) reduced with argmax, one column of them (a sigmoid output)
    cut at 0.5 (at 0 for logits); fractional predictions in [0, 1] of the
    labels' shape taken as probabilities of class 1, cut at 0.5; one-hot labels reduced."""
    if not argmax and p.ndim == y.ndim + 1 and p.shape[-1] == 1:
        p = p[..., 0]  # one sigmoid output per sample: the argmax of one column is always 0
        if p.dtype.kind == "f" and p.size and (p.min() < 0 or p.max() > 1):
            p = p > 0  # logits
    if argmax or p.ndim == y.ndim + 1:
        p = np.argmax(p, axis=-1)
    elif p.dtype.kind == "f" and p.size and p.min() >= 0 and p.max() <= 1 and np.any(p % 1):
        p = p > 0.5  # probabilities of the positive class (binary:logistic, a sigmoid output)
    if y.ndim == p.ndim + 1:  # one-hot labels
        y = np.argmax(y, axis=-1)
    return y.ravel().astype(np.int64), p.ravel().astype(np.int64)


#: Loss modules whose inputs are (prediction, target) of a regression.
REGRESSION_LOSSES = ("MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss")


def loss_targets(trial: Trial, names: Iterable[str]) -> set[str]:
    """The tensors among ``names`` that are what a loss module was given to compare with (its
    inputs after the first: ``BCEWithLogitsLoss_input_1`` for ``BCEWithLogitsLoss_output_0``
    in ``losses``; ``mse_loss_input_1`` for ``F.mse_loss``): the data's targets, not a tensor
    of the model. An optional read."""
    modules = {
        loss.rpartition("_output_")[0]
        for loss in optional_names_in(trial, "losses")
        if loss.rpartition("_output_")[2] == "0"
    }
    modules.update(FUNCTIONAL_REGRESSION_LOSSES)
    found = set()
    for name in names:
        module, _, index = name.rpartition("_input_")
        if module in modules and index.isdigit() and index != "0":
            found.add(name)
    return found


def regression_targets(trial: Trial, step: int) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """(predictions, targets, their names) a regression loss received at ``step``, from its
    saved inputs (``MSELoss_input_0`` and ``MSELoss_input_1`` for ``MSELoss_output_0`` in
    ``losses``; ``mse_loss_input_0`` and ``mse_loss_input_1`` for a functional one), or None
    where none was saved in full with floating-point values of one size. An optional read: a
    trial without losses is not told to save them."""
    saved = set(trial.tensor_names(step=step))
    modules = []
    for loss in optional_names_in(trial, "losses", step):
        module, _, rest = loss.rpartition("_output_")
        if module in REGRESSION_LOSSES and rest == "0":
            modules.append(module)
    for module in (*modules, *FUNCTIONAL_REGRESSION_LOSSES):
        names = [f"{module}_input_0", f"{module}_input_1"]
        if not all(n in saved and has_raw(trial.tensor(n), step) for n in names):
            continue
        p, t = (trial.tensor(n).value(step) for n in names)
        if p.dtype.kind == "f" and t.dtype.kind == "f" and p.size == t.size and t.size:
            return p, t, names
    return None


def zero_output_loss(trial: Trial, step: int) -> tuple[float, str] | None:
    """What the loss would be at ``step`` for a model whose outputs are all 0 (a soundly
    initialised network starts near it), and how it was found: ``log K`` for K classes (from
    the saved labels and predictions: scores per class give K), the mean squared target of an
    ``MSELoss`` (the mean absolute target of the other regression losses); None where neither
    the outcome nor a regression loss's inputs were saved at the step."""
    saved = set(trial.tensor_names(step=step))
    found = regression_targets(trial, step)
    if found is not None:
        _, t, names = found
        y = t.astype(np.float64).ravel()
        if names[0].startswith(("MSELoss", "mse_loss")):
            return float(np.mean(np.square(y))), "the mean squared target (outputs of 0)"
        return float(np.mean(np.abs(y))), "the mean absolute target (outputs of 0)"
    labels = [n for n in optional_names_in(trial, "labels", step) if n in saved]
    predictions = [n for n in optional_names_in(trial, "predictions", step) if n in saved]
    if not labels or not predictions:
        return None
    ly, lp = trial.tensor(labels[0]), trial.tensor(predictions[0])
    if not (has_raw(ly, step) and has_raw(lp, step)):
        return None
    y, p = np.asarray(ly.value(step)), np.asarray(lp.value(step))
    if not y.size or not p.size:
        return None
    if p.ndim == y.ndim + 1:  # scores per class
        classes = int(p.shape[-1])
    elif y.ndim == p.ndim + 1:  # one-hot labels
        classes = int(y.shape[-1])
    elif not np.all(np.isfinite(y)) or np.any(y % 1) or np.min(y) < 0:
        return None  # not class ids
    elif not np.any(p % 1):  # predicted classes
        classes = int(max(np.max(y), np.max(p))) + 1
    elif p.shape == y.shape and np.min(p) >= 0 and np.max(p) <= 1:  # P(class 1)
        classes = 2
    else:
        return None
    classes = max(classes, 2)
    return math.log(classes), f"log {classes} for {classes} classes (uniform scores)"
