"""ClassImbalance: some classes far rarer than others, or mostly mispredicted."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.rules.builtin._labels import labels_and_predictions
from tensortap.rules.rule import Rule


class ClassImbalance(Rule):
    """Counts the labels and correct predictions of every class over the steps seen so far;
    once at least ``samples`` labels were seen, fires when the most frequent class outnumbers
    the rarest by more than ``threshold_imbalance`` times, or when some class is mispredicted
    more often than ``threshold_misprediction`` (a fraction).

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
        self._counts = np.zeros(0, dtype=np.int64)
        self._correct = np.zeros(0, dtype=np.int64)

    def _grow(self, size: int) -> None:
        if size > self._counts.size:
            self._counts = np.pad(self._counts, (0, size - self._counts.size))
            self._correct = np.pad(self._correct, (0, size - self._correct.size))

    def invoke_at_step(self, step: int) -> bool:
        y, p, names = labels_and_predictions(
            self, step, self.labels_regex, self.predictions_regex, self.argmax
        )
        if y.size and y.min() < 0:
            raise self.skip("labels must be class indices >= 0")
        self._grow(int(y.max()) + 1 if y.size else 0)
        self._counts += np.bincount(y, minlength=self._counts.size)
        self._correct += np.bincount(y[y == p], minlength=self._counts.size)
        seen = int(self._counts.sum())
        if seen < self.samples:
            self.explain(f"{seen} of {self.samples} samples seen; not judged yet", tensors=names)
            return False
        present = np.flatnonzero(self._counts)
        counts = self._counts[present]
        imbalance = float(counts.max() / counts.min())
        if imbalance > self.threshold_imbalance:
            self.explain(
                f"class {present[counts.argmax()]} has {imbalance:.3g}x the samples of class "
                f"{present[counts.argmin()]} (limit {self.threshold_imbalance:g}x)",
                tensors=names,
                value=imbalance,
                threshold=self.threshold_imbalance,
                counts=counts.tolist(),
            )
            return True
        wrong = 1.0 - self._correct[present] / counts
        worst = int(wrong.argmax())
        fired = float(wrong[worst]) > self.threshold_misprediction
        self.explain(
            f"class {present[worst]} is mispredicted {100 * wrong[worst]:.3g}% of the time "
            f"(limit {100 * self.threshold_misprediction:g}%); imbalance {imbalance:.3g}x",
            tensors=names,
            value=float(wrong[worst]),
            threshold=self.threshold_misprediction,
        )
        return fired
