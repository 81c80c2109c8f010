"""A segment's series object, and the rollups that merge small segments' series.

The writer publishes each segment's series (its numbers as columns, see
:mod:`tensortap.format._series`) just before the segment's index, so a reader that sees the
index finds them. A long run publishes a segment every ``flush_secs``; reading a day of such
segments one object at a time would be slow, so once enough small segments are published the
writer also writes a *rollup* holding their series merged; readers then read the rollup and
skip the segments it covers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.core._dtypes import ML_DTYPE_NAMES
from tensortap.format import _layout as layout
from tensortap.format._index import IndexBuilder
from tensortap.format._series import STEP_DTYPE, encode_series, group_series, merge_series

SeriesParts = tuple[
    list[tuple[str, str, int]],
    list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    np.ndarray[Any, Any],
]
#: A rollup is written once this many segments, or this many values, wait for one; a segment
#: holding this many values on its own is read alone (merging it would only copy it).
ROLLUP_SEGMENTS = 64
ROLLUP_VALUES = 1 << 20
BIG_SEGMENT_VALUES = 1 << 18
_F8 = np.dtype("<f8")


def one_number(data: np.ndarray[Any, Any]) -> float | None:
    """The number a raw value of one element holds (None for anything else)."""
    if data.size != 1:
        return None
    if data.dtype is _F8:  # the vital signs: every step, so the common case goes first
        return float(data.item())
    kind = data.dtype.kind
    if kind in "biuf" or (kind == "V" and data.dtype.name in ML_DTYPE_NAMES):
        return float(data.reshape(-1)[0])
    return None


def segment_series(builder: IndexBuilder) -> SeriesParts:
    """The series of the segment ``builder`` indexes."""
    rows, values = builder.scalars()
    keys, blocks = group_series(builder.names, builder.records(), rows, values)
    return keys, blocks, _step_table(builder.steps)


def _step_table(steps: list[tuple[int, int, int, float]]) -> np.ndarray[Any, Any]:
    """:func:`step_table` of the steps a writer added (each four numbers), column by column."""
    table = np.zeros(len(steps), dtype=STEP_DTYPE)
    if steps:
        global_steps, modes, mode_steps, wall_times = zip(*steps, strict=True)
        table["global_step"] = global_steps
        table["mode_step"] = mode_steps
        table["wall_time"] = wall_times
        table["mode"] = modes
    return table


class Rollups:
    """Collects published segments' series and says when a run of them is due to be rolled up
    (or merged, see :mod:`tensortap.writer._compaction`)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._pending: list[tuple[int, SeriesParts]] = []
        self._values = 0

    def add(self, seq: int, parts: SeriesParts) -> list[tuple[int, SeriesParts]] | None:
        """Note a published segment; the run of segments to roll up, when one is due (two
        or more)."""
        size = sum(len(block[0]) for block in parts[1])
        if size >= BIG_SEGMENT_VALUES:  # read alone: end the run of small segments here
            return self._take()
        self._pending.append((seq, parts))
        self._values += size
        if len(self._pending) >= ROLLUP_SEGMENTS or self._values >= ROLLUP_VALUES:
            return self._take()
        return None

    @property
    def pending(self) -> int:
        """Published segments noted and not yet taken."""
        return len(self._pending)

    def end(self) -> list[tuple[int, SeriesParts]] | None:
        """The run of segments still pending (at close), if two or more."""
        return self._take()

    def _take(self) -> list[tuple[int, SeriesParts]] | None:
        pending, self._pending, self._values = self._pending, [], 0
        return pending if len(pending) >= 2 else None

    def rollup(self, pending: list[tuple[int, SeriesParts]]) -> tuple[str, bytes]:
        """(key, bytes) of the rollup of a run of segments."""
        first, last = pending[0][0], pending[-1][0]
        merged = merge_series([parts for _, parts in pending])
        return layout.rollup_key(self.worker, first, last), encode_series(
            self.worker, first, last, *merged
        )
