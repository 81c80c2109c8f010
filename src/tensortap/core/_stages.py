"""Stages of training: where a fit of another model begins in the same trial.

A script may train one model after another into one trial (a pre-trained encoder under a new
head for a second task, a Hugging Face or Lightning fine-tuning after a pre-training): the
second fit's losses are another task's, on another scale, and the rules that compare values
over time (Overfit, Overtraining, LossNotDecreasing, the spike rules, AccuracyAtChance,
ClassImbalance) start again there. The framework hooks tell :class:`StageMarks` when a fit
begins; the first TRAIN step after a fit of another model (or of the same one on another
task, where the framework says what the task is: a Keras model compiled again with another
loss) saves the training-loop fact ``stage`` (:data:`tensortap.core._collections.STAGE`), its
number from 1. A fit of the same model again (more epochs, a resume, a rollback) is the same
stage. The marks are the process's for each trial and worker (:func:`stage_marks_for`): a
trainer callback that made its own hook closes it when its fit ends, and the next ``Trainer``
makes another for the same trial (a new session) that must still know the last fit's model.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from tensortap.core._collections import STAGE, TRAINING_LOOP
from tensortap.core._recorder import RAW_PLAN, StepRecorder, records_from_array


class StageMarks:
    """The model the last fit trained (held weakly: a model freed and another made at its
    address is another model) and the stage due to be saved at the next TRAIN step."""

    def __init__(self) -> None:
        self._model: weakref.ref[Any] | None = None
        self._model_id: int | None = None  # for models that cannot be held weakly
        self._task: str | None = None
        self.number = 0  # stages begun after the first
        self.due = False

    def fit_begins(self, model: Any, task: str = "") -> bool:
        """A fit of ``model`` (on ``task``, where the framework says) begins: True when it is
        another model, or another task, than the last fit's. The caller decides whether that
        begins a new stage (:meth:`begin`): a trainer resuming a checkpoint into a new model
        object goes on with the same stage."""
        another = self._model_id is not None and (not self._same(model) or task != self._task)
        try:
            self._model, self._model_id = weakref.ref(model), id(model)
        except TypeError:  # not weakly referenceable: known by its address alone
            self._model, self._model_id = None, id(model)
        self._task = task
        return another

    def begin(self) -> None:
        """A new stage of training begins: saved at the next TRAIN step (:meth:`save`)."""
        self.due = True

    def _same(self, model: Any) -> bool:
        if self._model is not None:
            return self._model() is model
        return id(model) == self._model_id

    def save(self, recorder: StepRecorder) -> None:
        """At the first TRAIN step of a new stage: save ``stage`` at this step, whether the
        collection's schedule has it due or not (when the job saves training-loop facts)."""
        self.due = False
        self.number += 1
        if TRAINING_LOOP not in recorder.include_collections:
            return
        plan = recorder.begin(STAGE, [TRAINING_LOOP]) or RAW_PLAN
        recorder.put(STAGE, records_from_array(STAGE, np.asarray(self.number), plan))


_SHARED: dict[tuple[str, str], StageMarks] = {}
_SHARED_LOCK = threading.Lock()


def stage_marks_for(trial: str, worker: str) -> StageMarks:
    """The stage marks of ``worker`` writing ``trial`` in this process, shared by every hook
    that writes there (each session of the trial in turn)."""
    with _SHARED_LOCK:
        return _SHARED.setdefault((trial, worker), StageMarks())
