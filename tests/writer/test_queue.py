"""The writer's queue accounting: what a step's submission adds, its writing takes off."""

from __future__ import annotations

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._records import Record, RecordKind, StepBatch
from tensortap.storage import MemoryStore
from tensortap.writer import TrialWriter, WriterOptions


class _Deferred:
    """A value computed on the writer's thread, holding a buffer until then."""

    nbytes = 4 << 20

    def __init__(self, record: Record) -> None:
        self.record = record

    def resolve(self) -> None:  # as the torch converter's: the value in, the buffer given back
        self.record.value, self.record.deferred = 1.0, None


def _step(step: int) -> StepBatch:
    value = Record("w", RecordKind.REDUCTION, "float32", (1024,), reduction="l2")
    value.deferred = _Deferred(value)
    loss = Record("loss", RecordKind.TENSOR, "float64", (), np.array(float(step)))
    return StepBatch(step, ModeKeys.TRAIN, step, 0.0, [value, loss])


def test_the_queue_is_empty_once_steps_with_deferred_values_are_written() -> None:
    """A deferred value's buffer counts while the step waits, not after it is resolved: the
    queue's size goes back to 0 (it used to keep the buffers' bytes, growing with every such
    step; past 8 MB every submitted step then woke the writer, a share of a core each)."""
    writer = TrialWriter(MemoryStore(), "worker_0", WriterOptions(flush_secs=60))
    try:
        for step in range(5):
            writer.submit(_step(step))
        assert writer.flush(timeout=60)
        with writer._cv:
            assert writer._queued_bytes == 0
            assert not writer._queue
    finally:
        writer.close()
