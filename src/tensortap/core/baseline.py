"""A running baseline that outliers do not move: the median and MAD of the last values.

Used by the spike rules (LossSpike, GradientNormSpike) and by the PyTorch guard inside the step.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class RobustBaseline:
    """The median and MAD of the last ``window`` values: a baseline that outliers do not move."""

    def __init__(self, window: int) -> None:
        self.values: deque[float] = deque(maxlen=window)

    def __len__(self) -> int:
        return len(self.values)

    def add(self, value: float) -> None:
        if np.isfinite(value):
            self.values.append(value)

    def score(self, value: float) -> tuple[float, float, float]:
        """(median, scale, z): how many robust standard deviations ``value`` is above."""
        data = np.fromiter(self.values, dtype=float)
        median = float(np.median(data))
        mad = float(np.median(np.abs(data - median)))
        scale = max(1.4826 * mad, 1e-12 * abs(median), np.finfo(float).tiny)
        z = (value - median) / scale if np.isfinite(value) else float("inf")
        return median, scale, z
