"""The segment a writer has open: its data object, its index so far, its size and steps, and
how one step's records are appended to it (each value's bytes, padded to the format's
alignment, with its CRC and, for a one-element value, the number itself in the index)."""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np

from tensortap.core._records import F8_NAME, Record, ScalarSteps, StepBatch
from tensortap.format._checksum import crc32, crc32_of_words
from tensortap.format._index import DATA_ALIGNMENT, IndexBuilder
from tensortap.storage._base import ObjectWriter
from tensortap.writer._series import one_number

_PADDING = bytes(DATA_ALIGNMENT)
#: Values smaller than this are gathered and written with one call per step.
_JOIN_BYTES = 64 * 1024
_F8 = np.dtype("<f8")
_UNPACK_F8 = struct.Struct("<d").unpack
_F8_PAD = (-8) % DATA_ALIGNMENT
assert _F8_PAD == 0  # a block of numbers is written without padding (DATA_ALIGNMENT is 8)


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
        write = self.writer.write
        offset = self.offset
        small: list[Any] = []
        rows: list[tuple[Record, int, int, int, float | None]] = []
        for record in batch.records:
            data = record.data
            if data is None:
                rows.append((record, 0, 0, 0, None))
                continue
            if data.dtype is _F8 and not data.shape:  # a float64 number (a vital sign)
                raw = data.tobytes()
                small.append(raw)
                rows.append((record, offset, 8, crc32(raw), _UNPACK_F8(raw)[0]))
                if _F8_PAD:
                    small.append(_PADDING[:_F8_PAD])
                offset += 8 + _F8_PAD
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
            rows.append((record, offset, length, crc, scalar))
            offset += length + pad
        if small:
            write(b"".join(small))
        builder = self.builder
        builder.add_step(batch.global_step, batch.mode, batch.mode_step, batch.wall_time)
        builder.add_step_records(batch.global_step, batch.mode, batch.mode_step, rows)
        self.offset = offset
        self.steps += 1

    def append_scalar_steps(self, block: ScalarSteps) -> None:
        """Write many steps of numbers at once: the same bytes and index rows as
        :meth:`append` of each step in turn (a step's numbers in the order of its names), in
        one write and a few array passes, whatever the number of steps."""
        values, kept = block.values, block.kept
        count_names = len(block.names)
        if kept is None:
            flat = values.reshape(-1)
            name_index = np.tile(np.arange(count_names), len(values))
            row_of = np.repeat(np.arange(len(values)), count_names)
        else:
            flat = values[kept]
            rows, name_index = np.nonzero(kept)
            row_of = rows
        data = np.ascontiguousarray(flat, dtype=_F8)
        offset = self.offset
        if len(data):
            self.writer.write(data.tobytes())
        steps = list(
            zip(
                block.global_steps.tolist(),
                [int(block.mode)] * len(block),
                block.mode_steps.tolist(),
                [block.wall_time] * len(block),
                strict=True,
            )
        )
        self.builder.add_scalar_steps(
            steps,
            block.names,
            name_index,
            F8_NAME,
            block.global_steps[row_of],
            block.mode_steps[row_of],
            offset + 8 * np.arange(len(data), dtype=np.uint64),
            crc32_of_words(data),
            data,
            block.mode,
        )
        self.offset = offset + 8 * len(data)
        self.steps += len(block)
