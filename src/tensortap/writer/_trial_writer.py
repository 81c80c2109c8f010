"""The background writer thread.

Training threads call :meth:`TrialWriter.submit` with finished steps; a single thread appends
their bytes to the open segment's data object and publishes the segment (data object, then
collections, then index object, each atomically) when it is ``flush_secs`` old, sooner when
the loop goes idle (``idle_flush_secs``), when it reaches ``segment_bytes``, on ``flush()`` and
on ``close()``. A reader only ever looks at index objects,
so it sees whole steps or nothing.

Failures never propagate to training: they are logged, counted in :class:`WriterStatus`, and
written to the worker's end marker. A transient storage failure (``StorageError.transient``: a
lost connection, a 503) is retried with backoff for up to ``retry_secs`` while the queue
absorbs new steps; every publication is idempotent (same keys, same bytes), so the writer
catches up without losing or repeating a step.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from tensortap.core._records import ScalarSteps, StepBatch
from tensortap.exceptions import StorageError
from tensortap.format import _layout as layout
from tensortap.format._documents import SeqRuns, encode_json
from tensortap.format._index import SegmentIndex, encode_index
from tensortap.format._series import encode_series
from tensortap.storage._base import Store
from tensortap.writer._compaction import SMALL_SEGMENT_BYTES, merge_segments
from tensortap.writer._open_segment import OpenSegment
from tensortap.writer._options import WriterOptions
from tensortap.writer._series import Rollups, SeriesParts, segment_series
from tensortap.writer._status import WriterStatus, record_failure, retrying
from tensortap.writer._worker_session import WorkerSession

T = TypeVar("T")
logger = logging.getLogger(__name__)
_MAX_LISTED_DROPS = 1000
# While the writer sleeps until its segment's flush time, a submitted step wakes it only when
# the queue holds this much (a wake per small step costs training a share of a core).
_WAKE_BYTES = 8 * 1024 * 1024
_WAKE_STEPS = 512
# The writer gives back queue room once per this many bytes written (and after each drain).
_RELEASE_BYTES = 1024 * 1024


class TrialWriter:
    """Writes one worker's steps into a trial; one background thread per writer."""

    def __init__(
        self,
        store: Store,
        worker: str,
        options: WriterOptions | None = None,
        num_workers: int = 1,
        framework: str | None = None,
    ) -> None:
        self.store = store
        self.framework = framework
        self.worker = layout.validate_worker_name(worker)
        self.options = options or WriterOptions()
        self.num_workers = num_workers
        self.session = uuid.uuid4().hex[:16]
        self.status = WriterStatus()
        # each step with the bytes it held when submitted (its deferred values count then, not
        # once resolved: what submit adds, the writer takes off)
        self._queue: deque[tuple[StepBatch | ScalarSteps, int]] = deque()
        self._queued_bytes = 0
        self.queue_releases = 0  # times the writer took written steps off the queue (a lock each)
        #: CPU seconds the writer thread spent writing and publishing (what the save budget
        #: counts beside the training thread's own saving work); only that thread adds to it
        self.busy_s = 0.0
        self._cv = threading.Condition()
        self._wakes_by_itself = False  # the writer sleeps with a flush deadline (under _cv)
        self._last_submit = float("-inf")  # monotonic time of the last step submitted
        self._last_publish = float("-inf")  # ... and of the last segment published
        self._flush_waiters: list[threading.Event] = []
        self._stop = False
        self._closed = False
        self._close_deadline = float("inf")
        self._segment: OpenSegment | None = None
        self._pending_collections: dict[str, Any] | None = None
        self._new_drops: list[list[int]] = []
        self._hook_errors: tuple[int, str | None] = (0, None)
        self._listeners: list[tuple[str, Callable[[StepBatch], None]]] = []
        self._last_collections: dict[str, Any] | None = None
        self._rollups = Rollups(self.worker)
        # the indexes of the small segments the rollups hold, merged without reading them back
        self._small_indexes: dict[int, SegmentIndex] = {}
        self._next_check = time.monotonic() + self.options.check_secs
        # the worker's session, opened now (so a bad location fails at construction)
        self._worker_session = WorkerSession(
            store, self.worker, num_workers, self.session, framework
        )
        self._keeper = self._worker_session.keeper
        self.session_start = self._worker_session.start
        self._next_seq = self._worker_session.first_seq
        # every index this worker has published (the end marker says so: a reader then sees
        # one that went missing), as runs of numbers: one run on a run of 10**6 steps
        self._published = SeqRuns(self.session_start.published)
        self._thread = threading.Thread(
            target=self._run, name=f"tensortap-writer-{self.worker}", daemon=True
        )
        self._thread.start()

    def note_session(self, updates: dict[str, Any]) -> None:
        """Rewrite this session's record with ``updates`` (``mode_steps``, ``step_source``,
        ``rolled_back``: see :mod:`tensortap.writer._sessions`); raises StorageError."""
        self._worker_session.note(updates)

    def note_config(self, config: dict[str, Any]) -> None:
        """Record this session's run configuration, the whole of it (see
        :mod:`tensortap.format._run_config`); raises StorageError."""
        self._worker_session.put_config(config)

    def add_listener(self, what: str, listener: Callable[[StepBatch], None]) -> None:
        """Also hand every written step to ``listener`` (on the writer's thread, after the
        step is written); ``what`` names it in logs. Its failures are counted, never raised.
        It must not keep the batch's arrays: their memory is reused once the step is written."""
        self._listeners.append((what, listener))

    # -- training side --
    def submit(self, batch: StepBatch) -> None:
        """Queue a finished step; blocks or drops when the queue is full (see WriterOptions)."""
        self._enqueue(batch, 1)

    def submit_steps(self, block: ScalarSteps) -> None:
        """Queue many finished steps of numbers at once (see :class:`ScalarSteps`): written as
        one, in one pass, and published in one segment, so a reader sees all of them or none
        (or, when the queue is full, dropped together)."""
        if len(block):
            self._enqueue(block, len(block))

    def _enqueue(self, batch: StepBatch | ScalarSteps, steps: int) -> None:
        size = batch.nbytes
        with self._cv:
            self.status.steps_submitted += steps
            while self._queue and self._queued_bytes + size > self.options.max_queue_bytes:
                if self.options.when_full == "drop" or not self._thread.is_alive():
                    self._drop(batch, "the write queue is full")
                    return
                self._cv.wait(timeout=1.0)
            if self._closed or not self._thread.is_alive():
                self._drop(batch, "the writer is closed")
                return
            self._queue.append((batch, size))
            self._queued_bytes += size
            self._last_submit = time.monotonic()
            if (
                not self._wakes_by_itself
                or self._queued_bytes >= _WAKE_BYTES
                or len(self._queue) >= _WAKE_STEPS
            ):
                self._cv.notify_all()

    def _drop(self, batch: StepBatch | ScalarSteps, why: str) -> None:
        status = self.status
        if isinstance(batch, ScalarSteps):
            entries = [
                [step, int(batch.mode), mode_step]
                for step, mode_step in zip(
                    batch.global_steps.tolist(), batch.mode_steps.tolist(), strict=True
                )
            ]
        else:
            entries = [[batch.global_step, int(batch.mode), batch.mode_step]]
        status.steps_dropped += len(entries)
        room = max(0, _MAX_LISTED_DROPS - len(status.dropped))
        status.dropped.extend(entries[:room])
        self._new_drops.extend(entries)
        if batch.collections is not None:  # keep collection changes even when data is dropped
            self._pending_collections = batch.collections
        if status.steps_dropped in (1, 10, 100) or status.steps_dropped % 1000 == 0:
            logger.warning(
                "tensortap dropped step %d (%s); %d steps dropped so far. Raise "
                "max_queue_bytes or use when_full='block' to keep every step",
                batch.global_step,
                why,
                status.steps_dropped,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Publish everything submitted so far. True only if it was done within ``timeout``
        and every step submitted so far is published: once a step was lost (a full disk) or
        dropped (a full queue), it never will be, and flush says False from then on."""
        event = threading.Event()
        with self._cv:
            if not self._thread.is_alive():
                return False
            self._flush_waiters.append(event)
            self._cv.notify_all()
        done = event.wait(timeout if timeout is not None else self.options.close_timeout_secs)
        status = self.status
        return done and not status.steps_lost and not status.steps_dropped

    def note_hook_errors(self, count: int, last: str | None) -> None:
        """Record the hook's internal error count in the next published segments (live trials)."""
        self._hook_errors = (count, last)

    def close(self, end_info: dict[str, Any] | None = None) -> WriterStatus:
        """Publish what is queued, write the end marker, stop the thread. Never raises."""
        with self._cv:
            if self._closed:
                return self.status
            self._closed = True
            self._stop = True
            self._close_deadline = time.monotonic() + self.options.close_timeout_secs
            self._end_info = end_info or {}
            self._cv.notify_all()
        self._thread.join(self.options.close_timeout_secs)
        if self._thread.is_alive():
            logger.error(
                "tensortap: the writer for %s did not finish within %.0f s; %d queued steps "
                "may be missing from the trial",
                self.worker,
                self.options.close_timeout_secs,
                len(self._queue),
            )
        return self.status

    # -- writer thread --
    def _run(self) -> None:
        while True:
            with self._cv:
                while not (self._queue or self._stop or self._flush_waiters):
                    to_check = self._next_check - time.monotonic()
                    if to_check <= 0:
                        break
                    if self._segment is None:
                        self._wakes_by_itself = False  # a step must wake it
                        self._cv.wait(to_check)
                        continue
                    remaining = self._publish_due(self._segment) - time.monotonic()
                    if remaining <= 0:
                        break
                    # It wakes by itself when the segment is due (at most flush_secs after it
                    # opened): small steps need not wake it before (one wake per step costs
                    # training a share of a core).
                    self._wakes_by_itself = True
                    self._cv.wait(min(remaining, to_check))
                self._wakes_by_itself = False
                batches = list(self._queue)
                stop = self._stop
                waiters, self._flush_waiters = self._flush_waiters, []
            began = time.thread_time()
            self._write_queued(batches)
            batches.clear()  # no step outlives its writing here: its raw buffers get reused
            segment = self._segment
            if (
                stop
                or waiters
                or (segment is not None and time.monotonic() >= self._publish_due(segment))
            ):
                self._publish()
            self.busy_s += time.thread_time() - began
            for event in waiters:
                event.set()
            if stop:
                due = self._rollups.end()  # merged at close; rolled up only when 64 wait
                if due is not None and self.options.compact and self._keeper.lost is None:
                    self._merge_or_roll_up(due)
                self._write_end_marker()
                self._keeper.release()
                return
            if time.monotonic() >= self._next_check:
                self._check()

    def _write_queued(self, batches: list[tuple[StepBatch | ScalarSteps, int]]) -> None:
        # Steps leave the queue in runs (one lock per ``_RELEASE_BYTES`` written, not one per
        # step: a run of scalar-only steps costs one acquisition); a big step frees its room
        # as soon as it is written, so a submit blocked on a full queue resumes.
        done = freed = 0
        for batch, size in batches:
            self._write_batch(batch)
            done += 1
            freed += size
            if freed >= _RELEASE_BYTES:
                self._release(done, freed)
                done = freed = 0
        if done:
            self._release(done, freed)

    def _release(self, steps: int, size: int) -> None:
        """Take ``steps`` written steps (``size`` bytes) off the queue."""
        with self._cv:
            self.queue_releases += 1
            queue = self._queue
            for _ in range(steps):
                queue.popleft()
            self._queued_bytes -= size
            self._cv.notify_all()

    def _publish_due(self, segment: OpenSegment) -> float:
        """When the open segment is published (monotonic time): ``flush_secs`` after it opened,
        or sooner once the loop is idle (no step for ``idle_flush_secs``), but then never
        sooner than ``flush_secs`` after the last publication, so that a loop saving often
        still gets one segment per ``flush_secs`` (see WriterOptions)."""
        options = self.options
        due = segment.opened + options.flush_secs
        if options.idle_flush_secs is not None:
            idle = max(
                self._last_submit + options.idle_flush_secs,
                self._last_publish + options.flush_secs,
            )
            due = min(due, idle)
        return due

    def _check(self) -> None:
        """Every ``check_secs``: the trial is still there and the worker still this writer's."""
        self._next_check = time.monotonic() + self.options.check_secs
        was_lost = self._keeper.lost is not None
        try:
            outcome = self._keeper.check()
        except Exception as exc:
            self._fail(exc, "checking the trial")
            return
        if outcome == "recreated":
            try:
                self._worker_session.put_record()
            except Exception as exc:
                self._fail(exc, "recording the session again")
            self._fail(
                StorageError("the trial's tensortap.json disappeared (out_dir deleted?)"),
                "checking the trial",
                "the trial was re-created; steps published before are lost",
            )
            with self._cv:
                if self._pending_collections is None:
                    self._pending_collections = self._last_collections
            self._rollups = Rollups(self.worker)  # the segments it held are gone
            self._small_indexes.clear()
        elif outcome == "lost" and not was_lost:
            self._fail(
                StorageError(f"this writer no longer owns {self.worker}: {self._keeper.lost}"),
                "keeping the worker",
                "it stops publishing so as not to overwrite the new owner's steps",
            )

    def _write_batch(self, batch: StepBatch | ScalarSteps) -> None:
        if batch.collections is not None:
            with self._cv:
                self._pending_collections = batch.collections
        if isinstance(batch, ScalarSteps):
            self._write_scalar_steps(batch)
            return
        if not batch.records:
            return
        try:
            batch.resolve_deferred()
        except Exception as exc:  # the values stay NaN; the rest of the step is written
            self._fail(exc, f"computing deferred values of step {batch.global_step}")
        self._write_records(batch)
        for what, listener in self._listeners:
            try:
                listener(batch)
            except Exception as exc:
                self._fail(exc, f"{what} at step {batch.global_step}", "the trial is complete")

    def _write_scalar_steps(self, block: ScalarSteps) -> None:
        self._write_records(block)
        if self._listeners:  # they read steps one by one
            for batch in block.batches():
                for what, listener in self._listeners:
                    try:
                        listener(batch)
                    except Exception as exc:
                        self._fail(
                            exc, f"{what} at step {batch.global_step}", "the trial is complete"
                        )

    def _write_records(self, batch: StepBatch | ScalarSteps) -> None:
        try:
            segment = self._segment
            if segment is None:
                seq = self._take_seq()
                segment = OpenSegment(
                    seq, self.store.open_writer(layout.data_key(self.worker, seq))
                )
                self._segment = segment
            if isinstance(batch, ScalarSteps):
                segment.append_scalar_steps(batch)
            else:
                segment.append(batch)
        except Exception as exc:
            self._fail(exc, f"writing step {batch.global_step}")
            self._abandon_segment(extra_lost=len(batch) if isinstance(batch, ScalarSteps) else 1)
            return
        if segment.offset >= self.options.segment_bytes:
            self._publish()

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _publish(self) -> None:
        if self._segment is not None:
            self._last_publish = time.monotonic()
        if self._keeper.lost is not None:
            self._abandon_segment()
            return
        segment, self._segment = self._segment, None
        series: SeriesParts | None = None
        try:
            if segment is not None:
                self._retrying("uploading a segment", segment.writer.commit)
            with self._cv:
                pending, self._pending_collections = self._pending_collections, None
            if pending is not None:
                doc = encode_json("collections", {"worker": self.worker, **pending})
                try:
                    key = layout.collections_key(self.worker, self._take_seq())
                    self._retrying("writing collections", lambda: self.store.put(key, doc))
                    self._last_collections = pending
                except BaseException:
                    with self._cv:
                        if self._pending_collections is None:
                            self._pending_collections = pending
                    raise
            if segment is None:
                return
            with self._cv:
                drops, self._new_drops = self._new_drops, []
            header = {
                "worker": self.worker,
                "seq": segment.seq,
                "session": self.session,
                "data_key": layout.data_key(self.worker, segment.seq),
                "data_size": segment.offset,
                "published": time.time(),
                "dropped": drops,
            }
            errors, last_error = self._hook_errors
            if errors:
                header["hook_errors"] = errors
                header["last_hook_error"] = last_error
            try:
                decoded = segment.builder.index(header)
                index_key, index = (
                    layout.index_key(self.worker, segment.seq),
                    encode_index(decoded.header, decoded.records, decoded.dims),
                )
                series = self._put_series(segment)
                self._retrying("publishing an index", lambda: self.store.put(index_key, index))
            except BaseException:
                with self._cv:
                    self._new_drops[:0] = drops
                raise
        except Exception as exc:
            self._fail(exc, "publishing a segment")
            if segment is not None:
                segment.writer.abort()
                self.status.steps_lost += segment.steps
            return
        if segment is not None:
            if series is not None:
                self._roll_up(segment.seq, series, segment.offset, decoded)
            self._published.add(segment.seq)
            status = self.status
            status.segments_published += 1
            status.steps_written += segment.steps
            status.records_written += len(segment.builder)
            status.bytes_written += segment.offset

    def _put_series(self, segment: OpenSegment) -> SeriesParts | None:
        """Publish a segment's series object (before its index). Readers take the series of a
        segment without one from its index, so a failure here loses nothing: it is counted,
        and the segment is published."""
        try:
            parts = segment_series(segment.builder)
            raw = encode_series(self.worker, segment.seq, segment.seq, *parts)
            key = layout.series_key(self.worker, segment.seq)
            self._retrying("publishing a segment's series", lambda: self.store.put(key, raw))
        except Exception as exc:
            self._fail(exc, "publishing a segment's series", "readers take them from its index")
            return None
        return parts

    def _roll_up(self, seq: int, parts: SeriesParts, data_bytes: int, index: SegmentIndex) -> None:
        small = data_bytes <= SMALL_SEGMENT_BYTES
        if small and self.options.compact:
            self._small_indexes[seq] = index
        due = self._rollups.add(seq, parts) if small else self._rollups.end()
        if due is not None:
            self._merge_or_roll_up(due)
        if not self._rollups.pending:
            self._small_indexes.clear()

    def _merge_or_roll_up(self, due: list[tuple[int, SeriesParts]]) -> None:
        """Merge a run of small published segments into one (compaction), or, when the
        options turn it off or the merge fails, write a rollup of their series."""
        if self.options.compact:
            try:
                seqs = [seq for seq, _ in due]
                known = [self._small_indexes.pop(seq, None) for seq in seqs]
                indexes = [index for index in known if index is not None]
                given = indexes if len(indexes) == len(seqs) else None  # else read back
                new_seq = self._take_seq()
                self._retrying(
                    "merging small segments",
                    lambda: merge_segments(self.store, self.worker, seqs, new_seq, given),
                )
                self._published.add(new_seq)
                self.status.segments_merged += len(seqs)
                return
            except Exception as exc:
                self._fail(exc, "merging small segments", "they stay as they are, rolled up")
        try:
            key, raw = self._rollups.rollup(due)
            self._retrying("writing a series rollup", lambda: self.store.put(key, raw))
        except Exception as exc:
            self._fail(exc, "writing a series rollup", "readers read its segments one by one")

    def _retrying(self, doing: str, action: Callable[[], T]) -> T:
        """``action()``, retried with backoff while it fails transiently, for up to
        ``retry_secs`` (and no later than the close deadline)."""
        return retrying(
            doing,
            action,
            self.worker,
            self.options.retry_secs,
            self.status,
            lambda: self._close_deadline,
        )

    def _abandon_segment(self, extra_lost: int = 0) -> None:
        segment, self._segment = self._segment, None
        lost = extra_lost
        if segment is not None:
            segment.writer.abort()
            lost += segment.steps
        self.status.steps_lost += lost

    def _fail(
        self,
        exc: BaseException,
        doing: str,
        consequence: str = "the steps involved are missing from the trial",
    ) -> None:
        record_failure(self.status, self.worker, exc, doing, consequence)

    def _write_end_marker(self) -> None:
        body = {"worker": self.worker, "session": self.session, "ended": time.time()}
        body.update(self._end_info)
        body["status"] = asdict(self.status)
        published = self._published.runs()
        if published is not None:
            body["published_segments"] = published
        storage = self.store.stats()
        if storage:
            body["storage"] = storage
        doc = encode_json("end", body)
        try:
            self._retrying(
                "writing the end marker", lambda: self.store.put(layout.end_key(self.worker), doc)
            )
        except (StorageError, OSError) as exc:
            self._fail(exc, "writing the end-of-training marker")
