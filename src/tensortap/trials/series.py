"""A run's series (every saved number: losses, metrics, scalars, reductions) read as columns.

:class:`SeriesReader` reads the series objects the writer publishes beside each segment's
index (see :mod:`tensortap.format.series`), and the rollups that merge many small segments,
without opening the trial's index: reading one series, or all of them, costs a few range reads
per object whatever the number of steps inside it. A segment published without a series object
(a trial written before series objects existed, or a failed write) is read from its index.

Only published segments are read (a segment is published by its index), so a reader sees whole
steps, as :class:`~tensortap.trials.trial.Trial` does.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tensortap.core.dtypes import storage_dtype
from tensortap.core.modes import ModeKeys
from tensortap.core.records import RecordKind
from tensortap.core.safe_regex import compile_untrusted
from tensortap.exceptions import FormatError, InvalidConfigError, StorageError
from tensortap.format import layout
from tensortap.format.checksum import crc32
from tensortap.format.index import SegmentIndex, decode_index
from tensortap.format.series import (
    DIRECTORY_DTYPE,
    STEP_DTYPE,
    SeriesHead,
    decode_block,
    decode_head,
    decode_steps,
    group_series,
    head_length,
    step_table,
)
from tensortap.storage.base import Store
from tensortap.storage.resolve import open_store
from tensortap.trials.columns import COLUMNS

logger = logging.getLogger(__name__)

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
_BATCH = 256  # range requests made together
_FALLBACK_VALUES = 1 << 22  # series read from indexes kept in memory (32 MiB of numbers)
_HEADS_CACHED = 1 << 16
#: What the heads kept in memory may cost (a run of 10,000 series has heads of about 1 MB).
HEAD_CACHE_BYTES = 128 * 1024 * 1024


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


class SeriesColumns(Mapping[str, np.ndarray]):
    """Equal-length NumPy columns, rows grouped by series (each sorted by global step). The
    columns naming each row's series (``worker``, ``mode``, ``tensor``, ``statistic``, object
    arrays) are built when first asked for."""

    def __init__(
        self,
        order: tuple[str, ...],
        numbers: dict[str, np.ndarray],
        groups: list[tuple[SeriesKey, int, int]],
    ) -> None:
        self._order = order
        self._columns = dict(numbers)
        self._groups = groups
        self._rows = len(next(iter(numbers.values()))) if numbers else 0

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._columns.get(name)
        if found is None:
            if name not in self._order:
                raise KeyError(name)
            label = _LABELS[name]
            table = np.empty(len(self._groups), dtype=object)
            table[:] = [label(key) for key, _, _ in self._groups]
            lengths = [hi - lo for _, lo, hi in self._groups]
            found = self._columns[name] = np.repeat(table, lengths)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return f"SeriesColumns({list(self._order)}, rows={self.rows}, series={len(self._groups)})"

    @property
    def rows(self) -> int:
        return self._rows

    def keys_of_series(self) -> list[SeriesKey]:
        """The series, in row order."""
        return [key for key, _, _ in self._groups]

    def groups(self) -> Iterator[tuple[SeriesKey, SeriesColumns]]:
        """Each series and its rows."""
        numbers = {n: c for n, c in self._columns.items() if n not in _LABELS}
        for key, lo, hi in self._groups:
            part = {name: col[lo:hi] for name, col in numbers.items()}
            yield key, SeriesColumns(self._order, part, [(key, 0, hi - lo)])

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


@dataclass
class _Source:
    """An object holding series of segments ``first``..``last`` of one worker: a series
    object, a rollup, or (``index``) a segment's index read instead."""

    key: str
    first: int
    last: int
    index: bool = False


@dataclass
class _Worker:
    name: str
    published: list[int] = field(default_factory=list)
    singles: dict[int, str] = field(default_factory=dict)
    rollups: list[tuple[int, int, str]] = field(default_factory=list)
    last_index_key: str | None = None
    last_series_key: str | None = None
    last_rollup_key: str | None = None
    plan: list[_Source] = field(default_factory=list)
    # the series of the objects taken in by keys(), and those objects
    known: dict[tuple[str, str, int], SeriesKey] = field(default_factory=dict)
    scanned: set[str] = field(default_factory=set)


