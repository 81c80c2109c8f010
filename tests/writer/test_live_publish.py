"""A live writer publishes promptly when its loop is idle, without cutting a fast loop's run
into many small segments (WriterOptions.idle_flush_secs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError, StepNotYetAvailable


def _hook(path: Path, **options: float | None) -> tt.Hook:
    return tt.Hook(
        path,
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=tt.WriterOptions(**options),  # type: ignore[arg-type]
    )


def test_the_steps_of_a_loop_that_stops_are_published_long_before_flush_secs(
    tmp_path: Path,
) -> None:
    """A loop that stops (a long evaluation, a slow step, a hang): its last steps reach a live
    reader soon after it stops, not flush_secs later (here a minute)."""
    hook = _hook(tmp_path / "run", flush_secs=60)
    trial = tt.create_trial(tmp_path / "run")
    for step in range(5):
        hook.save_scalar("loss", float(step))
        hook.next_step()
    try:
        # raises StepNotYetAvailable after 20 s, a third of flush_secs: published by the idle flush
        trial.wait_for_steps([4], timeout=20)
        assert trial.tensor("loss").value(4) == 4.0
    finally:
        hook.close()


def test_a_loop_saving_more_often_than_the_idle_time_keeps_one_segment_per_flush(
    tmp_path: Path,
) -> None:
    """Steps 0.15 s apart are each 'idle' for longer than idle_flush_secs (0.1 s); publishing
    each at once would make a segment per step, and long runs are read segment by segment."""
    hook = _hook(tmp_path / "run", flush_secs=0.5, idle_flush_secs=0.1)
    start = time.monotonic()
    for step in range(16):
        hook.save_scalar("loss", float(step))
        hook.next_step()
        time.sleep(0.15)  # the training step's own time (pacing the loop, not waiting)
    elapsed = time.monotonic() - start
    hook.close()
    segments = hook.status.writer.segments_published
    assert segments <= elapsed / 0.5 + 2, (segments, elapsed)
    assert tt.create_trial(tmp_path / "run").steps() == list(range(16))


def test_idle_publishing_can_be_turned_off(tmp_path: Path) -> None:
    hook = _hook(tmp_path / "run", flush_secs=60, idle_flush_secs=None)
    trial = tt.create_trial(tmp_path / "run")
    hook.save_scalar("loss", 1.0)
    hook.next_step()
    try:
        with pytest.raises(StepNotYetAvailable):
            trial.wait_for_steps([0], timeout=1.0)  # would be published 60 s after the step
    finally:
        hook.close()
    assert tt.create_trial(tmp_path / "run").steps() == [0]


@pytest.mark.parametrize("bad", [0, -0.1, True, "0.1"])
def test_idle_flush_secs_is_validated(bad: object) -> None:
    with pytest.raises(InvalidConfigError, match="idle_flush_secs must be a number > 0"):
        tt.WriterOptions(idle_flush_secs=bad)  # type: ignore[arg-type]
