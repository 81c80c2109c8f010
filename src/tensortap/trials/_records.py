"""What was saved of some tensors at every step, as columns: one row per index record.

A rule that judges a finished trial's steps all at once (``Rule.judge_steps``) asks which
tensors were saved at which steps, raw or as reductions, and the numbers it can know without
reading the data objects: every saved reduction (kept in the index) and every one-element raw
value (kept in the series objects). :func:`saved_records` gathers them in a few vectorised
operations per segment instead of one ``StepBlock`` per step.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core._dtypes import storage_dtype
from tensortap.core._records import RecordKind
from tensortap.format._index import RECORD_DTYPE, REDUCTION_CODES
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
