"""Overtraining: training goes on after the loss stopped improving."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._numbers import Scalars
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    VITAL_LOSS,
    boosted_without_pair,
    boosting_metric_pair,
    boosting_no_pair,
    loss_names,
    metric_at,
    metric_pair,
    nonfinite_explanation,
    prefer_vital_loss,
)
from tensortap.rules.builtin._series import LossSeries, Observation, Stages

#: TRAIN vital losses averaged into one observation (see the class docstring).
VITAL_BLOCK = 10
#: A validation loss this far (relative) above its best is getting worse, not just flat.
_WORSE = 0.05
#: ... and this many times its best in each of the last ``_HARMED_PASSES`` observations (a
#: rise that stays, not one pass of a noisy validation set), training on has harmed the model.
_HARMED = 2.0
_HARMED_PASSES = 3


class Overtraining(Rule):
    """Tracks the best training loss (per TRAIN step) and the best validation loss (per
    evaluation pass: the mean of a run of EVAL steps, so that batches of different difficulty
    are not compared). A new best must beat the old one by more than ``delta`` (an absolute
    amount, as Keras' ``EarlyStopping(min_delta=...)``). Fires when the training loss has not
    improved for ``patience_train`` saved training steps, or the validation loss for
    ``patience_validation`` EVAL steps. The vital sign ``vitals/loss`` (the loss of every
    step) stands for the ``losses`` collection where saved; its TRAIN values are judged as the
    mean of each block of ``VITAL_BLOCK`` (10) steps, one observation each (the schedule a job
    saved losses on before, and steadier than one batch's loss: a plateau of 5 single batches
    is noise).

    Every run that converges stops improving, so a plateau is *advice* (training longer gains
    nothing: stop earlier or lower the learning rate); a validation loss that has risen more
    than 5% above its best is a *warning* (training on makes the model worse; keep the best
    checkpoint), and at twice its best or more in each of its last 3 observations (a rise that
    stays, not one noisy pass) a *problem*: training on has harmed the model (issue 44: a
    validation loss 4.4x its best was left a warning, and the run called healthy).
    A NaN or infinite loss is a problem. Overfit judges the gap between the two.
    Findings name ``details["cause"] = "overtraining"`` (or ``nonfinite``); a trial with a single
    loss ends NoData (nothing was compared).

    With ``training_metric`` and ``validation_metric`` (regexes of scalars saved at the same
    steps, such as XGBoost's ``train-rmse`` and ``validation-rmse``), both are tracked at every
    step instead of by mode. Without them, on a trial the XGBoost hook wrote, ``train-<metric>``
    and the validation set's same metric are.
    """

    collections_needed = ("losses",)
    severity = Severity.ADVICE

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        metric_pair(cls, params["training_metric"], params["validation_metric"])
        patience_train = params["patience_train"]
        patience_validation = params["patience_validation"]
        delta = params["delta"]
        for name, value in (
            ("patience_train", patience_train),
            ("patience_validation", patience_validation),
        ):
            cls.check_param(name, value, value >= 1, "an integer >= 1")
        cls.check_param("delta", delta, delta >= 0, "a number >= 0")

    def __init__(
        self,
        base_trial: Any,
        patience_train: int = 5,
        patience_validation: int = 10,
        delta: float = 0.01,
        tensor_regex: list[str] | None = None,
        training_metric: str = "",
        validation_metric: str = "",
    ) -> None:
        super().__init__(base_trial)
        self.training_metric, self.validation_metric = training_metric, validation_metric
        self.patience = {ModeKeys.TRAIN: patience_train, ModeKeys.EVAL: patience_validation}
        self.delta = delta
        self.tensor_regex = tensor_regex or []
        losses = Scalars(
            lambda s: loss_names(base_trial, True, self.tensor_regex, s),
            pick=functools.partial(prefer_vital_loss, base_trial),
        )
        self._series = LossSeries(base_trial, self.reads(losses), False)
        self._stages = Stages(base_trial)
        self._start_stage()

    def _start_stage(self) -> None:
        """Track the best losses from here (the run's start, or a new stage of training)."""
        self._best = {ModeKeys.TRAIN: math.inf, ModeKeys.EVAL: math.inf}
        self._since = {ModeKeys.TRAIN: 0, ModeKeys.EVAL: 0}
        self._recent: list[float] = []  # the last validation observations
        self._block: list[float] = []  # TRAIN vital losses of the block under way
        self._series.new_stage()

    def no_data_reason(self) -> str:
        boosted = boosting_no_pair(self.base_trial, self.rule_name)
        return boosted if boosted is not None else super().no_data_reason()

    def invoke_at_step(self, step: int) -> bool:
        if not self.training_metric:  # on a boosted model, its metrics (the booster's own)
            pair = boosting_metric_pair(self.base_trial, step)
            if pair is not None:
                self.training_metric, self.validation_metric = pair
            elif boosted_without_pair(self.base_trial, self.tensor_regex, step):
                raise self.skip("no loss metric of both the training and a validation set")
        if self._stages.entered(step):
            self._start_stage()
        if self.training_metric:
            return self._metrics(step)
        observations = self._series.observe(step)
        if not observations and not loss_names(self.base_trial, True, self.tensor_regex, step):
            raise self.skip("no loss saved at this step")
        verdicts = self._verdicts(observations)
        if not verdicts:
            if self._block:
                self.explain(
                    f"the training loss of every step is judged as the mean of each "
                    f"{VITAL_BLOCK} steps ({len(self._block)} of this block so far)"
                )
            else:
                self.explain("an evaluation pass is under way (judged when it ends)")
            return False
        return self._say(verdicts)

    def invoke_at_end(self, last_step: int) -> bool | None:
        """The evaluation pass that ended the run, when it was read live (its end was not known
        then, so its mean was never tracked): tracked now, at the run's last step."""
        if self.training_metric:
            return None  # a booster's metrics: each step is whole
        verdicts = self._verdicts(self._series.end())
        return self._say(verdicts) if verdicts else None

    def _verdicts(self, observations: list[Observation]) -> list[tuple[bool, int, dict[str, Any]]]:
        """What each observation of a tracked mode says (a block of every step's losses
        counts once it is full)."""
        verdicts = []
        for o in observations:
            if o.mode not in self._best and o.mode != ModeKeys.GLOBAL:
                continue
            if o.mode != ModeKeys.EVAL and o.tensors == (VITAL_LOSS,) and o.finite:
                self._block.append(o.value)  # the loss of every step: judged by the block
                if len(self._block) < VITAL_BLOCK:
                    continue
                mean, self._block = float(math.fsum(self._block) / VITAL_BLOCK), []
                verdicts.append(self._track(o.mode, mean, list(o.tensors), 1, VITAL_BLOCK))
                continue
            verdicts.append(self._track(o.mode, o.value, list(o.tensors), o.steps))
        return verdicts

    def _say(self, verdicts: list[tuple[bool, int, dict[str, Any]]]) -> bool:
        fired = [v for v in verdicts if v[0]]
        explanation = dict(min(fired or verdicts, key=lambda v: v[1])[2])
        if not fired and all(v[2].get("first") for v in verdicts):
            self.explain(
                "nothing to compare yet: Overtraining judges each loss against the best one "
                "before it",
                judged=False,
            )
            return False
        explanation.pop("first", None)
        self.explain(**explanation)
        return bool(fired)

    def _metrics(self, step: int) -> bool:
        train = metric_at(self.base_trial, self.training_metric, step)
        val = metric_at(self.base_trial, self.validation_metric, step)
        if train is None or val is None:
            raise self.skip("the training or validation metric was not saved at this step")
        verdicts = [
            self._track(ModeKeys.TRAIN, train, [self.training_metric], 1),
            self._track(ModeKeys.EVAL, val, [self.validation_metric], 1),
        ]
        return self._say(verdicts)

    def _track(
        self, mode: ModeKeys, loss: float, names: list[str], steps: int, block: int = 1
    ) -> tuple[bool, int, dict[str, Any]]:
        """(fired, severity rank, explanation) after one observation of ``mode`` (the mean
        of a ``block`` of steps' losses: counted once)."""
        if mode == ModeKeys.GLOBAL:
            mode = ModeKeys.TRAIN
        if not math.isfinite(loss):
            return True, 0, nonfinite_explanation(names, "the loss")
        best = self._best[mode]
        first = math.isinf(best)
        if loss < best - self.delta or first:
            self._best[mode], self._since[mode] = loss, 0
        else:
            self._since[mode] += steps
        which = "training" if mode == ModeKeys.TRAIN else "validation"
        since, patience, best = self._since[mode], self.patience[mode], self._best[mode]
        fired = since >= patience
        worse = mode == ModeKeys.EVAL and loss > best + max(self.delta, _WORSE * abs(best))
        if mode == ModeKeys.EVAL:
            self._recent = [*self._recent, loss][-_HARMED_PASSES:]
        harmed = (
            worse
            and best > 0
            and since >= _HARMED_PASSES
            and len(self._recent) == _HARMED_PASSES
            and min(self._recent) >= _HARMED * best
        )
        severity = Severity.PROBLEM if harmed else Severity.WARNING if worse else Severity.ADVICE
        unit = "steps" if block == 1 else f"blocks of {block} steps (their mean losses)"
        text = (
            f"{which} loss {loss:.4g}; best {best:.4g}, not improved by more than "
            f"{self.delta:g} for {since} {unit} (patience {patience})"
        )
        if fired:
            text += (
                f"; it is {loss / best:.3g}x its best: training on has made the model far worse "
                "(keep the best checkpoint and stop earlier)"
                if harmed
                else "; it is getting worse: keep the best checkpoint and stop earlier"
                if worse
                else "; it has levelled off: training longer gains nothing"
            )
        explanation = {
            "message": text,
            "tensors": names,
            "value": since,
            "threshold": patience,
            "severity": severity,
            "mode": mode,
            "cause": "overtraining",
        }
        if first:
            explanation["first"] = True
        return fired, severity.rank if fired else 9, explanation
