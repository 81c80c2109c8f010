"""The columns a series read fills: every wanted series' global steps and values, written
straight into two arrays as each batch of objects is decoded.

Each series gets a slot sized from the objects' directories before anything is read, so a read
holds its result and one batch of bytes, never a second copy of every value (issue 48: reading
every series of a long run cost 7.8 s and 1.66 GB, most of it values concatenated twice and
converted once more). What does not fit a slot (an object read in place of a damaged one that
holds more than the directory said) is kept aside and joined in :meth:`Fill.result`.
"""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

import numpy as np

from tensortap.trials._series_columns import SeriesKey

__all__ = ["Fill", "Filled", "series_order"]


def series_order(key: SeriesKey) -> tuple[str, str, int, str]:
    """The order series are returned in: tensor, statistic, mode, worker."""
    return key.tensor, key.statistic, int(key.mode), key.worker


class Filled(NamedTuple):
    """A read's result: each series' rows ``[lo, hi)`` of ``steps`` and ``values``, sorted by
    global step within a series."""

    steps: np.ndarray
    values: np.ndarray
    groups: list[tuple[SeriesKey, int, int]]


class Fill:
    """Slots for the series of a read, filled in the order their objects are read."""

    def __init__(self, capacity: dict[SeriesKey, int]) -> None:
        self._keys = sorted(capacity, key=series_order)
        self._slot = {key: i for i, key in enumerate(self._keys)}
        self._start = [0, *accumulate(capacity[key] for key in self._keys)]
        self._fill = self._start[:-1]
        self.steps = np.empty(self._start[-1], np.int64)
        self.values = np.empty(self._start[-1], np.float64)
        self._extra: dict[SeriesKey, list[tuple[np.ndarray, np.ndarray]]] = {}

    def put(self, key: SeriesKey, steps: np.ndarray, values: np.ndarray) -> None:
        """Append a piece of a series (steps sorted within it)."""
        n = len(steps)
        if not n:
            return
        i = self._slot.get(key)
        if i is None or self._fill[i] + n > self._start[i + 1]:
            self._extra.setdefault(key, []).append((np.array(steps), np.array(values)))
            return
        at = self._fill[i]
        self.steps[at : at + n] = steps
        self.values[at : at + n] = values
        self._fill[i] = at + n

    def result(self) -> Filled:
        """The filled columns, each series sorted by step (a step counted again, in a later
        object, keeps both rows, in the order read); series that got no row are left out."""
        full = not self._extra and all(
            self._fill[i] == self._start[i + 1] for i in range(len(self._keys))
        )
        if full:
            steps, values = self.steps, self.values
            groups = [
                (key, self._start[i], self._start[i + 1])
                for i, key in enumerate(self._keys)
                if self._start[i + 1] > self._start[i]
            ]
        else:
            steps, values, groups = self._joined()
        for _, lo, hi in groups:
            part = steps[lo:hi]
            if hi - lo > 1 and (part[1:] < part[:-1]).any():
                order = np.argsort(part, kind="stable")
                steps[lo:hi] = part[order]
                values[lo:hi] = values[lo:hi][order]
        return Filled(steps, values, groups)

    def _joined(self) -> tuple[np.ndarray, np.ndarray, list[tuple[SeriesKey, int, int]]]:
        """Slots not filled to the end, or pieces kept aside: the rows put, packed."""
        keys = sorted({*self._keys, *self._extra}, key=series_order)
        pieces: list[tuple[SeriesKey, list[tuple[np.ndarray, np.ndarray]]]] = []
        for key in keys:
            parts = []
            i = self._slot.get(key)
            if i is not None and self._fill[i] > self._start[i]:
                lo, hi = self._start[i], self._fill[i]
                parts.append((self.steps[lo:hi], self.values[lo:hi]))
            parts.extend(self._extra.get(key, ()))
            if parts:
                pieces.append((key, parts))
        total = sum(len(s) for _, parts in pieces for s, _ in parts)
        steps, values = np.empty(total, np.int64), np.empty(total, np.float64)
        groups, at = [], 0
        for key, parts in pieces:
            lo = at
            for s, v in parts:
                steps[at : at + len(s)] = s
                values[at : at + len(s)] = v
                at += len(s)
            groups.append((key, lo, at))
        return steps, values, groups
