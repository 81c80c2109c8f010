"""Helpers the built-in rules share: picking tensors, reading scalars, baselines, activity."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortap.core._collections import ROUTER, TRAINING_LOOP
from tensortap.core._metric_kinds import is_loss_metric
from tensortap.core._modes import ModeKeys
from tensortap.core._vitals import Vital
from tensortap.rules._finding import Severity
from tensortap.rules._numbers import saved_at as saved_at  # (read as the engine reads them)
from tensortap.rules._numbers import scalar as scalar

if TYPE_CHECKING:
    from tensortap.rules._rule import Rule
    from tensortap.trials._tensor import Tensor
    from tensortap.trials._trial import Trial


def names_in(trial: Trial, collection: str, step: int | None = None) -> list[str]:
    """Tensors of a collection (at a global step); none if the trial has no such collection."""
    if collection not in trial.collections():  # asked at every step: no exception to raise
        trial.collections_asked.add(collection)
        return []
    return trial.tensor_names(step=step, collection=collection)


def optional_names_in(trial: Trial, collection: str, step: int | None = None) -> list[str]:
    """``names_in`` for a collection a rule reads where it was saved but does not need: asking
    for it does not make it part of the rule's ``NoData`` reason."""
    asked = set(trial.collections_asked)
    try:
        return names_in(trial, collection, step) if collection in trial.collections() else []
    finally:
        trial.collections_asked = asked


def select(
    trial: Trial,
    collections: Iterable[str] | None,
    regexes: Iterable[str] | None,
    step: int | None = None,
    default: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
) -> list[str]:
    """Tensors in any of ``collections`` or matching any of ``regexes`` (at a global step).

    With neither given: the ``default`` collections, or every tensor when that is None, less
    the tensors of the ``exclude`` collections, the facts about the training loop (numbers
    about the loop, not tensors of the model) and the router statistics (token counts, which
    the mixture-of-experts rules judge: a healthy expert count of 0 is not "all zero").
    """
    collections, regexes = list(collections or []), list(regexes or [])
    if not collections and not regexes:
        if default is None:
            names = set(trial.tensor_names(step=step))
            for coll in (*exclude, TRAINING_LOOP):
                names.difference_update(names_in(trial, coll, step))
            names.difference_update(optional_names_in(trial, ROUTER, step))
            return sorted(names)
        collections = list(default)
    found: set[str] = set()
    for coll in collections:
        found.update(names_in(trial, coll, step))
    for regex in regexes:
        found.update(trial.tensor_names(step=step, regex=regex))
    return sorted(found)


def nonfinite_names(trial: Trial, names: Sequence[str], step: int) -> list[str]:
    """Those of ``names`` (saved at global ``step``) holding NaN or +/-inf: in their raw value,
    or, where only reductions were saved, in a reduction."""
    block = trial.step_block(step)
    raw, reduced = block.split_raw(list(names))
    bad: set[str] = set()
    if raw:
        nans, infs = block.nonfinite(raw)
        bad.update(n for n, hit in zip(raw, (nans + infs).tolist(), strict=True) if hit)
    for name in reduced:
        if any(not math.isfinite(v) for v in block.saved_reductions(name).values()):
            bad.add(name)
    return [n for n in names if n in bad]


def nonfinite_explanation(bad: Sequence[str], what: str) -> dict[str, Any]:
    """The explanation every rule gives for non-finite values (the same words and severity:
    NaN and inf are a problem, never "dead", "zero", "unchanged" or "fine")."""
    more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
    return {
        "message": f"{what} {bad[0] if bad else ''}{more} holds NaN or infinite values: the "
        "numbers are not finite, so nothing else can be judged (ExplodingTensor and "
        "NaNInfRootCause trace where they began)",
        "tensors": list(bad),
        "value": len(bad),
        "threshold": 0,
        "severity": Severity.PROBLEM,
        "nonfinite": True,
        "cause": "nonfinite",
    }


def fire_nonfinite(rule: Rule, bad: Sequence[str], what: str) -> bool:
    """Explain a finding on non-finite values (:func:`nonfinite_explanation`); True."""
    rule.explain(**nonfinite_explanation(bad, what))
    return True


GRADIENT_PREFIXES = ("gradient/", "gradients/")

#: A parameter whose mean |gradient| is below this share of the step's median has no gradient
#: worth speaking of.
NEGLIGIBLE_GRADIENT = 1e-6

