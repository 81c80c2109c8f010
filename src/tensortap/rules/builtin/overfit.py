"""Overfit: the validation loss has drifted above the training loss."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._numbers import Scalars
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    boosted_without_pair,
    boosting_metric_pair,
    boosting_no_pair,
    fire_nonfinite,
    has_raw,
    loss_names,
    metric_at,
    metric_pair,
    optional_names_in,
    prefer_vital_loss,
    step_mode,
)
from tensortap.rules.builtin._labels import as_classes
from tensortap.rules.builtin._passes import RISEN, SUSTAINED, Pass, small_set, trend_of
from tensortap.rules.builtin._samples import DistinctSamples, ModelInputs
from tensortap.rules.builtin._series import Stages, pass_ends_at

_TRAINING_ONLY = (
    "training steps only: Overfit compares each evaluation (EVAL) pass with the training loss "
    "before it, and judges nothing until an EVAL step follows training (save EVAL steps: "
    "hook.set_mode(ModeKeys.EVAL) around validation)"
)

#: An evaluation pass is compared with the training loss only when the latest TRAIN loss was
#: saved at most this many steps before the pass began (a job saves TRAIN steps every 10th
#: step; the trainer callbacks save the loss of the step right before each evaluation). A
#: training loss from much earlier says nothing of the model evaluated: a run that diverged
#: in between compared a validation loss of 2328 with the training loss of step 0, 3.29.
NEAR_STEPS = 10


class Overfit(Rule):
    """Compares the mean validation (EVAL) loss of each evaluation phase with the mean training
    loss of the training phase before it; fires when ``(val - train) / train`` exceeds
    ``ratio_threshold`` in ``patience`` consecutive evaluation phases, from global step
    ``start_step`` on. A phase is a run of consecutive steps of one mode (two evaluations with
    training steps between them are two phases, whether or not those steps saved a loss). An
    evaluation phase is judged only against TRAIN losses saved since the evaluation before it,
    the latest at most ``NEAR_STEPS`` (10) steps before it begins; otherwise it is skipped and
    says why (a TRAIN loss saved every 100th step is no measure of the model evaluated 90
    steps later). The run's first training loss, from before any update, is left out of the
    comparison when later ones follow it; an evaluation with only that one before it is
    skipped, saying why.

    A validation loss somewhat above the training loss is normal (smdebug's default ratio of
    0.1 is exceeded by most healthy runs), so exceeding it is a *warning*. It is a *problem*
    when the model is overfitting as it trains, judged on whole evaluation passes against the
    run's own noise: the last 3 passes are each above the best pass before them, their mean
    is more than 20% above it and more than 3 standard errors of the pass-to-pass noise (the
    spread of the pass means since the best about a straight line through them; more standard
    errors where there are few passes, as Student's t says), and the
    training loss went on falling. A validation loss that wobbles above its best for a pass
    or two is a warning at most. Where the passes saved an outcome (labels and predictions),
    a rise while the accuracy held (the last passes' not 2 standard errors below the best
    pass's) is a warning too: the model grows confident in its wrong answers, not worse at
    answering. A NaN or infinite loss is a problem.

    With ``training_metric`` and ``validation_metric`` (regexes of scalars saved at the same
    steps, such as XGBoost's ``train-logloss`` and ``validation-logloss``), each step compares
    the two metrics instead, and is its own phase (and pass). Without them, on a trial the
    XGBoost hook wrote, ``train-<metric>`` and the validation set's same metric are compared.

    Where the model's inputs are saved at training steps, their rows are counted: a training
    set of at most ``small_training_set`` distinct samples (each seen at least 3 times among
    the saved rows, so the count is firm) whose model's validation loss came down less than
    3/4 of what its training loss came down, on each of the last 3 passes (at the run's end,
    on every pass where it has fewer), is overfitting a small training set: a problem, with the
    cause ``small_training_set``. So is such a set beside an evaluation pass of 3 times as many
    samples or more (its labels counted) whose validation loss kept under 90% of what the
    training loss came down: the splits swapped, or a debugging subset left in.
    """

    collections_needed = ("losses",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        metric_pair(cls, params["training_metric"], params["validation_metric"])
        start_step = params["start_step"]
        patience = params["patience"]
        small_training_set = params["small_training_set"]
        cls.check_param("patience", patience, patience >= 1, "an integer >= 1")
        cls.check_param("start_step", start_step, start_step >= 0, "an integer >= 0")
        cls.check_param(
            "small_training_set", small_training_set, small_training_set >= 1, "an integer >= 1"
        )

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        start_step: int = 0,
        patience: int = 1,
        ratio_threshold: float = 0.1,
        training_metric: str = "",
        validation_metric: str = "",
        small_training_set: int = 100,
    ) -> None:
        super().__init__(base_trial)
        self.training_metric, self.validation_metric = training_metric, validation_metric
        self.small_training_set = small_training_set
        self.tensor_regex = tensor_regex or []
        self.start_step = start_step
        self.patience = patience
        self.ratio_threshold = ratio_threshold
        self._stages = Stages(base_trial)
        self._start_stage()
        self._losses = self.reads(
            Scalars(
                lambda s: loss_names(base_trial, True, self.tensor_regex, s),
                none_saved="no loss saved at this step",
                pick=functools.partial(prefer_vital_loss, base_trial),
            )
        )
        self._inputs = self.reads(ModelInputs(lambda: not self._samples.full))

    def _start_stage(self) -> None:
        """Compare from here (the run's start, or a new stage of training: another model, or
        another task's loss)."""
        self._samples = DistinctSamples(cap=4 * self.small_training_set)
        self._start: float | None = None  # the first training loss
        self._train: list[float] = []  # losses of the current (or last) training phase
        self._holds_first = False  # _train[0] is the run's first loss, from before any update
        self._train_step = 0  # the global step of its latest loss
        self._train_used = False  # an evaluation pass was compared with it already
        self._val: list[float] | None = None  # losses of the evaluation pass under way
        self._val_outcome: list[int] | None = None  # its [correct, total] predictions
        self._val_step = 0  # the global step of its last loss
        self._last_mode: ModeKeys | None = None
        self._last_eval: tuple[int, int] | None = None  # (global, EVAL step) of the last one
        self._unmatched: str | None = None  # why the pass under way is not judged
        self._exceeded: list[bool] = []  # per evaluation phase, latest verdict
        self._passes: list[Pass] = []  # the completed evaluation passes

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        if params.get("training_metric"):
            return cls.collections_needed
        return (*cls.collections_needed, "inputs")  # to count the training samples

    def _small_set(self, final: bool = False) -> tuple[str, dict[str, Any]] | None:
        return small_set(self._samples, self.small_training_set, self._start, self._passes, final)

    def no_data_reason(self) -> str:
        boosted = boosting_no_pair(self.base_trial, self.rule_name)
        return boosted if boosted is not None else super().no_data_reason()

    def invoke_at_step(self, step: int) -> bool:
        if self._stages.entered(step):
            self._start_stage()
        if not self.training_metric:  # on a boosted model, its metrics (the booster's own)
            pair = boosting_metric_pair(self.base_trial, step)
            if pair is not None:
                self.training_metric, self.validation_metric = pair
            elif boosted_without_pair(self.base_trial, self.tensor_regex, step):
                raise self.skip("no loss metric of both the training and a validation set")
        if self.training_metric:
            return self._compare_metrics(step)
        mode, mode_step = step_mode(self.base_trial, step)
        losses = list(self._losses.at(step))  # (a step without one is skipped)
        loss = losses[0][1] if len(losses) == 1 else float(np.mean([v for _, v in losses]))
        if not math.isfinite(loss):
            return fire_nonfinite(self, [n for n, _ in losses], "the loss")
        new_phase = mode != self._last_mode
        if mode == ModeKeys.EVAL:
            last, self._last_eval = self._last_eval, (step, mode_step)
            # Steps of another mode in between (saved or not) make this a new evaluation.
            new_phase = new_phase or last is None or step - last[0] > mode_step - last[1]
        self._last_mode = mode
        if mode != ModeKeys.EVAL or new_phase:
            self._close()
        if mode == ModeKeys.TRAIN:
            if new_phase:
                self._train = []
                self._holds_first = False
            self._train.append(loss)
            if self._start is None:
                self._start = loss
                self._holds_first = True
            found = None if self._samples.full else self._inputs.at(step)
            if found is not None:
                self._samples.add(found[1])
            self._train_step, self._train_used = step, False
            self.explain(_TRAINING_ONLY, judged=False)
            return False
        if mode != ModeKeys.EVAL:
            self.explain(f"{mode.name} steps are not compared", judged=False)
            return False
        if new_phase or (self._val is None and self._unmatched is None):
            self._unmatched = self._unmatched_reason(step)
            if self._unmatched is None:
                self._val = []
                self._val_outcome = [0, 0]
                self._exceeded.append(False)
        if self._unmatched is not None or self._val is None:
            self.explain(self._unmatched or "no training loss for this evaluation", judged=False)
            return False
        self._val.append(loss)
        self._count_outcome(step)
        self._val_step = step
        train, val = float(np.mean(self._training())), float(np.mean(self._val))
        complete = pass_ends_at(self.base_trial, step)
        if complete:
            self._close()
        return self._judge(step, train, val, complete, len(self._val) if not complete else 0)

    def invoke_at_end(self, last_step: int) -> bool | None:
        """The evaluation pass that ended the run, when it was read live (its end was not known
        then, so it was judged as a pass under way and never as a whole pass): judged now, at
        the run's last step. A run with fewer than ``SUSTAINED`` whole passes is judged for a
        small training set on the passes it has (one evaluation after training is all many
        scripts do: 64 rows of a debugging ``Subset`` left in, memorised, validated once)."""
        if self.training_metric:
            return None  # each step of a booster's metrics is whole, and judged
        if self._val and self._train:
            train, val = float(np.mean(self._training())), float(np.mean(self._val))
            self._close()
            return self._judge(last_step, train, val, True, 0, final=True)
        if 0 < len(self._passes) < SUSTAINED and self._small_set(final=True) is not None:
            last = self._passes[-1]  # judged as a whole pass already, but on fewer passes
            return self._judge(last_step, last.training, last.validation, True, 0, final=True)
        return None

    def _training(self) -> list[float]:
        """The training losses an evaluation is compared with: the phase's, less the run's
        first (from before the first update: a run that diverged at once compared an
        evaluation of 3860 with it, 3.289) when others follow it."""
        return self._train[1:] if self._holds_first and len(self._train) > 1 else self._train

    def _unmatched_reason(self, step: int) -> str | None:
        """Why the evaluation pass beginning at ``step`` has no training loss to compare with
        (None when it has one)."""
        if not self._train:
            return (
                "no training loss before this evaluation: Overfit compares the validation "
                "(EVAL) loss with the training loss of the TRAIN steps before it"
            )
        if self._holds_first and len(self._train) == 1:
            return (
                "the only training loss before this evaluation is the run's first, from before "
                "any update: Overfit compares an evaluation with the training loss of the "
                "model it evaluates (save the losses at every step)"
            )
        if self._train_used:
            return (
                f"no training loss saved since the previous evaluation (the latest, at step "
                f"{self._train_step}, was compared with it): Overfit compares each evaluation "
                "with the training loss of the steps just before it; save the losses at every "
                "step (they are a few numbers)"
            )
        if step - self._train_step > NEAR_STEPS:
            return (
                f"the latest training loss was saved {step - self._train_step} steps before "
                f"this evaluation (at step {self._train_step}): Overfit compares an evaluation "
                f"with a training loss at most {NEAR_STEPS} steps before it; save the losses "
                "more often (they are a few numbers)"
            )
        return None

    def _close(self) -> None:
        """End the evaluation pass under way (if any) as a whole pass."""
        if self._val and self._train:
            validation, training = float(np.mean(self._val)), float(np.mean(self._training()))
            correct, total = self._val_outcome or (0, 0)
            self._passes.append(Pass(validation, training, self._val_step, correct, total))
            self._train_used = True
        self._val = None

    def _compare_metrics(self, step: int) -> bool:
        train = metric_at(self.base_trial, self.training_metric, step)
        val = metric_at(self.base_trial, self.validation_metric, step)
        if train is None or val is None:
            raise self.skip("the training or validation metric was not saved at this step")
        if not (np.isfinite(train) and np.isfinite(val)):
            return fire_nonfinite(self, [self.training_metric, self.validation_metric], "a metric")
        self._exceeded.append(False)
        self._passes.append(Pass(val, train, step))
        return self._judge(step, train, val, True, 0)

    def _count_outcome(self, step: int) -> None:
        """Add the step's saved outcome (labels and predicted classes) to the pass under way;
        a step without one leaves the pass without an accuracy."""
        counts = self._val_outcome
        if counts is None:
            return
        trial = self.base_trial
        labels = optional_names_in(trial, "labels", step)
        predictions = optional_names_in(trial, "predictions", step)
        if not (labels and predictions) or not all(
            has_raw(trial.tensor(n[0]), step) for n in (labels, predictions)
        ):
            self._val_outcome = None
            return
        y, p = as_classes(
            trial.tensor(labels[0]).value(step), trial.tensor(predictions[0]).value(step)
        )
        if y.shape != p.shape or not y.size:
            self._val_outcome = None
            return
        counts[0] += int(np.count_nonzero(y == p))
        counts[1] += int(y.size)

    def _judge(
        self,
        step: int,
        train: float,
        val: float,
        complete: bool,
        batches: int,
        final: bool = False,
    ) -> bool:
        ratio = (val - train) / abs(train) if train else float("inf") * (val > 0)
        above = ratio > self.ratio_threshold
        self._exceeded[-1] = step >= self.start_step and above
        run = 0
        for exceeded in reversed(self._exceeded):
            if not exceeded:
                break
            run += 1
        fired = run >= self.patience
        trend = trend_of(self._passes, val, complete)
        details: dict[str, Any] = {"validation": val, "training": train, "cause": "overfitting"}
        said = ""
        if trend is not None and trend.rise > 0:
            details.update(
                best=trend.best.validation,
                recent=trend.mean,
                rise=trend.rise,
                standard_error=trend.standard_error,
            )
            recent = ", ".join(f"{p.validation:.4g}" for p in trend.recent)
            if trend.overfitting:
                said = (
                    f"; over whole evaluation passes the validation loss rose from its best "
                    f"{trend.best.validation:.4g} (the pass ending at step {trend.best.step}) "
                    f"to {recent} in the last {len(trend.recent)} passes (mean {trend.mean:.4g}, "
                    f"{trend.rise / trend.standard_error if trend.standard_error else math.inf:.3g}"
                    f" standard errors of the pass-to-pass noise) while the training loss fell "
                    f"from {trend.best.training:.4g} to {trend.recent[-1].training:.4g}: "
                    "overfitting"
                )
            elif trend.risen:
                accuracy = sum(p.correct for p in trend.recent) / sum(p.total for p in trend.recent)
                said = (
                    f"; over whole evaluation passes the validation loss rose from its best "
                    f"{trend.best.validation:.4g} (the pass ending at step {trend.best.step}) "
                    f"to {recent} in the last {len(trend.recent)} passes, but the accuracy held "
                    f"({trend.best.accuracy:.3g} then, {accuracy:.3g} in the last passes): the "
                    "model grew more confident in the answers it gets wrong, not worse at "
                    "answering; not harm (early stopping on the validation loss would keep the "
                    "best pass)"
                )
            else:
                said = (
                    f"; the last {len(trend.recent)} evaluation passes ({recent}) are "
                    f"{100 * trend.rise / abs(trend.best.validation):.3g}% above the best pass "
                    f"({trend.best.validation:.4g}) on average: not a sustained rise beyond "
                    f"{100 * RISEN:g}% and {trend.critical:.3g} standard errors of the "
                    f"pass-to-pass noise ({trend.standard_error:.3g}) with the training loss "
                    "falling, so not "
                    "overfitting"
                )
        small = self._small_set(final) if complete else None
        if small is not None:  # the cause: whether or not the validation loss also rose
            said = (said if trend is not None and trend.overfitting else "") + small[0]
            details.update(small[1])
        this = "this evaluation pass" if not batches else f"this evaluation pass so far ({batches}"
        this += "" if not batches else f" batch{'es' if batches > 1 else ''})"
        phases = "phase" if run == 1 else "phases"
        self.explain(
            f"validation loss {val:.4g} ({this}) vs training loss {train:.4g}: ratio "
            f"{ratio:.3g} ({'above' if above else 'within'} {self.ratio_threshold:g}"
            + (
                f"; above it in {run} consecutive evaluation {phases}, fires from {self.patience})"
                if run
                else ")"
            )
            + said,
            value=ratio,
            threshold=self.ratio_threshold,
            severity=Severity.PROBLEM
            if (trend is not None and trend.overfitting) or small is not None
            else Severity.WARNING,
            **details,
        )
        return fired or small is not None
