"""A run's series (every saved number: losses, metrics, scalars, reductions) read as columns.

:class:`SeriesReader` reads the series objects the writer publishes beside each segment's
index (see :mod:`tensortap.format._series`), and the rollups that merge many small segments,
without opening the trial's index: reading one series, or all of them, costs a few range reads
per object whatever the number of steps inside it. A segment published without a series object
(a trial written before series objects existed, or a failed write) is read from its index.

Only published segments are read (a segment is published by its index), so a reader sees whole
steps, as :class:`~tensortap.trials._trial.Trial` does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._safe_regex import compile_untrusted
from tensortap.exceptions import FormatError, InvalidConfigError, StorageError
from tensortap.format._series import (
    STEP_DTYPE,
    SeriesHead,
    decode_block,
    decode_steps,
)
from tensortap.storage._base import Store
from tensortap.storage._resolve import open_store
from tensortap.trials._index import natural_key
from tensortap.trials._series_columns import (
    BUCKET_COLUMNS,
    SeriesColumns,
    SeriesKey,
    bucket_columns,
    bucketed,
    join_steps,
    series_columns,
)
from tensortap.trials._series_objects import SeriesObjects, Source, WorkerSeries

__all__ = ["BUCKET_COLUMNS", "OneNumbers", "SeriesColumns", "SeriesKey", "SeriesReader", "bucketed"]
logger = logging.getLogger(__name__)


class _Filter:
    """Which series a call asks for."""

    def __init__(
        self,
        names: str | Iterable[str] | None,
        regex: str | None,
        statistic: str | Iterable[str] | None,
        mode: Any,
        worker: str | None,
    ) -> None:
        self.names = None if names is None else {names} if isinstance(names, str) else set(names)
        if regex is not None:
            try:
                self.regex: Any = compile_untrusted(regex, "the series regex", "nothing is read")
            except FormatError as exc:
                raise InvalidConfigError(str(exc)) from None
        else:
            self.regex = None
        if statistic is None:
            self.statistics = None
        else:
            self.statistics = {statistic} if isinstance(statistic, str) else set(statistic)
        self.mode = None if mode is None else int(_mode(mode))
        self.worker = worker
        self._seen: dict[tuple[str, str, int], bool] = {}

    def wants(self, key: tuple[str, str, int]) -> bool:
        found = self._seen.get(key)
        if found is None:
            tensor, stat, mode = key
            found = self._seen[key] = (
                (self.names is None or tensor in self.names)
                and (self.regex is None or bool(self.regex.search(tensor)))
                and (self.statistics is None or stat in self.statistics)
                and (self.mode is None or mode == self.mode)
            )
        return found


def _mode(mode: Any) -> ModeKeys:
    if isinstance(mode, ModeKeys):
        return mode
    if isinstance(mode, str) and mode.upper() in ModeKeys.__members__:
        return ModeKeys[mode.upper()]
    if isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return ModeKeys(mode)
        except ValueError:
            pass
    names = ", ".join(m.name for m in ModeKeys)
    raise InvalidConfigError(f"mode must be a ModeKeys or one of {names}, got {mode!r}")


def _bounds(start: int | None, end: int | None) -> tuple[int, int]:
    for name, value in (("start", start), ("end", end)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | np.integer)
        ):
            raise InvalidConfigError(
                f"{name} must be a global step (an int) or None, got {value!r}"
            )
    lo = -(2**62) if start is None else int(start)
    hi = 2**62 if end is None else int(end)
    return lo, hi


class SeriesReader:
    """Reads a trial's series; :meth:`refresh` takes in what was published since."""

    def __init__(self, source: str | os.PathLike[str] | Store) -> None:
        self.objects = SeriesObjects(open_store(source))
        self.store = self.objects.store
        self.problems = self.objects.problems
        self.refresh()

    # -- keeping current --
    def refresh(self) -> bool:
        """List what was published since the last refresh; True if anything was new."""
        return self.objects.refresh()

    @property
    def last_step(self) -> int:
        """The highest global step published (-1 when none)."""
        last = -1
        for state in self.objects.workers.values():
            for source, head in self.objects.heads_of(state.plan[-1:], state):
                del source
                last = max(last, head.last_step)
        return last

    def workers(self) -> list[str]:
        return sorted(self.objects.workers)

    def keys(self, worker: str | None = None) -> list[SeriesKey]:
        """Every series published so far (each object's list is taken in once)."""
        found: list[SeriesKey] = []
        for state in self.objects.states(worker):
            new = [s for s in state.plan if s.key not in state.scanned]
            for source, head in self.objects.heads_of(new, state):
                state.scanned.add(source.key)
                for tensor, stat, mode in head.keys:
                    state.known.setdefault(
                        (tensor, stat, mode), SeriesKey(tensor, stat, ModeKeys(mode), state.name)
                    )
            found.extend(state.known.values())
        return sorted(found, key=lambda k: (k.tensor, k.statistic, int(k.mode), k.worker))

    def _picks(self, source: Source, head: SeriesHead, wanted: _Filter) -> list[int]:
        """The positions of the wanted series in an object's list (by name when names are
        given: a run of 10,000 series is not scanned for one)."""
        if wanted.names is None or len(wanted.names) > 64:
            return [i for i, key in enumerate(head.keys) if wanted.wants(key)]
        by_name = self.objects.by_name(source.key, head)
        found = [i for name in wanted.names for i in by_name.get(name, ())]
        return sorted(i for i in found if wanted.wants(head.keys[i]))

    # -- reading --
    def series(
        self,
        names: str | Iterable[str] | None = None,
        *,
        regex: str | None = None,
        statistic: str | Iterable[str] | None = None,
        mode: Any = None,
        start: int | None = None,
        end: int | None = None,
        worker: str | None = None,
    ) -> SeriesColumns:
        """The rows of the series asked for, with global steps in ``[start, end)``: columns
        ``worker, mode, step, global_step, wall_time, tensor, statistic, value``."""
        wanted = _Filter(names, regex, statistic, mode, worker)
        lo, hi = _bounds(start, end)
        read, tables = self._read(wanted, lo, hi, with_steps=True)
        groups, pieces = [], []
        at = 0
        for key, (steps, values) in read.items():
            n = len(steps)
            groups.append((key, at, at + n))
            at += n
            mode_step, wall = join_steps(tables.get(key.worker), steps)
            pieces.append((key, steps, values, mode_step, wall))
        return series_columns(pieces, groups)

    def buckets(
        self,
        names: str | Iterable[str] | None = None,
        *,
        regex: str | None = None,
        statistic: str | Iterable[str] | None = None,
        mode: Any = None,
        start: int | None = None,
        end: int | None = None,
        worker: str | None = None,
        count: int = 1000,
    ) -> SeriesColumns:
        """Each series over ``[start, end)`` (or its own extent) split into at most ``count``
        buckets of equal global-step width: columns :data:`BUCKET_COLUMNS` (``min``/``max`` of
        the finite values, NaN when none; ``last`` the value saved at ``last_step``). Empty
        buckets are left out; ``nonfinite`` counts a bucket's NaN and infinite values (a chart
        marks them even where the bucket's last value is finite)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidConfigError(f"count must be an int >= 1, got {count!r}")
        wanted = _Filter(names, regex, statistic, mode, worker)
        lo, hi = _bounds(start, end)
        read, _ = self._read(wanted, lo, hi, with_steps=False)
        groups, pieces = [], []
        at = 0
        for key, (steps, values) in read.items():
            if not len(steps):
                continue
            first = lo if start is not None else int(steps[0])
            stop = hi if end is not None else int(steps[-1]) + 1
            part = bucketed(steps, values, first, stop, count)
            n = len(part[0])
            groups.append((key, at, at + n))
            at += n
            pieces.append((key, part))
        return bucket_columns(pieces, groups)

    # -- internals --
    def _read(
        self, wanted: _Filter, lo: int, hi: int, with_steps: bool
    ) -> tuple[dict[SeriesKey, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
        """Every wanted series' (steps, values) within [lo, hi), sorted by series and step;
        and with ``with_steps`` the step table of the objects read, per worker."""
        out: dict[SeriesKey, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        tables: dict[str, list[np.ndarray]] = {}
        for state in self.objects.states(wanted.worker):
            self._read_sources(state, state.plan, wanted, lo, hi, with_steps, out, tables)
        result = {}
        for key in sorted(out, key=lambda k: (k.tensor, k.statistic, int(k.mode), k.worker)):
            steps_l, values_l = out[key]
            steps = np.concatenate(steps_l) if len(steps_l) > 1 else steps_l[0]
            values = np.concatenate(values_l) if len(values_l) > 1 else values_l[0]
            if len(steps) > 1 and (np.diff(steps) < 0).any():  # a re-counted step: keep both
                order = np.argsort(steps, kind="stable")
                steps, values = steps[order], values[order]
            result[key] = (steps, values)
        joined = {}
        for worker, parts in tables.items():
            table = np.concatenate(parts) if len(parts) > 1 else parts[0]
            joined[worker] = table[np.argsort(table["global_step"], kind="stable")]
        return result, joined

    def _read_sources(
        self,
        state: WorkerSeries,
        sources: list[Source],
        wanted: _Filter,
        lo: int,
        hi: int,
        with_steps: bool,
        out: dict[SeriesKey, tuple[list[np.ndarray], list[np.ndarray]]],
        tables: dict[str, list[np.ndarray]],
    ) -> None:
        """Read the wanted series of ``sources`` into ``out``; an object that fails a check
        is a problem, and its segments are read another way (:meth:`_replacements`)."""
        requests: list[tuple[str, int, int]] = []
        jobs: list[tuple[Source, SeriesHead, list[int], int, bool]] = []
        for source, head in self.objects.heads_of(sources, state):
            if not (head.last_step >= lo and head.first_step < hi and len(head.keys)):
                continue
            picks = self._picks(source, head, wanted)
            if not picks:
                continue
            if source.index:
                jobs.append((source, head, picks, -1, False))
                continue
            counts = head.directory["count"]
            whole = 2 * int(counts[picks].sum()) >= int(counts.sum())
            first = len(requests)
            if with_steps:
                requests.append((source.key, head.head_size, STEP_DTYPE.itemsize * head.steps))
            if whole:
                requests.append((source.key, head.blocks_at, head.size - head.blocks_at))
            else:
                requests.extend((source.key, *head.block_range(i)) for i in picks)
            jobs.append((source, head, picks, first, whole))
        raws = self.objects.get_ranges(requests)
        redo: list[Source] = []
        for source, head, picks, first, whole in jobs:
            try:
                blocks, table = self._blocks(source, head, picks, raws, first, whole, with_steps)
            except (FormatError, StorageError) as exc:
                self.objects.note(source.key, exc)
                if not source.index:
                    redo.extend(self.objects.replacements(state, source))
                continue
            if with_steps:
                tables.setdefault(state.name, []).append(table)
            for i, (steps, values) in zip(picks, blocks, strict=True):
                if len(steps) and steps[0] < lo:
                    cut = np.searchsorted(steps, lo)
                    steps, values = steps[cut:], values[cut:]
                if len(steps) and steps[-1] >= hi:
                    cut = np.searchsorted(steps, hi)
                    steps, values = steps[:cut], values[:cut]
                tensor, stat, mode = head.keys[i]
                slot = out.setdefault(SeriesKey(tensor, stat, ModeKeys(mode), state.name), ([], []))
                slot[0].append(steps)
                slot[1].append(values)
        if redo:
            self._read_sources(state, redo, wanted, lo, hi, with_steps, out, tables)

    def _blocks(
        self,
        source: Source,
        head: SeriesHead,
        picks: list[int],
        raws: list[bytearray | None],
        first: int,
        whole: bool,
        with_steps: bool,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        if source.index:
            parts = self.objects.fallback_parts(source)
            return [parts.blocks[i] for i in picks], parts.steps
        needed = raws[first : first + int(with_steps) + (1 if whole else len(picks))]
        got = [raw for raw in needed if raw is not None]
        if len(got) != len(needed):
            raise FormatError(f"{source.key} could not be read whole")
        at = 0
        table = np.zeros(0, STEP_DTYPE)
        if with_steps:
            table = decode_steps(got[at], head, source.key)
            at += 1
        blocks = []
        if whole:
            body = memoryview(got[at])
            for i in picks:
                offset, length = head.block_range(i)
                offset -= head.blocks_at
                blocks.append(decode_block(body[offset : offset + length], head, i, source.key))
        else:
            for k, i in enumerate(picks):
                blocks.append(decode_block(got[at + k], head, i, source.key))
        return blocks, table


class OneNumbers:
    """The one-element values of tensors (losses, metrics) by global step, read as series in
    bulk and then only what is newer: what a rule asking for a loss at every step reads,
    instead of one read of the data object per step. Where several workers saved one, the
    first (natural order) is taken, and a step saved again by a later session is the later
    one's value, as :meth:`Tensor.value` answers."""

    def __init__(self, reader: Callable[[], SeriesReader]) -> None:
        self._reader = reader
        self._known: dict[str, tuple[int, dict[int, float]]] = {}

    def at(self, name: str, step: int) -> float | None:
        """The value saved at global ``step``; None when the series path has none there (not
        one element, or not published yet)."""
        found = self._known.get(name)
        if found is None or step > found[0]:
            found = self._take_newer(name, found)
        return found[1].get(step)

    def _take_newer(
        self, name: str, found: tuple[int, dict[int, float]] | None
    ) -> tuple[int, dict[int, float]]:
        reader = self._reader()
        extent, values = found if found is not None else (-1, {})
        cols = reader.series(name, statistic="value", start=extent + 1)
        parts = list(cols.groups())
        parts.sort(key=lambda kp: natural_key(kp[0].worker), reverse=True)  # first wins
        for _, part in parts:
            values.update(zip(part["global_step"].tolist(), part["value"].tolist(), strict=True))
        found = (max(extent, reader.last_step), values)
        self._known[name] = found
        return found
