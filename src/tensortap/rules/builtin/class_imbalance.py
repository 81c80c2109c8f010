"""ClassImbalance: some classes far rarer than others, or sacrificed by the model."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._collections import TRAINING_LOOP
from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    fire_nonfinite,
    has_raw,
    names_in,
    nonfinite_names,
    scalar,
    wilson,
)
from tensortap.rules.builtin._labels import labels_and_predictions
from tensortap.rules.builtin._samples import (
    ConfigFact,
    DistinctByClass,
    model_input,
    predicts_tokens,
)
from tensortap.rules.builtin._series import Stages

#: A class whose error rate fell this much since it was first seen given up is being learned.
_LEARNING = 0.1
#: A class is rare in the training labels at 1/_RARE of the most frequent class's count or
#: fewer, once that class was seen _MIN_TOP times (balanced classes are not that far apart by
#: chance then: a balanced 10-class run saving 176 labels has about 18 a class).
_RARE = 5.0
_MIN_TOP = 30
#: Where the model's inputs are saved beside the training labels, classes are counted in
#: distinct samples while there are at most this many: a training set of 40 samples drawn
#: again and again counts each label many times, and a class with 1 sample against 8 (chance,
#: in 40 samples of 10 classes) would pass for a 1-in-8 imbalance seen hundreds of times.
_DISTINCT_CAP = 1000
#: Labels of the most frequent class in the window, and its error rate at most, for a rare
#: class to be put down to the imbalance (the model learned the majority).
_MIN_CLASS = 20
#: ... and TRAIN steps the model trained for before a class given up is a problem mid-run: a
#: sequence task's batch holds hundreds of token labels, so ``samples`` labels are a step or
#: two of training, where the rare tags are always still behind (judged when training ended,
#: however short)
_MIN_TRAIN_STEPS = 50
_TOP_ERROR = 0.3
#: The training-loop fact: how far the loss module weights the classes apart.
_WEIGHTS = f"{TRAINING_LOOP}/class_weights"
#: ... and each class's weight
_WEIGHT_VALUES = f"{TRAINING_LOOP}/class_weights/values"


@dataclass
class _Labels:
    """What the rule has seen of one mode's labels: every label by class, the most recent
    labels and predictions, and the classes the model gave up on."""

    recent: deque[tuple[np.ndarray, np.ndarray]] = field(default_factory=deque)
    held: int = 0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # class -> (labels seen, its error rate) when it was first seen given up
    given_up: dict[int, tuple[int, float]] = field(default_factory=dict)


class ClassImbalance(Rule):
    """Fires when the most frequent class outnumbers the rarest by more than
    ``threshold_imbalance`` times over every label seen so far (as smdebug counted), or when,
    over the most recent ``samples`` predictions, some class is mispredicted more often than
    ``threshold_misprediction`` (a fraction) while the model as a whole errs at most a quarter
    that often: the model learned, but gave up on a class. (Judging mispredictions without the
    second condition fires on every model before it has learned; judging them over the whole
    run would count the time before it learned.) Steps before ``samples`` labels were seen are
    skipped, not judged, except for a class rare in the training labels (below).

    Cause and severity: a class given up on is put down to the imbalance only when it is rare in
    the training labels (at most a fifth of the most frequent class's count, once that class was
    seen 30 times; counted in distinct samples where the model's inputs are saved beside the
    labels and the training set has at most 1,000, so that a small set drawn again and again is
    not taken for a large imbalance) and its error rate is above ``threshold_misprediction``
    beyond the sampling noise (the lower end of its Wilson 95% interval): then it is judged as
    soon as that shows and the model gets the most frequent class right at least 70% of the time
    (a model that collapsed onto the majority class errs on a balanced validation set far more
    than a quarter of the time). It is a problem while it stays so once the model has trained on
    ``samples`` labels, or when training ended so however short it was (its error rate fell less
    than 10 points since it was first seen given up; the last labels are judged again at the
    run's end when later steps held none): early in training some class is always
    behind, and it is a warning until then. Mid-run it also waits for 50 TRAIN steps of
    training (a sequence task's batch holds hundreds of token labels: ``samples`` labels are a
    step or two there). A class given up on that is not rare is a warning
    whose cause is ``class_given_up`` (a class the model finds hard: in a balanced data set it
    is not an imbalance), and so is a rare class given up on where the loss weights the classes
    (the PyTorch hook's ``training_loop/class_weights`` fact: the imbalance is handled, yet the
    class is given up), unless the weights lean the wrong way: the class given up weighs less
    than the most frequent class (``training_loop/class_weights/values``: weights that follow
    the class counts, where their inverse was meant, make the imbalance worse). Training is
    counted in TRAIN steps times their batch of labels, so that
    a job saving every 10th TRAIN step, or a long evaluation pass (no training within it),
    counts what the model was trained on (a trial without TRAIN labels counts the labels of the
    mode judged); imbalanced labels alone are a warning (class weights or resampling may handle
    them, as the mispredictions then show).

    Each mode is judged on its own labels: TRAIN labels (the training data's balance; GLOBAL in
    a trial without modes) apart from EVAL labels (the validation data's), never pooled. A job
    saves every 10th TRAIN step and every EVAL step, so pooled counts are mostly the validation
    set's, and a balanced validation set hid an imbalanced training set. Findings name the
    mode (``details["mode"]``) and ``details["cause"]`` (``class_imbalance`` or
    ``class_given_up``).

    A language model's labels (the run's configuration names a model class of a causal, masked
    or sequence-to-sequence language-model head) are a vocabulary's tokens, rare by nature and
    some unpredictable: every step is skipped, saying so.

    Labels and predictions: the ``labels`` and ``predictions`` collections, else tensors
    matching ``labels_regex`` / ``predictions_regex``. Predictions that are scores per class
    (or any, with ``argmax``) are reduced with argmax; scores holding NaN or inf are a problem
    (non-finite).
    """

    collections_needed = ("labels", "predictions")

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold_imbalance = params["threshold_imbalance"]
        threshold_misprediction = params["threshold_misprediction"]
        samples = params["samples"]
        cls.check_param(
            "threshold_imbalance", threshold_imbalance, threshold_imbalance >= 1, "a ratio >= 1"
        )
        cls.check_param(
            "threshold_misprediction",
            threshold_misprediction,
            0 <= threshold_misprediction <= 1,
            "a fraction in [0, 1]",
        )
        cls.check_param("samples", samples, samples >= 1, "an integer >= 1")

    def __init__(
        self,
        base_trial: Any,
        threshold_imbalance: float = 10.0,
        threshold_misprediction: float = 0.7,
        samples: int = 500,
        argmax: bool = False,
        labels_regex: str = ".*labels",
        predictions_regex: str = ".*predictions",
    ) -> None:
        super().__init__(base_trial)
        self.threshold_imbalance = threshold_imbalance
        self.threshold_misprediction = threshold_misprediction
        self.samples = samples
        self.argmax = argmax
        self.labels_regex, self.predictions_regex = labels_regex, predictions_regex
        self._tokens = ConfigFact(base_trial, predicts_tokens)  # why the labels are tokens
        self._stages = Stages(base_trial)
        self._start_stage()

    def _start_stage(self) -> None:
        """Count labels from here (the run's start, or a new stage of training: another
        model's fit, on another task with classes of its own)."""
        self._seen: dict[ModeKeys, _Labels] = {}
        self._trained = 0  # labels trained on so far (TRAIN steps times their batch)
        self._last_train: int | None = None  # the TRAIN step they were counted to
        self._distinct = DistinctByClass(cap=_DISTINCT_CAP)  # training samples by class
        # the last window judged before the run's end was known, and whether a class given up
        # on there waited only for the run to be long enough (judged again at the end)
        self._last_judged: tuple[ModeKeys, _Labels, np.ndarray, np.ndarray, list[str]] | None
        self._last_judged = None
        self._waiting = False

    def _window(self, seen: _Labels, y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.recent.append((y, p))
        seen.held += y.size
        while seen.recent and seen.held - seen.recent[0][0].size >= self.samples:
            seen.held -= seen.recent.popleft()[0].size
        labels = np.concatenate([a for a, _ in seen.recent])[-self.samples :]
        predicted = np.concatenate([b for _, b in seen.recent])[-self.samples :]
        return labels, predicted

    def invoke_at_step(self, step: int) -> bool:
        tokens = self._tokens()
        if tokens is not None:
            raise self.skip(
                f"{tokens}: a vocabulary's tokens are rare by nature and some cannot be "
                "predicted from what comes before, so they are not judged as classes"
            )
        if self._stages.entered(step):
            self._start_stage()
        mode = self.base_trial.mode(step)
        mode = ModeKeys.TRAIN if mode == ModeKeys.GLOBAL else mode
        bad = self._nonfinite_scores(step)
        if bad:
            return fire_nonfinite(self, bad, "the predictions")
        y, p, names = labels_and_predictions(
            self, step, self.labels_regex, self.predictions_regex, self.argmax
        )
        if y.size and y.min() < 0:
            raise self.skip("labels must be class indices >= 0")
        if mode == ModeKeys.TRAIN:
            found = None if self._distinct.full else model_input(self.base_trial, step)
            if found is not None:
                self._distinct.add(found[1], y)
            mode_step = self.base_trial.mode_step(step)
            last = -1 if self._last_train is None else self._last_train
            self._trained += max(mode_step - last, 1) * y.size
            self._last_train = mode_step
        seen = self._seen.setdefault(mode, _Labels())
        counts = np.bincount(y, minlength=seen.counts.size)
        counts[: seen.counts.size] += seen.counts
        seen.counts = counts
        y, p = self._window(seen, y, p)
        # training has ended: what is given up now was never learned, however short the run
        trial = self.base_trial
        ended = trial.loaded_all_steps and step == trial.steps()[-1]
        self._last_judged = None if ended else (mode, seen, y, p, names)
        return self._judge(mode, seen, y, p, names, ended)

    def invoke_at_end(self, last_step: int) -> bool | None:
        """The last labels judged, when a later step held none (a short run whose last saved
        steps were vital signs alone): judged again as the end of training, where a class
        still given up was never learned. None when that changes nothing (no class was
        waiting for the run to be long enough)."""
        if self._last_judged is None or not self._waiting:
            return None
        mode, seen, y, p, names = self._last_judged
        self._last_judged = None
        return self._judge(mode, seen, y, p, names, ended=True)

    def _judge(
        self,
        mode: ModeKeys,
        seen: _Labels,
        y: np.ndarray,
        p: np.ndarray,
        names: list[str],
        ended: bool,
    ) -> bool:
        """Judge the window of ``mode``'s last labels ``y`` and predictions ``p``."""
        self._waiting = False
        which = mode.name
        # the training data's balance: TRAIN labels, or the judged mode's where none were saved
        ref_mode = ModeKeys.TRAIN if ModeKeys.TRAIN in self._seen else mode
        reference = self._seen[ref_mode].counts
        distinct = self._distinct.counts(reference.size) if ref_mode is ModeKeys.TRAIN else None
        rare = _rare(reference if distinct is None else distinct)
        counts = np.bincount(y, minlength=reference.size)
        correct = np.bincount(y[y == p], minlength=counts.size)
        present = np.flatnonzero(counts)
        wrong = {int(k): 1.0 - correct[k] / counts[k] for k in present}
        overall = float(np.mean(y != p))
        top = int(reference.argmax()) if reference.size else -1
        top_learned = counts[top] >= _MIN_CLASS and wrong[top] <= _TOP_ERROR if top >= 0 else False
        limit = self.threshold_misprediction
        full = y.size >= self.samples

        def significant(k: int) -> bool:
            """Class ``k``'s error rate is above the limit beyond the sampling noise."""
            return wilson(int(counts[k] - correct[k]), int(counts[k]))[0] > limit

        # a rare class whose error rate is significantly over the limit is judged early; the
        # imbalance is not to blame where the loss weights the classes (handled)
        weighted, weights = self._class_weights()

        def lighter(k: int) -> bool:
            """The loss weights class ``k`` less than the most frequent class: the weighting
            makes the imbalance worse (weights that follow the class counts)."""
            return weights is not None and max(k, top) < weights.size and weights[k] < weights[top]

        rare_given_up = {k for k in rare & set(wrong) if top_learned and significant(k)}
        blame = {k for k in rare_given_up if not weighted or lighter(k)}
        given_up = {
            k: e
            for k, e in wrong.items()
            if e > limit and (k in rare_given_up or (full and overall <= limit / 4))
        }
        if not given_up and not full:
            raise self.skip(f"{y.size} of {self.samples} {which} labels seen; not judged yet")
        in_distinct = distinct is not None and mode is ModeKeys.TRAIN
        balance = distinct if distinct is not None and in_distinct else seen.counts
        unit = f"distinct {which} samples" if in_distinct else f"{which} labels"
        present_all = np.flatnonzero(balance)
        totals = balance[present_all]
        imbalance = float(totals.max() / totals.min())
        worst = max(wrong, key=lambda k: wrong[k])
        if not given_up:
            if imbalance > self.threshold_imbalance:
                self.explain(
                    f"class {present_all[totals.argmax()]} has {imbalance:.3g}x the samples of "
                    f"class {present_all[totals.argmin()]} over {int(totals.sum())} {unit} "
                    f"(limit {self.threshold_imbalance:g}x); no class is given up on: "
                    f"class {worst} is mispredicted {100 * wrong[worst]:.3g}% of the time",
                    tensors=names,
                    value=imbalance,
                    threshold=self.threshold_imbalance,
                    counts=totals.tolist(),
                    severity=Severity.WARNING,
                    mode=mode,
                    cause="class_imbalance",
                )
                return True
            self.explain(
                f"class {worst} is mispredicted {100 * wrong[worst]:.3g}% of the time against "
                f"{100 * overall:.3g}% overall over the last {y.size} {which} labels (limit "
                f"{100 * limit:g}% for a class while the overall rate is under a quarter of "
                f"that); imbalance {imbalance:.3g}x",
                tensors=names,
                value=wrong[worst],
                threshold=limit,
                mode=mode,
            )
            return False
        total = self._trained if self._last_train is not None else int(seen.counts.sum())
        seen.given_up = {k: seen.given_up.get(k, (total, error)) for k, error in given_up.items()}

        def lasting(k: int) -> bool:
            """Class ``k`` still given up once the model trained on ``samples`` labels (or
            when training ended), not learned since it was first seen so."""
            steps = None if self._last_train is None else self._last_train + 1
            long_enough = steps is None or steps >= _MIN_TRAIN_STEPS
            enough = (total >= self.samples and long_enough) or ended
            return enough and given_up[k] > seen.given_up[k][1] - _LEARNING

        klass = max(given_up, key=lambda k: (lasting(k) and k in blame, k in blame, given_up[k]))
        blamed, kept = klass in blame, lasting(klass)
        self._waiting = (
            blamed and not kept and given_up[klass] > seen.given_up[klass][1] - _LEARNING
        )
        message = (
            f"class {klass} is mispredicted {100 * given_up[klass]:.3g}% of the time over the "
            f"last {y.size} {which} labels (limit {100 * limit:g}%)"
        )
        if blamed and weighted:
            assert weights is not None  # blamed under a weighting: it leans the wrong way
            message += (
                f"; it is rare in the {ref_mode.name} labels, and the loss weights it "
                f"{weights[klass]:.3g} against {weights[top]:.3g} for class {top}, the most "
                "frequent: the class weights make the imbalance worse (weights proportional to "
                "the class counts, where their inverse was meant?)"
            )
        elif blamed and distinct is not None:
            message += (
                f"; it has {int(distinct[klass]) if klass < distinct.size else 0} of the "
                f"{int(distinct.sum())} distinct {ref_mode.name} samples against "
                f"{int(distinct.max())} of class {int(distinct.argmax())}, and the model gets "
                f"class {top} right "
                f"{100 * (1 - wrong.get(top, 1.0)):.3g}% of the time: the imbalance is unhandled"
            )
        elif blamed:
            message += (
                f"; it is {int(reference[klass]) if klass < reference.size else 0} of "
                f"{int(reference.sum())} {ref_mode.name} labels against {int(reference[top])} "
                f"of class {top}, which the model gets right "
                f"{100 * (1 - wrong.get(top, 1.0)):.3g}% of the time: the imbalance is unhandled"
            )
        elif weighted and klass in rare:
            message += (
                f"; it is rare in the {ref_mode.name} labels, but the loss weights the classes "
                f"(up to {weighted:.3g}x): the imbalance is handled, yet the class is given up"
            )
        else:
            counted, what = (
                (distinct, f"distinct {ref_mode.name} samples")
                if distinct is not None
                else (reference, f"{ref_mode.name} labels")
            )
            message += (
                f" against {100 * overall:.3g}% overall, though it is not rare in the {what} "
                f"({int(counted[klass]) if klass < counted.size else 0} of "
                f"{int(counted.sum())}, against {int(counted.max())} of the most frequent "
                "class): a class the model finds hard, not an imbalance"
            )
        trained_steps = None if self._last_train is None else self._last_train + 1
        early = trained_steps is not None and trained_steps < _MIN_TRAIN_STEPS
        if not kept and ((total >= self.samples and not early) or ended):
            message += "; its error rate has fallen since it was first seen given up: learning it"
        elif not kept and early and total >= self.samples:
            message += (
                f"; the model trained for {trained_steps} steps so far (judged from "
                f"{_MIN_TRAIN_STEPS}, or when training ends)"
            )
        elif not kept:
            message += f"; the model trained on {total} labels so far (judged from {self.samples})"
        elif ended and total < self.samples:
            message += f"; training ended after {total} labels with the class still given up"
        self.explain(
            message,
            tensors=names,
            value=given_up[klass],
            threshold=limit,
            severity=Severity.PROBLEM if blamed and kept else Severity.WARNING,
            mode=mode,
            cause="class_imbalance" if blamed else "class_given_up",
        )
        return True

    def _class_weights(self) -> tuple[float | None, np.ndarray | None]:
        """How far the loss weights its classes apart (the PyTorch hook's training-loop fact
        ``class_weights``: the largest weight over the smallest), or None where not known; and
        each class's weight (``class_weights/values``), where saved."""
        trial = self.base_trial
        names = trial.tensor_names()
        if _WEIGHTS not in names:
            return None, None
        tensor = trial.tensor(_WEIGHTS)
        steps = tensor.steps()
        ratio = scalar(tensor, steps[-1]) if steps else math.nan
        if not (math.isfinite(ratio) and ratio > 1):
            return None, None  # not a weighting
        weights = None
        if _WEIGHT_VALUES in names:
            saved = trial.tensor(_WEIGHT_VALUES)
            at = saved.steps()
            if at:
                found = np.asarray(saved.value(at[-1]), dtype=np.float64).ravel()
                weights = found if np.isfinite(found).all() else None
        return ratio, weights

    def _nonfinite_scores(self, step: int) -> list[str]:
        """The prediction tensors saved at ``step`` that are scores holding NaN or inf."""
        trial = self.base_trial
        names = names_in(trial, "predictions", step) or trial.tensor_names(
            step=step, regex=self.predictions_regex
        )
        floats = [n for n in names if has_raw(trial.tensor(n), step)]
        return nonfinite_names(trial, floats, step)


def _rare(counts: np.ndarray) -> set[int]:
    """The classes at most 1/_RARE as frequent as the most frequent in ``counts`` (label
    counts by class), once that class was seen _MIN_TOP times; none before."""
    if counts.size == 0 or counts.max() < _MIN_TOP:
        return set()
    return {int(k) for k in np.flatnonzero(counts * _RARE <= counts.max())}