#: A bias whose mean |gradient| is below this share of its own layer's weight gradient is
#: normalised away: a bias feeding BatchNorm (or any normalisation) has a gradient of ~0 by
#: construction, measured at 1e-6 to 5e-5 of its weights' (up to 4e-6 of the step's median,
#: above NEGLIGIBLE_GRADIENT), where other biases measure 0.1 to 10 times their weights'.
NORMALISED_BIAS = 1e-3


def gradients_by_parameter(trial: Trial, step: int) -> dict[str, str]:
    """``{parameter: its gradient}`` for the weights and biases saved with a gradient at a step
    (a frozen parameter has none: the hooks save no gradient of what is not trained)."""
    params = set(names_in(trial, "weights", step)) | set(names_in(trial, "biases", step))
    found = {}
    for grad in names_in(trial, "gradients", step):
        for prefix in GRADIENT_PREFIXES:
            if grad.startswith(prefix) and grad[len(prefix) :] in params:
                found[grad[len(prefix) :]] = grad
    return dict(sorted(found.items()))


def own_weight(bias: str, params: Iterable[str]) -> str | None:
    """The weights of the layer a bias belongs to (``fc.bias`` -> ``fc.weight``; Keras's
    ``dense/bias:0`` -> ``dense/kernel:0``), if among ``params``."""
    head, found, tail = bias.rpartition("bias")
    if not found or "." in tail or "/" in tail:  # "bias" must be the name's last part
        return None
    known = set(params)
    for weight in ("weight", "kernel"):
        if head + weight + tail in known:
            return head + weight + tail
    return None


def trained_parameters(trial: Trial, step: int, pairs: dict[str, str]) -> dict[str, str]:
    """``pairs`` (from :func:`gradients_by_parameter`) less the parameters whose gradient is
    negligible: against the others' (:data:`NEGLIGIBLE_GRADIENT`), or, for a bias, against its
    own layer's weights' (:data:`NORMALISED_BIAS`: a bias feeding a normalisation). What the
    optimizer should visibly move."""
    if not pairs:
        return pairs
    means = trial.step_block(step).reduce(list(pairs.values()), "mean", abs=True)
    of = dict(zip(pairs, means.tolist(), strict=True))
    finite = means[np.isfinite(means)]
    floor = NEGLIGIBLE_GRADIENT * float(np.median(finite)) if finite.size else 0.0
    kept = {}
    for param, grad in pairs.items():
        mean = of[param]
        if mean <= floor:  # a NaN or infinite gradient stays: a problem for the rule to report
            continue
        weight = own_weight(param, pairs)
        if weight is not None and mean <= NORMALISED_BIAS * of[weight]:
            continue
        kept[param] = grad
    return kept


def zero_gradients(trial: Trial, step: int, pairs: dict[str, str]) -> bool:
    """Whether every gradient of ``pairs`` is exactly 0 at a step (nothing can train; a
    frozen parameter has no saved gradient, and is not in ``pairs``)."""
    if not pairs:
        return False
    largest = trial.step_block(step).reduce(list(pairs.values()), "max", abs=True)
    return bool(np.all(largest == 0))


def loss_is_zero(trial: Trial, step: int) -> bool:
    """Whether the losses saved at a step are all exactly 0 (a loss at its minimum has zero
    gradients by nature)."""
    names = loss_names(trial, True, None, step)
    return bool(names) and all(scalar(trial.tensor(n), step) == 0 for n in names)


def has_raw(tensor: Tensor, step: int) -> bool:
    return any(e.raw is not None for e in tensor._entries(step, None).values())


def step_mode(trial: Trial, step: int) -> tuple[ModeKeys, int]:
    return trial.mode(step), trial.mode_step(step)


#: What a rule of training steps says of the steps it does not judge (EVAL, PREDICT).
NOT_TRAINING = "{mode} steps are not training steps (only TRAIN steps, and GLOBAL ones, are judged)"


def judges_mode(wanted: ModeKeys, mode: ModeKeys) -> bool:
    """Whether a rule of ``wanted`` steps (its ``mode`` parameter) judges a step of ``mode``:
    one of that mode, and any step when ``wanted`` is GLOBAL; a GLOBAL step (its mode was
    never set, as smdebug writes when the script never calls ``set_mode``) is judged whatever
    ``wanted`` is, as smdebug's rules judged it."""
    return wanted in (ModeKeys.GLOBAL, mode) or mode == ModeKeys.GLOBAL


