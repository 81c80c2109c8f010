"""Reading saved tensor bytes: one value at a time, or many in as few ranged reads as possible.

Every value is checked against its CRC-32 before it is decoded: a corrupt file raises
FormatError rather than handing back garbled numbers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core._dtypes import decode_array
from tensortap.exceptions import FormatError, StorageError
from tensortap.format._checksum import crc32

if TYPE_CHECKING:
    from tensortap.storage._base import Store
    from tensortap.trials._index import TrialIndex

#: Values closer together than this in one data object are read with one request.
MAX_GAP = 1 << 16


@dataclass(slots=True)
class RawRef:
    """Where the raw bytes of one saved value live."""

    segment: int
    offset: int
    length: int
    crc32: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.offset + self.length


class ByteCache:
    """Recently read runs of data objects, up to ``max_bytes`` (least recently used leave
    first): a value inside a cached run is not fetched again."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._runs: OrderedDict[tuple[int, int, int], bytearray] = OrderedDict()
        self._lock = threading.Lock()  # a trial's read-ahead thread shares it

    def get(self, segment: int, start: int, end: int) -> memoryview | None:
        with self._lock:
            for key in reversed(self._runs):  # the newest first: the likely hits
                seg, run_start, run_end = key
                if seg == segment and run_start <= start and end <= run_end:
                    self._runs.move_to_end(key)
                    return memoryview(self._runs[key])[start - run_start : end - run_start]
        return None

    def clear(self) -> None:
        """Forget every cached run."""
        with self._lock:
            self._runs.clear()
            self.size = 0

    def put(self, segment: int, start: int, data: bytearray) -> None:
        if len(data) > self.max_bytes // 4:  # one big read must not flush everything else
            return
        with self._lock:
            self._runs[(segment, start, start + len(data))] = data
            self.size += len(data)
            while self.size > self.max_bytes or len(self._runs) > 256:
                _, dropped = self._runs.popitem(last=False)
                self.size -= len(dropped)


