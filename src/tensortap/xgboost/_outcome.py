"""The outcome of a boosting round (see :mod:`tensortap.core._outcome`): the booster's
predictions of the validation data and its labels, on at most
:data:`tensortap.core._outcome.MAX_ROWS` rows (evenly spaced, the same rows every round) and at
most :data:`tensortap.core._outcome.MAX_BYTES` bytes a round, predictions and labels together.
The predictions are saved as the booster gives them (a probability per row for
``binary:logistic``, scores per class for ``multi:softprob``, classes for ``multi:softmax``),
which the rules turn into classes; predicting on the sample alone also keeps each round's cost
bounded on a large validation set."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.core._outcome import keep_rows


class OutcomeRows:
    """The sample of the validation data whose outcome is saved, kept for the data it was
    drawn from."""

    def __init__(self) -> None:
        self._cached: tuple[Any, Any] | None = None  # (validation data, its sample)
        self._labels: tuple[Any, np.ndarray] | None = None  # (a sample, its labels)

    def sample(self, data: Any) -> Any:
        """``data`` itself when small enough, else a slice of evenly spaced rows."""
        rows = keep_rows(int(data.num_row()))
        if rows is None:
            return data
        if self._cached is None or self._cached[0] is not data:
            self._cached = (data, data.slice(rows.tolist()))
        return self._cached[1]

    def labels(self, sample: Any) -> np.ndarray:
        """The labels of ``sample`` (read once: a DMatrix's labels cost a copy each time)."""
        if self._labels is None or self._labels[0] is not sample:
            self._labels = (sample, np.asarray(sample.get_label()))
        return self._labels[1]


def bounded(predictions: np.ndarray, labels: np.ndarray | None) -> tuple[np.ndarray, Any]:
    """(predictions, labels) thinned to the byte bound (rows evenly spaced; labels None
    where the data has none)."""
    n = predictions.shape[0] if predictions.ndim else 0
    if not n:
        return predictions, labels
    row_bytes = predictions[0:1].nbytes + (labels[0:1].nbytes if labels is not None else 0)
    rows = keep_rows(n, row_bytes)
    if rows is None:
        return predictions, labels
    return predictions[rows], labels[rows] if labels is not None else None
