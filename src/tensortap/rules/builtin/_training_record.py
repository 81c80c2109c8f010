"""What one stage of training says about the evaluation passes that judge it (AccuracyAtChance):
its TRAIN steps walked in order, the constant and the linear models a model must beat, and the
training loss it ended with."""

from __future__ import annotations

import bisect
import math

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._chance import MIN_TRAIN
from tensortap.rules.builtin._common import scalar, vital_at
from tensortap.rules.builtin._labels import as_classes, find, regression_targets
from tensortap.rules.builtin._linear import LinearClassifier, LinearFit
from tensortap.rules.builtin._samples import model_input

#: the vital sign of the training loss judged at the end of training (a classifier's loss
#: still at the entropy of its labels' class shares learned nothing beyond them)
LOSS = "vitals/loss"
#: the training loss at the end: the median of this many last values, after at least
#: ``MIN_STEPS`` training steps; at ``AT_ENTROPY`` of the labels' entropy or above, at chance
END_VALUES, MIN_STEPS, AT_ENTROPY = 10, 50, 0.97
#: training labels counted at most (the shares of a sample of the training set)
MAX_TRAIN = 4096
#: a regression's fit of its training targets at the end: its predictions on the last
#: ``FIT_STEPS`` saved training steps (at most ``FIT_ROWS`` targets of each), at least
#: ``MIN_FIT`` targets; explaining under ``AT_VARIANCE`` of their spread, it fit nothing
FIT_STEPS, FIT_ROWS, MIN_FIT, AT_VARIANCE = 20, 1024, 100, 0.1


