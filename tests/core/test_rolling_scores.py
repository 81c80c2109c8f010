"""RollingScores: the spike forecast's per-indicator scores, kept up to date as the window
slides, are bit for bit those of the whole window computed afresh with NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensortap.core._rolling_scores import MAD_TO_SD, RollingScores


def _reference(window: np.ndarray, recent: int, baseline: int) -> tuple[float, float, float]:
    """The scores of one window, plainly: medians by ``np.median``, a pair-by-pair count."""
    base, last = window[:baseline], window[-recent:]
    center = float(np.median(base))
    spread = max(MAD_TO_SD * float(np.median(np.abs(base - center))), 1e-3)
    level = (float(np.median(last)) - center) / spread
    s = sum(float(np.sign(last[j] - last[i])) for i in range(recent) for j in range(i + 1, recent))
    trend = (s - float(np.sign(s))) / math.sqrt(recent * (recent - 1) * (2 * recent + 5) / 18)
    return center, level, trend


@pytest.mark.parametrize(
    ("recent", "gap", "baseline"),
    [(8, 0, 1), (9, 3, 2), (8, 5, 17), (11, 0, 30), (25, 100, 200), (10, 20, 61)],
)
@pytest.mark.parametrize("ties", [False, True])
def test_scores_equal_the_whole_window_computed_afresh(
    recent: int, gap: int, baseline: int, ties: bool
) -> None:
    rng = np.random.default_rng(recent * 1000 + gap * 10 + baseline)
    size = recent + gap + baseline
    steps = size + 400
    walk = np.cumsum(rng.normal(0.0, 0.1, steps))
    jumps = np.where(rng.random(steps) < 0.02, rng.normal(0.0, 2.0, steps), 0.0)
    values = walk + jumps  # a random walk with outliers: medians and deviations move about
    if ties:  # many equal values: deletions and counts must take the right one
        values = np.round(values, 1)
    scores = RollingScores(recent, gap, baseline, 1e-3)
    for i, value in enumerate(values.tolist()):
        scores.push(value)
        if scores.count < size:
            with pytest.raises(ValueError, match="window"):
                scores.scores()
            continue
        if i % 3 == 0 and i < steps - 50:
            continue  # scored only now and then at first: kept up to date all the same
        expected = _reference(values[i + 1 - size : i + 1], recent, baseline)
        assert scores.scores() == expected, i  # equal, not close


def test_a_constant_window_has_the_least_spread_and_no_trend() -> None:
    scores = RollingScores(8, 2, 10, 1e-3)
    for _ in range(40):
        scores.push(0.5)
    assert scores.scores() == (0.5, 0.0, 0.0)
