"""ClassImbalance: some classes far rarer than others, or sacrificed by the model."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from tensortap.rules.builtin._labels import labels_and_predictions
from tensortap.rules.rule import Rule


class ClassImbalance(Rule):
    """Looks at the most recent ``samples`` labelled samples (once that many were seen) and
    fires when the most frequent class outnumbers the rarest by more than
    ``threshold_imbalance`` times, or when some class is mispredicted more often than
    ``threshold_misprediction`` (a fraction) while the model as a whole errs at most a quarter
    that often: the model learned, but gave up on a class. (Judging mispredictions without the
    second condition fires on every model before it has learned.)

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
        y, p = self._window(y, p)
        if y.size < self.samples:
            self.explain(f"{y.size} of {self.samples} samples seen; not judged yet", tensors=names)
            return False
        counts = np.bincount(y)
        correct = np.bincount(y[y == p], minlength=counts.size)
        present = np.flatnonzero(counts)
        counts, correct = counts[present], correct[present]
        imbalance = float(counts.max() / counts.min())
        if imbalance > self.threshold_imbalance:
            self.explain(
                f"class {present[counts.argmax()]} has {imbalance:.3g}x the samples of class "
                f"{present[counts.argmin()]} in the last {y.size} (limit "
                f"{self.threshold_imbalance:g}x)",
                tensors=names,
                value=imbalance,
                threshold=self.threshold_imbalance,
                counts=counts.tolist(),
            )
            return True
        wrong = 1.0 - correct / counts
        overall = float(np.mean(y != p))
        worst = int(wrong.argmax())
        fired = (
            float(wrong[worst]) > self.threshold_misprediction
            and overall <= self.threshold_misprediction / 4
        )
        self.explain(
            f"class {present[worst]} is mispredicted {100 * wrong[worst]:.3g}% of the time "
            f"against {100 * overall:.3g}% overall (limit {100 * self.threshold_misprediction:g}%"
            f" for a class while the overall rate is under a quarter of that); imbalance "
            f"{imbalance:.3g}x",
            tensors=names,
            value=float(wrong[worst]),
            threshold=self.threshold_misprediction,
        )
        return fired
