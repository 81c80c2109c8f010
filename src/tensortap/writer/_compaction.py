"""Compaction: a worker's small segments merged into one.

At a training pace the writer publishes a segment every ``flush_secs``, so a long run lies in
thousands of small objects, and opening or reading it costs a request and a decode per object.
A merge copies consecutive small segments ``first``..``last`` of one worker into one new
segment ``seq`` (a number the worker's owner takes, so no writer can publish it too) and then
deletes them. Only their indexes and series are always merged: a segment's values of at least
:data:`KEEP_DATA_BYTES` stay in its own data object, which the merged index names (index
version 3), as WiscKey keeps large values out of an LSM tree's compactions: each byte of
tensors is written once, and the bytes a merge copies are few. Order, so that a process killed
at any point loses and duplicates nothing:

1. the merged data object (it reserves ``seq``: a writer that starts later counts after it;
   empty when every part keeps its own);
2. the merged series, named for the segments it replaces (:func:`layout.merged_series_key`);
3. the merged index, whose header lists the segments it replaces (``parts``): from here on a
   reader reads the replaced segments from it, whether or not they are still there;
4. the replaced segments' rollups, series objects, indexes, then the data objects it copied.

Killed before 3, the new objects are orphans a reader ignores; killed after, the leftovers are
read from the merged segment once each (see docs/format.md, "Compaction").
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.core._dtypes import storage_dtype
from tensortap.core._records import RecordKind
from tensortap.exceptions import FormatError, TensortapError, WorkerInUse
from tensortap.format import _layout as layout
from tensortap.format._checksum import crc32, crc32_of_words
from tensortap.format._index import (
    DATA_ALIGNMENT,
    INDEX_KEPT_DATA,
    INDEX_PACKED,
    SegmentIndex,
    decode_index,
    encode_index,
)
from tensortap.format._index_rows import RECORD_DTYPE
from tensortap.format._series import encode_series, group_series, number_rows, step_table
from tensortap.storage._base import Store
from tensortap.storage._resolve import open_store
from tensortap.writer._ownership import claim_worker, next_seq

logger = logging.getLogger(__name__)

#: Segments whose data object is at most this big are merged ...
SMALL_SEGMENT_BYTES = 4 * 1024 * 1024
#: ... into merged segments of at most this many bytes and segments.
MERGE_BYTES = 64 * 1024 * 1024
MERGE_SEGMENTS = 1024
#: A segment whose data object holds at least this many bytes keeps it when merged (its index
#: and series are merged; its values are not copied): so a merge's copying costs at most this
#: much a segment, and a trial holds at most one data object per this many bytes more.
KEEP_DATA_BYTES = 64 * 1024
#: A merged series reads a kept part's numbers from its data object in spans: numbers less than
#: this many bytes apart are read in one range (a part of scalars: one read, not one a number;
#: on S3 each range is a request).
READ_GAP_BYTES = 64 * 1024
#: ... and no span is longer than this (what one merge holds in memory for a kept part's reads).
READ_SPAN_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Merge:
    """A merge done: the new segment, the segments it replaced, and what it holds."""

    worker: str
    seq: int
    replaced: tuple[int, ...]
    records: int
    steps: int
    data_bytes: int


def merge_segments(
    store: Store,
    worker: str,
    seqs: Sequence[int],
    seq: int,
    indexes: Sequence[SegmentIndex] | None = None,
    keep_bytes: int | None = None,
) -> Merge:
    """Merge the published segments ``seqs`` (consecutive ones of ``worker``, in order) into
    a new segment ``seq``, then delete them. The caller owns the worker (its writer, or
    :func:`compact_worker` holding its claim); ``indexes``: theirs, when already read; a
    segment whose data object holds ``keep_bytes`` (default :data:`KEEP_DATA_BYTES`) or more
    keeps it.
    Raises FormatError when a segment cannot be read whole (nothing is written then),
    StorageError when the store fails."""
    seqs = list(seqs)
    if len(seqs) < 2 or seqs != sorted(set(seqs)) or seq <= seqs[-1]:
        raise ValueError(f"merge_segments needs 2+ increasing segments below {seq}, got {seqs}")
    if indexes is None:
        indexes = [_read_index(store, worker, s) for s in seqs]
    else:
        indexes = [_check_plain(index, worker, s) for index, s in zip(indexes, seqs, strict=True)]
    least = max(1, KEEP_DATA_BYTES if keep_bytes is None else keep_bytes)
    kept = [_data_size(index) >= least for index in indexes]
    copied = iter(store.get_many([i.data_key for i, k in zip(indexes, kept, strict=True) if not k]))
    datas = [None if k else next(copied) for k in kept]
    merged_index, data = _merge(worker, seq, indexes, datas)
    version = INDEX_KEPT_DATA if any(kept) else INDEX_PACKED
    index_raw = encode_index(*merged_index, version)
    index = decode_index(index_raw, f"merged index of {worker} segment {seq}")  # checks it all
    series = _series(store, worker, seqs[0], seq, index, data)
    store.put(layout.data_key(worker, seq), data)
    store.put(layout.merged_series_key(worker, seq, seqs[0], seqs[-1]), series)
    store.put(layout.index_key(worker, seq), index_raw)
    remove_replaced(store, worker, seqs, {p.seq for p in index.parts if p.kept_data})
    return Merge(worker, seq, tuple(seqs), len(index.records), len(index.steps), len(data))


def remove_replaced(
    store: Store, worker: str, seqs: Sequence[int], kept: set[int] | frozenset[int] = frozenset()
) -> None:
    """Delete what a published merge replaced: rollups inside its span, then the segments'
    series objects, indexes and data objects, but for those the merge ``kept`` (an index
    goes before its data: a reader never lists an index whose data was deleted, except the
    merged one it reads instead)."""
    first, last = seqs[0], seqs[-1]
    for key in store.list(layout.rollups_prefix(worker)):
        span = layout.rollup_span(key)
        if span is not None and first <= span[0] and span[1] <= last:
            store.delete(key)
    for key_of in (layout.series_key, layout.index_key, layout.data_key):
        for s in seqs:
            if key_of is not layout.data_key or s not in kept:
                store.delete(key_of(worker, s))


def _data_size(index: SegmentIndex) -> int:
    return int(index.header.get("data_size", 0))


def _read_index(store: Store, worker: str, seq: int) -> SegmentIndex:
    key = layout.index_key(worker, seq)
    return _check_plain(decode_index(store.get(key), f"index {key}"), worker, seq)


def _check_plain(index: SegmentIndex, worker: str, seq: int) -> SegmentIndex:
    key = layout.index_key(worker, seq)
    header = index.header
    if (
        header["worker"] != worker
        or header["seq"] != seq
        or index.data_key != layout.data_key(worker, seq)
        or index.parts
    ):
        raise FormatError(f"index {key} is not a plain segment of its own: not merged")
    return index


def _merge(
    worker: str, seq: int, indexes: list[SegmentIndex], datas: list[bytes | None]
) -> tuple[tuple[dict[str, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]], bytes]:
    """((header, records, dims) of the merged index, its data object's bytes): each part's
    values copied from its data (``datas``), or left in its own data object where that is
    None (the part then names its size, and its records keep their offsets)."""
    names: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    records: list[np.ndarray[Any, Any]] = []
    dims: list[np.ndarray[Any, Any]] = []
    chunks: list[bytes | memoryview] = []
    steps: list[list[Any]] = []
    dropped: list[Any] = []
    parts: list[list[Any]] = []
    offset = dims_at = hook_errors = 0
    last_hook_error = None
    for index, data in zip(indexes, datas, strict=True):
        size = _data_size(index)
        if data is not None and len(data) < size:
            raise FormatError(f"{index.data_key} is shorter than its index says: not merged")
        rows = index.records.copy()
        name_map = np.array([names.setdefault(n, len(names)) for n in index.names], np.uint32)
        dtype_map = np.array([dtypes.setdefault(d, len(dtypes)) for d in index.dtypes], np.uint16)
        if len(rows):
            rows["name"] = name_map[rows["name"]]
            rows["dtype"] = dtype_map[rows["dtype"]]
            rows["dims_offset"] += dims_at
            raw = rows["kind"] == int(RecordKind.TENSOR)
            if data is not None:
                rows["data_offset"][raw] += np.uint64(offset)
        records.append(rows)
        dims.append(index.dims)
        dims_at += len(index.dims)
        head = index.header
        parts.append([int(head["seq"]), str(head["session"]), len(rows), len(index.steps)])
        parts[-1].append(offset)
        if data is None:  # kept in its own data object
            parts[-1].append(size)
        else:
            pad = (-size) % DATA_ALIGNMENT
            chunks.append(memoryview(data)[:size])  # copied once, by the join below
            if pad:
                chunks.append(bytes(pad))
            offset += size + pad
        steps.extend(index.steps)
        dropped.extend(index.header.get("dropped") or [])
        if int(index.header.get("hook_errors", 0)) >= hook_errors:
            hook_errors = int(index.header.get("hook_errors", 0))
            last_hook_error = index.header.get("last_hook_error")
    header: dict[str, Any] = {
        "worker": worker,
        "seq": seq,
        "session": parts[-1][1],
        "data_key": layout.data_key(worker, seq),
        "data_size": offset,
        "published": time.time(),
        "dropped": dropped,
        "parts": parts,
        "names": list(names),
        "dtypes": list(dtypes),
        "steps": steps,
    }
    if hook_errors:
        header["hook_errors"] = hook_errors
        header["last_hook_error"] = last_hook_error
    all_records = np.concatenate(records) if records else np.empty(0, RECORD_DTYPE)
    all_dims = np.concatenate(dims).astype("<i8") if dims else np.empty(0, "<i8")
    return (header, all_records, all_dims), b"".join(chunks)


def _series(
    store: Store, worker: str, first: int, seq: int, index: SegmentIndex, data: bytes
) -> bytes:
    """The merged segment's series (its reductions and one-number raw values, each raw value
    checked against its CRC: a corrupt one is not copied into a series unnoticed): those of
    copied parts from the merged ``data``, those of kept parts read from their own data
    objects (only their bytes)."""
    rows = number_rows(index)
    picked = index.records[rows]
    values = np.zeros(len(rows), np.float64)
    in_kept = np.zeros(len(rows), dtype=bool)
    offsets = picked["data_offset"].astype(np.int64)
    ends = offsets + picked["data_length"].astype(np.int64)
    ranges: list[tuple[str, int, int]] = []
    at = np.zeros(len(rows), np.int64)  # where each kept part's number lies in what is fetched
    fetched_size = 0
    for part in index.parts:
        if part.kept_data:
            lo, hi = np.searchsorted(rows, part.records)
            in_kept[lo:hi] = True
            key = layout.data_key(worker, part.seq)
            for start, end, members, within in _spans(offsets[lo:hi], ends[lo:hi]):
                ranges.append((key, start, end - start))
                at[lo + members] = fetched_size + within
                fetched_size += end - start
    mine = np.flatnonzero(~in_kept)
    values[mine] = _checked_numbers(index, picked[mine], data, offsets[mine], worker, seq)
    if ranges:
        fetched = b"".join(store.get_ranges(ranges))
        theirs = np.flatnonzero(in_kept)
        values[theirs] = _checked_numbers(index, picked[theirs], fetched, at[theirs], worker, seq)
    keys, blocks = group_series(index.names, index.records, rows, values)
    return encode_series(worker, first, seq, keys, blocks, step_table(index.steps))


def _spans(
    starts: np.ndarray[Any, Any],
    ends: np.ndarray[Any, Any],
    gap: int = READ_GAP_BYTES,
    most: int = READ_SPAN_BYTES,
) -> list[tuple[int, int, np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The byte ranges ``[starts[i], ends[i])`` of one data object gathered into spans to
    read: ranges less than ``gap`` bytes apart are read as one, a span at most ``most`` bytes
    (unless one range alone is longer). Each span: its start and end, the indexes of the
    ranges in it, and where each of them starts within the span."""
    if not len(starts):
        return []
    order = np.argsort(starts, kind="stable")
    first, last = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(order), dtype=bool)
    new[1:] = first[1:] > last[:-1] + gap
    bounds = [*np.flatnonzero(new).tolist(), len(order)]
    spans = []
    for lo, hi in itertools.pairwise(bounds):
        i = lo
        while i < hi:  # a span is never longer than most (a close-packed index cannot ask
            # for a whole large object at once): cut at the first range that would pass it
            limit = int(first[i]) + most
            j = max(i + 1, i + int(np.searchsorted(last[i:hi], limit, side="right")))
            start, end = int(first[i]), int(ends[order[i:j]].max())
            spans.append((start, end, order[i:j], first[i:j] - start))
            i = j
    return spans


