"""Which objects hold a trial's series, and their heads.

For every published segment of every worker (a segment is published by its index) the reader
reads its series from the rollup that covers it, else from its own series object, else from its
index (a trial written before series objects existed, or an object that failed a check). Heads
(and the series read from indexes) are read once and kept in caches on a byte budget
(:class:`~tensortap.core._memory_budget.MemoryBudget`): the reader's own
(:data:`HEAD_CACHE_BYTES` and :data:`FALLBACK_CACHE_BYTES`), or one shared with other readers
(the dashboard's, over every run it serves).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from tensortap.core._memory_budget import PY_OBJECT_BYTES, BudgetCache, MemoryBudget, nbytes
from tensortap.exceptions import FormatError, StorageError
from tensortap.format import _layout as layout
from tensortap.format._series import SeriesHead, decode_head, head_length
from tensortap.storage._base import Store
from tensortap.trials._series_columns import SeriesKey
from tensortap.trials._series_index import Parts, parts_from_index

logger = logging.getLogger(__name__)

_BATCH = 256  # range requests made together
#: What the series read from indexes kept in memory may cost (a reader's own budget).
FALLBACK_CACHE_BYTES = 64 * 1024 * 1024
#: What the heads kept in memory may cost (a run of 10,000 series has heads of about 1 MB).
HEAD_CACHE_BYTES = 128 * 1024 * 1024


@dataclass
class Source:
    """An object holding series of segments ``first``..``last`` of one worker: a series
    object, a rollup, or (``index``) a segment's index read instead."""

    key: str
    first: int
    last: int
    index: bool = False
    #: a merged segment's series (compaction): the last segment it replaced (``first`` is
    #: the first, ``last`` the merged segment itself); -1 for other sources
    replaced_to: int = -1
    #: where it sorts in a plan (its first segment's place; -1: ``first``)
    at: int = -1


@dataclass
class WorkerSeries:
    """What is known of one worker's series: its published segments, their series objects
    and rollups, the plan reading them, and the series listed so far."""

    name: str
    published: list[int] = field(default_factory=list)
    singles: dict[int, str] = field(default_factory=dict)
    rollups: list[tuple[int, int, str]] = field(default_factory=list)
    # merged segment -> (first, last segment it replaced, its series object's key)
    merged: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    last_index_key: str | None = None
    last_series_key: str | None = None
    last_rollup_key: str | None = None
    plan: list[Source] = field(default_factory=list)
    # the series of the objects taken in by keys(), and those objects
    known: dict[tuple[str, str, int], SeriesKey] = field(default_factory=dict)
    scanned: set[str] = field(default_factory=set)


