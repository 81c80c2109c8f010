"""A run's series as columns: :class:`SeriesKey`, :class:`SeriesColumns` and how a series is cut
into buckets (what :class:`~tensortap.trials._series.SeriesReader` returns)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.trials._columns import COLUMNS

#: The columns of :meth:`SeriesReader.buckets`.
BUCKET_COLUMNS = (
    "worker",
    "mode",
    "tensor",
    "statistic",
    "first_step",
    "last_step",
    "count",
    "min",
    "max",
    "last",
    "nonfinite",
)


class SeriesKey(NamedTuple):
    """One series: a tensor's statistic in one mode, as one worker saved it."""

    tensor: str
    statistic: str
    mode: ModeKeys
    worker: str


#: The columns that name a row's series: made from the series' keys when first asked for.
_LABELS: dict[str, Callable[[SeriesKey], str]] = {
    "worker": lambda key: key.worker,
    "mode": lambda key: key.mode.name,
    "tensor": lambda key: key.tensor,
    "statistic": lambda key: key.statistic,
}
#: The columns joined from a worker's step table when first asked for.
_JOINED = ("step", "wall_time")


class SeriesColumns(Mapping[str, np.ndarray]):
    """Equal-length NumPy columns, rows grouped by series (each sorted by global step). The
    columns naming each row's series (``worker``, ``mode``, ``tensor``, ``statistic``, object
    arrays), and with ``step_tables`` (each worker's step table, sorted by global step) each
    row's ``step`` and ``wall_time``, are built when first asked for: a read of every value
    that wants only the numbers never pays for them."""

    def __init__(
        self,
        order: tuple[str, ...],
        numbers: dict[str, np.ndarray],
        groups: list[tuple[SeriesKey, int, int]],
        step_tables: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self._order = order
        self._columns = dict(numbers)
        self._groups = groups
        self._tables = step_tables
        self._rows = len(next(iter(numbers.values()))) if numbers else 0

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._columns.get(name)
        if found is None:
            if name not in self._order:
                raise KeyError(name)
            if name in _JOINED and self._tables is not None:
                self._join_steps()
                return self._columns[name]
            label = _LABELS[name]
            table = np.empty(len(self._groups), dtype=object)
            table[:] = [label(key) for key, _, _ in self._groups]
            lengths = [hi - lo for _, lo, hi in self._groups]
            found = self._columns[name] = np.repeat(table, lengths)
        return found

    def _join_steps(self) -> None:
        """Each row's mode step and wall time, from its worker's step table."""
        global_steps = self._columns["global_step"]
        mode_step = np.full(len(global_steps), -1, np.int64)
        wall = np.full(len(global_steps), np.nan)
        tables = self._tables or {}
        for key, lo, hi in self._groups:
            mode_step[lo:hi], wall[lo:hi] = join_steps(tables.get(key.worker), global_steps[lo:hi])
        self._columns["step"], self._columns["wall_time"] = mode_step, wall

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return f"SeriesColumns({list(self._order)}, rows={self.rows}, series={len(self._groups)})"

    @property
    def rows(self) -> int:
        return self._rows

    def groups(self) -> Iterator[tuple[SeriesKey, SeriesColumns]]:
        """Each series and its rows."""
        numbers = {n: c for n, c in self._columns.items() if n not in _LABELS}
        for key, lo, hi in self._groups:
            part = {name: col[lo:hi] for name, col in numbers.items()}
            yield key, SeriesColumns(self._order, part, [(key, 0, hi - lo)], self._tables)

    def to_pandas(self) -> Any:
        """A pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd  # type: ignore[import-untyped]
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame({name: self[name] for name in self._order})

    def to_arrow(self) -> Any:
        """A pyarrow Table (needs pyarrow: pip install 'tensortap[table]')."""
        try:
            import pyarrow as pa
        except ImportError:
            raise ImportError("to_arrow() needs pyarrow: pip install 'tensortap[table]'") from None
        return pa.table({name: pa.array(self[name]) for name in self._order})


def join_steps(table: np.ndarray | None, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mode step and wall time of each global step, from a step table sorted by global
    step (-1 / NaN where not listed)."""
    if table is None or not len(table) or not len(steps):
        return np.full(len(steps), -1, np.int64), np.full(len(steps), np.nan)
    known = table["global_step"]
    if len(known) == len(steps) and np.array_equal(known, steps):  # a value at every step
        return table["mode_step"].astype(np.int64), table["wall_time"].astype(np.float64)
    where = np.minimum(np.searchsorted(known, steps), len(known) - 1)
    rows = table[where]
    hit = rows["global_step"] == steps
    mode_step = np.where(hit, rows["mode_step"], -1).astype(np.int64)
    wall = np.where(hit, rows["wall_time"], np.nan)
    return mode_step, wall


def bucketed(
    steps: np.ndarray, values: np.ndarray, lo: int, hi: int, count: int
) -> tuple[np.ndarray, ...]:
    """(first_step, last_step, count, min, max, last, nonfinite) of each non-empty bucket of
    a series sorted by step, over [lo, hi) cut into at most ``count`` buckets of equal width
    (``nonfinite``: how many of its values are NaN or infinite)."""
    width = max(1, -(-(hi - lo) // count))
    bucket = (steps - lo) // width
    starts = np.concatenate([[0], np.flatnonzero(np.diff(bucket)) + 1])
    ends = np.concatenate([starts[1:], [len(steps)]])
    ok = np.isfinite(values)
    finite = np.where(ok, values, np.nan)
    with np.errstate(invalid="ignore"):
        low = np.fmin.reduceat(finite, starts)
        high = np.fmax.reduceat(finite, starts)
    bad = np.add.reduceat((~ok).astype(np.int64), starts)
    return (
        steps[starts],
        steps[ends - 1],
        (ends - starts).astype(np.int64),
        low,
        high,
        values[ends - 1],
        bad,
    )


def merge_buckets(
    parts: list[tuple[np.ndarray, ...]], lo: int, hi: int, count: int
) -> tuple[np.ndarray, ...]:
    """The buckets of a series read in pieces: :func:`bucketed` of each piece (each over the
    same ``[lo, hi)`` and ``count``), in the order the pieces were read, merged into what
    :func:`bucketed` gives of all of them at once (``last``: the value at the bucket's last
    step, of the piece read last where several hold that step, as a stable sort by step
    keeps it)."""
    if len(parts) == 1:
        return parts[0]
    first, last, counts, low, high, last_value, bad = (
        np.concatenate([part[k] for part in parts]) for k in range(7)
    )
    width = max(1, -(-(hi - lo) // count))
    bucket = (first - lo) // width
    read = np.arange(len(first))
    order = np.lexsort((read, last, bucket))  # by bucket, then last step, then as read
    bucket = bucket[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(bucket)) + 1])
    ends = np.concatenate([starts[1:], [len(bucket)]])
    with np.errstate(invalid="ignore"):
        merged_low = np.fmin.reduceat(low[order], starts)
        merged_high = np.fmax.reduceat(high[order], starts)
    return (
        np.minimum.reduceat(first[order], starts),
        np.maximum.reduceat(last[order], starts),
        np.add.reduceat(counts[order], starts),
        merged_low,
        merged_high,
        last_value[order][ends - 1],
        np.add.reduceat(bad[order], starts),
    )


def series_columns(
    steps: np.ndarray,
    values: np.ndarray,
    groups: list[tuple[SeriesKey, int, int]],
    step_tables: Mapping[str, np.ndarray],
) -> SeriesColumns:
    """The columns of a read: ``steps`` and ``values`` of every series (``groups`` says whose
    rows are where), the rest named or joined when asked for."""
    numbers = {"global_step": steps, "value": values}
    return SeriesColumns(COLUMNS, numbers, groups, step_tables)


def bucket_columns(
    pieces: list[tuple[SeriesKey, tuple[np.ndarray, ...]]],
    groups: list[tuple[SeriesKey, int, int]],
) -> SeriesColumns:
    names = ("first_step", "last_step", "count", "min", "max", "last", "nonfinite")
    if not pieces:
        empty = _empty(("first_step", "last_step", "count", "nonfinite"), ("min", "max", "last"))
        return SeriesColumns(BUCKET_COLUMNS, empty, [])
    numbers = {name: np.concatenate([p[1][k] for p in pieces]) for k, name in enumerate(names)}
    return SeriesColumns(BUCKET_COLUMNS, numbers, groups)


def _empty(ints: tuple[str, ...], floats: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {
        **{n: np.zeros(0, np.int64) for n in ints},
        **{n: np.zeros(0, np.float64) for n in floats},
    }
