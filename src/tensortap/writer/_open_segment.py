"""The segment a writer has open: its data object, its index so far, its size and steps, and
how one step's records are appended to it (each value's bytes, padded to the format's
alignment, with its CRC and, for a one-element value, the number itself in the index)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tensortap.core._records import StepBatch
from tensortap.format._checksum import crc32
from tensortap.format._index import DATA_ALIGNMENT, IndexBuilder
from tensortap.storage._base import ObjectWriter
from tensortap.writer._series import one_number

_PADDING = bytes(DATA_ALIGNMENT)
#: Values smaller than this are gathered and written with one call per step.
_JOIN_BYTES = 64 * 1024


class OpenSegment:
    """The segment being written: its data object, its index so far, its size and steps."""

    def __init__(self, seq: int, writer: ObjectWriter) -> None:
        self.seq = seq
        self.writer = writer
        self.builder = IndexBuilder()
        self.offset = 0
        self.opened = time.monotonic()
        self.steps = 0

    def append(self, batch: StepBatch) -> None:
        """Write one step's values to the data object and its records to the index.

        Small values (a step of scalars) go to the data object in one write per step; a value
        of ``_JOIN_BYTES`` or more is written as it is (never copied)."""
        builder = self.builder
        global_step, mode, mode_step = batch.global_step, batch.mode, batch.mode_step
        builder.add_step(global_step, mode, mode_step, batch.wall_time)
        write = self.writer.write
        offset = self.offset
        small: list[Any] = []
        for record in batch.records:
            data = record.data
            if data is None:
                builder.add(record, global_step, mode, mode_step)
                continue
            scalar = one_number(data)
            view = memoryview(data.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
            length = len(view)
            crc = crc32(view)
            pad = (-length) % DATA_ALIGNMENT
            if length < _JOIN_BYTES:
                small.append(view)
                if pad:
                    small.append(_PADDING[:pad])
            else:
                if small:
                    write(b"".join(small))
                    small.clear()
                write(view)
                if pad:
                    write(_PADDING[:pad])
            builder.add(record, global_step, mode, mode_step, offset, length, crc, scalar)
            offset += length + pad
        if small:
            write(b"".join(small))
        self.offset = offset
        self.steps += 1
