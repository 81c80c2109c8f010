"""A Keras loop's vital signs into their steps.

Each batch's row of vital signs (:mod:`tensortap.keras._vitals`) goes to the recorder under the
batch's step, and a TRAIN row's learning rate joins the rate's facts
(:mod:`tensortap.keras._lr_facts`). On TensorFlow the TRAIN rows wait in the ring: a batch
that saves nothing else only counts itself (:attr:`VitalSteps.lag`), and the steps it counted
are published when the ring is read, around the next saving step, every half ring and at the
ends of epochs and loops. More than one such step goes to the writer as one block (one
recorder pass, one submission), as recording each row and closing its step would save.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tensortap.core._collections import TRAINING_LOOP
from tensortap.core._modes import ModeKeys
from tensortap.core._vitals import VITALS, Vital
from tensortap.keras._lr_facts import LearningRateFacts
from tensortap.keras._tap_host import KerasTapHost
from tensortap.keras._vitals import RING, BatchVitals

_VITALS = (VITALS,)
#: The vital signs a ring row gives, in the order a row's are recorded (BatchVitals.read_ring).
_RING_NAMES = (Vital.LOSS, Vital.LR, Vital.GRAD_NORM, Vital.SAMPLES_PER_SECOND, Vital.STEP_TIME)


class VitalSteps:
    """The vital signs of a Keras hook's batches (``hook``), step by step.

    ``tape_open`` says whether a ``wrap_tape`` step is in progress (its variables are saved at
    the step's end: its steps keep the step-by-step path)."""

    def __init__(
        self, hook: KerasTapHost, vitals: BatchVitals, tape_open: Callable[[], bool]
    ) -> None:
        self.hook = hook
        self.vitals = vitals
        self.tape_open = tape_open
        self._recorder = hook.recorder  # read every batch: held, as the other parts hold theirs
        self.rates = LearningRateFacts()  # each TRAIN step's rate (from its vital signs)
        # TRAIN batches ended whose steps are not published yet (their vital signs are in the
        # ring: the recorder stays at the first of them), and the TRAIN step at which the ring
        # is read next (something other than vital signs is due, or half the ring is unread)
        self.lag = 0
        self.read_at = 0

    def record(self, row: Mapping[str, float], training: bool) -> None:
        """A batch's vital signs (full names and floats already: straight to the recorder, on
        every batch's path); a TRAIN batch's learning rate joins the rate's facts."""
        recorder = self._recorder
        for name, number in row.items():
            recorder.record(name, number, _VITALS)
        if training:
            self.see_rate(row)

    def see_rate(self, row: Mapping[str, float]) -> None:
        """A TRAIN step's learning rate (in its vital signs) joins the rate's facts."""
        lr = row.get(Vital.LR)
        if lr is not None:
            self.rates.see(lr, getattr(self.hook.model, "optimizer", None))

    def save_rate_facts(self, optimizer: Any) -> None:
        """The learning rate's facts that changed, when ``training_loop`` is due."""
        if not self._recorder.is_collection_due(TRAINING_LOOP):
            return
        for name, value in self.rates.changed(optimizer).items():
            self._recorder.record(f"{TRAINING_LOOP}/{name}", value, [TRAINING_LOOP])

    def publish_ring(self, last_open: bool, ring: Any = None) -> None:
        """Publish the :attr:`lag` steps read from the ring (and, with ``last_open``, record the
        current step's row too, leaving that step open for what else it saves); ``ring``: the
        ring's value when it was read with the step's other values."""
        steps, self.lag = self.lag, 0
        recorder = self._recorder
        rows = self.vitals.read_ring(steps + int(last_open), ring)
        if steps > 1 and recorder.mode == ModeKeys.TRAIN:
            self._publish_block(rows[:steps])
            rows, steps = rows[steps:], 0
        for index, row in enumerate(rows):
            self.record(row, training=True)
            if index < steps:
                recorder.next_step()

    def _publish_block(self, rows: list[dict[str, float]]) -> None:
        """Publish steps read from the ring, the current one first, as one block: what
        recording each row and closing its step would save. A step of a ``wrap_tape`` loop in
        progress (its variables saved at the step's end) keeps the step-by-step path."""
        # a row leaves out what it did not see (read_ring never gives a NaN)
        values = np.array([[row.get(n, np.nan) for n in _RING_NAMES] for row in rows])
        first = self._recorder.mode_step
        self._recorder.publish_scalar_steps(
            range(first, first + len(rows)),
            dict(zip(_RING_NAMES, values.T, strict=True)),
            _VITALS,
            kept=~np.isnan(values),
            step_end=self.tape_open(),
        )
        for row in rows:
            self.see_rate(row)

    def next_read(self) -> int:
        """The TRAIN step at which the ring is read next: the next one (after the current)
        at which a collection other than ``vitals`` is due, at most half the ring on (in
        rows: a step of ``steps_per_execution`` k batches writes k)."""
        recorder = self._recorder
        rows = getattr(self.hook.model, "steps_per_execution", 1)
        most = max(1, RING // 2 // (rows if isinstance(rows, int) and rows > 0 else 1))
        configs = [
            recorder.collections.get(name).save_config or recorder.save_config
            for name in recorder.include_collections
            if name != VITALS
        ]
        first = recorder.mode_step + 1
        for step in range(first, first + most - 1):
            if any(config.should_save(ModeKeys.TRAIN, step) for config in configs):
                return step
        return first + most - 1
