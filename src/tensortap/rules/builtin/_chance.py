"""What chance scores on one evaluation pass, apart from the rule that walks the passes.

A classifier's pass is judged against always answering its most common class (accuracy) and
against predictions that ignore the inputs however they are spread (balanced accuracy, 1/K); a
regression's against always answering the training targets' mean (squared error). Each gives a
:class:`PassScore`. :func:`label_shift` says when a pass at chance is a training set's
imbalance rather than labels that do not follow from the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: at least this many training labels saved before their shares are compared with a pass's
MIN_TRAIN = 30
#: the training labels' majority class at least this many times as likely (odds) as in the
#: pass: the training set is imbalanced against what the model is evaluated on
SHIFT_ODDS = 5.0


@dataclass(frozen=True)
class PassScore:
    """One evaluation pass against chance."""

    #: neither measure is ``z_threshold`` standard errors better than chance
    at_chance: bool
    #: what was measured, in words
    said: str
    #: the accuracy (a classifier) or R^2 (a regression)
    value: float
    #: what chance scores on the same measure (the majority's share; 0 for R^2)
    chance: float
    #: how far above chance, in standard errors (the larger of a classifier's two measures)
    z: float
    #: how far from chance to perfect (balanced accuracy's share of the way, or R^2)
    gain: float


def classified(labels: np.ndarray, predicted: np.ndarray, z_threshold: float) -> PassScore:
    """A classifier's pass of class ids ``labels`` and ``predicted`` (at least one sample)."""
    n = labels.size
    chance = float(np.bincount(labels - labels.min()).max()) / n
    accuracy = float(np.mean(labels == predicted))
    spread = math.sqrt(max(chance * (1 - chance), 1e-12) / n)
    z = (accuracy - chance) / spread
    balanced_accuracy, z_balanced = balanced(labels, predicted)
    said = (
        f"evaluation accuracy {accuracy:.3f} over {n} samples against {chance:.3f} for always "
        f"answering the most common class ({z:+.1f} standard errors), balanced accuracy "
        f"{balanced_accuracy:.3f} against {1 / max(len(np.unique(labels)), 1):.3f} for "
        f"answering without looking ({z_balanced:+.1f})"
    )
    k = max(len(np.unique(labels)), 2)
    return PassScore(
        at_chance=z < z_threshold and z_balanced < z_threshold,
        said=said,
        value=accuracy,
        chance=chance,
        z=max(z, z_balanced),
        gain=(balanced_accuracy - 1 / k) / (1 - 1 / k),  # of the way to every class right
    )


def regressed(
    predicted: np.ndarray, target: np.ndarray, mean: float, z_threshold: float
) -> PassScore:
    """A regression's pass (at least two targets), against always answering ``mean``: at
    chance when the model's squared error is not ``z_threshold`` standard errors (of the
    per-sample differences) below that constant's."""
    n = target.size
    constant, model = (target - mean) ** 2, (target - predicted) ** 2
    z = paired_z(constant - model)
    r2 = 1 - float(model.mean()) / max(float(constant.mean()), 1e-12)
    said = (
        f"evaluation squared error {model.mean():.4g} over {n} targets against "
        f"{constant.mean():.4g} for always answering the training targets' mean "
        f"{mean:.4g} (R^2 {r2:.3f}, {z:+.1f} standard errors better)"
    )
    return PassScore(z < z_threshold, said, r2, 0.0, z, r2)


def paired_z(gain: np.ndarray) -> float:
    """How many standard errors (of the per-sample differences) the mean of ``gain`` is above
    0: one squared error's lead over another's on the same targets."""
    spread = float(gain.std(ddof=1)) / math.sqrt(gain.size) if gain.size > 1 else 0.0
    return float(gain.mean()) / max(spread, 1e-12)


def balanced(labels: np.ndarray, predicted: np.ndarray) -> tuple[float, float]:
    """(balanced accuracy, its distance above chance in standard errors): the mean recall over
    the classes present, which is 1/K for predictions that ignore the inputs whatever their
    spread, its standard error under that null from each class's count and the share of
    predictions naming it."""
    classes, counts = np.unique(labels, return_counts=True)
    k = classes.size
    if k < 2:
        return 0.0, -math.inf
    recall = np.array([np.mean(predicted[labels == c] == c) for c in classes])
    share = np.array([np.mean(predicted == c) for c in classes])
    variance = float(np.sum(share * (1 - share) / counts)) / (k * k)
    balanced_accuracy = float(recall.mean())
    return balanced_accuracy, (balanced_accuracy - 1 / k) / math.sqrt(max(variance, 1e-12))


def label_shift(train: np.ndarray, seen: np.ndarray) -> str | None:
    """Why a pass at chance is the training set's imbalance, not labels that do not follow from
    the inputs: a class that is most of the training labels saved (``train``, counts by class)
    is far less of the pass's (``seen``): its odds ``SHIFT_ODDS`` times the pass's or more,
    half-counts added to both. None where the training labels are too few (``MIN_TRAIN``) or
    distributed alike."""
    if train.sum() < MIN_TRAIN or seen.sum() == 0:
        return None
    k = max(train.size, seen.size)
    train = np.pad(train, (0, k - train.size)).astype(np.float64)
    seen = np.pad(seen, (0, k - seen.size)).astype(np.float64)
    top = int(train.argmax())
    share, share_seen = train[top] / train.sum(), seen[top] / seen.sum()
    if share < 0.5:
        return None

    def odds(counts: np.ndarray) -> float:
        return float((counts[top] + 0.5) / (counts.sum() - counts[top] + 0.5))

    ratio = odds(train) / odds(seen)
    if ratio < SHIFT_ODDS:
        return None
    return (
        f"not labels that do not follow from the inputs (shuffled labels keep their "
        f"classes' shares): class {top} is {100 * share:.3g}% of the {int(train.sum())} "
        f"training labels saved against {100 * share_seen:.3g}% of this pass's (odds "
        f"{ratio:.3g}x), so the model learned the training set's imbalance: balance the "
        "training data (resample or weight the classes) or check how the training set was "
        "filtered or split"
    )
