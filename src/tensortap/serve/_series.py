"""Where the dashboard's charts take their numbers: one series reader per run (the series
path, :class:`~tensortap.trials._series.SeriesReader`, which reads a run's series objects without
opening the trial's index), asked for the names of its series (the chart list) and for at most
:data:`BUCKETS` buckets of each series drawn (min, max and last over equal step ranges), never
for a run's every step. :func:`open_reader` is the one place the reader is made.

Answers are cached per run in a :class:`ByteCache` (a byte limit, least recently used out),
so that memory stays bounded per run whatever its length and its number of series.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensortap.query._curves import LINE_BUCKETS
from tensortap.trials._series import SeriesKey, SeriesReader

#: Buckets a chart asks for per series: it never draws more than about 2 points per bucket.
BUCKETS = LINE_BUCKETS
#: Bytes of answers kept per run.
CACHE_BYTES = 32 * 1024 * 1024


def open_reader(location: str) -> SeriesReader:
    """The one place a run's series reader is made."""
    return SeriesReader(location)


def close_reader(reader: SeriesReader) -> None:
    """Release what the reader holds open (its store's files or client)."""
    reader.store.close()


def buckets(
    reader: SeriesReader,
    keys: Sequence[SeriesKey],
    start: int | None = None,
    end: int | None = None,
    count: int = BUCKETS,
) -> dict[SeriesKey, dict[str, np.ndarray]]:
    """At most ``count`` buckets (first and last step, count, min, max, last, how many values
    are not finite) of each of
    ``keys`` over the global steps ``[start, end)``, read in one call; a series with no step
    there is left out."""
    if not keys:
        return {}
    wanted = set(keys)
    names = sorted({k.tensor for k in keys})
    statistics = sorted({k.statistic for k in keys})
    found = reader.buckets(names, statistic=statistics, start=start, end=end, count=count)
    return {
        key: {name: np.asarray(part[name]) for name in _NUMBERS}
        for key, part in found.groups()
        if key in wanted
    }


_NUMBERS = ("first_step", "last_step", "count", "min", "max", "last", "nonfinite")


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
    "SeriesKey",
    "buckets",
    "close_reader",
    "open_reader",
]
