"""ClassImbalance: some classes far rarer than others, or sacrificed by the model."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from tensortap.rules.builtin._labels import labels_and_predictions
from tensortap.rules.finding import Severity
from tensortap.rules.rule import Rule

#: A class whose error rate fell this much since it was first seen given up is being learned.
_LEARNING = 0.1


class ClassImbalance(Rule):
    """Once ``samples`` labels were seen (steps before are skipped, not judged), fires when
    the most frequent class outnumbers the rarest by more than ``threshold_imbalance`` times
    over every label seen so far (as smdebug counted), or when, over the most recent
    ``samples`` predictions, some class is mispredicted more often than
    ``threshold_misprediction`` (a fraction) while the model as a whole errs at most a quarter
    that often: the model learned, but gave up on a class. (Judging mispredictions without the
    second condition fires on every model before it has learned; judging them over the whole
    run would count the time before it learned.)

    Severity: a model that gave up on a class is a problem once it has for ``samples`` more
    labels without learning it (its error rate fell less than 10 points): early in training
    some class is always behind, and it is a warning until then;
    imbalanced labels alone are a warning (class weights or resampling may handle them, as
    the mispredictions then show).

    Labels and predictions: the ``labels`` and ``predictions`` collections, else tensors
    matching ``labels_regex`` / ``predictions_regex``. Predictions that are scores per class
    (or any, with ``argmax``) are reduced with argmax.
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
        self._recent: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self._held = 0
        self._counts = np.zeros(0, dtype=np.int64)  # every label seen, by class
        # class -> (labels seen, its error rate) when it was first seen given up
        self._given_up: dict[int, tuple[int, float]] = {}

    def _window(self, y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._recent.append((y, p))
        self._held += y.size
        while self._recent and self._held - self._recent[0][0].size >= self.samples:
            self._held -= self._recent.popleft()[0].size
        labels = np.concatenate([a for a, _ in self._recent])[-self.samples :]
        predicted = np.concatenate([b for _, b in self._recent])[-self.samples :]
        return labels, predicted

    def invoke_at_step(self, step: int) -> bool:
        y, p, names = labels_and_predictions(
            self, step, self.labels_regex, self.predictions_regex, self.argmax
        )
        if y.size and y.min() < 0:
            raise self.skip("labels must be class indices >= 0")
        seen = np.bincount(y, minlength=self._counts.size)
        seen[: self._counts.size] += self._counts
        self._counts = seen
        y, p = self._window(y, p)
        if y.size < self.samples:
            raise self.skip(f"{y.size} of {self.samples} labels seen; not judged yet")
        present_all = np.flatnonzero(self._counts)
        totals = self._counts[present_all]
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
                f"class {present_all[totals.argmin()]} over {int(totals.sum())} labels (limit "
                f"{self.threshold_imbalance:g}x); no class is given up on: class "
                f"{present[worst]} is mispredicted {100 * wrong[worst]:.3g}% of the time",
                tensors=names,
                value=imbalance,
                threshold=self.threshold_imbalance,
                counts=totals.tolist(),
                severity=Severity.WARNING,
            )
            return True
        fired = gave_up
        lasting = False
        total = int(self._counts.sum())
        given_up = {
            int(present[i]): float(wrong[i])
            for i in np.flatnonzero(wrong > self.threshold_misprediction)
        } if gave_up else {}  # fmt: skip
        self._given_up = {k: self._given_up.get(k, (total, error)) for k, error in given_up.items()}
        for klass, (since, first_error) in sorted(self._given_up.items(), key=lambda kv: kv[1]):
            if total - since >= self.samples and given_up[klass] > first_error - _LEARNING:
                lasting, worst = True, int(np.flatnonzero(present == klass)[0])
                break
        self.explain(
            f"class {present[worst]} is mispredicted {100 * wrong[worst]:.3g}% of the time "
            f"against {100 * overall:.3g}% overall (limit {100 * self.threshold_misprediction:g}%"
            f" for a class while the overall rate is under a quarter of that); imbalance "
            f"{imbalance:.3g}x"
            + ("" if lasting or not gave_up else f"; not yet for {self.samples} more labels"),
            tensors=names,
            value=float(wrong[worst]),
            threshold=self.threshold_misprediction,
            severity=Severity.PROBLEM if lasting else Severity.WARNING,
        )
        return fired