class TrainingRecord:
    """The TRAIN steps of one stage of training (from TRAIN step ``stage_from``: the run's
    start, or another model's fit), walked in order with :meth:`walk`: how many were walked; a
    regression's training targets (their mean: the constant to beat) and the straight line
    through the model's inputs fitted on them (``line``); a classifier's training labels
    (``labels``: counts by class, of at most ``MAX_TRAIN``) and the linear classifier of the
    inputs fitted on them (``class_line``); and, read from the trial when asked, the training
    loss the stage ended with."""

    def __init__(self, rule: Rule, stage_from: int, labels_regex: str) -> None:
        self._rule = rule
        self.stage_from = stage_from
        self._labels_regex = labels_regex
        self.steps = 0  # TRAIN steps walked
        self._target_sum, self._target_count = 0.0, 0  # of the training targets
        # the last FIT_STEPS steps' predictions and training targets: (the step, predictions,
        # targets), at most FIT_ROWS of each step's
        self._fit: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.line = LinearFit()  # the training targets fitted on the model's inputs
        self.class_line = LinearClassifier()  # the training labels fitted on them
        self.labels = np.zeros(0, dtype=np.int64)  # TRAIN labels saved, by class
        self._losses: tuple[int, list[float]] | None = None  # see last_losses
        # the first training loss walked and the last END_VALUES, while loss_fell has not
        # held (None: it has, and the losses are no longer read)
        self._recent: tuple[float, list[float]] | None = (math.nan, [])

    def walk(self, step: int, regression_pass: bool) -> None:
        """A TRAIN step: count it, and its training targets or labels (no labels where a
        regression's evaluation pass is under way: ``regression_pass``)."""
        self.steps += 1
        trial = self._rule.base_trial
        if self._recent is not None and vital_at(trial, LOSS, step):
            value = scalar(trial.tensor(LOSS), step)
            first, recent = self._recent
            self._recent = (value if not recent else first, [*recent[-END_VALUES + 1 :], value])
        found = regression_targets(trial, step)
        if found is not None:  # the training targets' mean: the constant to beat
            predicted, target = (np.asarray(v, dtype=np.float64).ravel() for v in found[:2])
            self._target_sum += float(np.sum(target))
            self._target_count += target.size
            one = np.squeeze(found[1]).ndim <= 1  # one target a row (an autoencoder's are many)
            kept = (step, predicted[:FIT_ROWS], target[:FIT_ROWS])
            if one and np.isfinite(kept[1]).all() and np.isfinite(kept[2]).all():
                self._fit = [*self._fit[-FIT_STEPS + 1 :], kept]
            x = matrix_input(self._rule, step)
            if x is not None:
                self.line.add(x, found[1])
            return
        if regression_pass:
            return
        y = self._classes(step)
        if y is not None and self.class_line.fitting:
            given = model_input(trial, step)
            if given is not None:
                self.class_line.add(np.asarray(given[1]), y)

    def target_mean(self) -> float | None:
        """The mean of a regression's training targets (None where none was saved)."""
        return self._target_sum / self._target_count if self._target_count else None

    def fit_at_chance(self) -> tuple[float, int, int] | None:
        """(How much of its training targets' spread the model's predictions explain on its
        last ``FIT_STEPS`` saved training steps: ``1 - (e / s)^2``, ``e`` the median absolute
        error and ``s`` the median absolute deviation of the targets, R^2 for normal errors
        and targets and blind to a heavy tail's outliers; how many targets; the last of those
        steps) where it is under ``AT_VARIANCE``: a regression that ended training without
        fitting its own training targets (after ``MIN_STEPS`` training steps, on ``MIN_FIT``
        targets or more, one a row: an autoencoder's reconstruction is not judged so); None
        otherwise, and where half the targets or more are one value. The spread is the larger
        of the two inputs', so a loss called as ``mse_loss(target, prediction)`` is judged
        alike."""
        if not self._fit or self.steps < MIN_STEPS:
            return None
        predicted = np.concatenate([p for _, p, _ in self._fit])
        target = np.concatenate([t for _, _, t in self._fit])
        if target.size < MIN_FIT:
            return None
        deviation = _deviation(target)
        if not deviation > 0:
            return None  # targets mostly one value (at least half): no spread to explain
        spread = max(deviation, _deviation(predicted))
        share = 1.0 - (float(np.median(np.abs(predicted - target))) / spread) ** 2
        return (share, target.size, self._fit[-1][0]) if share < AT_VARIANCE else None

    def _classes(self, step: int) -> np.ndarray | None:
        """The class ids saved at a TRAIN step (None: none, or targets that are not classes),
        added to the training labels' counts until ``MAX_TRAIN`` were counted (a sample of
        the training set is enough for their shares); read while they are counted or the
        linear classifier fits them."""
        counting = self.labels.sum() < MAX_TRAIN
        if self._target_count or not (counting or self.class_line.fitting):
            return None
        name = find(self._rule, "labels", self._labels_regex, step)
        if name is None:
            return None
        labels = np.asarray(self._rule.base_trial.tensor(name).value(step))
        whole = labels.dtype.kind in "iub" or (
            labels.dtype.kind == "f" and bool(np.all(np.mod(labels, 1) == 0))
        )
        if not whole and labels.ndim < 2:  # neither class ids nor one-hot rows: targets
            return None
        if labels.ndim >= 2 and not np.allclose(labels.sum(axis=-1), 1.0):
            return None  # multi-hot rows (several labels a sample): no class shares
        y = as_classes(labels, labels)[0]
        if y.size == 0 or y.min() < 0:
            return None
        if counting:
            counts = np.bincount(y, minlength=self.labels.size)
            counts[: self.labels.size] += self.labels
            self.labels = counts
        return y

    def final_loss(self) -> tuple[float, float, int] | None:
        """(the training loss at the end: the median of the last ``END_VALUES`` values of
        ``vitals/loss``, the entropy of the training labels' class shares, the last training
        step), after at least ``MIN_STEPS`` training steps of a classifier; None where not
        known."""
        train = self.labels
        if train.sum() < MIN_TRAIN or np.count_nonzero(train) < 2:
            return None
        last, values = self.last_losses()
        if len(values) < END_VALUES or last - self.stage_from < MIN_STEPS:
            return None
        final = float(np.median(values))
        if not math.isfinite(final):
            return None
        shares = train[train > 0] / train.sum()
        return final, float(-(shares * np.log(shares)).sum()), last

    def loss_at_chance(self) -> tuple[float, float, int] | None:
        """:meth:`final_loss` where it is at ``AT_ENTROPY`` of the labels' entropy or above:
        what always answering the class shares costs in cross-entropy, so the model learned
        nothing beyond them; None otherwise."""
        found = self.final_loss()
        return found if found is not None and found[0] >= AT_ENTROPY * found[1] else None

    def loss_nonfinite(self) -> bool:
        """Whether the training loss (``vitals/loss``) is non-finite among its last
        ``END_VALUES`` training values."""
        return not all(math.isfinite(v) for v in self.last_losses()[1])

    def loss_fell(self) -> bool:
        """Whether the training loss has fallen since the stage began, as far as it was walked:
        the median of its last ``END_VALUES`` values walked under its first. True where no
        training loss was saved (not known), and from the first time it held on (see
        ``_recent``)."""
        if self._recent is None:
            return True
        first, recent = self._recent
        fell = not recent or not math.isfinite(first) or float(np.median(recent)) < first
        if fell:
            self._recent = None  # no longer read: it fell once, and that is what is asked
        return fell

    def last_losses(self) -> tuple[int, list[float]]:
        """(the last TRAIN step of ``vitals/loss`` in the stage, its last ``END_VALUES`` values
        as means), read once per last step: asked at every pass at chance and at the end."""
        trial = self._rule.base_trial
        if LOSS not in trial.tensor_names():
            return -1, []
        tensor = trial.tensor(LOSS)
        steps = tensor.steps(mode=ModeKeys.TRAIN)
        steps = steps[bisect.bisect_left(steps, self.stage_from) :]  # this stage's
        if not steps:
            return -1, []
        if self._losses is None or self._losses[0] != steps[-1]:
            values = [float(np.asarray(tensor.value(s, mode=ModeKeys.TRAIN)).mean())
                      for s in steps[-END_VALUES:]]  # fmt: skip
            self._losses = (steps[-1], values)
        return self._losses


def _deviation(v: np.ndarray) -> float:
    """The median absolute deviation of ``v`` from its median."""
    return float(np.median(np.abs(v - np.median(v))))


def matrix_input(rule: Rule, step: int) -> np.ndarray | None:
    """The model's own input saved at ``step``, where it is a matrix of features."""
    found = model_input(rule.base_trial, step)
    if found is None or found[1].ndim != 2:
        return None
    return np.asarray(found[1])
