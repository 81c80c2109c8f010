"""Reading saved tensor bytes: one value at a time, or many in as few ranged reads as possible.

Every value is checked against its CRC-32 before it is decoded: a corrupt file raises
FormatError rather than handing back garbled numbers.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core.dtypes import decode_array
from tensortap.exceptions import FormatError

if TYPE_CHECKING:
    from tensortap.storage.base import Store
    from tensortap.trials.index import TrialIndex

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


class ValueReader:
    """Reads (and verifies) the raw bytes the index points at."""

    def __init__(self, store: Store, index: TrialIndex) -> None:
        self.store = store
        self.index = index
        self._fetched: dict[tuple[int, int], np.ndarray] = {}

    def read(self, ref: RawRef) -> np.ndarray:
        """One value, as a new array (from the last :meth:`prefetch` when it holds it)."""
        fetched = self._fetched.get((ref.segment, ref.offset))
        if fetched is not None:
            return np.array(fetched, copy=True)
        key = self.index.segments[ref.segment].index.data_key
        return self.decode(ref, self.store.get_range(key, ref.offset, ref.length))

    def verify(self, ref: RawRef, buf: bytes | bytearray | memoryview) -> None:
        if zlib.crc32(buf) != ref.crc32:
            key = self.index.segments[ref.segment].index.data_key
            raise FormatError(
                f"data at {key}[{ref.offset}:{ref.end}] fails its checksum: the file is corrupt"
            )

    def decode(self, ref: RawRef, buf: bytes | bytearray | memoryview) -> np.ndarray:
        self.verify(ref, buf)
        return decode_array(buf, ref.dtype, ref.shape)

    def read_spans(
        self, refs: Iterable[RawRef], max_gap: int = MAX_GAP
    ) -> Iterator[tuple[list[RawRef], memoryview]]:
        """Group ``refs`` by data object into runs no more than ``max_gap`` bytes apart and read
        each run with one request: yields (the run's refs by offset, the bytes from the first
        ref's offset to the last one's end). Checksums are the caller's to verify."""
        by_segment: dict[int, list[RawRef]] = {}
        for ref in refs:
            by_segment.setdefault(ref.segment, []).append(ref)
        for seg_id, seg_refs in by_segment.items():
            key = self.index.segments[seg_id].index.data_key
            seg_refs.sort(key=lambda r: r.offset)
            run = [seg_refs[0]]
            for ref in seg_refs[1:]:
                if ref.offset - run[-1].end > max_gap:
                    yield run, self._read_run(key, run)
                    run = []
                run.append(ref)
            yield run, self._read_run(key, run)

    def _read_run(self, key: str, run: list[RawRef]) -> memoryview:
        start = run[0].offset
        end = max(r.end for r in run)
        return memoryview(self.store.get_range(key, start, end - start))

    def prefetch(self, refs: Iterable[RawRef], max_gap: int = MAX_GAP) -> int:
        """Read many values with as few requests as possible and keep them until the next
        ``prefetch`` (:meth:`read` then serves them from memory). Returns the request count."""
        fetched: dict[tuple[int, int], np.ndarray] = {}
        reads = 0
        for run, buf in self.read_spans(refs, max_gap):
            reads += 1
            start = run[0].offset
            for r in run:
                piece = buf[r.offset - start : r.end - start]
                fetched[(r.segment, r.offset)] = self.decode(r, piece)
        self._fetched = fetched
        return reads
