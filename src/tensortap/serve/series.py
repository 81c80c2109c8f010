"""Where the dashboard's charts take their numbers: one series reader per run, asked for the
names of its series (the chart list) and for at most :data:`BUCKETS` buckets of each series
drawn (min, max and last over equal step ranges), never for a run's every step.

:func:`open_reader` is the one place the reader is made. Until the columnar series path
(``tensortap.trials.series.SeriesReader``, issue 33) is on this branch, the reader here is an
interim one with the same methods, over the trial's segment columns (``trials/columns.py``,
as ``tensortap export`` reads them), read once per segment and kept as one array per series.

Answers are cached per run in a :class:`ByteCache` (a byte limit, least recently used out),
so that memory stays bounded per run whatever its length and its number of series.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.trials.columns import published_segments, scalar_columns
from tensortap.trials.trial import Trial, create_trial

#: Buckets a chart asks for per series: it never draws more than about 2 points per bucket.
BUCKETS = 600
#: Bytes of answers kept per run.
CACHE_BYTES = 32 * 1024 * 1024


class SeriesKey(NamedTuple):
    """One series: a tensor's statistic (``"value"`` for a raw one-element value, or a
    reduction name) in one mode, written by one worker (as the series path names it)."""

    tensor: str
    statistic: str
    mode: ModeKeys
    worker: str


def equal_width_buckets(
    steps: np.ndarray, values: np.ndarray, start: int | None, end: int | None, count: int
) -> dict[str, np.ndarray]:
    """``steps`` (sorted) and ``values`` inside ``[start, end)`` split into at most ``count``
    buckets of equal step width: first and last step, count, min and max of the finite values
    (NaN when none), last value. Empty buckets are left out."""
    lo = int(steps[0]) if start is None and len(steps) else (start or 0)
    hi = int(steps[-1]) + 1 if end is None and len(steps) else (end or 0)
    inside = slice(np.searchsorted(steps, lo), np.searchsorted(steps, hi))
    s, v = steps[inside], values[inside]
    if not len(s):
        empty_i, empty_f = np.array([], np.int64), np.array([], np.float64)
        return {
            "first_step": empty_i,
            "last_step": empty_i,
            "count": empty_i,
            "min": empty_f,
            "max": empty_f,
            "last": empty_f,
        }
    width = max(1, math.ceil((hi - lo) / count))
    bucket = (s - lo) // width
    starts = np.concatenate(([0], np.flatnonzero(np.diff(bucket)) + 1))
    ends = np.concatenate((starts[1:], [len(s)]))
    finite = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        low = np.minimum.reduceat(np.where(finite, v, np.inf), starts)
        high = np.maximum.reduceat(np.where(finite, v, -np.inf), starts)
    none = np.add.reduceat(finite.astype(np.int64), starts) == 0
    low[none], high[none] = np.nan, np.nan
    return {
        "first_step": s[starts],
        "last_step": s[ends - 1],
        "count": (ends - starts).astype(np.int64),
        "min": low,
        "max": high,
        "last": v[ends - 1],
    }


class ColumnsReader:
    """The interim series reader (the methods of the series path's ``SeriesReader`` the
    dashboard uses): a run's series from its trial's segment columns, each new segment read
    once, kept as one sorted array of global steps and one of values per series."""

    def __init__(self, location: str) -> None:
        self.trial: Trial = create_trial(location)
        self._after: dict[str, int] = {}  # worker -> last segment taken
        self._parts: dict[SeriesKey, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._whole: dict[SeriesKey, tuple[np.ndarray, np.ndarray]] = {}
        self.last_step = -1
        self.refresh()

    def close(self) -> None:
        self.trial.store.close()

    def refresh(self) -> bool:
        """Take what was published since the last call; True when anything was new."""
        segments = published_segments(self.trial, self._after)
        if not segments:
            return False
        columns = scalar_columns(self.trial, segments)
        for ref in segments:
            self._after[ref.worker] = max(self._after.get(ref.worker, -1), ref.seq)
        if not len(columns["value"]):
            return False
        combined = np.zeros(len(columns["value"]), dtype=np.int64)
        for name in ("tensor", "statistic", "mode", "worker"):
            # codes by a dict, not np.unique: sorting strings would hold the GIL throughout,
            # and the runs list must answer while a run is read
            seen: dict[str, int] = {}
            codes = np.fromiter(
                (seen.setdefault(v, len(seen)) for v in columns[name]),
                dtype=np.int64,
                count=len(combined),
            )
            combined = combined * (len(seen) + 1) + codes
        order = np.argsort(combined, kind="stable")
        split = np.flatnonzero(np.diff(combined[order])) + 1
        steps, values = columns["global_step"][order], columns["value"][order]
        for part in np.split(np.arange(len(order)), split):
            first = order[part[0]]
            key = SeriesKey(
                str(columns["tensor"][first]),
                str(columns["statistic"][first]),
                ModeKeys[str(columns["mode"][first])],
                str(columns["worker"][first]),
            )
            self._parts.setdefault(key, []).append((steps[part], values[part]))
            self._whole.pop(key, None)
        self.last_step = max(self.last_step, int(columns["global_step"].max()))
        return True

    def keys(self) -> list[SeriesKey]:
        return list(self._parts)

    def _arrays(self, key: SeriesKey) -> tuple[np.ndarray, np.ndarray]:
        whole = self._whole.get(key)
        if whole is None:
            parts = self._parts[key]
            steps = np.concatenate([p[0] for p in parts])
            values = np.concatenate([p[1] for p in parts])
            if len(steps) > 1 and (np.diff(steps) < 0).any():
                order = np.argsort(steps, kind="stable")
                steps, values = steps[order], values[order]
            self._parts[key] = [(steps, values)]
            whole = self._whole[key] = (steps, values)
        return whole

    def buckets_by_key(
        self, keys: Sequence[SeriesKey], start: int | None, end: int | None, count: int
    ) -> dict[SeriesKey, dict[str, np.ndarray]]:
        """The buckets of each of ``keys`` held (the series path's ``buckets()``, by key)."""
        return {
            key: equal_width_buckets(*self._arrays(key), start, end, count)
            for key in keys
            if key in self._parts
        }


def open_reader(location: str) -> ColumnsReader:
    """The one place a run's series reader is made."""
    return ColumnsReader(location)


def buckets(
    reader: ColumnsReader,
    keys: Sequence[SeriesKey],
    start: int | None = None,
    end: int | None = None,
    count: int = BUCKETS,
) -> dict[SeriesKey, dict[str, np.ndarray]]:
    """At most ``count`` buckets (first and last step, count, min, max, last) of each of
    ``keys`` over the global steps ``[start, end)``; a series with no step there is left out."""
    return reader.buckets_by_key(keys, start, end, count)


class ByteCache:
    """A thread-safe least-recently-used mapping holding at most ``limit`` bytes (each entry
    weighed when put)."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self.size = 0
        self._items: OrderedDict[Any, tuple[int, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[1]

    def put(self, key: Any, value: Any, size: int) -> None:
        if size > self.limit:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.size -= old[0]
            self._items[key] = (size, value)
            self.size += size
            while self.size > self.limit:
                _, (dropped, _) = self._items.popitem(last=False)
                self.size -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.size = 0

    def __len__(self) -> int:
        return len(self._items)


__all__ = [
    "BUCKETS",
    "ByteCache",
    "ColumnsReader",
    "SeriesKey",
    "buckets",
    "equal_width_buckets",
    "open_reader",
]
