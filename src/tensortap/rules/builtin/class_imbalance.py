"""ClassImbalance: some classes far rarer than others, or sacrificed by the model."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import fire_nonfinite, has_raw, names_in, nonfinite_names
from tensortap.rules.builtin._labels import labels_and_predictions
from tensortap.rules.finding import Severity
from tensortap.rules.rule import Rule

#: A class whose error rate fell this much since it was first seen given up is being learned.
_LEARNING = 0.1


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
    """Once ``samples`` labels were seen (steps before are skipped, not judged), fires when
    the most frequent class outnumbers the rarest by more than ``threshold_imbalance`` times
    over every label seen so far (as smdebug counted), or when, over the most recent
    ``samples`` predictions, some class is mispredicted more often than
    ``threshold_misprediction`` (a fraction) while the model as a whole errs at most a quarter
    that often: the model learned, but gave up on a class. (Judging mispredictions without the
    second condition fires on every model before it has learned; judging them over the whole
    run would count the time before it learned.)

    Severity: a model that gave up on a class is a problem once it has trained on ``samples``
    more labels without learning it (its error rate fell less than 10 points): early in
    training some class is always behind, and it is a warning until then. Training is counted
    in TRAIN steps times their batch of labels, so that a job saving every 10th TRAIN step, or
    a long evaluation pass (no training within it), counts what the model was trained on
    (a trial without TRAIN labels counts the labels of the mode judged);
    imbalanced labels alone are a warning (class weights or resampling may handle them, as
    the mispredictions then show).

    Each mode is judged on its own labels: TRAIN labels (the training data's balance; GLOBAL in
    a trial without modes) apart from EVAL labels (the validation data's), never pooled. A job
    saves every 10th TRAIN step and every EVAL step, so pooled counts are mostly the validation
    set's, and a balanced validation set hid an imbalanced training set. Findings name the
    mode (``details["mode"]``) and ``details["cause"] = "class_imbalance"``.

    Labels and predictions: the ``labels`` and ``predictions`` collections, else tensors
    matching ``labels_regex`` / ``predictions_regex``. Predictions that are scores per class
    (or any, with ``argmax``) are reduced with argmax; scores holding NaN or inf are a problem
    (non-finite).
    """

    collections_needed = ("labels", "predictions")

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
        self.check_param(
            "threshold_imbalance", threshold_imbalance, threshold_imbalance >= 1, "a ratio >= 1"
        )
        self.check_param(
            "threshold_misprediction",
            threshold_misprediction,
            0 <= threshold_misprediction <= 1,
            "a fraction in [0, 1]",
        )
        self.check_param("samples", samples, samples >= 1, "an integer >= 1")
        self.threshold_imbalance = threshold_imbalance
        self.threshold_misprediction = threshold_misprediction
        self.samples = samples
        self.argmax = argmax
        self.labels_regex, self.predictions_regex = labels_regex, predictions_regex
        self._seen: dict[ModeKeys, _Labels] = {}
        self._trained = 0  # labels trained on so far (TRAIN steps times their batch)
        self._last_train: int | None = None  # the TRAIN step they were counted to

    def _window(self, seen: _Labels, y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.recent.append((y, p))
        seen.held += y.size
        while seen.recent and seen.held - seen.recent[0][0].size >= self.samples:
            seen.held -= seen.recent.popleft()[0].size
        labels = np.concatenate([a for a, _ in seen.recent])[-self.samples :]
        predicted = np.concatenate([b for _, b in seen.recent])[-self.samples :]
        return labels, predicted

    def invoke_at_step(self, step: int) -> bool:
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
            mode_step = self.base_trial.mode_step(step)
            last = -1 if self._last_train is None else self._last_train
            self._trained += max(mode_step - last, 1) * y.size
            self._last_train = mode_step
        seen = self._seen.setdefault(mode, _Labels())
        counts = np.bincount(y, minlength=seen.counts.size)
        counts[: seen.counts.size] += seen.counts
        seen.counts = counts
        y, p = self._window(seen, y, p)
        which = mode.name
        if y.size < self.samples:
            raise self.skip(f"{y.size} of {self.samples} {which} labels seen; not judged yet")
        present_all = np.flatnonzero(seen.counts)
        totals = seen.counts[present_all]
        imbalance = float(totals.max() / totals.min())
        counts = np.bincount(y)
        correct = np.bincount(y[y == p], minlength=counts.size)
        present = np.flatnonzero(counts)
        counts, correct = counts[present], correct[present]
        wrong = 1.0 - correct / counts
        overall = float(np.mean(y != p))
        worst = int(wrong.argmax())
        gave_up = (
            float(wrong[worst]) > self.threshold_misprediction
            and overall <= self.threshold_misprediction / 4
        )
        if imbalance > self.threshold_imbalance and not gave_up:
            self.explain(
                f"class {present_all[totals.argmax()]} has {imbalance:.3g}x the samples of "
                f"class {present_all[totals.argmin()]} over {int(totals.sum())} {which} labels "
                f"(limit {self.threshold_imbalance:g}x); no class is given up on: class "
                f"{present[worst]} is mispredicted {100 * wrong[worst]:.3g}% of the time",
                tensors=names,
                value=imbalance,
                threshold=self.threshold_imbalance,
                counts=totals.tolist(),
                severity=Severity.WARNING,
                mode=mode,
                cause="class_imbalance",
            )
            return True
        fired = gave_up
        lasting = False
        total = self._trained if self._last_train is not None else int(seen.counts.sum())
        given_up = {
            int(present[i]): float(wrong[i])
            for i in np.flatnonzero(wrong > self.threshold_misprediction)
        } if gave_up else {}  # fmt: skip
        seen.given_up = {k: seen.given_up.get(k, (total, error)) for k, error in given_up.items()}
        for klass, (since, first_error) in sorted(seen.given_up.items(), key=lambda kv: kv[1]):
            if total - since >= self.samples and given_up[klass] > first_error - _LEARNING:
                lasting, worst = True, int(np.flatnonzero(present == klass)[0])
                break
        self.explain(
            f"class {present[worst]} is mispredicted {100 * wrong[worst]:.3g}% of the time "
            f"against {100 * overall:.3g}% overall over the last {y.size} {which} labels (limit "
            f"{100 * self.threshold_misprediction:g}% for a class while the overall rate is "
            f"under a quarter of that); imbalance {imbalance:.3g}x"
            + (
                ""
                if lasting or not gave_up
                else f"; not yet over {self.samples} more labels trained on"
            ),
            tensors=names,
            value=float(wrong[worst]),
            threshold=self.threshold_misprediction,
            severity=Severity.PROBLEM if lasting else Severity.WARNING,
            mode=mode,
            cause="class_imbalance",
        )
        return fired

    def _nonfinite_scores(self, step: int) -> list[str]:
        """The prediction tensors saved at ``step`` that are scores holding NaN or inf."""
        trial = self.base_trial
        names = names_in(trial, "predictions", step) or trial.tensor_names(
            step=step, regex=self.predictions_regex
        )
        floats = [n for n in names if has_raw(trial.tensor(n), step)]
        return nonfinite_names(trial, floats, step)
