"""Confusion: the confusion matrix of a step shows classes mistaken for each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import judges_mode, step_mode
from tensortap.rules.builtin._labels import labels_and_predictions


class Confusion(Rule):
    """Builds the confusion matrix of the labels and predictions saved at a step, each row
    normalised by the count of its true class; fires when a diagonal entry (a class's recall)
    is below ``min_diag`` or an off-diagonal entry (class i predicted as j) above
    ``max_off_diag``. ``category_no`` fixes the number of classes; classes absent from a
    step's labels are not judged at it.

    The parameters and their order are smdebug's: ``labels`` and ``predictions`` name the
    tensors (else the tensors of ``labels_collection`` / ``predictions_collection``, else the
    first matching ``label_regex`` / ``prediction_regex``). tensortap adds: ``classes`` (judge
    only those), ``argmax`` (reduce scores per class), and ``mode``: only steps of ``mode``
    are judged, and GLOBAL steps (a script that never set a mode: smdebug judged every step).
    By default EVAL steps: predictions made while the model is still learning are wrong by
    nature. On a trial the XGBoost hook wrote, the default is TRAIN: it saves the predictions
    of the validation data at each boosting round, a TRAIN step. A TRAIN step 0 is not
    judged: its model has taken one step (one boosting round), it has not learned yet.

    A run is judged on how training ends: a step that fires while later steps of the judged
    mode may follow is a warning (a booster at round 10 of 100 has not learned yet); the last
    step judged, once the trial has ended, is a problem if it fires. A live job reads its last
    step before it knows that training ended: :meth:`invoke_at_end` then judges it again, as
    the end of training.
    """

    collections_needed = ("labels", "predictions")

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        category_no = params["category_no"]
        min_diag = params["min_diag"]
        max_off_diag = params["max_off_diag"]
        for name, value in (("min_diag", min_diag), ("max_off_diag", max_off_diag)):
            cls.check_param(name, value, 0 <= value <= 1, "a fraction in [0, 1]")
        if category_no is not None:
            cls.check_param("category_no", category_no, category_no >= 2, "an integer >= 2")

    def __init__(
        self,
        base_trial: Any,
        category_no: int | None = None,
        labels: str | None = None,
        predictions: str | None = None,
        labels_collection: str = "labels",
        predictions_collection: str = "predictions",
        min_diag: float = 0.9,
        max_off_diag: float = 0.1,
        argmax: bool = False,
        mode: ModeKeys | None = None,
        classes: list[int] | None = None,
        label_regex: str = ".*labels",
        prediction_regex: str = ".*predictions",
    ) -> None:
        super().__init__(base_trial)
        self.category_no, self.classes = category_no, classes
        self.labels, self.predictions = labels, predictions
        self.labels_collection, self.predictions_collection = (
            labels_collection,
            predictions_collection,
        )
        self.label_regex, self.prediction_regex = label_regex, prediction_regex
        self.min_diag, self.max_off_diag = min_diag, max_off_diag
        self.argmax = argmax
        self.mode = mode
        # the last step judged: (step, fired, what it said, tensors, value, threshold, final)
        self._last: tuple[int, bool, str, tuple[str, ...], float, float, bool] | None = None
        self._final_steps: dict[ModeKeys, int] = {}  # once the trial ended: each mode's last

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        return (
            str(params.get("labels_collection") or "labels"),
            str(params.get("predictions_collection") or "predictions"),
        )

    def _mode(self) -> ModeKeys:
        if self.mode is not None:
            return self.mode
        held_out = self.base_trial.framework() == "xgboost"  # validation predictions, TRAIN steps
        return ModeKeys.TRAIN if held_out else ModeKeys.EVAL

    def invoke_at_step(self, step: int) -> bool:
        step_m, number = step_mode(self.base_trial, step)
        wanted = self._mode()
        if not judges_mode(wanted, step_m):
            self.explain(
                f"{step_m.name} steps are not judged (mode {wanted.name}"
                + (
                    ": predictions made while the model learns are wrong by nature; give "
                    f"mode={step_m.name} to judge them)"
                    if wanted == ModeKeys.EVAL
                    else ")"
                ),
                judged=False,
            )
            return False
        if step_m == ModeKeys.TRAIN and number == 0:
            self.explain(
                "TRAIN step 0 is not judged: its model has taken one step (one boosting "
                "round) and has not learned yet",
                judged=False,
            )
            return False
        y, p, names = labels_and_predictions(
            self,
            step,
            self.label_regex,
            self.prediction_regex,
            self.argmax,
            (self.labels, self.predictions),
            (self.labels_collection, self.predictions_collection),
        )
        size = self.category_no or int(max(y.max(initial=0), p.max(initial=0))) + 1
        keep = (y >= 0) & (y < size) & (p >= 0) & (p < size)
        matrix = np.zeros((size, size), dtype=np.int64)
        np.add.at(matrix, (y[keep], p[keep]), 1)
        classes = np.asarray(self.classes if self.classes is not None else range(size))
        classes = classes[(classes < size) & (matrix.sum(axis=1)[classes] > 0)]
        if not classes.size:
            raise self.skip("no labelled samples of the judged classes at this step")
        rates = matrix[classes][:, classes] / matrix[classes].sum(axis=1, keepdims=True)
        diag = np.diag(rates)
        off = rates - np.diag(diag)
        i = int(diag.argmin())
        if diag[i] < self.min_diag:
            fired = True
            said = (
                f"only {100 * diag[i]:.3g}% of class {classes[i]} is predicted correctly "
                f"(at least {100 * self.min_diag:g}% expected)"
            )
            value, threshold = float(diag[i]), self.min_diag
        else:
            r, c = np.unravel_index(int(off.argmax()), off.shape)
            fired = bool(off[r, c] > self.max_off_diag)
            said = (
                f"class {classes[r]} is predicted as {classes[c]} {100 * off[r, c]:.3g}% of the "
                f"time (limit {100 * self.max_off_diag:g}%); lowest recall {100 * diag[i]:.3g}%"
            )
            value, threshold = float(off[r, c]), self.max_off_diag
        final = self._ends_run(step)
        self._last = (step, fired, said, tuple(names), value, threshold, final)
        self.explain(
            said + ("" if final or not fired else SO_FAR),
            tensors=names,
            value=value,
            threshold=threshold,
            severity=Severity.PROBLEM if final else Severity.WARNING,
        )
        return fired

    def invoke_at_end(self, last_step: int) -> bool | None:
        """The last step judged, when it fired before the run's end was known (a live job):
        judged again now, as how training ended (a problem)."""
        if self._last is None:
            return None
        step, fired, said, names, value, threshold, final = self._last
        if final or not fired:
            return None  # already judged as the end, or it ended fine
        self.explain(
            f"{said} at the last step judged (step {step}), to the end of training",
            tensors=names,
            value=value,
            threshold=threshold,
            severity=Severity.PROBLEM,
        )
        return True

    def _ends_run(self, step: int) -> bool:
        """Whether ``step`` is the last the rule judges: the trial has ended and no later
        step of the judged mode (of any, for mode GLOBAL) follows."""
        trial = self.base_trial
        if not trial.loaded_all_steps:
            return False
        mode = ModeKeys.GLOBAL if self._mode() == ModeKeys.GLOBAL else trial.mode(step)
        if mode not in self._final_steps:  # the trial has ended: its steps no longer change
            self._final_steps[mode] = trial.steps(mode=mode)[-1]
        number = step if mode == ModeKeys.GLOBAL else trial.mode_step(step)
        return bool(number == self._final_steps[mode])


#: What a finding said before the run's end was known gets (a warning, judged again at the end).
SO_FAR = " (so far: training goes on, and the run is judged on the last step judged)"
