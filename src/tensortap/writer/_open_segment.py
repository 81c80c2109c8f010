"""The segment a writer has open: its data object, its index so far, its size and steps, and
how one step's records are appended to it (each value's bytes, padded to the format's
alignment, with its CRC and, for a one-element value, the number itself in the index)."""

from __future__ import annotations

import time

import numpy as np

from tensortap.core._records import StepBatch
from tensortap.format._checksum import crc32
from tensortap.format._index import DATA_ALIGNMENT, IndexBuilder
from tensortap.storage._base import ObjectWriter
from tensortap.writer._series import one_number

_PADDING = bytes(DATA_ALIGNMENT)


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
        """Write one step's values to the data object and its records to the index."""
        builder = self.builder
        builder.add_step(batch.global_step, batch.mode, batch.mode_step, batch.wall_time)
        for record in batch.records:
            if record.data is None:
                builder.add(record, batch.global_step, batch.mode, batch.mode_step)
                continue
            scalar = one_number(record.data)
            view = memoryview(record.data.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
            length = len(view)
            crc = crc32(view)
            self.writer.write(view)
            pad = (-length) % DATA_ALIGNMENT
            if pad:
                self.writer.write(_PADDING[:pad])
            builder.add(
                record,
                batch.global_step,
                batch.mode,
                batch.mode_step,
                self.offset,
                length,
                crc,
                scalar,
            )
            self.offset += length + pad
        self.steps += 1
