"""StepRecorder.has_saved: what the current step saved so far, forgotten at the step's end."""

from __future__ import annotations

from tensortap.core._collections import CollectionManager
from tensortap.core._recorder import StepRecorder
from tensortap.core._records import ScalarSteps, StepBatch
from tensortap.core._save_config import SaveConfig


def test_has_saved_tells_what_the_current_step_saved() -> None:
    batches: list[StepBatch] = []

    class Sink:
        def submit(self, batch: StepBatch) -> None:
            batches.append(batch)

        def submit_steps(self, block: ScalarSteps) -> None:
            batches.extend(block.batches())

    recorder = StepRecorder(
        CollectionManager(), Sink(), SaveConfig(save_interval=2), include_collections=["labels"]
    )
    assert recorder.record("labels", [1, 2], ["labels"])
    assert recorder.has_saved("labels") and not recorder.has_saved("predictions")
    recorder.next_step()  # step 1: not due, nothing saved
    assert not recorder.record("labels", [1, 2], ["labels"])
    assert not recorder.has_saved("labels")
    assert [r.name for r in batches[0].records] == ["labels"]
