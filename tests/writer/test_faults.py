"""Fault injection: storage errors and a full queue never stop training, and are reported."""

from __future__ import annotations

import threading
import time

import numpy as np

import tensortap as tt
from tensortap.exceptions import StorageError
from tensortap.storage import MemoryStore


class FlakyStore(MemoryStore):
    """Fails every put of an index object while `failing` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = threading.Event()

    def put(self, key: str, data: bytes) -> None:
        if self.failing.is_set() and key.endswith(".ttidx"):
            raise StorageError("No space left on device (injected)")
        super().put(key, data)


class SlowStore(MemoryStore):
    """Blocks data writes until released, so the queue fills up."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def open_writer(self, key: str):
        self.release.wait(timeout=30)
        return super().open_writer(key)


def test_storage_errors_are_counted_and_training_continues(caplog) -> None:
    store = FlakyStore()
    hook = tt.Hook(store, save_config=tt.SaveConfig(save_interval=1))
    hook.save_scalar("x", 0.0)
    hook.next_step()
    assert hook.flush(timeout=10)
    store.failing.set()
    hook.save_scalar("x", 1.0)
    hook.next_step()
    hook.flush(timeout=10)
    store.failing.clear()
    hook.save_scalar("x", 2.0)
    hook.next_step()
    status = hook.close()
    assert status.writer.errors == 1 and status.writer.steps_lost == 1
    assert not status.healthy
    assert "No space left on device" in caplog.text
    trial = tt.create_trial(store)
    assert trial.steps() == [0, 2]
    assert trial.tensor("x").value(2) == 2.0
    assert any("writer errors" in p and "injected" in p for p in trial.problems())


def test_full_queue_drop_policy_records_the_drop() -> None:
    store = SlowStore()
    options = tt.WriterOptions(max_queue_bytes=10_000, when_full="drop")
    hook = tt.Hook(store, save_config=tt.SaveConfig(save_interval=1), writer_options=options)
    for i in range(20):  # each step is 8 KB: the queue holds one at a time
        hook.save_tensor("big", np.full(1024, i, np.float64))
        hook.next_step()
    store.release.set()
    status = hook.close()
    assert status.writer.steps_dropped > 0
    assert status.writer.steps_written + status.writer.steps_dropped == 20
    trial = tt.create_trial(store)
    assert len(trial.steps()) == status.writer.steps_written
    assert any("dropped" in p for p in trial.problems())


def test_full_queue_block_policy_keeps_everything() -> None:
    store = SlowStore()
    options = tt.WriterOptions(max_queue_bytes=10_000, when_full="block")
    hook = tt.Hook(store, save_config=tt.SaveConfig(save_interval=1), writer_options=options)

    def train() -> None:
        for i in range(20):
            hook.save_tensor("big", np.full(1024, i, np.float64))
            hook.next_step()

    training = threading.Thread(target=train)
    training.start()
    deadline = time.monotonic() + 30
    while hook.status.writer.steps_submitted < 2:  # the writer is stuck on step 0; step 1 waits
        assert time.monotonic() < deadline, "training never reached the full queue"
        time.sleep(0.001)
    # The store is still blocked, so a non-blocking policy would have let training finish.
    assert training.is_alive()
    assert hook.status.writer.steps_dropped == 0
    store.release.set()
    training.join(timeout=30)
    assert not training.is_alive()
    status = hook.close()
    assert status.healthy and status.writer.steps_written == 20
    assert tt.create_trial(store).steps() == list(range(20))


def test_internal_errors_are_contained(monkeypatch) -> None:
    hook = tt.Hook(MemoryStore(), save_config=tt.SaveConfig(save_interval=1))

    def broken(*args, **kwargs):
        raise RuntimeError("bug inside tensortap")

    monkeypatch.setattr("tensortap.core._recorder.records_from_array", broken)
    assert hook.save_tensor("x", np.ones(2)) is False
    hook.next_step()
    status = hook.close()
    assert status.internal_errors == 1 and "bug inside tensortap" in (
        status.last_internal_error or ""
    )


def test_flush_is_true_only_while_every_step_so_far_is_published() -> None:
    """A full disk: flush() must not report steps as published that were lost (it said True
    for 40 of 40 steps while 14 were published)."""
    store = FlakyStore()
    hook = tt.Hook(store, save_config=tt.SaveConfig(save_interval=1))
    answers = []
    for step in range(6):
        if step == 3:
            store.failing.set()  # the disk fills up
        hook.save_scalar("x", float(step))
        hook.next_step()
        answers.append(hook.flush(timeout=10))
    hook.close()
    published = tt.create_trial(store).steps()
    assert published == [0, 1, 2]
    assert answers == [True, True, True, False, False, False]