def _checked_numbers(
    index: SegmentIndex,
    picked: np.ndarray[Any, Any],
    data: bytes,
    offsets: np.ndarray[Any, Any],
    worker: str,
    seq: int,
) -> np.ndarray[Any, Any]:
    """The numbers of one-number records ``picked``, whose bytes lie in ``data`` at
    ``offsets``, each checked against its CRC. The values of one dtype are gathered and
    checked together (8-byte ones in one table pass)."""
    values = np.zeros(len(picked), np.float64)
    buf = np.frombuffer(data, np.uint8)
    # the codes present (``np.unique`` would import ``numpy.ma``, ~25 ms, in a writer's first merge)
    for code in np.flatnonzero(np.bincount(picked["dtype"])).tolist():
        at = np.flatnonzero(picked["dtype"] == code)
        dtype = storage_dtype(index.dtypes[code])
        raw = buf[offsets[at][:, None] + np.arange(dtype.itemsize)]
        if dtype.itemsize == 8:
            crcs = crc32_of_words(raw.reshape(-1).view("<u8"))
        else:
            crcs = np.array([crc32(r.tobytes()) for r in raw], dtype=np.uint32)
        if (crcs != picked["crc32"][at]).any():
            raise FormatError(f"a value of {worker} segment {seq}'s parts fails its checksum")
        values[at] = np.ascontiguousarray(raw).reshape(-1).view(dtype).astype(np.float64)
    return values


