"""MemoryCheckpoints (the copies a trainer's callback takes) and a step's micro-batches in the
shared Rollback: framework-free, no torch."""

from __future__ import annotations

import pytest

from tensortap.exceptions import CheckpointError, InvalidConfigError
from tensortap.healing import MemoryCheckpoints, Rollback
from tensortap.healing._budget import MicroBatches


def test_the_newest_keep_copies_are_held_and_put_back() -> None:
    state = {"w": 0}
    restored: list[int] = []
    checkpoints = MemoryCheckpoints(keep=2)
    checkpoints.bind(lambda: dict(state), lambda copy: restored.append(copy["w"]))
    for step in range(0, 20, 5):
        state["w"] = step
        checkpoints.save(step, {"at": step})
    assert checkpoints.steps() == [10, 15]
    assert checkpoints.load(10) == {"at": 10} and restored == [10]
    assert checkpoints.state(15) == {"w": 15}
    checkpoints.forget(15)
    assert checkpoints.steps() == [10]
    with pytest.raises(CheckpointError, match="step 5"):
        checkpoints.load(5)
    checkpoints.bind(lambda: {}, lambda copy: None)  # another run: nothing of the last held
    assert checkpoints.steps() == []


def test_unbound_or_badly_made_memory_checkpoints_say_what_to_do() -> None:
    with pytest.raises(CheckpointError, match="RollbackCallback"):
        MemoryCheckpoints().save(0, {})
    with pytest.raises(InvalidConfigError, match="keep"):
        MemoryCheckpoints(keep=0)
    with pytest.raises(InvalidConfigError, match="capture"):
        MemoryCheckpoints().bind(None, None)  # type: ignore[arg-type]
    # a rollback whose save fails goes on: an event, no crash
    rollback = Rollback(MemoryCheckpoints(), every=5)
    rollback.checkpoint(0)
    assert [e.kind for e in rollback.events] == ["save_failed"]


def test_a_request_naming_an_accumulated_step_skips_each_of_its_micro_batches() -> None:
    held: list[int] = []
    checkpoints = MemoryCheckpoints()
    checkpoints.bind(lambda: None, lambda copy: held.append(1))
    rollback = Rollback(checkpoints, every=5)
    rollback.checkpoint(10)
    rollback.trained(12, MicroBatches(("a", "b")))
    rollback.request(12, [], "the loop's loss check")
    assert rollback.restore() == 10 and held == [1]
    (event,) = rollback.events
    assert event.batches == ("a", "b")