class _Parts(NamedTuple):
    """A source's series in memory (read from an index)."""

    head: SeriesHead
    blocks: list[tuple[np.ndarray, np.ndarray]]
    steps: np.ndarray


class SeriesReader:
    """Reads a trial's series; :meth:`refresh` takes in what was published since."""

    def __init__(self, source: str | os.PathLike[str] | Store) -> None:
        self.store = open_store(source)
        self.problems: list[str] = []
        self._workers: dict[str, _Worker] = {}
        self._heads: dict[str, SeriesHead] = {}
        self._head_bytes = 0
        self._bad: set[str] = set()  # series objects that failed a check: not read again
        self._by_name: dict[str, dict[str, list[int]]] = {}
        self._canon: dict[tuple[str, str, int], tuple[str, str, int]] = {}
        self._fallback: dict[str, _Parts] = {}
        self._fallback_values = 0
        self.refresh()

    # -- keeping current --
    def refresh(self) -> bool:
        """List what was published since the last refresh; True if anything was new."""
        new = False
        for name in self.store.list_dir(layout.WORKERS_PREFIX):
            if name.startswith(".") or not layout.is_plain_name(name):
                continue
            state = self._workers.setdefault(name, _Worker(name))
            new |= self._refresh_worker(state)
        return new

    def _refresh_worker(self, state: _Worker) -> bool:
        store, name = self.store, state.name
        published = _listed(store, layout.index_prefix(name), state.last_index_key, "ttidx")
        singles = _listed(store, layout.series_prefix(name), state.last_series_key, "ttser")
        rollups = _listed(store, layout.rollups_prefix(name), state.last_rollup_key, "ttser")
        for key in published:
            seq = layout.seq_of(key)
            if seq is not None:
                state.published.append(seq)
        for key in singles:
            seq = layout.seq_of(key)
            if seq is not None:
                state.singles[seq] = key
        for key in rollups:
            span = layout.rollup_span(key)
            if span is not None:
                state.rollups.append((*span, key))
        state.last_index_key = published[-1] if published else state.last_index_key
        state.last_series_key = singles[-1] if singles else state.last_series_key
        state.last_rollup_key = rollups[-1] if rollups else state.last_rollup_key
        if not (published or singles or rollups):
            return False
        state.published.sort()
        state.plan = self._plan(state)
        return True

    def _plan(self, state: _Worker) -> list[_Source]:
        """The objects to read for every published segment: rollups first, then each
        remaining segment's series object, else its index."""
        plan: list[_Source] = []
        covered_to = -1
        by_first = sorted(r for r in state.rollups if r[2] not in self._bad)
        r = 0
        for seq in state.published:
            if seq <= covered_to:
                continue
            while r < len(by_first) and by_first[r][1] < seq:
                r += 1
            if r < len(by_first) and by_first[r][0] <= seq:
                first, last, key = by_first[r]
                # a rollup is written after its segments are published; one that covers a
                # segment this listing does not show yet waits for the next refresh
                if seq == first and state.published[-1] >= last:
                    plan.append(_Source(key, first, last))
                    covered_to = last
                    continue
            single = state.singles.get(seq)
            if single is not None and single not in self._bad:
                plan.append(_Source(single, seq, seq))
            else:
                plan.append(_Source(layout.index_key(state.name, seq), seq, seq, index=True))
        return plan

    # -- what there is --
    @property
    def last_step(self) -> int:
        """The highest global step published (-1 when none)."""
        last = -1
        for state in self._workers.values():
            for source, head in self._heads_of(state.plan[-1:], state):
                del source
                last = max(last, head.last_step)
        return last

    def workers(self) -> list[str]:
        return sorted(self._workers)

    def keys(self, worker: str | None = None) -> list[SeriesKey]:
        """Every series published so far (each object's list is taken in once)."""
        found: list[SeriesKey] = []
        for state in self._states(worker):
            new = [s for s in state.plan if s.key not in state.scanned]
            for source, head in self._heads_of(new, state):
                state.scanned.add(source.key)
                for tensor, stat, mode in head.keys:
                    state.known.setdefault(
                        (tensor, stat, mode), SeriesKey(tensor, stat, ModeKeys(mode), state.name)
                    )
            found.extend(state.known.values())
        return sorted(found, key=lambda k: (k.tensor, k.statistic, int(k.mode), k.worker))

    def _picks(self, source: _Source, head: SeriesHead, wanted: _Filter) -> list[int]:
        """The positions of the wanted series in an object's list (by name when names are
        given: a run of 10,000 series is not scanned for one)."""
        if wanted.names is None or len(wanted.names) > 64:
            return [i for i, key in enumerate(head.keys) if wanted.wants(key)]
        by_name = self._by_name.get(source.key)
        if by_name is None:
            by_name = {}
            for i, key in enumerate(head.keys):
                by_name.setdefault(key[0], []).append(i)
            if len(self._by_name) >= _HEADS_CACHED:
                self._by_name.pop(next(iter(self._by_name)))
            self._by_name[source.key] = by_name
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
            mode_step, wall = _join_steps(tables.get(key.worker), steps)
            pieces.append((key, steps, values, mode_step, wall))
        return _series_columns(pieces, groups)

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
        return _bucket_columns(pieces, groups)

    # -- internals --
    def _states(self, worker: str | None) -> list[_Worker]:
        if worker is None:
            return [self._workers[w] for w in sorted(self._workers)]
        state = self._workers.get(worker)
        return [state] if state is not None else []

    def _read(
        self, wanted: _Filter, lo: int, hi: int, with_steps: bool
    ) -> tuple[dict[SeriesKey, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
        """Every wanted series' (steps, values) within [lo, hi), sorted by series and step;
        and with ``with_steps`` the step table of the objects read, per worker."""
        out: dict[SeriesKey, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        tables: dict[str, list[np.ndarray]] = {}
        for state in self._states(wanted.worker):
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
        state: _Worker,
        sources: list[_Source],
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
        jobs: list[tuple[_Source, SeriesHead, list[int], int, bool]] = []
        for source, head in self._heads_of(sources, state):
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
        raws = self._get_ranges(requests)
        redo: list[_Source] = []
        for source, head, picks, first, whole in jobs:
            try:
                blocks, table = self._blocks(source, head, picks, raws, first, whole, with_steps)
            except (FormatError, StorageError) as exc:
                self._note(source.key, exc)
                if not source.index:
                    redo.extend(self._replacements(state, source))
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

    def _replacements(self, state: _Worker, source: _Source) -> list[_Source]:
        """A damaged series object is not read again: its published segments are read from
        their own series objects (for a rollup) or their indexes."""
        self._bad.add(source.key)
        state.plan = self._plan(state)
        at = bisect.bisect_left(state.published, source.first)
        out = []
        for seq in state.published[at : bisect.bisect_right(state.published, source.last)]:
            single = state.singles.get(seq)
            if single is not None and single not in self._bad:
                out.append(_Source(single, seq, seq))
            else:
                out.append(_Source(layout.index_key(state.name, seq), seq, seq, index=True))
        return out

    def _blocks(
        self,
        source: _Source,
        head: SeriesHead,
        picks: list[int],
        raws: list[bytearray | None],
        first: int,
        whole: bool,
        with_steps: bool,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        if source.index:
            parts = self._fallback_parts(source, head)
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

    def _get_ranges(self, requests: list[tuple[str, int, int]]) -> list[bytearray | None]:
        """The bytes of each range, together; one that cannot be read is None (and a
        problem), not an error for all of them."""
        out: list[bytearray | None] = []
        for at in range(0, len(requests), _BATCH):
            batch = requests[at : at + _BATCH]
            try:
                out.extend(self.store.get_ranges(batch))
            except (KeyError, StorageError):
                out.extend(self._range_or_none(*request) for request in batch)
        return out

    def _heads_of(
        self, plan: list[_Source], state: _Worker
    ) -> Iterator[tuple[_Source, SeriesHead]]:
        """The heads of a plan's sources (read once and kept while the budget allows); an
        object whose head is unreadable is a problem, and its segments are read another way."""
        got: dict[str, SeriesHead] = {}
        missing = []
        for source in plan:
            if not source.index:
                cached = self._heads.get(source.key)
                if cached is None:
                    missing.append(source)
                else:
                    got[source.key] = cached
        got.update(self._read_heads(missing))
        for source in plan:
            if source.index:
                try:
                    yield source, self._fallback_parts(source, None).head
                except (FormatError, StorageError) as exc:
                    self._note(source.key, exc)
                except KeyError:
                    self._note(source.key, FormatError("listed, then gone before it was read"))
                continue
            head = got.get(source.key)
            if head is None:
                yield from self._heads_of(self._replacements(state, source), state)
                continue
            yield source, head

    def _read_heads(self, sources: list[_Source]) -> dict[str, SeriesHead]:
        """The heads of ``sources`` that could be read (each kept while the cache's budget
        allows); one that cannot is a problem, and left out."""
        found: dict[str, SeriesHead] = {}
        for at in range(0, len(sources), _BATCH):
            batch = sources[at : at + _BATCH]
            prefixes: list[bytearray | None]
            try:
                prefixes = list(self.store.get_ranges([(s.key, 0, 32) for s in batch]))
            except (KeyError, StorageError):
                prefixes = [self._range_or_none(s.key, 0, 32) for s in batch]
            sizes: list[tuple[_Source, int]] = []
            for source, prefix in zip(batch, prefixes, strict=True):
                if prefix is None:
                    continue
                try:
                    sizes.append((source, head_length(bytes(prefix), source.key)))
                except FormatError as exc:
                    self._note(source.key, exc)
            for source, size in sizes:
                raw = self._range_or_none(source.key, 0, size)
                if raw is None:
                    continue
                try:
                    head = decode_head(raw, source.key)
                    if head.first_seq != source.first or head.last_seq != source.last:
                        raise FormatError(
                            f"it says it holds segments {head.first_seq}..{head.last_seq}, its "
                            f"name {source.first}..{source.last}: it was copied or moved here"
                        )
                except FormatError as exc:
                    self._note(source.key, exc)
                    continue
                canon = self._canon  # one copy of each series' key, whatever the objects
                head.keys[:] = [canon.setdefault(k, k) for k in head.keys]
                found[source.key] = head
                self._keep_head(source.key, head)
        return found

    def _keep_head(self, key: str, head: SeriesHead) -> None:
        """Keep a head, dropping the oldest kept while they hold more than the budget."""
        cost = _head_cost(head)
        while self._heads and self._head_bytes + cost > HEAD_CACHE_BYTES:
            old_key = next(iter(self._heads))
            self._head_bytes -= _head_cost(self._heads.pop(old_key))
            self._by_name.pop(old_key, None)
        if cost <= HEAD_CACHE_BYTES:
            self._heads[key] = head
            self._head_bytes += cost

    def _range_or_none(self, key: str, start: int, length: int) -> bytearray | None:
        try:
            return self.store.get_range(key, start, length)
        except KeyError:
            self._note(key, FormatError("listed, then gone before it could be read"))
        except StorageError as exc:
            self._note(key, exc)
        return None

    def _fallback_parts(self, source: _Source, head: SeriesHead | None) -> _Parts:
        """A segment's series from its index (and its raw one-element values from its data)."""
        del head
        found = self._fallback.get(source.key)
        if found is not None:
            return found
        index = decode_index(self.store.get(source.key), f"index {source.key}")
        if index.header["seq"] != source.first or index.data_key != layout.data_key(
            str(index.header["worker"]), source.first
        ):
            raise FormatError(f"index {source.key} is not its own segment's: not trusted")
        rows, values = _raw_scalars(self.store, index)
        keys, blocks = group_series(index.names, index.records, rows, values)
        table = step_table(index.steps)
        counts = np.array([len(b[0]) for b in blocks], dtype=np.uint64)
        directory = np.zeros(len(keys), dtype=DIRECTORY_DTYPE)
        directory["count"] = counts
        parts = _Parts(
            SeriesHead(
                str(index.header["worker"]),
                source.first,
                source.last,
                keys,
                directory,
                len(table),
                0,
                0,
                int(table["global_step"].min()) if len(table) else -1,
                int(table["global_step"].max()) if len(table) else -1,
            ),
            blocks,
            table,
        )
        size = int(counts.sum())
        if self._fallback_values + size <= _FALLBACK_VALUES:
            self._fallback[source.key] = parts
            self._fallback_values += size
        return parts

    def _note(self, what: str, exc: BaseException) -> None:
        text = f"{what}: {exc}"
        if text not in self.problems:
            logger.warning("part of the series at %s is unreadable: %s", self.store.location, text)
            self.problems.append(text)


def _head_cost(head: SeriesHead) -> int:
    """About what a decoded head costs in memory (its keys are shared between heads)."""
    return 64 * len(head.keys) + head.directory.nbytes + 512


def _listed(store: Store, prefix: str, after: str | None, suffix: str) -> list[str]:
    return [k for k in store.list(prefix, start_after=after) if k.endswith("." + suffix)]


def _raw_scalars(store: Store, index: SegmentIndex) -> tuple[np.ndarray, np.ndarray]:
    """The rows of an index's raw one-element numeric values, and those numbers (read from
    its data object, each checked against its CRC)."""
    records = index.records
    if not len(records):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    not_one = np.concatenate([[0], np.cumsum(index.dims != 1)])
    start = records["dims_offset"].astype(np.int64)
    one = (not_one[start + records["ndim"]] - not_one[start]) == 0
    numeric = np.array([_numeric(d) for d in index.dtypes], dtype=bool)
    rows = np.flatnonzero(
        (records["kind"] == int(RecordKind.TENSOR)) & one & numeric[records["dtype"]]
    )
    if not len(rows):
        return rows, np.zeros(0, np.float64)
    picked = records[rows]
    ranges = [(index.data_key, int(r["data_offset"]), int(r["data_length"])) for r in picked]
    values = np.zeros(len(rows), np.float64)
    raws: list[bytearray] = []
    for at in range(0, len(ranges), _BATCH):
        raws.extend(store.get_ranges(ranges[at : at + _BATCH]))
    for k, (raw, rec) in enumerate(zip(raws, picked, strict=True)):
        if crc32(raw) != int(rec["crc32"]):
            raise FormatError(f"a value in {index.data_key} fails its checksum: it is corrupt")
        dtype = storage_dtype(index.dtypes[int(rec["dtype"])])
        values[k] = float(np.frombuffer(raw, dtype=dtype, count=1)[0])
    return rows, values


def _numeric(name: str) -> bool:
    try:
        kind = storage_dtype(name).kind
    except FormatError:
        return True  # a low-precision float without ml_dtypes: read as a float later
    return kind in "biuf" or kind == "V"


def _join_steps(table: np.ndarray | None, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mode step and wall time of each global step, from a step table sorted by global
    step (-1 / NaN where not listed)."""
    if table is None or not len(table) or not len(steps):
        return np.full(len(steps), -1, np.int64), np.full(len(steps), np.nan)
    known = table["global_step"]
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


def _series_columns(
    pieces: list[tuple[SeriesKey, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    groups: list[tuple[SeriesKey, int, int]],
) -> SeriesColumns:
    if not pieces:
        return SeriesColumns(COLUMNS, _empty(("step", "global_step"), ("wall_time", "value")), [])
    numbers = {
        "step": np.concatenate([p[3] for p in pieces]),
        "global_step": np.concatenate([p[1] for p in pieces]).astype(np.int64),
        "wall_time": np.concatenate([p[4] for p in pieces]),
        "value": np.concatenate([p[2] for p in pieces]).astype(np.float64),
    }
    return SeriesColumns(COLUMNS, numbers, groups)


def _bucket_columns(
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
