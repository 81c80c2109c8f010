"""When does a training step end? The rule framework hooks share, as a small state machine.

A framework adapter reports three kinds of event: a forward pass of a registered top-level model
starts, a backward pass ends, and an update happens (an optimizer step, or a mixed-precision
scaler update). The rule:

- In TRAIN (and GLOBAL) mode a step is one training iteration: it ends with its *update*. The
  update is the most specific event the run has shown: a scaler update if a scaler is known, else
  an optimizer step if an optimizer is known, else a backward pass. The step is closed lazily, when
  the next forward of a top-level model starts (or the mode changes, or the hook closes), so values
  saved after the update still belong to the iteration that produced them. Several forwards before
  the update (a model called twice) and several backward passes before one optimizer step
  (gradient accumulation, once the optimizer is known) stay in one step.
- In EVAL and PREDICT mode each forward of a top-level model is one step.
- Once the user marks steps explicitly, automatic boundaries stop.
"""

from __future__ import annotations

from enum import IntEnum

from tensortap.core._modes import ModeKeys


class Update(IntEnum):
    """What ends a training step, from least to most specific."""

    BACKWARD = 0
    OPTIMIZER_STEP = 1
    SCALER_UPDATE = 2


class StepTracker:
    """Decides, from framework events, when a new step begins."""

    def __init__(self) -> None:
        self.automatic = True
        self.update = Update.BACKWARD
        self._forwarded = False
        self._updated = False

    def expect(self, update: Update) -> None:
        """A more specific update event exists in this run (an optimizer or scaler is known)."""
        if update > self.update:
            self.update = update

    def forward_starts_step(self, mode: ModeKeys) -> bool:
        """A top-level forward begins: True if the current step must be closed first."""
        if not self.automatic:
            return False
        if mode in (ModeKeys.TRAIN, ModeKeys.GLOBAL):
            return self._updated
        return self._forwarded

    def on_forward(self) -> None:
        self._forwarded = True

    def on_update(self, update: Update) -> None:
        """A backward pass ended, an optimizer stepped, or a scaler updated."""
        self.expect(update)
        if update == self.update:
            self._updated = True

    def reset(self) -> None:
        """The current step was closed."""
        self._forwarded = False
        self._updated = False

    def stop_automatic(self) -> None:
        """The user marks steps from now on."""
        self.automatic = False
