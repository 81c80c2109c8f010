"""Shared by GradientNormSpike and LossSpike: a value far above its robust running baseline."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tensortap.core._baseline import RobustBaseline
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import fire_nonfinite
from tensortap.rules.builtin._series import Stages

#: Values off their baseline in a row that make a problem: two in a row were seen in a healthy
#: run (an MLP whose batch losses had a median of 0.07 met two hard batches, 0.9 each).
LASTING = 3
#: ... and the steps they must span: what LASTING values in a row spanned at a job's saving
#: interval of 10 steps (steps s, s + 10, s + 20). A series saved at every step (the vital
#: signs) has three hard batches in a row far more often than one saved every 10th step: the
#: instability must last as long, not only over as many values.
LASTING_STEPS = 20


class SpikeRule(Rule):
    """Fires when a value is more than ``z_threshold`` robust standard deviations (1.4826 x
    the median absolute deviation) above the median of its last ``window`` values, and also
    more than ``min_ratio`` times that median; judged after ``warmup`` values (a rule that saw
    no more ends NoData). One such value is a warning (healthy runs absorb a hard batch, and
    late in training, where most batches' losses are near 0, a hard batch or two in a row sit
    many deviations above the median); ``LASTING`` in a row are a problem (the instability
    lasted). Non-finite values always fire, as a problem (non-finite), also during the
    warm-up."""

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        window = params["window"]
        warmup = params["warmup"]
        z_threshold = params["z_threshold"]
        min_ratio = params["min_ratio"]
        cls.check_param("window", window, window >= 3, "an integer >= 3")
        cls.check_param("warmup", warmup, 3 <= warmup <= window, f"between 3 and window ({window})")
        cls.check_param("z_threshold", z_threshold, z_threshold > 0, "a number > 0")
        cls.check_param("min_ratio", min_ratio, min_ratio >= 1, "a ratio >= 1")

    def __init__(
        self,
        base_trial: Any,
        window: int = 20,
        warmup: int = 10,
        z_threshold: float = 6.0,
        min_ratio: float = 2.0,
    ) -> None:
        super().__init__(base_trial)
        self.window, self.warmup = window, warmup
        self.z_threshold, self.min_ratio = z_threshold, min_ratio
        self._step = 0  # the step being evaluated
        self._stages = Stages(base_trial)
        self._start_stage()
        self.declare_numbers()

    def declare_numbers(self) -> None:
        """Declare the numbers the rule reads at each step (``self.reads(...)``), if any."""

    def _start_stage(self) -> None:
        """Baselines from here (the run's start, or a new stage of training: another model's
        losses and gradients, on another scale)."""
        self._baselines: dict[str, RobustBaseline] = {}
        self._spiking: dict[str, int] = {}  # the key's last values that were spikes, in a row
        self._spike_from: dict[str, int] = {}  # the step of the first of them

    #: The cause a spike points at (None: the rule names none).
    cause: str | None = None
    #: Whether spikes that last (LASTING in a row) are a problem; else every spike is a warning.
    lasting_is_problem: bool = True

    def begin_step(self, step: int) -> None:
        self._step = step
        if self._stages.entered(step):
            self._start_stage()

    def judge_value(self, key: str, value: float, what: str, tensors: list[str]) -> bool:
        if not math.isfinite(value):
            return fire_nonfinite(self, tensors, what)
        baseline = self._baselines.get(key)
        if baseline is None:
            baseline = self._baselines[key] = RobustBaseline(self.window)
        if len(baseline) < self.warmup:
            baseline.add(value)
            self.explain(self._warming(), judged=False)
            return False
        median, _scale, z = baseline.score(value)
        baseline.add(value)
        fired = z > self.z_threshold and not (abs(value) <= self.min_ratio * abs(median))
        # one value off its baseline is an event training often absorbs (a hard batch, an LSTM's
        # gradient): a warning; LASTING in a row is instability that lasts, a problem
        run = self._spiking.get(key, 0) + 1 if fired else 0
        self._spiking[key] = run
        if run == 1:
            self._spike_from[key] = self._step
        lasted = self._step - self._spike_from.get(key, self._step)
        sustained = run >= LASTING and lasted >= LASTING_STEPS and self.lasting_is_problem
        details: dict[str, Any] = {"median": median, "measured": value}
        if self.cause:
            details["cause"] = self.cause
        self.explain(
            lambda: (
                f"{what} {value:.4g} against a median of {median:.4g}: {z:.3g} robust "
                f"deviations above (limit {self.z_threshold:g}, and over {self.min_ratio:g}x "
                "the median)"
                + (
                    f"; {run} values in a row off their baseline, over {lasted} steps"
                    if run > 1
                    else ""
                )
            ),
            tensors=tensors,
            value=z,
            threshold=self.z_threshold,
            severity=Severity.PROBLEM if sustained else Severity.WARNING,
            **details,
        )
        return bool(fired)

    def _warming(self) -> str:
        return (
            f"the baseline is warming up: {self.rule_name} judges a value against the median "
            f"of the values before it, from value {self.warmup + 1} on"
        )
