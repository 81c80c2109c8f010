"""The learning rate of a Keras fit as training-loop facts (TrainingLoop judges them; see
:mod:`tensortap.core._lr_track`): the rate of each TRAIN step, as its vital signs read it
inside the step, before the update, so at no cost of its own. An optimizer whose learning
rate is a ``LearningRateSchedule`` evaluates it at every optimizer step (batch): its facts
say so (``scheduler_per_step/<Optimizer>/<Schedule>`` 1, ``scheduler_counts_steps`` 1), with
how many steps its schedule spans (``scheduler_period``: ``decay_steps``,
``first_decay_steps``, or the last boundary) and the optimizer's iterations
(``scheduler_steps``). A schedule written as if it counted epochs (``decay_steps=5`` meant as
five epochs) is done within the first epoch."""

from __future__ import annotations

from typing import Any

import keras

from tensortap.core._lr_track import RateTrack
from tensortap.keras._convert import to_numpy

#: The attributes of Keras's schedules that say how many steps the schedule spans.
_PERIODS = ("decay_steps", "first_decay_steps")


class LearningRateFacts:
    """The learning rate of a Keras fit, step by step (see the module)."""

    def __init__(self) -> None:
        self._track = RateTrack()
        self._steps = 0  # TRAIN steps whose learning rate was seen
        self._saved: dict[str, float] = {}  # the facts as last saved
        self._optimizer: int | None = None  # whose rate is tracked (its id)

    def see(self, lr: float, optimizer: Any) -> None:
        """A TRAIN step trained at ``lr`` by ``optimizer``. Another optimizer (a model compiled
        again to fine-tune at a lower rate, say) starts its own record: its rate is not
        compared with the last one's peak."""
        if id(optimizer) != self._optimizer:
            self._track, self._steps = RateTrack(), 0
            self._optimizer = id(optimizer)
        self._steps += 1
        self._track.see(lr, self._steps)

    def changed(self, optimizer: Any) -> dict[str, float]:
        """The facts of ``optimizer``'s learning rate that changed since the last call (a fact
        is saved when it changes; TrainingLoop reads each one's latest)."""
        label = type(optimizer).__name__
        facts = self._track.facts(label, self._steps)
        if facts:
            facts[f"steps/{label}"] = self._steps
            facts.update(_schedule_facts(optimizer, label))
        new = {k: v for k, v in facts.items() if self._saved.get(k) != v}
        self._saved.update(new)
        return new


def _schedule_facts(optimizer: Any, label: str) -> dict[str, float]:
    """The facts of the ``LearningRateSchedule`` that sets ``optimizer``'s rate (none for a
    rate that is a number or a variable, set per epoch by a callback, say)."""
    schedule = getattr(optimizer, "_learning_rate", None)
    if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return {}
    key = f"{label}/{type(schedule).__name__}"
    facts: dict[str, float] = {
        f"scheduler_per_step/{key}": 1.0,
        f"scheduler_counts_steps/{key}": 1,
    }
    try:
        facts[f"scheduler_steps/{key}"] = int(to_numpy(optimizer.iterations))
    except Exception:  # a backend whose variables read otherwise: the count is optional
        pass
    period = _period(schedule)
    if period is not None:
        facts[f"scheduler_period/{key}"] = period
    return facts


def _period(schedule: Any) -> float | None:
    """How many optimizer steps ``schedule`` spans, where its class says."""
    for attr in _PERIODS:
        value = getattr(schedule, attr, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    boundaries = getattr(schedule, "boundaries", None)
    if isinstance(boundaries, (list, tuple)) and boundaries:
        try:
            return float(max(boundaries))
        except (TypeError, ValueError):
            return None
    return None