def training_step(trial: Trial, step: int) -> tuple[ModeKeys, int] | None:
    """``(mode, step number)`` of a training step, to read its tensors with
    (``tensor.value(number, mode=mode)``, ``tensor.steps(mode=mode)``): a TRAIN step and its
    TRAIN step number, or a GLOBAL step and its global step number. A script that never calls
    ``set_mode`` writes GLOBAL steps only (smdebug's hooks as well as tensortap's), and
    smdebug's rules judged those as training steps. None for EVAL and PREDICT steps."""
    mode, number = step_mode(trial, step)
    if mode == ModeKeys.GLOBAL:
        return mode, step
    if mode == ModeKeys.TRAIN:
        return mode, number
    return None


#: The loss of every step (core._vitals): read ahead of the ``losses`` collection.
VITAL_LOSS = Vital.LOSS


def vital_at(trial: Trial, name: str, step: int) -> bool:
    """Whether the vital sign ``name`` (``vitals/loss``, ...) was saved at global ``step``."""
    return trial.has_tensor(name) and saved_at(trial.tensor(name), step)


def loss_names(
    trial: Trial, use_losses_collection: bool, regexes: Sequence[str] | None, step: int | None
) -> list[str]:
    """The loss tensors saved at ``step`` (at any step: None): the losses collection and/or
    names matching regexes. Where the step's vital sign ``vitals/loss`` was saved, it stands
    for the losses collection (the same loss, of every step: never judged twice); at any step
    (None) both are named, and :func:`prefer_vital_loss` picks per step."""
    if use_losses_collection and step is not None and vital_at(trial, VITAL_LOSS, step):
        note_losses_asked(trial)
        extra = select(trial, [], regexes, step=step, default=[]) if regexes else []
        return [VITAL_LOSS, *(n for n in extra if n != VITAL_LOSS)]
    names = select(
        trial, ["losses"] if use_losses_collection else [], regexes, step=step, default=[]
    )
    if use_losses_collection and step is None and trial.has_tensor(VITAL_LOSS):
        names = [VITAL_LOSS, *(n for n in names if n != VITAL_LOSS)]
    return names


def note_losses_asked(trial: Trial) -> None:
    """Count the ``losses`` collection as asked for at a step whose ``vitals/loss`` stands for
    it (as the walk in bulk, naming both, asks for it)."""
    asked = getattr(trial, "collections_asked", None)
    if asked is not None:
        asked.add("losses")


def prefer_vital_loss(
    trial: Trial, losses: list[list[tuple[str, float]] | None] | None
) -> list[list[tuple[str, float]] | None] | None:
    """Each step's (name, value) losses as :func:`loss_names` names them at that step: where
    ``vitals/loss`` is among them, the ``losses`` collection's are left out."""
    if losses is None or not trial.has_tensor(VITAL_LOSS):
        return losses
    replaced = set(optional_names_in(trial, "losses"))
    out: list[list[tuple[str, float]] | None] = []
    for found in losses:
        if found and any(name == VITAL_LOSS for name, _ in found):
            found = [(n, v) for n, v in found if n == VITAL_LOSS or n not in replaced]
        out.append(found)
    return out


def metric_at(trial: Trial, regex: str, step: int) -> float | None:
    """The mean of the scalars matching ``regex`` saved at ``step`` (None if there are none):
    how rules read a metric named by the user, such as XGBoost's ``validation-logloss``."""
    names = trial.tensor_names(step=step, regex=regex)
    if not names:
        return None
    return float(np.mean([scalar(trial.tensor(n), step) for n in names]))


def metric_pair(rule: type[Rule], training: str, validation: str) -> tuple[str, str]:
    """The ``training_metric`` and ``validation_metric`` regexes of a rule that compares the
    two, checked to be given together (both or neither)."""
    rule.check_param(
        "validation_metric",
        validation,
        bool(training) == bool(validation),
        "given together with training_metric (both or neither)",
    )
    return training, validation