class ValueReader:
    """Reads (and verifies) the raw bytes the index points at: many runs at once through the
    store's ``get_ranges`` (in parallel on object storage), through a small byte cache where
    the store asks for one (``Store.cache_bytes``)."""

    def __init__(self, store: Store, index: TrialIndex) -> None:
        self.store = store
        self.index = index
        self._fetched: dict[tuple[int, int], np.ndarray] = {}
        self.cache = ByteCache(store.cache_bytes) if store.cache_bytes > 0 else None

    def read(self, ref: RawRef) -> np.ndarray:
        """One value, as a new array (from the last :meth:`prefetch` when it holds it)."""
        fetched = self._fetched.get((ref.segment, ref.offset))
        if fetched is not None:
            return np.array(fetched, copy=True)
        value = self.decode(ref, self.read_run(ref.segment, ref.offset, ref.end))
        return value if self.cache is None else np.array(value, copy=True)  # not the cache's

    def read_many(self, refs: Sequence[RawRef], max_gap: int = MAX_GAP) -> list[np.ndarray]:
        """Many values (new arrays, in the order of ``refs``) in as few requests as possible,
        fetched together."""
        return [np.array(v, copy=True) for v in self._views(refs, max_gap)[0]]

    def _views(self, refs: Sequence[RawRef], max_gap: int) -> tuple[list[np.ndarray], int]:
        """The verified values of ``refs`` (views of the fetched bytes) and the request count."""
        out: list[np.ndarray] = [np.empty(0)] * len(refs)
        spans = self.read_spans(refs, max_gap)
        for members, buf in spans:
            start = refs[members[0]].offset
            for m in members:
                r = refs[m]
                out[m] = self.decode(r, buf[r.offset - start : r.end - start])
        return out, len(spans)

    def verify(self, ref: RawRef, buf: bytes | bytearray | memoryview) -> None:
        self.check(ref.segment, ref.offset, ref.crc32, buf)

    def check(
        self, segment: int, offset: int, crc: int, buf: bytes | bytearray | memoryview
    ) -> None:
        """Raise FormatError unless ``buf`` (the bytes at ``offset``) has CRC-32 ``crc``."""
        if crc32(buf) != crc:
            key = self.index.segments[segment].index.data_key
            error = FormatError(
                f"data at {key}[{offset}:{offset + len(buf)}] fails its checksum: "
                "the file is corrupt"
            )
            self.index.note_problem(key, FormatError("values fail their checksum: corrupt"))
            raise error

    def decode(self, ref: RawRef, buf: bytes | bytearray | memoryview) -> np.ndarray:
        self.verify(ref, buf)
        return decode_array(buf, ref.dtype, ref.shape)

    def read_run(self, segment: int, start: int, end: int) -> memoryview:
        """The bytes ``[start, end)`` of a segment's data object, in one request."""
        return self.read_runs([(segment, start, end)])[0]

    def read_runs(self, runs: Sequence[tuple[int, int, int]]) -> list[memoryview]:
        """The bytes of each ``(segment, start, end)``: cached runs from memory, the rest with
        one ``get_ranges`` call (parallel requests on object storage)."""
        out: list[memoryview | None] = [None] * len(runs)
        cache = self.cache
        missing = []
        for i, (segment, start, end) in enumerate(runs):
            hit = cache.get(segment, start, end) if cache is not None else None
            if hit is None:
                missing.append(i)
            else:
                out[i] = hit
        if missing:
            try:
                try:
                    fetched = self.store.get_ranges(self._where(runs, missing))
                except KeyError:
                    # merged into a larger segment since it was read (compaction)?
                    if not self.index.follow_merges():
                        raise
                    fetched = self.store.get_ranges(self._where(runs, missing))
            except KeyError as exc:
                error = FormatError(
                    f"the data object {exc.args[0]} is missing behind its index: the trial "
                    "lost it (deleted, or never copied); its values cannot be read"
                )
                self.index.note_problem(str(exc.args[0]), error)
                raise error from None
            except StorageError as exc:
                self.index.note_problem("reading values", exc)
                raise
            for i, data in zip(missing, fetched, strict=True):
                if cache is not None:
                    cache.put(runs[i][0], runs[i][1], data)
                out[i] = memoryview(data)
        return out  # type: ignore[return-value]  # every slot is filled

    def _where(
        self, runs: Sequence[tuple[int, int, int]], picked: list[int]
    ) -> list[tuple[str, int, int]]:
        """(data object, start, length) of the picked runs, wherever their segments are now."""
        wanted = []
        for i in picked:
            key, shift = self.index.data_location(runs[i][0])
            wanted.append((key, runs[i][1] + shift, runs[i][2] - runs[i][1]))
        return wanted

    def read_spans(
        self, refs: Sequence[RawRef], max_gap: int = MAX_GAP
    ) -> list[tuple[list[int], memoryview]]:
        """Read ``refs`` in runs (see :func:`plan_runs`), all runs fetched together: per run,
        (the indices of its refs, by offset; the bytes from the first one's offset to the last
        one's end). Checksums are the caller's."""
        plan = plan_runs(
            [r.segment for r in refs], [r.offset for r in refs], [r.end for r in refs], max_gap
        )
        bufs = self.read_runs([(segment, start, end) for segment, start, end, _ in plan])
        return [(members, buf) for (_, _, _, members), buf in zip(plan, bufs, strict=True)]

    def prefetch(self, refs: Iterable[RawRef], max_gap: int = MAX_GAP) -> int:
        """Read many values with as few requests as possible and keep them until the next
        ``prefetch`` (:meth:`read` then serves them from memory). Returns the request count."""
        refs = list(refs)
        values, requests = self._views(refs, max_gap)
        self._fetched = {(r.segment, r.offset): v for r, v in zip(refs, values, strict=True)}
        return requests


def plan_runs(
    segments: Sequence[int], offsets: Sequence[int], ends: Sequence[int], max_gap: int = MAX_GAP
) -> list[tuple[int, int, int, list[int]]]:
    """Group byte ranges into runs, each read with one request: per data object (segment),
    ranges by offset, a new run wherever the gap to the previous range exceeds ``max_gap``.
    Returns (segment, start, end, indices of the member ranges) per run."""
    order = sorted(range(len(offsets)), key=lambda i: (segments[i], offsets[i]))
    runs: list[tuple[int, int, int, list[int]]] = []
    for i in order:
        seg, off, end = segments[i], offsets[i], ends[i]
        if runs:
            last_seg, start, last_end, members = runs[-1]
            if last_seg == seg and off - last_end <= max_gap:
                runs[-1] = (seg, start, max(last_end, end), members)
                members.append(i)
                continue
        runs.append((seg, off, end, [i]))
    return runs
