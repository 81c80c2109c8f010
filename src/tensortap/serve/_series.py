"""Where the dashboard's charts take their numbers: one series reader per run (the series
path, :class:`~tensortap.trials._series.SeriesReader`, which reads a run's series objects without
opening the trial's index), asked for the names of its series (the chart list) and for at most
:data:`BUCKETS` buckets of each series drawn (min, max and last over equal step ranges), never
for a run's every step. :func:`open_reader` is the one place the reader is made.

What the dashboard keeps of every run it serves (answers, the series objects' heads, series
read from indexes, report pages) is accounted against one
:class:`~tensortap.core._memory_budget.MemoryBudget` of the whole server (:data:`CACHE_MB`, or
``tensortap serve --cache-mb``), least recently used out whichever run holds it, so that
memory stays bounded whatever the runs' length, their number of series and their number.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensortap.core._memory_budget import MemoryBudget
from tensortap.query._curves import LINE_BUCKETS
from tensortap.trials._series import SeriesKey, SeriesReader

#: Buckets a chart asks for per series: it never draws more than about 2 points per bucket.
BUCKETS = LINE_BUCKETS
#: Megabytes the dashboard keeps in memory of all its runs together, by default.
CACHE_MB = 256


def open_reader(location: str, budget: MemoryBudget) -> SeriesReader:
    """The one place a run's series reader is made; what it keeps counts against ``budget``."""
    return SeriesReader(location, budget)


def close_reader(reader: SeriesReader) -> None:
    """Release what the reader holds open (its store's files or client) and what it keeps
    in memory (out of the server's budget)."""
    reader.objects.release()
    reader.store.close()


def buckets(
    reader: SeriesReader,
    keys: Sequence[SeriesKey],
    start: int | None = None,
    end: int | None = None,
    count: int = BUCKETS,
) -> dict[SeriesKey, dict[str, np.ndarray]]:
    """At most ``count`` buckets (first and last step, count, min, max, last, how many values
    are not finite) of each of ``keys`` over the global steps ``[start, end)``, in one call to
    the reader (which holds at most
    :data:`~tensortap.trials._series.BUCKET_READ_VALUES` values at once, whatever the number
    and length of the series); a series with no step there is left out."""
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


__all__ = [
    "BUCKETS",
    "CACHE_MB",
    "SeriesKey",
    "buckets",
    "close_reader",
    "open_reader",
]
