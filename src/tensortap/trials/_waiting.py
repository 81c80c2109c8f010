"""Where training stands relative to a step of a trial it is still writing, and waiting for
steps to be saved."""

from __future__ import annotations

import time
from collections.abc import Iterable
from enum import Enum
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import NoMoreData, StepNotYetAvailable
from tensortap.trials._parts import TrialParts


class StepState(Enum):
    """Where training stands relative to a step."""

    UNAVAILABLE = 0  # training went past it without saving it
    AVAILABLE = 1  # saved, by every worker that will save it
    NOT_YET_AVAILABLE = 2  # training has not reached it (or not every worker has)


def step_state(trial: TrialParts, step: int, mode: ModeKeys | None) -> StepState:
    """AVAILABLE, UNAVAILABLE (passed without saving) or NOT_YET_AVAILABLE."""
    if step in set(trial.steps(mode)):
        return StepState.AVAILABLE
    index = trial.saved_index
    workers = list(index.workers.values())
    if not workers or len(workers) < index.expected_workers():
        return StepState.NOT_YET_AVAILABLE
    if mode in (None, ModeKeys.GLOBAL):
        passed = all(w.has_passed(step) for w in workers)
    else:
        passed = all(any(m == mode and s > step for m, s in w.mode_to_global) for w in workers)
    return StepState.UNAVAILABLE if passed else StepState.NOT_YET_AVAILABLE


def wait_for_steps(
    trial: TrialParts, required_steps: Iterable[int], mode: Any, timeout: float | None
) -> None:
    """Block until every step is saved or passed (polling with a backoff); NoMoreData if
    training ended first, StepNotYetAvailable when ``timeout`` seconds pass first."""
    wanted = list(required_steps)
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.01
    while True:
        trial.refresh()
        pending = [s for s in wanted if _state(trial, s, mode) == StepState.NOT_YET_AVAILABLE]
        if not pending:
            return
        if trial.saved_index.all_ended():
            raise NoMoreData(
                f"training has ended; steps {pending}{mode_text(mode)} will never be saved"
            )
        if deadline is not None and time.monotonic() >= deadline:
            raise StepNotYetAvailable(pending[0], trial.mode_key(mode), trial.last_saved_step(mode))
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _state(trial: TrialParts, step: int, mode: Any) -> StepState:
    """What ``Trial.has_passed_step`` answers (without importing Trial)."""
    trial.refresh_if_stale()
    return step_state(trial, step, trial.mode_key(mode))


def mode_text(mode: Any) -> str:
    return "" if mode is None else f" of mode {getattr(mode, 'name', mode)}"
