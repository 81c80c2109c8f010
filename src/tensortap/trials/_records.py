"""What was saved of some tensors at every step, as columns: one row per index record.

The rules' engine, judging a finished trial's steps all at once (:mod:`tensortap.rules.
_engine`), asks which tensors were saved at which steps, raw or as reductions, and the numbers
it can know without reading the data objects: every saved reduction (kept in the index) and
every one-element raw value (kept in the series objects). :func:`saved_records` gathers them in
a few vectorised operations per segment instead of one ``StepBlock`` per step; the functions
after it lay records out by step (:func:`any_at`, :func:`per_step`, :func:`name_sets`) and read
the one-element values of named series at every step (:func:`one_numbers`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core._dtypes import storage_dtype
from tensortap.core._records import RecordKind
from tensortap.format._index import REDUCTION_CODES
from tensortap.format._index_rows import RECORD_DTYPE
from tensortap.trials._index import natural_key

if TYPE_CHECKING:
    from tensortap.trials._trial import Trial


@dataclass(frozen=True)
class SavedRecords:
    """The records of ``names``: row ``i`` is a record of ``names[name[i]]`` at global step
    ``step[i]``. ``value`` holds a reduction's value, or a one-element raw value where the series
    path has it (``known`` says where ``value`` is a saved number). ``workers`` counts the
    workers that saved them."""

    names: tuple[str, ...]
    name: np.ndarray  # int32 positions into names
    step: np.ndarray  # int64 global steps
    kind: np.ndarray  # int8 RecordKind values
    reduction: np.ndarray  # int8 reduction codes (REDUCTION_CODES; 0: none)
    abs: np.ndarray  # bool
    value: np.ndarray  # float64
    known: np.ndarray  # bool
    one_element: np.ndarray  # bool: a raw value of one element
    workers: int

    def __len__(self) -> int:
        return len(self.step)

    def reduction_rows(self, reduction: str, abs: bool = False) -> np.ndarray:
        """Which rows are the saved reduction ``reduction`` (of absolute values with ``abs``)."""
        return (  # type: ignore[no-any-return]
            (self.kind == RecordKind.REDUCTION)
            & (self.reduction == REDUCTION_CODES[reduction])
            & (self.abs == abs)
        )

    def repeated(self) -> np.ndarray:
        """The rows whose name, step and kind of record appear more than once (a step saved
        again by a resumed session, or by several workers): judged step by step."""
        if not len(self):
            return np.zeros(0, dtype=bool)
        kind, reduction = self.kind.astype(np.int64), self.reduction.astype(np.int64)
        what = (kind * 64 + reduction) * 2 + self.abs  # < 2^9
        if len(self.names) < 1 << 14 and self.step.min() >= 0 and self.step.max() < 1 << 40:
            key = ((self.name.astype(np.int64) << 9) + what << 40) + self.step
        else:  # too wide for one int64: one key per distinct row
            rows = np.stack([self.name, self.step, what], axis=1)
            key = np.unique(rows, axis=0, return_inverse=True)[1].ravel()
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        same = ordered[1:] == ordered[:-1]
        twice = np.zeros(len(key), dtype=bool)
        twice[1:] |= same
        twice[:-1] |= same
        out = np.empty(len(key), dtype=bool)
        out[order] = twice
        return out


#: The last few answers per trial (rules of one walk ask for the same names).
_KEPT: weakref.WeakKeyDictionary[Trial, dict[tuple[int, tuple[str, ...]], SavedRecords]] = (
    weakref.WeakKeyDictionary()
)


def saved_records(trial: Trial, names: Sequence[str]) -> SavedRecords:
    """Every record of ``names`` in ``trial``'s published segments (see the module docstring)."""
    key = (trial.parts.saved_index.version, tuple(names))
    kept = _KEPT.setdefault(trial, {})
    found = kept.get(key)
    if found is None:
        if len(kept) >= 4:
            kept.clear()
        found = kept[key] = _gather(trial, key[1])
    return found


def _gather(trial: Trial, names: tuple[str, ...]) -> SavedRecords:
    index = trial.parts.saved_index
    fields = ("global_step", "kind", "reduction", "abs", "value", "data_length", "dtype")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("name", *fields)}
    workers: set[str] = set()
    itemsizes: dict[int, np.ndarray] = {}
    for position, name in enumerate(names):
        for seg_id, rows in index.name_rows.get(name, ()):
            segment = index.segments[seg_id]
            workers.add(segment.worker)
            records = segment.index.records
            for field in fields:
                parts[field].append(records[field][rows])
            parts["name"].append(np.full(len(rows), position, dtype=np.int32))
            sizes = itemsizes.get(seg_id)
            if sizes is None:
                sizes = itemsizes[seg_id] = np.asarray(
                    [storage_dtype(d).itemsize for d in segment.index.dtypes] or [0],
                    dtype=np.int64,
                )
            parts["dtype"][-1] = sizes[np.minimum(parts["dtype"][-1], len(sizes) - 1)]
    cols = {
        k: np.concatenate(v) if v else np.zeros(0, dtype=RECORD_DTYPE[k] if k in fields else int)
        for k, v in parts.items()
    }
    name_col, itemsize = cols["name"].astype(np.int32), cols["dtype"].astype(np.int64)
    kind = cols["kind"].astype(np.int8)
    raw = kind == RecordKind.TENSOR
    one = raw & (cols["data_length"].astype(np.int64) == itemsize) & (itemsize > 0)
    value = np.where(kind == RecordKind.REDUCTION, cols["value"], np.nan).astype(np.float64)
    known = kind == RecordKind.REDUCTION
    steps = cols["global_step"].astype(np.int64)
    if one.any() and len(workers) == 1:
        _fill_one_element(trial, names, name_col, steps, one, value, known)
    return SavedRecords(
        names,
        name_col,
        steps,
        kind,
        cols["reduction"].astype(np.int8),
        cols["abs"].astype(bool),
        value,
        known,
        one,
        len(workers),
    )


