"""The in-memory index of a trial, kept current by reading only new index objects.

Opening a trial reads the small index objects of every segment (never tensor data); each
refresh lists only keys after the last one seen, per worker. What it holds per worker and per
segment is defined in ``_worker_state`` and ``_segments``; the check of a trial's marker when
it is opened, in ``_marker``.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from tensortap.core._collections import Collection
from tensortap.core._modes import ModeKeys
from tensortap.exceptions import FormatError, InvalidConfigError, StorageError
from tensortap.format import _layout as layout
from tensortap.format._documents import (
    decode_end,
    decode_json,
    decode_session_at,
    decode_worker_info,
)
from tensortap.format._fields import get_list
from tensortap.format._index import SegmentIndex, decode_index
from tensortap.storage._base import Store
from tensortap.trials._completeness import missing_segments
from tensortap.trials._marker import check_marker
from tensortap.trials._segments import Segment, StepColumns, build_columns, check_identity
from tensortap.trials._worker_state import WorkerState, natural_key

# what the index holds (re-exported: the readers of trials/, query/ and serve/ import them here)
__all__ = ["TrialIndex", "WorkerState", "natural_key"]

logger = logging.getLogger(__name__)
_FETCH_BATCH = 64  # index objects fetched together when a trial is opened
_OUTLINE_BATCH = 4  # ... when only their headers are kept (each is read whole, then let go)


class TrialIndex:
    """Workers, segments, steps and the rows of every tensor name, as published so far.

    With ``records=False`` (an outline) only each index's header is kept: workers, steps and
    modes, sessions, names and collections, but no rows (64 bytes a saved value otherwise);
    :meth:`columns` and :meth:`names_at`, which need the rows, raise."""

    def __init__(self, store: Store, strict: bool = False, records: bool = True) -> None:
        self.store = store
        #: Raise on the first unreadable part instead of skipping it (``problems`` lists those).
        self.strict = strict
        self.records = records
        self._outline_names: set[str] = set()  # the names, when the rows are not kept
        self.problems: list[str] = []
        self.workers: dict[str, WorkerState] = {}
        self.segments: list[Segment] = []
        self.name_rows: dict[str, list[tuple[int, np.ndarray[Any, Any]]]] = {}
        # global step -> (segment, its StepColumns rows [lo, hi) at the step), by publication
        self.step_rows: dict[int, list[tuple[int, int, int]]] = {}
        self.dtype_names: list[str] = []  # StepColumns.dtype codes index this
        # segments a merge replaced after they were read: (merged data object, their offset)
        self.moved: dict[int, tuple[str, int]] = {}
        self._bases: dict[int, int] = {}  # where a segment read from a merged one begins there
        self._columns: dict[int, StepColumns] = {}
        self.collection_docs: dict[str, dict[str, Any]] = {}
        self.version = 0  # bumped whenever anything new is ingested
        self._collections: tuple[int, dict[str, Collection]] | None = None

    def check_marker(self, path: str, must_exist: bool = False, warn: bool = True) -> None:
        """Refuse a root that holds other things but no trial; read a trial whose marker is
        damaged or missing (next to ``workers/``) with a problem; refuse a newer trial. A root
        that holds nothing yet is refused if ``must_exist``, else read as empty (saying so at
        WARNING if ``warn``, else at INFO)."""
        check_marker(self.store, path, must_exist, warn, self.problem)

    # -- refresh --
    def refresh(self) -> bool:
        """Read what was published since the last refresh; True if anything was new. Once
        every worker has ended, a worker whose end marker changed (a new session resumed it)
        is read again."""
        before = self.version
        ended = self.all_ended()
        for name in self.store.list_dir(layout.WORKERS_PREFIX):
            if name.startswith("."):
                continue
            state = self.workers.get(name)
            if state is None:
                try:
                    layout.validate_worker_name(name)
                except ValueError:
                    logger.warning("ignoring unexpected entry %r in the trial's workers/", name)
                    continue
                state = self.workers[name] = WorkerState(name)
                self.version += 1
            if not state.info_read:
                self._read_worker_info(state)
            if ended and state.complete:
                self._check_resumed(state)
            if not state.complete:
                self._refresh_worker(state)
        for name in self.store.special_entries(layout.WORKERS_PREFIX):
            if layout.is_plain_name(name):  # said, not followed: its rows are not read
                self.problem(
                    f"{layout.WORKERS_PREFIX}{name}",
                    StorageError(
                        "a symbolic link, FIFO or device where a worker's folder belongs "
                        "(not followed): that worker's steps are not read"
                    ),
                )
        return self.version != before

    def _check_resumed(self, state: WorkerState) -> None:
        """A worker that ended is live again when a new session replaced its end marker."""
        try:
            raw = self.store.get(layout.end_key(state.name))
        except KeyError:
            raw = None
        except StorageError:
            return
        if raw is not None:
            try:
                end = decode_end(raw, f"end marker of {state.name}")
            except FormatError:
                return
            old = state.end or {}
            if (end.get("session"), end.get("ended")) == (old.get("session"), old.get("ended")):
                return
        state.complete, state.end = False, None
        self._read_worker_info(state)
        self.version += 1

    def sessions(self, state: WorkerState) -> dict[int, dict[str, Any]]:
        """The session records of a worker (read on demand: listing them is not needed to read
        steps), by index; a damaged one is a problem, and left out."""
        keys = self.store.list(
            layout.sessions_prefix(state.name), start_after=state.last_session_key
        )
        keys = [k for k in keys if k.endswith(".json")]
        if state.last_session_key is not None and not state.complete:
            keys.insert(0, state.last_session_key)  # a live session may rewrite its record
        for key, raw in zip(keys, self._get_each(keys), strict=True):
            if raw is not None:
                try:
                    doc = decode_session_at(raw, key)
                except FormatError as exc:
                    self.problem(key, exc)
                else:
                    state.session_docs[int(doc["index"])] = doc
            state.last_session_key = key
        return state.session_docs

    def problem(self, what: str, exc: BaseException) -> None:
        """A part of the trial that cannot be read: raise (strict) or skip it and say so."""
        if self.strict:
            raise exc
        self.note_problem(what, exc)

    def note_problem(self, what: str, exc: BaseException) -> None:
        """Record (once) a part of the trial that could not be read."""
        text = f"{what}: {exc}"
        if text not in self.problems:
            logger.warning("part of the trial at %s is unreadable: %s", self.store.location, text)
            self.problems.append(text)

    def _read_worker_info(self, state: WorkerState) -> None:
        key = layout.worker_info_key(state.name)
        try:
            doc = decode_worker_info(self.store.get(key), f"worker info of {state.name}")
        except KeyError:
            return  # not written yet: read at the next refresh
        except (FormatError, StorageError) as exc:
            state.info_read = True
            self.problem(key, exc)
            return
        state.info_read = True
        state.num_workers = int(doc.get("num_workers", 1))
        state.framework = doc.get("framework")
        self.version += 1

    def _refresh_worker(self, state: WorkerState) -> None:
        # Read the end marker *before* listing: everything published before it is then listed.
        end: dict[str, Any] | None = None
        key = layout.end_key(state.name)
        try:
            end = decode_end(self.store.get(key), f"end marker of {state.name}")
        except KeyError:
            pass
        except (FormatError, StorageError) as exc:
            # It was published whole, so the worker did end; what it said is lost.
            self.problem(key, exc)
            end = {}
        self._read_new_indexes(state)
        self._refresh_collections(state)
        if end:
            for missing, reason in missing_segments(state, end):
                self.problem(missing, FormatError(reason))
        if end is not None:
            state.end = end
            state.complete = True
            last = end.get("last_global_step")
            if isinstance(last, int):
                state.max_step = max(state.max_step, last - 1)
            self.version += 1

    def follow_merges(self) -> bool:
        """Read the indexes published since the last listing of every worker, ended ones
        too: a merge (compaction) publishes one after a worker ended. True if a merged index
        was new (segments read before may then be read from it: their objects may be gone)."""
        moved = len(self.moved)
        for state in self.workers.values():
            self._read_new_indexes(state)
        return len(self.moved) != moved

    def _read_new_indexes(self, state: WorkerState) -> None:
        keys = self.store.list(layout.index_prefix(state.name), start_after=state.last_index_key)
        keys = [k for k in keys if k.endswith(layout.INDEX_SUFFIX)]
        step = _FETCH_BATCH if self.records else _OUTLINE_BATCH
        for at in range(0, len(keys), step):  # fetched together (in parallel on S3)
            batch = keys[at : at + step]
            for key, raw in zip(batch, self._get_each(batch), strict=True):
                seq = layout.seq_of(key)
                if seq is not None:
                    state.index_seqs.add(seq)
                if raw is None:
                    state.unreadable_indexes += 1
                else:
                    try:
                        index = decode_index(raw, f"index {key}", records=self.records)
                        check_identity(index, state.name, key)
                    except FormatError as exc:
                        state.unreadable_indexes += 1
                        self.problem(key, exc)
                    else:
                        self._take_in(state, index)
                state.last_index_key = key

    def _get_each(self, keys: list[str]) -> list[bytes | None]:
        """The objects of ``keys``, together; one that cannot be read is a problem, not an
        error for all of them."""
        try:
            return list(self.store.get_many(keys))
        except (KeyError, StorageError):
            return [self._read(key) for key in keys]

    def _read(self, key: str) -> bytes | None:
        """A listed object's bytes; None (and a problem) when it cannot be read."""
        try:
            return self.store.get(key)
        except KeyError:
            self.problem(key, FormatError("listed, then gone before it could be read"))
        except StorageError as exc:
            self.problem(key, exc)
        return None

    def _refresh_collections(self, state: WorkerState) -> None:
        """The newest readable collections snapshot of a worker (a corrupt newest one is a
        problem, and the one before it is used)."""
        ckeys = self.store.list(
            layout.collections_prefix(state.name), start_after=state.last_collections_key
        )
        ckeys = [k for k in ckeys if k.endswith(".json")]
        for key in reversed(ckeys):
            raw = self._read(key)
            if raw is None:
                continue
            try:
                doc = decode_json(raw, "collections", f"collections {key}")
                entries = get_list(doc, "collections", f"collections {key}")
            except FormatError as exc:
                self.problem(key, exc)
                continue
            self.collection_docs[state.name] = {"collections": entries, "key": key}
            break
        if ckeys:
            state.last_collections_key = ckeys[-1]
            self.version += 1

    def _take_in(self, state: WorkerState, index: SegmentIndex) -> None:
        """A listed index: a segment, or a merged one (compaction), whose replaced segments
        are read from it once each: those already taken in (listed before it, or left by a
        merge that was killed) now read their values from it (theirs may be deleted), unless
        the merge kept their data object."""
        parts = index.parts
        if not parts:
            self._ingest(state, index)
            return
        state.merged_seqs.add(int(index.header["seq"]))
        for part in parts:
            state.index_seqs.add(part.seq)
            seg_id = state.ingested.get(part.seq)
            if seg_id is None:
                self._ingest(state, index.part(part))
                if not part.kept_data:
                    self._bases[len(self.segments) - 1] = part.data_offset
            elif not part.kept_data:  # (a kept part's values stay where they were read)
                # its offsets count from where it began in the object it was read from
                shift = part.data_offset - self._bases.get(seg_id, 0)
                self.moved[seg_id] = (index.data_key, shift)

    def data_location(self, seg_id: int) -> tuple[str, int]:
        """Where a segment's values are now: (data object, offset of its first byte); a
        segment a merge replaced is read from the merged data object."""
        moved = self.moved.get(seg_id)
        if moved is not None:
            return moved
        return self.segments[seg_id].index.data_key, 0

    def _ingest(self, state: WorkerState, index: SegmentIndex) -> None:
        seg_id = len(self.segments)
        state.ingested[int(index.header["seq"])] = seg_id
        records = index.records
        session = str(index.header.get("session"))
        state.session_segments[session] = state.session_segments.get(session, 0) + 1
        by_step = (
            np.argsort(records["global_step"], kind="stable")
            if self.records
            else np.empty(0, dtype=np.intp)
        )
        self.segments.append(Segment(state.name, index, by_step))
        span = state.session_spans.setdefault(str(index.header.get("session")), [])
        for entry in index.steps:
            global_step, mode_value, mode_step = int(entry[0]), int(entry[1]), int(entry[2])
            mode = ModeKeys(mode_value)
            if span:
                span[0], span[1] = min(span[0], global_step), max(span[1], global_step)
            else:
                span[:] = [global_step, global_step]
            state.steps.add(global_step)
            state.max_step = max(state.max_step, global_step)
            state.mode_to_global[(mode, mode_step)] = global_step
            state.global_to_mode[global_step] = (mode, mode_step)
            if len(entry) > 3:
                state.wall_time[global_step] = float(entry[3])
        state.dropped.extend(index.header.get("dropped") or [])
        if index.header.get("hook_errors", 0) > state.hook_errors:
            state.hook_errors = int(index.header["hook_errors"])
            state.last_hook_error = index.header.get("last_hook_error")
        if not self.records:
            self._outline_names.update(index.names)
        elif len(records):
            name_ids = records["name"]
            order = np.argsort(name_ids, kind="stable")
            counts = np.bincount(name_ids, minlength=len(index.names))
            bounds = np.concatenate(([0], np.cumsum(counts)))
            for name_id, name in enumerate(index.names):
                lo, hi = int(bounds[name_id]), int(bounds[name_id + 1])
                if hi > lo:
                    self.name_rows.setdefault(name, []).append((seg_id, order[lo:hi]))
            steps, starts = np.unique(records["global_step"][by_step], return_index=True)
            ends = [*starts[1:].tolist(), len(records)]
            for g, lo, hi in zip(steps.tolist(), starts.tolist(), ends, strict=True):
                self.step_rows.setdefault(g, []).append((seg_id, lo, hi))
        self.version += 1

    def names(self) -> AbstractSet[str]:
        """Every tensor name saved so far (a set-like view)."""
        return self.name_rows.keys() if self.records else self._outline_names

    def require_records(self, what: str) -> None:
        """Raise when this index is an outline (``records=False``): ``what`` needs the rows."""
        if not self.records:
            raise InvalidConfigError(
                f"{what} reads saved values, and this trial was opened with records=False "
                "(steps, names, collections, sessions and series only); open it with "
                "records=True (the default) to read them"
            )

    def columns(self, seg_id: int) -> StepColumns:
        """A segment's records as step-ordered columns (built on first use: opening a trial
        and listing it never needs them)."""
        self.require_records("a segment's columns")
        found = self._columns.get(seg_id)
        if found is None:
            found = self._columns[seg_id] = build_columns(self.segments[seg_id], self.dtype_names)
        return found

    # -- derived views --
    def names_at(self, global_step: int, worker: str | None = None) -> set[str]:
        """Names saved at a global step (by one worker, or by any)."""
        self.require_records("the names saved at a step")
        found: set[str] = set()
        for seg_id, lo, hi in self.step_rows.get(global_step, ()):
            if worker is None or self.segments[seg_id].worker == worker:
                found.update(self.columns(seg_id).names[lo:hi].tolist())
        return found

    def expected_workers(self) -> int:
        declared = max((w.num_workers for w in self.workers.values()), default=1)
        return max(declared, len(self.workers))

    def all_ended(self) -> bool:
        return (
            bool(self.workers)
            and len(self.workers) >= self.expected_workers()
            and all(w.complete for w in self.workers.values())
        )

    def collections(self) -> dict[str, Collection]:
        """Collections of every worker, merged (tensor names are the union); built once per
        index version (rules ask at every step, also for collections a trial lacks)."""
        cached = self._collections
        if cached is not None and cached[0] == self.version:
            return dict(cached[1])
        merged: dict[str, Collection] = {}
        for worker in sorted(self.collection_docs, key=natural_key):
            doc = self.collection_docs[worker]
            for i, entry in enumerate(doc["collections"]):
                try:
                    coll, trouble = Collection.from_stored(entry, f"collection {i} of {doc['key']}")
                except FormatError as exc:
                    self.problem(doc["key"], exc)
                    continue
                if trouble:
                    self.problem(doc["key"], FormatError(trouble))
                if coll.name in merged:
                    for tname in coll.tensor_names:
                        merged[coll.name].add_tensor_name(tname)
                else:
                    merged[coll.name] = coll
        self._collections = (self.version, merged)
        return dict(merged)