def plan_merges(indexes: Sequence[SegmentIndex]) -> list[list[int]]:
    """Runs of a worker's published segments (``indexes``, by segment number) to merge: each
    of at least two consecutive small plain segments, at most :data:`MERGE_BYTES` and
    :data:`MERGE_SEGMENTS` each."""
    runs: list[list[int]] = []
    run: list[int] = []
    size = 0
    for index in indexes:
        data_size = int(index.header.get("data_size", 0))
        small = not index.parts and data_size <= SMALL_SEGMENT_BYTES
        if not small or len(run) >= MERGE_SEGMENTS or size + data_size > MERGE_BYTES:
            if len(run) >= 2:
                runs.append(run)
            run, size = [], 0
        if small:
            run.append(int(index.header["seq"]))
            size += data_size
    if len(run) >= 2:
        runs.append(run)
    return runs


def compact_worker(store: Store, worker: str, keep_bytes: int | None = None) -> list[Merge]:
    """Merge the small segments of a worker no writer holds (its claim is taken for the
    while: a writer that starts meanwhile gets ``WorkerInUse``); raises ``WorkerInUse`` when
    one holds it. A segment that cannot be read stays as it is. ``keep_bytes``: see
    :func:`merge_segments`."""
    info = {
        "worker": worker,
        "session": "compaction",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
    }
    claim = claim_worker(store, worker, info)
    try:
        keys = [
            k for k in store.list(layout.index_prefix(worker)) if k.endswith(layout.INDEX_SUFFIX)
        ]
        indexes: list[SegmentIndex] = []
        for key in keys:
            seq = layout.seq_of(key)
            try:
                if seq is None:
                    raise FormatError("not a segment's index")
                indexes.append(decode_index(store.get(key), f"index {key}"))
            except (KeyError, TensortapError) as exc:
                logger.warning("compaction leaves %s as it is: %s", key, exc)
                indexes.append(_UNREADABLE)  # ends a run: only neighbours merge
        replaced = {part.seq for index in indexes for part in index.parts}
        kept = {part.seq for index in indexes for part in index.parts if part.kept_data}
        leftovers = [int(i.header["seq"]) for i in indexes if i.header["seq"] in replaced]
        if leftovers:  # a merge killed before it deleted what it replaced: finish it
            remove_replaced(store, worker, leftovers, kept)
        _remove_orphans(store, worker, {layout.seq_of(key) for key in keys})
        plain = [i for i in indexes if i.header["seq"] not in replaced]
        done = []
        next_free = next_seq(store, worker)
        by_seq = {int(index.header["seq"]): index for index in plain}
        for run in plan_merges(plain):
            try:
                indexes = [by_seq[s] for s in run]
                done.append(merge_segments(store, worker, run, next_free, indexes, keep_bytes))
            except FormatError as exc:
                logger.warning("compaction leaves segments %s..%s: %s", run[0], run[-1], exc)
            next_free += 1  # even a failed merge may have left its data object
        return done
    finally:
        claim.release()


