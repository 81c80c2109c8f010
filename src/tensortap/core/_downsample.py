"""Long series made short without lying: buckets that keep their minimum and maximum (a spike
is never dropped), and runs of non-finite values kept apart so that a chart can mark them.

NumPy only; used by the dashboard and by the report's charts.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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


class StreamedMinMax:
    """:func:`minmax_buckets` of a series given a piece at a time (in order), so that a long
    series is never held whole: ``finite`` (how many of its values are finite, counted in a
    first pass) fixes the buckets; what is kept is each bucket's extremes so far, at most
    ``2 * buckets`` points of a short series, and the runs of non-finite values. The result
    is :func:`minmax_buckets` of the pieces joined."""

    def __init__(self, finite: int, buckets: int = 1000) -> None:
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets}")
        self._finite, self._buckets = finite, buckets
        self._whole = finite <= 2 * buckets
        self._edges = np.linspace(0, finite, buckets + 1).astype(np.int64)
        self._short: list[tuple[np.ndarray, np.ndarray]] = []
        # per bucket: its extreme so far, the finite index of its first occurrence, x and y
        self._low = np.full(buckets, np.inf)
        self._high = np.full(buckets, -np.inf)
        self._kept: dict[int, tuple[float, float]] = {}
        self._low_at = np.full(buckets, -1, np.int64)
        self._high_at = np.full(buckets, -1, np.int64)
        self._seen = 0  # finite values put
        self._put = 0  # values put
        self._over = 0  # finite values put beyond those counted
        self._gaps: list[list[Any]] = []  # [first_x, last_x, kind, last position]

    def put(self, x: np.ndarray, y: np.ndarray) -> None:
        """The next piece (x and y of one length, in the series' order)."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self._take_gaps(x, y)
        finite = np.isfinite(y)
        fx, fy = x[finite], y[finite]
        self._put += len(y)
        room = self._finite - self._seen
        self._over += max(0, len(fx) - room)
        fx, fy = fx[:room], fy[:room]
        if not len(fx):  # (more finite values than counted: left out, see complete)
            return
        at = self._seen
        self._seen += len(fx)
        if self._whole:
            self._short.append((fx, fy))
            return
        if at == 0:
            self._kept[0] = (float(fx[0]), float(fy[0]))
        if self._seen == self._finite:
            self._kept[self._finite - 1] = (float(fx[-1]), float(fy[-1]))
        index = at + np.arange(len(fx))
        bucket = np.searchsorted(self._edges, index, side="right") - 1
        starts = np.concatenate([[0], np.flatnonzero(np.diff(bucket)) + 1])
        owners = bucket[starts]
        segment = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(fx))))
        for extreme, best, where, better in (
            (np.minimum.reduceat(fy, starts), self._low, self._low_at, np.less),
            (np.maximum.reduceat(fy, starts), self._high, self._high_at, np.greater),
        ):
            hit = np.flatnonzero(fy == extreme[segment])
            _, first = np.unique(segment[hit], return_index=True)
            position = hit[first]  # each segment's first occurrence of its extreme
            wins = better(extreme, best[owners])  # an equal one later is not the first
            for k in np.flatnonzero(wins).tolist():
                b, p = int(owners[k]), int(position[k])
                best[b], where[b] = extreme[k], at + p
                self._kept[at + p] = (float(fx[p]), float(fy[p]))

    def _take_gaps(self, x: np.ndarray, y: np.ndarray) -> None:
        bad = np.flatnonzero(~np.isfinite(y))
        if not len(bad):
            return
        values = y[bad]
        kinds = np.where(np.isnan(values), 0, np.where(values > 0, 1, 2))
        breaks = np.flatnonzero((np.diff(bad) != 1) | (np.diff(kinds) != 0)) + 1
        for f, last in zip(
            np.concatenate(([0], breaks)).tolist(),
            np.concatenate((breaks - 1, [len(bad) - 1])).tolist(),
            strict=True,
        ):
            kind = _KINDS[kinds[f]]
            start, end = self._put + int(bad[f]), self._put + int(bad[last])
            held = self._gaps[-1] if self._gaps else None
            if held is not None and held[3] == start - 1 and held[2] == kind:
                held[1], held[3] = float(x[bad[last]]), end  # a run across pieces
            else:
                self._gaps.append([float(x[bad[f]]), float(x[bad[last]]), kind, end])

    @property
    def complete(self) -> bool:
        """Whether exactly the finite values counted were put (a series that grew between
        the count and the pieces is not: read it again)."""
        return self._seen == self._finite and self._over == 0

    def result(self) -> Series:
        """What :func:`minmax_buckets` gives of every piece put, joined."""
        gaps = [(g[0], g[1], str(g[2])) for g in self._gaps]
        if self._whole:
            xs = [p[0] for p in self._short] or [np.zeros(0)]
            ys = [p[1] for p in self._short] or [np.zeros(0)]
            return Series(np.concatenate(xs), np.concatenate(ys), gaps)
        wanted = {0, self._finite - 1, *self._low_at.tolist(), *self._high_at.tolist()}
        order = sorted(i for i in wanted if i >= 0)
        x = np.array([self._kept[i][0] for i in order], dtype=np.float64)
        y = np.array([self._kept[i][1] for i in order], dtype=np.float64)
        return Series(x, y, gaps)


__all__ = ["Series", "StreamedMinMax", "minmax_buckets", "nonfinite_runs"]