class SeriesObjects:
    """The series objects of a trial: which to read for every published segment (rollups,
    segments' own, indexes instead), their heads (kept under a byte budget), and what could not
    be read. :class:`~tensortap.trials._series.SeriesReader` reads columns through it."""

    def __init__(self, store: Store, budget: MemoryBudget | None = None) -> None:
        self.store = store
        self.problems: list[str] = []
        self.workers: dict[str, WorkerSeries] = {}
        heads = budget or MemoryBudget(HEAD_CACHE_BYTES)
        self._heads: BudgetCache[SeriesHead] = heads.cache()
        # each tensor's positions in a head
        self._by_name: BudgetCache[dict[str, list[int]]] = heads.cache()
        fallback = budget or MemoryBudget(FALLBACK_CACHE_BYTES)
        self._fallback: BudgetCache[Parts] = fallback.cache()
        self._bad: set[str] = set()  # series objects that failed a check: not read again
        self._canon: dict[tuple[str, str, int], tuple[str, str, int]] = {}

    def release(self) -> None:
        """Let go of what the caches hold (their bytes leave a shared budget at once, not when
        it next needs room); they fill again as the objects are read."""
        for cache in (self._heads, self._by_name, self._fallback):
            cache.clear()

    def refresh(self) -> bool:
        """List what was published since the last refresh; True if anything was new."""
        new = False
        for name in self.store.list_dir(layout.WORKERS_PREFIX):
            if name.startswith(".") or not layout.is_plain_name(name):
                continue
            state = self.workers.setdefault(name, WorkerSeries(name))
            new |= self._refresh_worker(state)
        return new

    def _refresh_worker(self, state: WorkerSeries) -> bool:
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
            merged = layout.merged_series_span(key)
            if merged is not None:
                state.merged[merged[0]] = (merged[1], merged[2], key)
                continue
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

    def _merged_sources(self, state: WorkerSeries) -> dict[int, Source]:
        """Per published segment a merge covers (the merged one, and those it replaced that
        are still listed: a merge killed before it deleted them, or a listing from before),
        the source that reads them all once: the merged series, else the merged index."""
        covered: dict[int, Source] = {}
        published = state.published
        listed = set(published)
        for seq, (first, last, key) in sorted(state.merged.items()):
            if seq not in listed:
                continue  # not published (yet, or a merge killed before its index)
            lo, hi = bisect.bisect_left(published, first), bisect.bisect_right(published, last)
            at = published[lo] if lo < hi else seq
            if key in self._bad:
                source = Source(layout.index_key(state.name, seq), seq, seq, index=True, at=at)
            else:
                source = Source(key, first, seq, replaced_to=last, at=at)
            for s in (*published[lo:hi], seq):
                covered[s] = source
        return covered

    def _plan(self, state: WorkerSeries) -> list[Source]:
        """The objects to read for every published segment: merged segments' series, then
        rollups, then each remaining segment's series object, else its index."""
        plan: list[Source] = []
        covered_to = -1
        merged = self._merged_sources(state)
        taken: set[str] = set()
        in_merges = sorted(merged)
        by_first = [
            r
            for r in sorted(r for r in state.rollups if r[2] not in self._bad)
            # a rollup that shares a segment with a merge would read it twice
            if bisect.bisect_left(in_merges, r[0]) == bisect.bisect_right(in_merges, r[1])
        ]
        r = 0
        for seq in state.published:
            source = merged.get(seq)
            if source is not None:
                if source.key not in taken:
                    taken.add(source.key)
                    plan.append(source)
                continue
            if seq <= covered_to:
                continue
            while r < len(by_first) and by_first[r][1] < seq:
                r += 1
            if r < len(by_first) and by_first[r][0] <= seq:
                first, last, key = by_first[r]
                # a rollup is written after its segments are published; one that covers a
                # segment this listing does not show yet waits for the next refresh
                if seq == first and state.published[-1] >= last:
                    plan.append(Source(key, first, last))
                    covered_to = last
                    continue
            plan.append(self._own(state, seq))
        if merged:  # in step order: a merged segment's values are those of its first part
            plan.sort(key=lambda source: source.at if source.at >= 0 else source.first)
        return plan

    def _own(self, state: WorkerSeries, seq: int) -> Source:
        """What holds segment ``seq`` alone: its series object, or its index when it has
        none (or it failed a check)."""
        single = state.singles.get(seq)
        if single is not None and single not in self._bad:
            return Source(single, seq, seq)
        return Source(layout.index_key(state.name, seq), seq, seq, index=True)

    # -- what there is --
    def unpublished(self, worker: str) -> list[str]:
        """The series objects of ``worker``'s segments whose index is not listed (a segment
        being published, or one whose writer was killed while publishing it, or whose index
        was deleted)."""
        state = self.workers.get(worker)
        if state is None:
            return []
        published = set(state.published)
        found = [key for seq, key in sorted(state.singles.items()) if seq not in published]
        for seq, (first, last, key) in sorted(state.merged.items()):
            # a merged segment's series without its index: lost rows unless the segments it
            # replaced are still listed (a merge killed before it published its index)
            lo = bisect.bisect_left(state.published, first)
            if seq not in published and not (
                lo < len(state.published) and state.published[lo] <= last
            ):
                found.append(key)
        return found

    def states(self, worker: str | None) -> list[WorkerSeries]:
        if worker is None:
            return [self.workers[w] for w in sorted(self.workers)]
        state = self.workers.get(worker)
        return [state] if state is not None else []

    def replacements(self, state: WorkerSeries, source: Source) -> list[Source]:
        """A damaged series object is not read again: its published segments are read from
        their own series objects (for a rollup) or their indexes."""
        self._bad.add(source.key)
        state.plan = self._plan(state)
        if source.replaced_to >= 0:  # a merged segment's series: its index holds them all
            seq = source.last
            return [Source(layout.index_key(state.name, seq), seq, seq, index=True, at=source.at)]
        at = bisect.bisect_left(state.published, source.first)
        end = bisect.bisect_right(state.published, source.last)
        return [self._own(state, seq) for seq in state.published[at:end]]

    def get_ranges(self, requests: list[tuple[str, int, int]]) -> list[bytearray | None]:
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

    def heads_of(
        self, plan: list[Source], state: WorkerSeries
    ) -> Iterator[tuple[Source, SeriesHead]]:
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
                    yield source, self.fallback_parts(source).head
                except (FormatError, StorageError) as exc:
                    self.note(source.key, exc)
                except KeyError as exc:  # the index, or the data object it reads from
                    gone = exc.args[0] if exc.args and exc.args[0] != source.key else None
                    self.note(
                        source.key,
                        FormatError(
                            f"its data object {gone} is missing: its values are lost"
                            if gone
                            else "listed, then gone before it was read"
                        ),
                    )
                continue
            head = got.get(source.key)
            if head is None:
                yield from self.heads_of(self.replacements(state, source), state)
                continue
            yield source, head

    def _read_heads(self, sources: list[Source]) -> dict[str, SeriesHead]:
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
            sizes: list[tuple[Source, int]] = []
            for source, prefix in zip(batch, prefixes, strict=True):
                if prefix is None:
                    continue
                try:
                    sizes.append((source, head_length(bytes(prefix), source.key)))
                except FormatError as exc:
                    self.note(source.key, exc)
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
                    self.note(source.key, exc)
                    continue
                canon = self._canon  # one copy of each series' key, whatever the objects
                head.keys[:] = [canon.setdefault(k, k) for k in head.keys]
                found[source.key] = head
                self._heads.put(source.key, head, _head_cost(head))
        return found

    def _range_or_none(self, key: str, start: int, length: int) -> bytearray | None:
        try:
            return self.store.get_range(key, start, length)
        except KeyError:
            self.note(key, FormatError("listed, then gone before it could be read"))
        except StorageError as exc:
            self.note(key, exc)
        return None

    def fallback_parts(self, source: Source) -> Parts:
        """A segment's series from its index (kept while their numbers fit the budget)."""
        found = self._fallback.get(source.key)
        if found is not None:
            return found
        parts = parts_from_index(self.store, source.key, source.first, source.last)
        arrays = [parts.steps, parts.head.directory, *(a for block in parts.blocks for a in block)]
        size = nbytes(*arrays) + PY_OBJECT_BYTES * (len(parts.head.keys) + len(parts.blocks))
        self._fallback.put(source.key, parts, size + 512)
        return parts

    def note(self, what: str, exc: BaseException) -> None:
        text = f"{what}: {exc}"
        if text not in self.problems:
            logger.warning("part of the series at %s is unreadable: %s", self.store.location, text)
            self.problems.append(text)

    def by_name(self, key: str, head: SeriesHead) -> dict[str, list[int]]:
        """The positions of each tensor's series in an object's list (kept with its head)."""
        found = self._by_name.get(key)
        if found is None:
            found = {}
            for i, series in enumerate(head.keys):
                found.setdefault(series[0], []).append(i)
            # a dict slot and a list per name, an int and a list slot per position
            self._by_name.put(key, found, 2 * PY_OBJECT_BYTES * (len(found) + len(head.keys)))
        return found


def _head_cost(head: SeriesHead) -> int:
    """What a decoded head costs in memory: its directory exactly, a list slot and a key per
    series (conservatively: keys are shared between heads), and the object itself."""
    return PY_OBJECT_BYTES * len(head.keys) + nbytes(head.directory) + 512


def _listed(store: Store, prefix: str, after: str | None, suffix: str) -> list[str]:
    return [k for k in store.list(prefix, start_after=after) if k.endswith("." + suffix)]
