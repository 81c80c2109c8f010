"""How a hook numbers this session's steps after the earlier sessions of its worker: it
continues the trial's count (and says so when there were earlier sessions), and
:meth:`Hook.continue_at <tensortap.hook._hook.Hook.continue_at>` numbers a mode's steps as the
training counts them, counting steps again (listed in the session's record) when the training
goes back. Where a session starts is read by :mod:`tensortap.writer._sessions`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import StepRecorder
from tensortap.writer import SessionStart

logger = logging.getLogger("tensortap.hook")  # the hook's one logger

#: The (trial, worker) pairs a hook of this process has written: a later session of one of
#: them is this process writing on (a trainer's ``evaluate()`` after ``train()``), not
#: another run in the same ``out_dir``.
_WRITTEN_HERE: set[tuple[str, str]] = set()


class SessionSteps:
    """The step count of one hook's session: ``recorder`` counts, ``note_session`` records in
    the session's record what changed (contained: it never raises)."""

    def __init__(
        self,
        recorder: StepRecorder,
        worker: str,
        out_dir: str,
        note_session: Callable[[dict[str, Any]], object],
    ) -> None:
        self._recorder = recorder
        self._worker = worker
        self._out_dir = out_dir
        self._note_session = note_session
        self._rolled_back: list[list[Any]] = []  # [mode, first, last] counted again

    def resume(self, start: SessionStart) -> None:
        """Start counting where the worker's earlier sessions stopped (see
        :mod:`tensortap.writer._sessions`), and say so when there were any."""
        self._recorder.resume(start.global_step, start.mode_steps)
        key = (os.path.abspath(self._out_dir), self._worker)
        here = key in _WRITTEN_HERE
        _WRITTEN_HERE.add(key)
        if start.resumed and here:
            logger.info(
                "tensortap: %s of the trial at %s writes on after this process's earlier "
                "session, at global step %s",
                self._worker,
                self._out_dir,
                _counts_text(start.global_step, start.mode_steps),
            )
        elif start.resumed:
            logger.warning(
                "tensortap: %s of the trial at %s resumed: it holds steps up to global step %d "
                "from %d earlier session(s); this session continues at global step %s, so no "
                "step is written over (a separate run belongs in its own out_dir)",
                self._worker,
                self._out_dir,
                start.last_step,
                start.index,
                _counts_text(start.global_step, start.mode_steps),
            )

    def continue_at(self, step: int, mode: ModeKeys, source: str) -> None:
        """Number the steps of ``mode`` from ``step`` on (checked by the caller; see
        :meth:`Hook.continue_at <tensortap.hook._hook.Hook.continue_at>`)."""
        recorder = self._recorder
        before = recorder.count_mode_from(mode, step)
        if before == step:
            return
        updates: dict[str, Any] = {
            "mode_steps": {m.name: n for m, n in recorder.counts().items()},
            "step_source": source,
        }
        if step < before:
            self._rolled_back.append([mode.name, step, before - 1])
            updates["rolled_back"] = list(self._rolled_back)
            logger.warning(
                "tensortap: %s puts %s at step %d, but %s already counted %s steps up to %d: "
                "it counts %s steps %d-%d again. The earlier ones keep their global steps "
                "(before %d) and stay readable by global step and in trial.sessions(); by %s "
                "step, those numbers now give this session's values",
                source,
                mode.name,
                step,
                self._worker,
                mode.name,
                before - 1,
                mode.name,
                step,
                before - 1,
                recorder.global_step,
                mode.name,
            )
        self._note_session(updates)


def _counts_text(global_step: int, mode_steps: dict[ModeKeys, int]) -> str:
    """``12 (TRAIN 10, EVAL 2)``: where a session's count starts."""
    modes = ", ".join(f"{m.name} {n}" for m, n in sorted(mode_steps.items()) if n > 0)
    return f"{global_step} ({modes})" if modes else str(global_step)
