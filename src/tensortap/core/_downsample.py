"""Long series made short without lying: buckets that keep their minimum and maximum (a spike
is never dropped), and runs of non-finite values kept apart so that a chart can mark them.

NumPy only; used by the dashboard and by the report's charts.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Series(NamedTuple):
    """A downsampled series: finite points ``x``/``y`` in step order, and ``gaps``, the runs
    of non-finite values as ``(first_x, last_x, kind)``, kind ``"nan"``, ``"inf"`` or ``"-inf"``."""

    x: np.ndarray
    y: np.ndarray
    gaps: list[tuple[float, float, str]]


_KINDS = ("nan", "inf", "-inf")


def nonfinite_runs(x: np.ndarray, y: np.ndarray) -> list[tuple[float, float, str]]:
    """Consecutive points of one non-finite kind, as ``(first_x, last_x, kind)``."""
    bad = np.flatnonzero(~np.isfinite(y))
    if not len(bad):
        return []
    values = y[bad]
    kinds = np.where(np.isnan(values), 0, np.where(values > 0, 1, 2))
    breaks = np.flatnonzero((np.diff(bad) != 1) | (np.diff(kinds) != 0)) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(bad) - 1]))
    return [
        (float(x[bad[f]]), float(x[bad[last]]), _KINDS[kinds[f]])
        for f, last in zip(firsts, lasts, strict=True)
    ]


def minmax_buckets(x: np.ndarray, y: np.ndarray, buckets: int = 1000) -> Series:
    """At most about ``2 * buckets`` finite points: the series split into ``buckets`` runs of
    equal length, each kept as its minimum and its maximum, in step order (with the first and
    the last point). Shorter series come back whole. Non-finite values are never averaged away:
    they come back as ``gaps``."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D and of one length, got {x.shape} and {y.shape}")
    gaps = nonfinite_runs(x, y)
    finite = np.isfinite(y)
    fx, fy = x[finite], y[finite]
    if len(fx) <= 2 * buckets:
        return Series(fx, fy, gaps)
    edges = np.linspace(0, len(fx), buckets + 1).astype(np.int64)
    starts = edges[:-1]
    lows = np.minimum.reduceat(fy, starts)
    highs = np.maximum.reduceat(fy, starts)
    # the index of each bucket's minimum and maximum: the first point equal to it
    bucket = np.repeat(np.arange(buckets), np.diff(edges))
    keep = np.zeros(len(fx), dtype=bool)
    keep[[0, -1]] = True
    for extreme in (lows, highs):
        hit = fy == extreme[bucket]
        first = np.full(buckets, -1)
        positions = np.flatnonzero(hit)
        # the first hit of each bucket: positions are sorted, so the first occurrence wins
        owners, where = np.unique(bucket[positions], return_index=True)
        first[owners] = positions[where]
        keep[first[first >= 0]] = True
    return Series(fx[keep], fy[keep], gaps)


__all__ = ["Series", "minmax_buckets", "nonfinite_runs"]
