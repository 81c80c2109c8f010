"""A view of one saved tensor across steps, modes and workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._records import RecordKind
from tensortap.core._reductions import REDUCTION_NAMES, compute_reduction
from tensortap.exceptions import InvalidConfigError, InvalidWorker, TensorUnavailableForStep
from tensortap.format._index import REDUCTION_BY_CODE
from tensortap.trials._index import natural_key
from tensortap.trials._parts import TrialParts
from tensortap.trials._reader import RawRef


@dataclass(slots=True)
class StepEntry:
    """What one worker saved of one tensor at one step."""

    worker: str
    global_step: int
    mode: ModeKeys
    mode_step: int
    raw: RawRef | None = None
    shape: tuple[int, ...] | None = None
    reductions: dict[tuple[str, bool], float] = field(default_factory=dict)


class Tensor:
    """One tensor of a trial. Steps are global steps unless a mode is given."""

    def __init__(self, name: str, trial: TrialParts) -> None:
        self.name = name
        self._parts = trial
        self._by_global: dict[int, dict[str, StepEntry]] = {}
        self._by_mode: dict[tuple[ModeKeys, int], dict[str, StepEntry]] = {}
        self._consumed = 0

    @property
    def trial(self) -> Any:
        """The trial this tensor is of (as smdebug's ``Tensor.trial``)."""
        return getattr(self._parts, "trial", self._parts)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {len(self._by_global)} steps)"

    def __str__(self) -> str:
        return self.name

    # -- keeping current --
    def _update(self) -> None:
        rows = self._parts.saved_index.name_rows.get(self.name, [])
        if len(rows) == self._consumed:
            return
        segments = self._parts.saved_index.segments
        for seg_id, row_ids in rows[self._consumed :]:
            seg = segments[seg_id]
            idx = seg.index
            sub = idx.records[row_ids]
            columns = {f: sub[f].tolist() for f in sub.dtype.names or () if not f.startswith("pad")}
            modes = {m: ModeKeys(m) for m in set(columns["mode"])}  # one enum lookup per mode
            for i in range(len(sub)):
                g = columns["global_step"][i]
                mode = modes[columns["mode"][i]]
                mstep = columns["mode_step"][i]
                per_worker = self._by_global.setdefault(g, {})
                entry = per_worker.get(seg.worker)
                if entry is None:
                    entry = per_worker[seg.worker] = StepEntry(seg.worker, g, mode, mstep)
                    self._by_mode.setdefault((mode, mstep), {})[seg.worker] = entry
                kind = columns["kind"][i]
                start = columns["dims_offset"][i]
                shape = tuple(idx.dims[start : start + columns["ndim"][i]].tolist())
                entry.shape = shape
                if kind == RecordKind.TENSOR:
                    entry.raw = RawRef(
                        seg_id,
                        columns["data_offset"][i],
                        columns["data_length"][i],
                        columns["crc32"][i],
                        idx.dtypes[columns["dtype"][i]],
                        shape,
                    )
                elif kind == RecordKind.REDUCTION:
                    key = (REDUCTION_BY_CODE[columns["reduction"][i]], bool(columns["abs"][i]))
                    entry.reductions[key] = columns["value"][i]
        self._consumed = len(rows)

    def _entries(self, step: int, mode: ModeKeys | None) -> dict[str, StepEntry]:
        self._update()
        if mode is None or mode == ModeKeys.GLOBAL:
            return self._by_global.get(step, {})
        return self._by_mode.get((mode, step), {})

    def _entry(self, step: int, mode: Any, worker: str | None) -> StepEntry:
        mode = self._parts.mode_key(mode)
        found = self._entries(step, mode)
        if not found and self._parts.refresh_if_stale():
            found = self._entries(step, mode)
        if not found:
            self._parts.raise_missing(self.name, step, mode)
        if worker is None:
            if len(found) == 1:
                return next(iter(found.values()))
            return found[min(found, key=natural_key)]
        entry = found.get(worker)
        if entry is None:
            if worker not in self._parts.workers():
                raise InvalidWorker(worker, self._parts.workers())
            raise TensorUnavailableForStep(self.name, step, mode, self.steps(mode))
        return entry

    # -- public API --
    def steps(self, mode: Any = None, show_incomplete_steps: bool = True) -> list[int]:
        """Steps at which this tensor was saved (global steps, or steps of ``mode``)."""
        mode = self._parts.mode_key(mode)
        self._parts.refresh_if_stale()
        self._update()
        if mode is None or mode == ModeKeys.GLOBAL:
            steps = sorted(self._by_global)
        else:
            steps = sorted(s for (m, s) in self._by_mode if m == mode)
        if not show_incomplete_steps:
            done = set(self._parts.steps(mode))
            steps = [s for s in steps if s in done]
        return steps

    def workers(self, step_num: int, mode: Any = None) -> list[str]:
        """Workers that saved this tensor at the step."""
        return sorted(self._entries(step_num, self._parts.mode_key(mode)), key=natural_key)

    def value(self, step_num: int, mode: Any = None, worker: str | None = None) -> np.ndarray:
        """The saved value (a new NumPy array) at a step; the first worker's if none is named."""
        entry = self._entry(step_num, mode, worker)
        if entry.raw is None:
            raise TensorUnavailableForStep(
                self.name,
                step_num,
                self._parts.mode_key(mode),
                self._raw_steps(mode),
                note="only reductions or the shape were saved at this step",
            )
        return self._parts.read_raw(entry.raw)

    def _raw_steps(self, mode: Any) -> list[int]:
        mode = self._parts.mode_key(mode)
        if mode is None or mode == ModeKeys.GLOBAL:
            return sorted(g for g, ws in self._by_global.items() if any(e.raw for e in ws.values()))
        return sorted(
            s
            for (m, s), ws in self._by_mode.items()
            if m == mode and any(e.raw for e in ws.values())
        )

    def global_steps(self, mode: Any = None) -> list[int]:
        """The global step of each of ``steps(mode)``, in the same order (for curves of a
        mode drawn over global steps, without a lookup per step)."""
        steps = self.steps(mode)
        m = self._parts.mode_key(mode)
        if m is None or m == ModeKeys.GLOBAL:
            return steps
        return [next(iter(self._by_mode[(m, s)].values())).global_step for s in steps]

    def values(self, mode: Any = None, worker: str | None = None) -> dict[int, np.ndarray]:
        """Every saved value by step (steps where only reductions were saved are skipped)."""
        found: dict[int, RawRef] = {}
        m = self._parts.mode_key(mode)
        for step in self.steps(mode):
            entries = self._entries(step, m)
            if worker is not None:
                entry = entries.get(worker)
            else:  # the first worker's, as value() picks it
                entry = entries[min(entries, key=natural_key)] if entries else None
            if entry is not None and entry.raw is not None:
                found[step] = entry.raw
        self._parts.values_read += len(found)
        values = self._parts.value_reader.read_many(list(found.values()))  # fetched together
        return dict(zip(found, values, strict=True))

    def shape(self, step_num: int, mode: Any = None, worker: str | None = None) -> tuple[int, ...]:
        entry = self._entry(step_num, mode, worker)
        assert entry.shape is not None  # every record carries the shape
        return entry.shape

    def reduction_value(
        self,
        step_num: int,
        reduction_name: str,
        mode: Any = None,
        worker: str | None = None,
        abs: bool = False,
    ) -> float:
        """The saved reduction, or one computed from the saved raw value."""
        name = reduction_name.lower() if isinstance(reduction_name, str) else reduction_name
        if name not in REDUCTION_NAMES:
            raise InvalidConfigError(
                f"unknown reduction {reduction_name!r}; accepted: {', '.join(REDUCTION_NAMES)}"
            )
        entry = self._entry(step_num, mode, worker)
        saved = entry.reductions.get((name, bool(abs)))
        if saved is not None:
            self._parts.values_read += 1
            return saved
        if entry.raw is None:
            have = ", ".join(f"{'abs_' if a else ''}{n}" for n, a in entry.reductions) or "none"
            raise TensorUnavailableForStep(
                self.name,
                step_num,
                self._parts.mode_key(mode),
                note=f"neither the reduction {'abs_' if abs else ''}{name} nor the raw tensor "
                f"was saved at this step (saved reductions: {have})",
            )
        return compute_reduction(self._parts.read_raw(entry.raw), name, bool(abs))

    def reduction_values(
        self, step_num: int, mode: Any = None, worker: str | None = None
    ) -> dict[tuple[str, bool], float]:
        """Every reduction saved at the step, keyed by (name, abs)."""
        self._parts.values_read += 1
        return dict(self._entry(step_num, mode, worker).reductions)
