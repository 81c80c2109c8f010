"""How a read of series is planned (:class:`~tensortap.trials._series.SeriesReader`): the
objects to read and the series wanted in each (jobs), series cut into groups that fit the
reader's bound on values held at once, and each object's blocks joined into few ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from tensortap.format._series import STEP_DTYPE, SeriesHead
from tensortap.trials._series_columns import SeriesKey, bucketed, merge_buckets
from tensortap.trials._series_fill import series_order
from tensortap.trials._series_objects import Source

#: The bytes of ranges read at once (an object is read whole in one batch, whatever its size).
BATCH_BYTES = 32 << 20
#: The most values (a global step and a number each: 16 bytes) :meth:`SeriesReader.buckets`
#: holds at once, whatever it is asked for: series are read whole in groups of at most this
#: many values (and each group's bytes a batch of at most as many at a time), a series
#: longer than this a batch of its objects at a time, each batch bucketed and the buckets
#: merged. A block (one series in one object) is the unit read: the writer's rollups hold at
#: most ``ROLLUP_VALUES`` (2^20) values of all their series together. Issue 48: a dashboard
#: drawing 100 series of 100,000 steps held all 10^7 of them at once (160 MB, and as much
#: again in bytes read) for a few hundred buckets each.
BUCKET_READ_VALUES = 1 << 20
#: Pieces of a long series' buckets kept before they are merged into one.
_MERGE_PIECES = 64

PutSeries = Callable[[SeriesKey, np.ndarray, np.ndarray], None]
#: Blocks of one object closer than this (or than the run read so far) are read in one range.
_GAP_BYTES = 64 << 10
#: A range read at once grows to at most this many bytes.
_RUN_BYTES = 16 << 20


class ReadJob(NamedTuple):
    """An object to read, the positions of the wanted series in its list, and their keys."""

    source: Source
    head: SeriesHead
    picks: list[int]
    keys: list[SeriesKey]


class BucketPieces:
    """The buckets of one series over ``[first, stop)``, put a piece at a time (each sorted
    by step) and merged as they come, so that what is kept stays a few pieces' buckets."""

    def __init__(self, first: int, stop: int, count: int) -> None:
        self.first, self.stop, self.count = first, stop, count
        self.lowest, self.highest = 2**63 - 1, -(2**63)  # the steps put
        self._parts: list[tuple[np.ndarray, ...]] = []

    def put(self, key: SeriesKey, steps: np.ndarray, values: np.ndarray) -> None:
        del key
        if not len(steps):
            return
        low, high = int(steps[0]), int(steps[-1])
        self.lowest, self.highest = min(self.lowest, low), max(self.highest, high)
        if self.first <= low and high < self.stop:  # else the extent was wrong: read again
            self._parts.append(bucketed(steps, values, self.first, self.stop, self.count))
        if len(self._parts) >= _MERGE_PIECES:
            self._parts = [self.merged()]

    def merged(self) -> tuple[np.ndarray, ...]:
        return merge_buckets(self._parts, self.first, self.stop, self.count)


def read_cost(job: ReadJob) -> int:
    """What reading a job with its step table holds, in values (16 bytes each): the ranges
    read, or the values of a segment read from its index."""
    if job.source.index:
        return int(job.head.directory["count"][job.picks].sum())
    return sum(length for _, length, _ in block_ranges(job.head, job.picks, True)) // 16


def narrowed(jobs: list[ReadJob], keep: set[SeriesKey] | None) -> list[ReadJob]:
    """The jobs narrowed to the series in ``keep`` (all of them when None)."""
    if keep is None:
        return jobs
    out = []
    for job in jobs:
        pairs = [(i, key) for i, key in zip(job.picks, job.keys, strict=True) if key in keep]
        if pairs:
            out.append(ReadJob(job.source, job.head, [i for i, _ in pairs], [k for _, k in pairs]))
    return out


def series_groups(capacity: dict[SeriesKey, int], most: int) -> list[list[SeriesKey]]:
    """The series in their order (:func:`series_order`), cut into runs of at most ``most``
    values together; a series of more than ``most`` is a run of its own."""
    groups: list[list[SeriesKey]] = []
    held = 0
    for key in sorted(capacity, key=series_order):
        size = capacity[key]
        if not groups or held + size > most:
            groups.append([])
            held = 0
        groups[-1].append(key)
        held += size
    return groups


def block_ranges(
    head: SeriesHead, picks: list[int], with_steps: bool
) -> list[tuple[int, int, list[int]]]:
    """The ranges to read of an object: (offset, length, the picks inside), the step table
    first (no picks) when asked for. Blocks close together are read in one range."""
    runs: list[tuple[int, int, list[int]]] = []
    if with_steps:
        runs.append((head.head_size, STEP_DTYPE.itemsize * head.steps, []))
    start = end = -1
    inside: list[int] = []
    for i in picks:
        offset, length = head.block_range(i)
        gap = offset - end
        if inside and gap <= max(_GAP_BYTES, end - start) and offset + length - start <= _RUN_BYTES:
            end = offset + length
            inside.append(i)
            continue
        if inside:
            runs.append((start, end - start, inside))
        start, end, inside = offset, offset + length, [i]
    if inside:
        runs.append((start, end - start, inside))
    return runs
