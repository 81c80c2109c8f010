"""The per-step publish floor: what a step of a few scalars costs the writer, in counts.

A step of vital signs is five float64 numbers. The writer used to make one storage write per
value and take its queue lock once per step; a run of such steps now costs one write per step
and one lock per drained run (docs/benchmarks.md, "Vital signs every step")."""

from __future__ import annotations

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._records import Record, RecordKind, StepBatch
from tensortap.storage import MemoryStore
from tensortap.storage._base import ObjectWriter
from tensortap.trials import create_trial
from tensortap.writer import TrialWriter, WriterOptions

_VITALS = ("vitals/loss", "vitals/grad_norm", "vitals/lr", "vitals/update_norm", "vitals/step_time")


class _CountingStore(MemoryStore):
    """A memory store that counts the writes made to its data objects."""

    writes = 0

    def open_writer(self, key: str) -> ObjectWriter:
        inner = super().open_writer(key)
        store = self

        class _Counting(ObjectWriter):
            def write(self, data: bytes | bytearray | memoryview) -> None:
                store.writes += 1
                inner.write(data)

            def commit(self) -> None:
                inner.commit()

            def abort(self) -> None:
                inner.abort()

        return _Counting()


def _vitals_step(step: int) -> StepBatch:
    records = [
        Record(name, RecordKind.TENSOR, "float64", (), np.array(step + i / 8))
        for i, name in enumerate(_VITALS)
    ]
    return StepBatch(step, ModeKeys.TRAIN, step, 1000.0 + step, records)


def test_a_step_of_scalars_is_one_storage_write_and_reads_back_the_same() -> None:
    store = _CountingStore()
    writer = TrialWriter(store, "worker_0", WriterOptions(flush_secs=60))
    try:
        steps = 50
        for step in range(steps):
            writer.submit(_vitals_step(step))
        assert writer.flush(timeout=60)
        assert store.writes == steps  # it was one per value: 5 * steps
    finally:
        writer.close()
    trial = create_trial(store)
    for i, name in enumerate(_VITALS):
        tensor = trial.tensor(name)
        assert tensor.steps() == list(range(steps))
        assert [float(tensor.value(s)) for s in (0, 17, 49)] == [s + i / 8 for s in (0, 17, 49)]


def test_a_large_value_is_written_as_it_is_between_small_ones() -> None:
    store = _CountingStore()
    writer = TrialWriter(store, "worker_0", WriterOptions(flush_secs=60))
    big = np.arange(40_000, dtype=np.float32)  # 160 kB: never copied into a joined write
    try:
        records = [
            Record("a", RecordKind.TENSOR, "float32", (3,), np.ones(3, np.float32)),
            Record("big", RecordKind.TENSOR, "float32", big.shape, big),
            Record("b", RecordKind.TENSOR, "float64", (), np.array(2.5)),
        ]
        writer.submit(StepBatch(0, ModeKeys.TRAIN, 0, 1000.0, records))
        assert writer.flush(timeout=60)
        # "a" and its padding, "big", "b": three writes
        assert store.writes == 3
    finally:
        writer.close()
    trial = create_trial(store)
    np.testing.assert_array_equal(trial.tensor("big").value(0), big)
    np.testing.assert_array_equal(trial.tensor("a").value(0), np.ones(3, np.float32))
    assert float(trial.tensor("b").value(0)) == 2.5


def test_a_run_of_scalar_steps_leaves_the_queue_under_one_lock() -> None:
    """200 steps queued while the writer waits are taken off the queue in one acquisition
    of its lock (they were 200)."""
    writer = TrialWriter(MemoryStore(), "worker_0", WriterOptions(flush_secs=60))
    try:
        writer.submit(_vitals_step(0))
        assert writer.flush(timeout=60)
        before = writer.queue_releases
        with writer._cv:  # the writer cannot drain until all 200 are queued
            for step in range(1, 201):
                writer.submit(_vitals_step(step))
        assert writer.flush(timeout=60)
        assert writer.queue_releases - before == 1
        assert writer.status.steps_written == 201
    finally:
        writer.close()
