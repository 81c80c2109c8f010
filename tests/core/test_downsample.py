"""Min/max buckets: a long series made short keeps every bucket's extremes (no spike is lost)
and hands back every non-finite run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tensortap.core._downsample import StreamedMinMax, minmax_buckets, nonfinite_runs

values = st.floats(-1e6, 1e6) | st.sampled_from([np.nan, np.inf, -np.inf])


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(0, 3000), elements=values), st.integers(1, 200))
def test_buckets_keep_every_extreme_and_every_nonfinite_run(y: np.ndarray, buckets: int) -> None:
    x = np.arange(len(y), dtype=np.float64) * 3
    out = minmax_buckets(x, y, buckets)
    finite = np.isfinite(y)
    fx, fy = x[finite], y[finite]
    assert set(out.x.tolist()) <= set(fx.tolist()) and np.all(np.diff(out.x) > 0)
    assert len(out.x) <= max(2 * buckets, 0) + 2
    if len(fx):
        assert out.y.max() == fy.max() and out.y.min() == fy.min()
        assert out.x[0] == fx[0] and out.x[-1] == fx[-1]
        if len(fx) > 2 * buckets:  # each bucket's min and max survive
            edges = np.linspace(0, len(fx), buckets + 1).astype(int)  # runs of equal length
            for start, end in itertools.pairwise(edges):
                part_x, part_y = fx[start:end], fy[start:end]
                kept = out.y[(out.x >= part_x[0]) & (out.x <= part_x[-1])]
                assert kept.max() == part_y.max() and kept.min() == part_y.min()
    covered = sorted(
        v for first, last, _ in out.gaps for v in x[(x >= first) & (x <= last)].tolist()
    )
    assert covered == x[~finite].tolist()


def test_a_single_spike_in_a_hundred_thousand_steps_survives() -> None:
    x = np.arange(100_000, dtype=np.float64)
    y = np.sin(x / 500)
    y[61_234] = 50.0
    y[70_000:70_010] = np.nan
    y[80_000] = -np.inf
    out = minmax_buckets(x, y, 500)
    assert len(out.x) <= 1002 and 61_234 in out.x.tolist() and out.y.max() == 50.0
    assert out.gaps == [(70_000.0, 70_009.0, "nan"), (80_000.0, 80_000.0, "-inf")]


def test_runs_split_by_kind_and_bad_input_is_refused() -> None:
    y = np.array([1, np.nan, np.nan, np.inf, 2, np.nan])
    assert nonfinite_runs(np.arange(6.0), y) == [
        (1.0, 2.0, "nan"),
        (3.0, 3.0, "inf"),
        (5.0, 5.0, "nan"),
    ]
    with pytest.raises(ValueError, match="buckets must be"):
        minmax_buckets(np.arange(3.0), np.arange(3.0), 0)
    with pytest.raises(ValueError, match="one length"):
        minmax_buckets(np.arange(3.0), np.arange(4.0))


few = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, np.nan, np.inf, -np.inf])


@settings(max_examples=300, deadline=None)
@given(
    arrays(np.float64, st.integers(0, 400), elements=values | few),
    st.integers(1, 60),
    st.lists(st.integers(0, 400), max_size=8),
)
def test_buckets_of_a_series_put_in_pieces_equal_buckets_of_it_whole(
    y: np.ndarray, buckets: int, cuts: list[int]
) -> None:
    """Pieces put one after another (a long series walked a window at a time): the same
    points, values and non-finite runs (runs across pieces joined) as the series whole;
    repeated extremes (0.0 and -0.0 too) keep their first occurrence."""
    x = np.arange(len(y), dtype=np.float64) * 2 + 5
    streamed = StreamedMinMax(int(np.isfinite(y).sum()), buckets)
    for piece_x, piece_y in zip(np.split(x, sorted(cuts)), np.split(y, sorted(cuts)), strict=True):
        streamed.put(piece_x, piece_y)
    assert streamed.complete
    got, want = streamed.result(), minmax_buckets(x, y, buckets)
    np.testing.assert_array_equal(got.x, want.x)
    np.testing.assert_array_equal(got.y, want.y)
    assert np.array_equal(np.signbit(got.y), np.signbit(want.y))
    assert got.gaps == want.gaps


def test_a_series_that_grew_after_it_was_counted_is_not_complete() -> None:
    streamed = StreamedMinMax(3, 1)
    streamed.put(np.arange(5.0), np.arange(5.0))
    assert not streamed.complete