def _fill_one_element(
    trial: Trial,
    names: tuple[str, ...],
    name_col: np.ndarray,
    steps: np.ndarray,
    one: np.ndarray,
    value: np.ndarray,
    known: np.ndarray,
) -> None:
    """Take the one-element raw values from the series path (one worker's trial): a value the
    series do not hold (an older trial, a damaged object, a non-numeric value) stays unknown."""
    wanted = sorted({names[i] for i in np.unique(name_col[one]).tolist()}, key=natural_key)
    cols = trial.series(wanted, statistic="value")
    if not len(cols["value"]):
        return
    position = {n: i for i, n in enumerate(names)}
    tensor_of = np.asarray([position[t] for t in cols["tensor"].tolist()], dtype=np.int64)
    found_key = tensor_of * (1 << 40) + cols["global_step"].astype(np.int64)
    order = np.argsort(found_key, kind="stable")
    found_key, found_value = found_key[order], cols["value"][order].astype(np.float64)
    rows = np.flatnonzero(one)
    key = name_col[rows].astype(np.int64) * (1 << 40) + steps[rows]
    at = np.searchsorted(found_key, key)
    hit = at < len(found_key)
    hit[hit] = found_key[at[hit]] == key[hit]
    value[rows[hit]] = found_value[at[hit]]
    known[rows[hit]] = True


def any_at(steps: np.ndarray, row_steps: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """For each of ``steps`` (ascending), whether one of the rows (``row_steps``, where ``rows``
    is True) is at that step."""
    if rows is not None:
        row_steps = row_steps[rows]
    found = np.zeros(len(steps), dtype=bool)
    if not len(row_steps) or not len(steps):
        return found
    at = np.searchsorted(steps, row_steps)
    inside = at < len(steps)
    inside[inside] = steps[at[inside]] == row_steps[inside]
    found[at[inside]] = True
    return found


def per_step(
    steps: np.ndarray, row_steps: np.ndarray, row_names: np.ndarray, names: int, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(value, count) matrices of ``len(steps)`` x ``names``: the value of each row at its step
    and name (rows not at one of ``steps`` are left out), and how many rows landed there."""
    value = np.zeros((len(steps), names))
    count = np.zeros((len(steps), names), dtype=np.int64)
    if not len(row_steps) or not len(steps):
        return value, count
    at = np.searchsorted(steps, row_steps)
    inside = at < len(steps)
    inside[inside] = steps[at[inside]] == row_steps[inside]
    at, name = at[inside], row_names[inside]
    value[at, name] = values[inside]
    np.add.at(count, (at, name), 1)
    return value, count


def chunks(steps: np.ndarray, width: int, cells: int = 1 << 20) -> Iterator[np.ndarray]:
    """``steps`` in pieces of at most ``cells`` matrix cells of ``width`` columns."""
    size = max(1, cells // max(width, 1))
    for lo in range(0, len(steps), size):
        yield steps[lo : lo + size]


def name_sets(names: Sequence[str], present: np.ndarray) -> list[tuple[str, ...]]:
    """For each row of ``present`` (steps x names, bool), the names present there, in their
    order (one tuple per distinct row, shared by the rows alike)."""
    if not len(present):
        return []
    rows, inverse = np.unique(present, axis=0, return_inverse=True)
    tuples = [tuple(names[j] for j in np.flatnonzero(row).tolist()) for row in rows]
    return [tuples[i] for i in inverse.ravel().tolist()]


def one_numbers(
    trial: Trial, names: Sequence[str], steps: np.ndarray
) -> list[list[tuple[str, float]] | None] | None:
    """For each of ``steps``: the (name, value) of each of ``names`` saved there as a finite
    one-element raw value (names in their order; empty where none was saved), or None where
    one was saved otherwise (only reductions, more elements, not finite, twice): what
    ``scalar`` would read at the step, read step by step. None for a trial of several
    workers."""
    saved = saved_records(trial, names)
    if saved.workers > 1:
        return None
    with np.errstate(invalid="ignore"):
        usable = saved.one_element & saved.known & np.isfinite(saved.value)
    usable &= ~saved.repeated()
    raw = saved.kind == RecordKind.TENSOR
    doubt = any_at(steps, saved.step, raw & ~usable)
    for position in range(len(names)):
        mine = saved.name == position
        doubt |= any_at(steps, saved.step, mine) & ~any_at(steps, saved.step, mine & usable)
    pick = np.flatnonzero(usable)
    pick = pick[np.lexsort((saved.name[pick], saved.step[pick]))]  # by step, names in order
    lo = np.searchsorted(saved.step[pick], steps).tolist()
    hi = np.searchsorted(saved.step[pick], steps, side="right").tolist()
    keys = [names[i] for i in saved.name[pick].tolist()]
    values = saved.value[pick].tolist()
    return [
        None if doubt[i] else list(zip(keys[lo[i] : hi[i]], values[lo[i] : hi[i]], strict=True))
        for i in range(len(steps))
    ]
