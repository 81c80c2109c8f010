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
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from tensortap.core._memory_budget import MemoryBudget
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
from tensortap.trials._series_columns import (
    BUCKET_COLUMNS,
    SeriesColumns,
    SeriesKey,
    bucket_columns,
    bucketed,
    series_columns,
)
from tensortap.trials._series_fill import Fill, Filled
from tensortap.trials._series_objects import SeriesObjects, Source, WorkerSeries
from tensortap.trials._series_plan import (
    BATCH_BYTES,
    BUCKET_READ_VALUES,
    BucketPieces,
    PutSeries,
    ReadJob,
    block_ranges,
    narrowed,
    read_cost,
    series_groups,
)

__all__ = [
    "BUCKET_COLUMNS",
    "BUCKET_READ_VALUES",
    "SeriesColumns",
    "SeriesKey",
    "SeriesReader",
    "bucketed",
]
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

    def __init__(
        self, source: str | os.PathLike[str] | Store, budget: MemoryBudget | None = None
    ) -> None:
        """Read the series at ``source``; what it keeps in memory (heads, series read from
        indexes) is accounted against ``budget`` (one shared with other readers), else its
        own."""
        self.objects = SeriesObjects(open_store(source), budget)
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
        ``worker, mode, step, global_step, wall_time, tensor, statistic, value`` (the numbers
        read; the names and the mode step and wall time of each row made when first asked)."""
        wanted = _Filter(names, regex, statistic, mode, worker)
        lo, hi = _bounds(start, end)
        return self._columns(wanted, lo, hi, BATCH_BYTES)

    def _columns(self, wanted: _Filter, lo: int, hi: int, batch_bytes: int) -> SeriesColumns:
        plans, capacity = self._plan(wanted, lo, hi)
        filled, tables = self._read_planned(
            plans, capacity, wanted, lo, hi, True, batch_bytes, whole=True
        )
        return series_columns(filled.steps, filled.values, filled.groups, tables)

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
        plans, capacity = self._plan(wanted, lo, hi)
        most = BUCKET_READ_VALUES
        pieces: list[tuple[SeriesKey, tuple[np.ndarray, ...]]] = []
        groups = series_groups(capacity, most)
        for keys in groups:
            if len(keys) == 1 and capacity[keys[0]] > most:  # longer than the bound: in pieces
                part = self._long_buckets(plans, keys[0], wanted, lo, hi, start, end, count)
                if part is not None:
                    pieces.append((keys[0], part))
                continue
            held = {key: capacity[key] for key in keys}
            whole = len(groups) == 1  # all of them: no job narrowed
            filled, _ = self._read_planned(plans, held, wanted, lo, hi, False, 16 * most, whole)
            for key, row_lo, row_hi in filled.groups:
                steps, values = filled.steps[row_lo:row_hi], filled.values[row_lo:row_hi]
                first = lo if start is not None else int(steps[0])
                stop = hi if end is not None else int(steps[-1]) + 1
                pieces.append((key, bucketed(steps, values, first, stop, count)))
            del filled  # this group's values go before the next group's are read
        rows, at = [], 0
        for key, part in pieces:
            rows.append((key, at, at + len(part[0])))
            at += len(part[0])
        return bucket_columns(pieces, rows)

    def series_windows(
        self,
        names: str | Iterable[str] | None = None,
        *,
        statistic: str | Iterable[str] | None = None,
        mode: Any = None,
        worker: str | None = None,
    ) -> Iterator[SeriesColumns]:
        """The rows :meth:`series` answers, a window of global steps at a time (in step order,
        each window's rows as :meth:`series` gives them): a whole long series walked without
        holding it. One window when everything fits in :data:`BUCKET_READ_VALUES`; else
        windows cut where objects start, each reading at most that many values' bytes (16
        bytes a value: the blocks and step tables of the objects overlapping it, read whole,
        then cut), a batch of at most as many at a time; a window is at least one object."""
        most = BUCKET_READ_VALUES
        wanted = _Filter(names, None, statistic, mode, worker)
        everything = _bounds(None, None)
        plans, capacity = self._plan(wanted, *everything)
        if sum(capacity.values()) <= most:
            yield self._columns(wanted, *everything, 16 * most)
            return
        spans = sorted(
            (job.head.first_step, job.head.last_step, read_cost(job))
            for _, jobs in plans
            for job in jobs
        )
        end = max(last for _, last, _ in spans) + 1
        cuts = sorted({first for first, _, _ in spans[1:] if first > spans[0][0]} | {end})
        start, at, taken = spans[0][0], 0, 0  # taken: the spans that start before the window ends
        while at < len(cuts):
            held = sum(cost for first, last, cost in spans[:taken] if last >= start)
            stop = start
            while at < len(cuts):
                more = 0
                while taken + more < len(spans) and spans[taken + more][0] < cuts[at]:
                    more += 1
                cost = sum(c for _, _, c in spans[taken : taken + more])
                if stop > start and held + cost > most:
                    break
                held, taken, stop = held + cost, taken + more, cuts[at]
                at += 1
            yield self._columns(wanted, start, stop, 16 * most)
            start = stop

    def _long_buckets(
        self,
        plans: list[tuple[WorkerSeries, list[ReadJob]]],
        key: SeriesKey,
        wanted: _Filter,
        lo: int,
        hi: int,
        start: int | None,
        end: int | None,
        count: int,
    ) -> tuple[np.ndarray, ...] | None:
        """The buckets of one series too long to hold at once: its objects read a batch at a
        time, each piece bucketed over the series' extent and the pieces merged
        (:func:`merge_buckets`). An extent not given (``start`` or ``end`` None) is taken from
        the first and last step of each of its blocks (two small reads a block), and checked
        against the steps read: where damage made them disagree, read again over the steps
        seen. None when the series has no step in ``[lo, hi)``."""
        only = [(state, narrowed(jobs, {key})) for state, jobs in plans]
        first, stop = self._extent(only, lo, hi)
        first = lo if start is not None else first
        stop = hi if end is not None else stop
        for _ in range(2):
            pieces = BucketPieces(first, stop, count)
            for state, jobs in only:
                batch = 16 * BUCKET_READ_VALUES
                self._fill(state, jobs, wanted, lo, hi, False, pieces.put, {}, {key}, batch)
            if pieces.highest < pieces.lowest:
                return None
            found = (
                first if start is not None else pieces.lowest,
                stop if end is not None else pieces.highest + 1,
            )
            if found == (first, stop):
                return pieces.merged()
            first, stop = found  # a block's ends read wrong (damage): again, over what was seen
        return None

    def _extent(
        self, plans: list[tuple[WorkerSeries, list[ReadJob]]], lo: int, hi: int
    ) -> tuple[int, int]:
        """The lowest step in ``[lo, hi)`` and the highest plus one of the one series the jobs
        pick, from the first and last step of each block (unchecked: the caller checks them
        against what it reads)."""
        ends: list[tuple[int, int]] = []
        requests: list[tuple[str, int, int]] = []
        for _, jobs in plans:
            for job in jobs:
                (i,) = job.picks
                if job.source.index:
                    try:
                        steps = self.objects.fallback_parts(job.source).blocks[i][0]
                    except (FormatError, StorageError, KeyError):
                        continue
                    if len(steps):
                        ends.append((int(steps[0]), int(steps[-1])))
                    continue
                offset, length = job.head.block_range(i)
                if length >= 16:
                    at_last = offset + length // 2 - 8
                    requests += [(job.source.key, offset, 8), (job.source.key, at_last, 8)]
        raws = self.objects.get_ranges(requests)
        for low, high in zip(raws[::2], raws[1::2], strict=True):
            if low is not None and high is not None and len(low) == 8 and len(high) == 8:
                ends.append(
                    (
                        int.from_bytes(low, "little", signed=True),
                        int.from_bytes(high, "little", signed=True),
                    )
                )
        firsts = [a for a, _ in ends if lo <= a < hi] or [lo]
        lasts = [b for _, b in ends if lo <= b < hi] or [hi - 1]
        return min(firsts), max(lasts) + 1

    # -- internals --
    def _plan(
        self, wanted: _Filter, lo: int, hi: int
    ) -> tuple[list[tuple[WorkerSeries, list[ReadJob]]], dict[SeriesKey, int]]:
        """The objects to read per worker, and each wanted series' room (its values in those
        objects, from their directories: nothing read but heads)."""
        plans: list[tuple[WorkerSeries, list[ReadJob]]] = []
        capacity: dict[SeriesKey, int] = {}
        for state in self.objects.states(wanted.worker):
            jobs = self._jobs(state, state.plan, wanted, lo, hi)
            for job in jobs:
                counts = job.head.directory["count"]
                for i, key in zip(job.picks, job.keys, strict=True):
                    capacity[key] = capacity.get(key, 0) + int(counts[i])
            plans.append((state, jobs))
        return plans, capacity

    def _read_planned(
        self,
        plans: list[tuple[WorkerSeries, list[ReadJob]]],
        capacity: dict[SeriesKey, int],
        wanted: _Filter,
        lo: int,
        hi: int,
        with_steps: bool,
        batch_bytes: int,
        whole: bool = False,
    ) -> tuple[Filled, dict[str, np.ndarray]]:
        """The steps and values within [lo, hi) of the series in ``capacity`` (all of the
        plans' with ``whole``, else only these), sorted by series and step, and with
        ``with_steps`` the step table of the objects read, per worker (sorted by global step).
        Each series' room is counted first, then the objects are read ``batch_bytes`` at a
        time straight into it (:class:`Fill`)."""
        fill = Fill(capacity)
        keep = None if whole else set(capacity)
        tables: dict[str, list[np.ndarray]] = {}
        for state, jobs in plans:
            self._fill(
                state,
                narrowed(jobs, keep),
                wanted,
                lo,
                hi,
                with_steps,
                fill.put,
                tables,
                keep,
                batch_bytes,
            )
        joined = {}
        for worker, parts in tables.items():
            table = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if len(table) > 1 and (np.diff(table["global_step"]) < 0).any():
                table = table[np.argsort(table["global_step"], kind="stable")]
            joined[worker] = table
        return fill.result(), joined

    def _jobs(
        self, state: WorkerSeries, sources: list[Source], wanted: _Filter, lo: int, hi: int
    ) -> list[ReadJob]:
        """The sources holding wanted series within [lo, hi), with the series to read."""
        jobs = []
        keys: dict[tuple[str, str, int], SeriesKey] = {}
        for source, head in self.objects.heads_of(sources, state):
            if not (head.last_step >= lo and head.first_step < hi and len(head.keys)):
                continue
            picks = self._picks(source, head, wanted)
            if not picks:
                continue
            named = []
            for i in picks:
                found = keys.get(head.keys[i])
                if found is None:
                    tensor, stat, mode = head.keys[i]
                    found = keys[head.keys[i]] = SeriesKey(tensor, stat, ModeKeys(mode), state.name)
                named.append(found)
            jobs.append(ReadJob(source, head, picks, named))
        return jobs

    def _fill(
        self,
        state: WorkerSeries,
        jobs: list[ReadJob],
        wanted: _Filter,
        lo: int,
        hi: int,
        with_steps: bool,
        put: PutSeries,
        tables: dict[str, list[np.ndarray]],
        keep: set[SeriesKey] | None,
        batch_bytes: int,
    ) -> None:
        """Read ``jobs`` (of the series in ``keep``, else all wanted) into ``put``, about
        ``batch_bytes`` of ranges at a time (an object is never split between batches); an
        object that fails a check is a problem, and its segments are read another way
        (:meth:`SeriesObjects.replacements`)."""
        redo: list[Source] = []
        batch: list[tuple[ReadJob, list[tuple[int, int, list[int]]]]] = []
        size = 0
        for job in jobs:
            runs = [] if job.source.index else block_ranges(job.head, job.picks, with_steps)
            cost = sum(length for _, length, _ in runs)
            if batch and size + cost > batch_bytes:
                redo += self._take(state, batch, lo, hi, with_steps, put, tables)
                batch, size = [], 0
            batch.append((job, runs))
            size += cost
        if batch:
            redo += self._take(state, batch, lo, hi, with_steps, put, tables)
        if redo:
            redone = narrowed(self._jobs(state, redo, wanted, lo, hi), keep)
            self._fill(state, redone, wanted, lo, hi, with_steps, put, tables, keep, batch_bytes)

    def _take(
        self,
        state: WorkerSeries,
        batch: list[tuple[ReadJob, list[tuple[int, int, list[int]]]]],
        lo: int,
        hi: int,
        with_steps: bool,
        put: PutSeries,
        tables: dict[str, list[np.ndarray]],
    ) -> list[Source]:
        """Read one batch into ``put``; the sources to read again in place of those that
        failed a check. An object is decoded whole before any of it is put, so a damaged one
        adds nothing."""
        requests = [(job.source.key, at, n) for job, runs in batch for at, n, _ in runs]
        raws = iter(self.objects.get_ranges(requests))
        redo: list[Source] = []
        for job, runs in batch:
            got = [next(raws) for _ in runs]
            try:
                blocks, table = self._decode(job, runs, got)
            except (FormatError, StorageError) as exc:
                self.objects.note(job.source.key, exc)
                if not job.source.index:
                    redo.extend(self.objects.replacements(state, job.source))
                continue
            if with_steps:
                tables.setdefault(state.name, []).append(table)
            clip = job.head.first_step < lo or job.head.last_step >= hi
            for key, (steps, values) in zip(job.keys, blocks, strict=True):
                if clip:
                    cut_lo, cut_hi = np.searchsorted(steps, (lo, hi))
                    steps, values = steps[cut_lo:cut_hi], values[cut_lo:cut_hi]
                put(key, steps, values)
        return redo

    def _decode(
        self,
        job: ReadJob,
        runs: list[tuple[int, int, list[int]]],
        got: list[bytearray | None],
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """A job's blocks (in the order of its picks) and step table, checked."""
        source, head = job.source, job.head
        if source.index:
            parts = self.objects.fallback_parts(source)
            return [parts.blocks[i] for i in job.picks], parts.steps
        read = [raw for raw in got if raw is not None]
        if len(read) != len(got):
            raise FormatError(f"{source.key} could not be read whole")
        table = np.zeros(0, STEP_DTYPE)
        blocks = []
        for (at, _, picks), raw in zip(runs, read, strict=True):
            body = memoryview(raw)
            if not picks:  # the step table
                table = decode_steps(raw, head, source.key)
                continue
            for i in picks:
                offset, length = head.block_range(i)
                offset -= at
                blocks.append(decode_block(body[offset : offset + length], head, i, source.key))
        return blocks, table
