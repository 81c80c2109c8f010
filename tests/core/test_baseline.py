"""The robust baseline of the spike rules and the guard: its score, computed in plain Python,
gives the numbers NumPy's median and MAD give, to the last bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tensortap.core._baseline import RobustBaseline

finite = st.floats(
    allow_nan=False, allow_infinity=False, width=64, min_value=-1e300, max_value=1e300
)


def numpy_score(values: list[float], value: float) -> tuple[float, float, float]:
    data = np.asarray(values, dtype=float)
    median = float(np.median(data))
    mad = float(np.median(np.abs(data - median)))
    scale = max(1.4826 * mad, 1e-12 * abs(median), float(np.finfo(float).tiny))
    z = (value - median) / scale if math.isfinite(value) else math.inf
    return median, scale, z


@given(
    window=st.integers(1, 40),
    values=st.lists(
        st.one_of(finite, st.sampled_from([math.nan, math.inf, 0.0, 1.0])), max_size=60
    ),
    value=st.one_of(finite, st.sampled_from([math.nan, -math.inf])),
)
def test_the_score_is_numpys_median_and_mad_to_the_bit(window, values, value) -> None:
    baseline = RobustBaseline(window)
    for v in values:
        baseline.add(v)  # non-finite values are left out
    kept = [v for v in values if math.isfinite(v)][-window:]
    assert list(baseline.values) == kept
    if kept:
        with np.errstate(all="ignore"):
            expected = numpy_score(kept, value)
        got = baseline.score(value)
        assert got == expected  # equal numbers (a median of 0.0 and -0.0 may take either)
