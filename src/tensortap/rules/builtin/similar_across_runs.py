"""SimilarAcrossRuns: the same tensors in two runs differ."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.core._vitals import Vital
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import has_raw, select

_TIMINGS = (Vital.STEP_TIME, Vital.SAMPLES_PER_SECOND)


class SimilarAcrossRuns(Rule):
    """Compares every selected tensor of the base trial with the same tensor at the same step
    of the other trial (``np.allclose(rtol, atol)``); fires when one differs (a run that
    should reproduce another does not). Tensors: ``collection_names`` / ``tensor_regex``,
    every tensor when neither is given, less the timings among the vital signs (a rerun's
    ``vitals/step_time`` and ``vitals/samples_per_second`` are the machine's, not the run's).
    """

    def __init__(
        self,
        base_trial: Any,
        other_trials: Any = None,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        rtol: float = 1e-5,
        atol: float = 1e-8,
    ) -> None:
        super().__init__(base_trial, other_trials)
        self.check_param(
            "other_trials", other_trials, len(self.other_trials) == 1, "exactly one other trial"
        )
        self.other = self.other_trials[0]
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.rtol, self.atol = rtol, atol

    def _pairs(self, step: int) -> list[str]:
        names = select(self.base_trial, self.collection_names, self.tensor_regex, step=step)
        if not self.collection_names and not self.tensor_regex:
            names = [n for n in names if n not in _TIMINGS]
        other = set(self.other.tensor_names(step=step))
        return [
            n
            for n in names
            if n in other
            and has_raw(self.base_trial.tensor(n), step)
            and has_raw(self.other.tensor(n), step)
        ]

    def set_required_tensors(self, step: int) -> None:
        for name in self._pairs(step):
            self.req_tensors.add(name, [step])
            self.req_tensors.add(name, [step], trial=self.other)

    def invoke_at_step(self, step: int) -> bool:
        names = self._pairs(step)
        if not names:
            raise self.skip("no selected tensor was saved (raw) at this step in both trials")
        for name in names:
            a, b = self.base_trial.tensor(name).value(step), self.other.tensor(name).value(step)
            if a.shape != b.shape:
                self.explain(
                    f"{name} has shape {a.shape} here and {b.shape} in {self.other.name}",
                    tensors=[name],
                )
                return True
            if not np.allclose(a, b, rtol=self.rtol, atol=self.atol, equal_nan=True):
                diff = float(np.max(np.abs(a.astype(np.float64) - b)))
                self.explain(
                    f"{name} differs from {self.other.name} by up to {diff:.3g}",
                    tensors=[name],
                    value=diff,
                    threshold=self.atol,
                )
                return True
        self.explain(f"{len(names)} tensors match {self.other.name}", value=0.0)
        return False
