"""Plans that hold at every step: a tensor whose collections save every step (the vital
signs) is not re-planned at each step, and what it saves is the same."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensortap.core._collections import CollectionManager
from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import StepRecorder
from tensortap.core._records import ScalarSteps, StepBatch
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.core._vitals import VITALS

_NAMES = ("vitals/loss", "vitals/grad_norm", "vitals/lr", "vitals/update_norm", "vitals/step_time")


class _Sink:
    def __init__(self) -> None:
        self.batches: list[StepBatch] = []

    def submit(self, batch: StepBatch) -> None:
        self.batches.append(batch)

    def submit_steps(self, block: ScalarSteps) -> None:
        self.batches.extend(block.batches())


def _count_should_save(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    original = SaveConfigMode.should_save

    def counting(self: SaveConfigMode, step: int) -> bool:
        calls[0] += 1
        return original(self, step)

    monkeypatch.setattr(SaveConfigMode, "should_save", counting)
    return calls


def test_vital_signs_are_planned_once_not_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_should_save(monkeypatch)
    sink = _Sink()
    recorder = StepRecorder(CollectionManager(), sink, include_collections=[VITALS])
    for step in range(100):
        for i, name in enumerate(_NAMES):
            assert recorder.record(name, step + i / 8, (VITALS,))
        recorder.next_step()
    assert calls[0] <= 10  # the first step only; it was one per step and name (104)
    assert len(sink.batches) == 100
    last = sink.batches[-1]
    assert [r.name for r in last.records] == list(_NAMES)
    assert [float(r.data) for r in last.records] == [99 + i / 8 for i in range(5)]  # type: ignore[arg-type]


def test_a_schedule_that_is_not_every_step_is_still_asked_at_each_step() -> None:
    collections = CollectionManager()
    sink = _Sink()
    recorder = StepRecorder(collections, sink, include_collections=[VITALS])
    for step in range(4):
        recorder.record("vitals/loss", float(step), (VITALS,))
        recorder.next_step()
        if step == 1:  # from step 2 on, the vitals collection saves every other step
            collections.get(VITALS).save_config = SaveConfig(save_interval=2)
    assert [b.global_step for b in sink.batches if b.records] == [0, 1, 2]


def test_a_mode_with_another_schedule_is_planned_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    collections = CollectionManager()
    modes: dict[Any, Any] = {ModeKeys.TRAIN: SaveConfigMode(save_interval=1)}
    modes[ModeKeys.EVAL] = SaveConfigMode(save_interval=3)
    collections.get(VITALS).save_config = SaveConfig(mode_save_configs=modes)
    sink = _Sink()
    recorder = StepRecorder(collections, sink, include_collections=[VITALS])
    recorder.set_mode(ModeKeys.TRAIN)
    for _ in range(3):
        assert recorder.record("vitals/loss", 1.0, (VITALS,))
        recorder.next_step()
    recorder.set_mode(ModeKeys.EVAL)
    saved = [recorder.record("vitals/loss", 1.0, (VITALS,)) for _ in range(1)]
    recorder.next_step()
    for _ in range(3):
        saved.append(recorder.record("vitals/loss", 1.0, (VITALS,)))
        recorder.next_step()
    assert saved == [True, False, False, True]


def test_the_default_schedule_every_step_is_steady_until_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_should_save(monkeypatch)
    sink = _Sink()
    recorder = StepRecorder(
        CollectionManager(), sink, SaveConfig(save_interval=1), include_collections=["weights"]
    )
    for step in range(50):
        assert recorder.record("w", [1.0, 2.0], ["weights"])
        assert recorder.record("scale", float(step), ("weights",))
        recorder.next_step()
    assert calls[0] <= 4  # the first step only; it was one per step (50)
    recorder.save_config = SaveConfig(save_interval=3)  # from step 50 on: every third step
    saved = []
    for _ in range(6):
        saved.append(recorder.record("scale", 1.0, ("weights",)))
        recorder.next_step()
    assert saved == [False, True, False, False, True, False]  # steps 50..55
    assert [float(r.data) for r in sink.batches[49].records if r.name == "scale"] == [49.0]  # type: ignore[arg-type]


class _Arriving:
    """A number a device is still copying: ``resolve`` fills it (counted)."""

    nbytes = 0

    def __init__(self, value: float) -> None:
        self.number = np.full((), np.nan)
        self.value = value
        self.resolved = 0

    def resolve(self) -> None:
        self.resolved += 1
        self.number[()] = self.value


def test_an_arriving_number_is_kept_as_it_is_and_resolved_by_the_writer() -> None:
    """Saved as it is (the vital signs' plan), an arriving number is not waited for: its record
    holds the array and the deferred, which the writer resolves before writing."""
    sink = _Sink()
    recorder = StepRecorder(CollectionManager(), sink, include_collections=[VITALS])
    for step in range(3):
        arriving = _Arriving(2.5 + step)
        assert recorder.record_arriving("vitals/loss", arriving.number, arriving, (VITALS,))
        recorder.next_step()
        assert arriving.resolved == 0  # not waited for by the recorder
        (record,) = sink.batches[-1].records
        assert record.deferred is arriving and record.data is arriving.number
        sink.batches[-1].resolve_deferred()  # what the writer does
        assert float(record.data) == 2.5 + step


def test_an_arriving_number_under_reductions_is_waited_for_and_reduced() -> None:
    collections = CollectionManager()
    collections.get(VITALS).reduction_config = ReductionConfig(reductions=["max"])
    sink = _Sink()
    recorder = StepRecorder(collections, sink, include_collections=[VITALS])
    arriving = _Arriving(4.0)
    assert recorder.record_arriving("vitals/loss", arriving.number, arriving, (VITALS,))
    assert arriving.resolved == 1
    recorder.next_step()
    (record,) = sink.batches[-1].records
    assert record.deferred is None and record.reduction == "max" and record.value == 4.0
