"""Reading saved tensor bytes: one value at a time, or many in as few ranged reads as possible.

Every value is checked against its CRC-32 before it is decoded: a corrupt file raises
FormatError rather than handing back garbled numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core.dtypes import decode_array
from tensortap.exceptions import FormatError
from tensortap.format.checksum import crc32

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
        return self.decode(ref, self.read_run(ref.segment, ref.offset, ref.end))

    def verify(self, ref: RawRef, buf: bytes | bytearray | memoryview) -> None:
        self.check(ref.segment, ref.offset, ref.crc32, buf)

    def check(
        self, segment: int, offset: int, crc: int, buf: bytes | bytearray | memoryview
    ) -> None:
        """Raise FormatError unless ``buf`` (the bytes at ``offset``) has CRC-32 ``crc``."""
        if crc32(buf) != crc:
            key = self.index.segments[segment].index.data_key
            raise FormatError(
                f"data at {key}[{offset}:{offset + len(buf)}] fails its checksum: "
                "the file is corrupt"
            )

    def decode(self, ref: RawRef, buf: bytes | bytearray | memoryview) -> np.ndarray:
        self.verify(ref, buf)
        return decode_array(buf, ref.dtype, ref.shape)

    def read_run(self, segment: int, start: int, end: int) -> memoryview:
        """The bytes ``[start, end)`` of a segment's data object, in one request."""
        key = self.index.segments[segment].index.data_key
        return memoryview(self.store.get_range(key, start, end - start))

    def read_spans(
        self, refs: Iterable[RawRef], max_gap: int = MAX_GAP
    ) -> Iterator[tuple[list[RawRef], memoryview]]:
        """Read ``refs`` in runs (see :func:`plan_runs`): yields (the run's refs by offset, the
        bytes from the first one's offset to the last one's end). Checksums are the caller's."""
        refs = list(refs)
        plan = plan_runs(
            [r.segment for r in refs], [r.offset for r in refs], [r.end for r in refs], max_gap
        )
        for segment, start, end, members in plan:
            yield [refs[m] for m in members], self.read_run(segment, start, end)

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
