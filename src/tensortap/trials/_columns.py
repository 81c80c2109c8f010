"""A trial's saved numbers as columns: every reduction, and every raw value of one element (a
loss, a metric), segment by segment, for tables (``tensortap export``).

A segment is the unit: it is published whole, never changes, and holds each of its records
once, so a reader that remembers, per worker, the last segment it took can take only what is
new and never take a record twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._records import RecordKind
from tensortap.exceptions import FormatError, StorageError
from tensortap.format import _layout as layout
from tensortap.format._index import REDUCTION_BY_CODE, SegmentIndex
from tensortap.format._series import decode_block, decode_head, group_series
from tensortap.storage._base import Store
from tensortap.trials._parts import TrialParts
from tensortap.trials._reader import RawRef

#: The columns :func:`scalar_columns` returns, in order.
COLUMNS = ("worker", "mode", "step", "global_step", "wall_time", "tensor", "statistic", "value")
_NUMERIC = frozenset("biuf")
_NAMES = np.array(["", *(REDUCTION_BY_CODE[c] for c in sorted(REDUCTION_BY_CODE))], dtype=object)
_ABS_NAMES = np.array(["abs_" + n if n else n for n in _NAMES], dtype=object)
_MODE_NAMES = np.array(["", *(m.name for m in sorted(ModeKeys))], dtype=object)


@dataclass(frozen=True)
class SegmentRef:
    """One published segment: its worker, its sequence number, its place in the trial."""

    worker: str
    seq: int
    position: int


def published_segments(
    trial: TrialParts, after: Mapping[str, int] | None = None
) -> list[SegmentRef]:
    """The trial's published segments (refreshed now), each worker's in order, leaving out
    those at or before ``after[worker]`` (a sequence number)."""
    trial.refresh()
    after = after or {}
    found = []
    for position, seg in enumerate(trial.saved_index.segments):
        seq = int(seg.index.header["seq"])
        if seq > after.get(seg.worker, -1):
            found.append(SegmentRef(seg.worker, seq, position))
    return sorted(found, key=lambda s: (s.worker, s.seq))


def scalar_columns(trial: TrialParts, segments: Sequence[SegmentRef]) -> dict[str, np.ndarray]:
    """The reductions and one-element raw values of ``segments``, as NumPy columns named
    :data:`COLUMNS` (``mode`` as its name, ``statistic`` ``value`` for a raw value and
    ``abs_<r>`` for a reduction of the absolute values)."""
    parts: list[dict[str, np.ndarray]] = []
    raw_refs: list[RawRef] = []
    raw_slots: list[tuple[int, np.ndarray]] = []
    for ref in segments:
        seg = trial.saved_index.segments[ref.position]
        index = seg.index
        records = index.records
        if not len(records):
            continue
        kind = records["kind"]
        size_one = _one_element(index, records)
        numeric = np.array([np.dtype(_numpy_name(d)).kind in _NUMERIC for d in index.dtypes])
        take = (kind == RecordKind.REDUCTION) | (
            (kind == RecordKind.TENSOR) & size_one & numeric[records["dtype"]]
        )
        rows = records[take]
        if not len(rows):
            continue
        is_raw = rows["kind"] == RecordKind.TENSOR
        statistic = np.where(
            is_raw,
            "value",
            np.where(rows["abs"] == 1, _ABS_NAMES[rows["reduction"]], _NAMES[rows["reduction"]]),
        )
        listed = sorted(index.steps, key=lambda s: int(s[0]))
        steps = np.array([s[0] for s in listed], dtype=np.int64)
        walls = np.array([s[3] if len(s) > 3 else np.nan for s in listed], dtype=np.float64)
        where = np.searchsorted(steps, rows["global_step"]) if len(steps) else None
        part = {
            "worker": np.full(len(rows), seg.worker, dtype=object),
            "mode": _MODE_NAMES[rows["mode"]],
            "step": rows["mode_step"].astype(np.int64),
            "global_step": rows["global_step"].astype(np.int64),
            "wall_time": _at(walls, steps, where, rows["global_step"]),
            "tensor": np.array(index.names, dtype=object)[rows["name"]],
            "statistic": statistic.astype(object),
            "value": rows["value"].astype(np.float64),
        }
        raw_at = np.flatnonzero(is_raw)
        from_series = (
            _raw_from_series(trial.store, index, np.flatnonzero(take)[raw_at])
            if len(raw_at)
            else None
        )
        if from_series is not None:  # one read of the segment's series object
            part["value"][raw_at] = from_series
        elif len(raw_at):
            raw_slots.append((len(parts), raw_at))
            raw_refs.extend(
                RawRef(
                    ref.position,
                    int(r["data_offset"]),
                    int(r["data_length"]),
                    int(r["crc32"]),
                    index.dtypes[int(r["dtype"])],
                    index.shape_of(int(i)),
                )
                for i, r in zip(np.flatnonzero(take)[raw_at], rows[raw_at], strict=True)
            )
        parts.append(part)
    if raw_refs:  # the raw values, read together (few requests on object storage)
        values = iter(trial.value_reader.read_many(raw_refs))
        for part_no, positions in raw_slots:
            column = parts[part_no]["value"]
            for pos in positions:
                column[pos] = float(np.asarray(next(values), dtype=np.float64).reshape(-1)[0])
    if not parts:
        return {c: np.array([], dtype=_EMPTY[c]) for c in COLUMNS}
    return {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}


_EMPTY: dict[str, Any] = {
    "worker": object,
    "mode": object,
    "step": np.int64,
    "global_step": np.int64,
    "wall_time": np.float64,
    "tensor": object,
    "statistic": object,
    "value": np.float64,
}


def _raw_from_series(store: Store, index: SegmentIndex, rows: np.ndarray) -> np.ndarray | None:
    """The numbers of the raw one-element records at ``rows`` of a segment, from its series
    object (one read instead of one per value); None when it has none, or it does not hold
    exactly these records (then they are read from the data object)."""
    key = layout.series_key(str(index.header["worker"]), int(index.header["seq"]))
    try:
        raw = store.get(key)
        head = decode_head(raw, key)
        if (head.first_seq, head.last_seq) != (index.header["seq"], index.header["seq"]):
            return None
        # the series these rows make, with each row's position standing in for its value
        where = np.arange(len(rows), dtype=np.float64)
        keys, blocks = group_series(index.names, index.records, rows, where)
        known = {k: i for i, k in enumerate(head.keys)}
        out = np.full(len(rows), np.nan)
        filled = 0
        for k, (steps, positions) in zip(keys, blocks, strict=True):
            if k[1] != "value":  # a reduction: its number is in the index
                continue
            i = known.get(k)
            if i is None:
                return None
            offset, length = head.block_range(i)
            saved_steps, values = decode_block(
                memoryview(raw)[offset : offset + length], head, i, key
            )
            if not np.array_equal(saved_steps, steps):
                return None
            out[positions.astype(np.int64)] = values
            filled += len(positions)
    except (KeyError, FormatError, StorageError):
        return None
    return out if filled == len(rows) else None


def _one_element(index: Any, records: np.ndarray) -> np.ndarray:
    """Whether each record's shape has exactly one element (no dimension other than 1)."""
    not_one = np.concatenate([[0], np.cumsum(index.dims != 1)])
    start = records["dims_offset"].astype(np.int64)
    return np.asarray((not_one[start + records["ndim"]] - not_one[start]) == 0)


def _at(walls: np.ndarray, steps: np.ndarray, where: Any, wanted: np.ndarray) -> np.ndarray:
    """The wall time of each wanted global step (NaN where the segment does not say)."""
    if where is None:
        return np.full(len(wanted), np.nan)
    clipped = np.minimum(where, len(steps) - 1)
    return np.where(steps[clipped] == wanted, walls[clipped], np.nan)


def _numpy_name(stored: str) -> str:
    """A stored dtype name NumPy knows (low-precision floats count as floats)."""
    try:
        np.dtype(stored)
    except TypeError:
        return "float32"
    return stored
