"""StalledTrainingRule: training has published nothing for too long."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tensortap.rules._rule import Rule


class StalledTrainingRule(Rule):
    """Fires when training, still running, has published no new step for ``threshold``
    seconds (a hang, a deadlock between workers, a stuck data loader). Judged while the
    invoker waits for steps; a trial whose training ended never stalls.

    ``stop_training_on_fire`` (smdebug's) makes a job stop training when the rule fires (the
    same as a StopTraining action); ``training_job_name_prefix`` is accepted for smdebug code
    and not needed here (the job is known).
    """

    reads_data = False

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        cls.check_param("threshold", threshold, threshold > 0, "a number of seconds > 0")

    def __init__(
        self,
        base_trial: Any,
        threshold: float = 1800.0,
        stop_training_on_fire: bool = False,
        training_job_name_prefix: str | None = None,
    ) -> None:
        super().__init__(base_trial)
        self.threshold = threshold
        self.stop_training_on_fire = stop_training_on_fire
        self.training_job_name_prefix = training_job_name_prefix
        self._first_wait: float | None = None

    def _last_publish(self) -> float | None:
        steps = self.base_trial.steps(show_incomplete_steps=True)
        return self.base_trial.wall_time(steps[-1]) if steps else None

    def invoke_at_step(self, step: int) -> bool:
        self._first_wait = None
        self.explain("a new step arrived")
        return False

    def invoke_while_waiting(self, last_step: int | None) -> bool:
        if self.base_trial.loaded_all_steps:
            return False
        now = time.time()
        last = self._last_publish()
        if last is None:  # nothing published yet: count from when the rule started waiting
            if self._first_wait is None:
                self._first_wait = now
            last = self._first_wait
        idle = now - last
        self.explain(
            f"no new step for {idle:.1f} s (limit {self.threshold:g} s)"
            + ("" if last_step is None else f"; the last step is {last_step}"),
            value=idle,
            threshold=self.threshold,
        )
        return idle > self.threshold