def _remove_orphans(store: Store, worker: str, listed: set[int | None]) -> None:
    """Delete what a merge killed before it published its index left (its data object and
    series: no index of that number is listed, readable or not); the worker's claim is held,
    so no writer is publishing one now."""
    for key in store.list(layout.rollups_prefix(worker)):
        span = layout.merged_series_span(key)
        if span is not None and span[0] not in listed:
            store.delete(key)
            store.delete(layout.data_key(worker, span[0]))


_UNREADABLE = SegmentIndex(
    {"data_size": SMALL_SEGMENT_BYTES + 1, "seq": -1},
    [],
    [],
    np.empty(0, RECORD_DTYPE),
    np.empty(0, "<i8"),
)


def compact_trial(
    path: str | os.PathLike[str] | Store, keep_bytes: int | None = None
) -> list[Merge]:
    """Merge the small segments of every worker of the trial at ``path`` (a location or a
    Store) that no writer holds (a worker being written is left to its writer, which merges
    its own). ``keep_bytes``: see :func:`merge_segments`."""
    store = open_store(path)
    done: list[Merge] = []
    for worker in store.list_dir(layout.WORKERS_PREFIX):
        if not layout.is_plain_name(worker):
            continue
        try:
            done.extend(compact_worker(store, worker, keep_bytes))
        except WorkerInUse as exc:
            logger.info("compaction skips %s: %s", worker, exc)
    return done
