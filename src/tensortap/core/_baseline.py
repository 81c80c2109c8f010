"""A running baseline that outliers do not move: the median and MAD of the last values.

Used by the spike rules (LossSpike, GradientNormSpike) and by the PyTorch guard inside the step.
"""

from __future__ import annotations

import math
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
        """(median, scale, z): how many robust standard deviations ``value`` is above.

        In plain Python over the (short) window: the same numbers, to the last bit, as
        ``np.median`` gives (the middle value, or the mean of the two middle ones), several
        times faster for the rules that score every step."""
        median = _median(sorted(self.values))
        mad = _median(sorted([abs(v - median) for v in self.values]))
        scale = max(1.4826 * mad, 1e-12 * abs(median), _TINY)
        z = (value - median) / scale if math.isfinite(value) else math.inf
        return median, scale, z


_TINY = float(np.finfo(float).tiny)


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    if not n:
        return math.nan  # as np.median of nothing (without its warning)
    half = n // 2
    if n % 2:
        return ordered[half]
    return (ordered[half - 1] + ordered[half]) / 2