def boosting_metric_pair(trial: Trial, step: int) -> tuple[str, str] | None:
    """On a trial the XGBoost hook wrote, the metrics a rule of losses compares when it is
    given none (the booster computed them: no loss is saved): ``train-<metric>`` and the last
    other eval set's ``<set>-<metric>`` (``validation-logloss``), of the first loss metric,
    by name, that both have, as regexes matching exactly them. None on other trials, and
    when no loss metric has both (error rates are no loss: :func:`boosting_no_pair`)."""
    if trial.framework() != "xgboost":
        return None
    pair = training_and_validation(names_in(trial, "metrics", step))
    return None if pair is None else (f"^{re.escape(pair[0])}$", f"^{re.escape(pair[1])}$")


def training_and_validation(
    metrics: Sequence[str], losses_only: bool = True
) -> tuple[str, str] | None:
    """Of XGBoost's metric names (``<eval set>-<metric>``): ``train-<metric>`` and the last
    other set's same metric, of the first loss metric by name that both have (with
    ``losses_only`` false, of any metric when no loss metric has both)."""
    names = sorted(metrics)
    for wanted in (True, False) if not losses_only else (True,):
        for name in names:
            if name.startswith("train-"):
                metric = name[len("train-") :]
                if is_loss_metric(metric) != wanted:
                    continue
                others = [m for m in names if m != name and m.endswith(f"-{metric}")]
                if others:
                    return name, others[-1]
    return None


def boosted_without_pair(trial: Trial, tensor_regex: list[str], step: int) -> bool:
    """A booster's trial whose metrics hold no training and validation loss to compare (and
    no loss saved otherwise): nothing to judge, for the reason :func:`boosting_no_pair` gives
    (never "save losses", which a booster has no use for). For Overfit and Overtraining."""
    if trial.framework() != "xgboost":
        return False
    return not loss_names(trial, True, tensor_regex, step)


def boosting_no_pair(trial: Trial, rule: str) -> str | None:
    """Why ``rule`` has no training and validation loss metric to compare on a trial the
    XGBoost hook wrote (None on other trials, or when it has them): no training set among
    the eval sets, no other set, or error rates only; with what to do."""
    if trial.framework() != "xgboost":
        return None
    metrics = sorted(names_in(trial, "metrics", None))
    if training_and_validation(metrics) is not None:
        return None
    sets = sorted({m.partition("-")[0] for m in metrics})
    listed = ", ".join(metrics) if metrics else "none"
    if "train" not in sets:
        return (
            f"the booster's metrics ({listed}) have none of the training data: {rule} compares "
            "the training set's loss metric with a validation set's; put the training data in "
            "evals (xgb.train(..., evals=[(dtrain, 'train'), (dvalid, 'validation')])) or "
            "first in eval_set (model.fit(X, y, eval_set=[(X, y), (X_valid, y_valid)]))"
        )
    if len(sets) < 2:
        return (
            f"the booster's metrics ({listed}) have no validation set: {rule} compares the "
            "training set's loss metric with a validation set's; add one to evals or eval_set"
        )
    return (
        f"the booster's metrics ({listed}) hold no loss of both the training and a validation "
        f"set: {rule} compares losses, and error rates or scores are no loss; add a loss to "
        "eval_metric (eval_metric=['logloss', 'error'] for a classifier, 'rmse' for a "
        "regressor)"
    )


def newest_at_or_before(steps: Sequence[int], limit: int) -> int | None:
    """The largest of the sorted ``steps`` that is <= ``limit``."""
    lo, hi = 0, len(steps)
    while lo < hi:
        mid = (lo + hi) // 2
        if steps[mid] <= limit:
            lo = mid + 1
        else:
            hi = mid
    return steps[lo - 1] if lo else None


def unit_activity(values: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Percent of samples in which each unit is active.

    ``values`` is (batch, units...) and ``active`` a boolean mask of the same shape; a unit is
    an element of a dense layer, a channel (axis 1) of anything with spatial dimensions.
    """
    if active.ndim <= 1:
        return np.asarray([100.0 * float(active.mean())]) if active.size else np.zeros(0)
    axes = (0,) if active.ndim == 2 else (0, *range(2, active.ndim))
    return np.asarray(100.0 * active.mean(axis=axes), dtype=np.float64)


def collection_names_param(params: Mapping[str, Any]) -> list[str]:
    """The ``collection_names`` parameter as given to ``required_collections``: a list, or
    a comma-separated string (the job's spelling)."""
    names = params.get("collection_names") or []
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    return list(names)


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of a rate of ``hits`` in ``n``: how low and
    how high the true rate may be, given the sample ((0, 1) when n is 0)."""
    if n <= 0:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))
