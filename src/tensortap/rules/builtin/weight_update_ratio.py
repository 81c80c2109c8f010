"""WeightUpdateRatio: weight updates far too large or too small relative to the weights."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._collections import INITIAL_PREFIX, INITIAL_WEIGHTS
from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    fire_nonfinite,
    gradients_by_parameter,
    loss_is_zero,
    loss_names,
    names_in,
    nonfinite_names,
    scalar,
    step_mode,
    trained_parameters,
    training_step,
    zero_gradients,
)

#: The growth in norm (median over the weights) within ``_GROWTH_WITHIN`` steps that is a
#: learning rate too high (see :meth:`WeightUpdateRatio._grown`).
GROWTH_THRESHOLD = 8.0
#: TRAIN steps after the first saved one before the weights' total change is judged.
_LOW_AFTER = 100
#: The training loss must have come down less than this (relative) for weights that barely
#: moved to be a learning rate too low (a fine-tuned model moves little and learns).
_NO_PROGRESS = 0.1
#: A training loss that rises above its first value by more than this many times that value's
#: magnitude, after a large first update, diverges: the learning rate is too high. A healthy
#: loss starts near its highest; SGD at 100x a healthy rate on the digits MLPs (Keras and
#: Lightning, tests/jobs/test_lr_verdict.py) passed it within 10 steps, then overflowed.
_DIVERGED = 10.0
#: ... judged on the median of the last this many training losses.
_SPAN = 3
#: A training loss under this share of where it started is at (or near) a minimum: its
#: updates are small because its gradients are (VanishingGradient's figure).
_CONVERGED = 0.05
#: TRAIN steps from a weight's first saved step within which its growth is judged: a long
#: healthy run's weights may grow slowly for thousands of steps, an early growth of several
#: times is the updates outgrowing the weights.
_GROWTH_WITHIN = 200


class WeightUpdateRatio(Rule):
    """Every ``num_steps`` TRAIN steps, for each tensor in ``weights``:
    ``ratio = ||w_s - w_p|| / (s - p) / (||w_p|| + epsilon)`` where p is the previous saved
    step (the mean update per step relative to the weight's size; healthy training sits near
    1e-3). Fires when a ratio exceeds ``large_threshold`` or falls below ``small_threshold``
    (problems: ``details["cause"]`` is ``lr_too_high``, ``lr_too_low``, or ``not_updating``
    for a ratio of exactly 0). A small ratio in a run whose training loss is under 5% of where
    it started is advice: the model is at a minimum, where updates are small (a memorised
    training set), not a learning rate too low.

    The first saved step is compared with the weights before its update where the hook saved them
    (``initial_weights``), so the first update is judged too. A first update that follows the
    gradient (SGD's) and moves a weight tensor by more than ``first_update_threshold`` of its
    norm is a *warning* (``lr_too_high``): healthy SGD moves a network's weights by 1e-5 to
    4e-3 at learning rates up to 1e-2, but a new classifier head or a regression far from its
    solution reaches 0.2 (see docs/rules.md for the measurement). An adaptive optimizer's first
    step moves every weight alike (by the learning rate: the ratio is the learning rate over the
    weights' scale) and is held to ``large_threshold`` alone. Where gradients are saved, only
    the weights the optimizer is meant to move are judged: frozen ones (no gradient) and those
    whose gradient is negligible against the others' are left out; when every saved gradient is
    exactly 0 nothing can train, a problem (``not_updating``), and when no weight has one the
    step is skipped (all frozen). Weights holding NaN or inf are a problem (non-finite), not a
    ratio. A weight that moved from a norm of 0 (at most ``epsilon``: zero-initialised) has no
    ratio (it would be the update over ``epsilon``, 1e7 for an ordinary step, whatever the
    learning rate): it is left out, and the step's finding names it; one that stayed at 0 has a
    ratio of 0.
    A first update reported large (the warning) becomes a problem (``lr_too_high``,
    ``details["diverged"]``) when the training loss then rises by more than 10 times its first
    value (the median of its last 3 values: one batch of a heavy-tailed loss is no
    divergence): the large first step was the learning rate, and the loss diverges from it.

    The total change is judged too, from 100 TRAIN steps after the first saved step on: when
    the weights that moved at all moved by less than ``total_change_threshold`` of their norm
    since the first saved step (the median over them) and the training loss came down less
    than 10% (the medians of its first and last 3 saved values), the learning rate is too low
    (a problem, ``lr_too_low``; a warning where no loss is saved). On the generated
    benchmark's development split the healthy runs had moved 6% or more by then and learned
    23% or more; runs at 1/1000 of their learning rate had moved 0.07-4% and learned under 6%.
    Each step's own ratio is far below healthy there too (1e-6 against 1e-3), but slow
    fine-tuning shares it: the loss tells them apart.
    """

    collections_needed = ("weights",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        num_steps = params["num_steps"]
        large_threshold = params["large_threshold"]
        small_threshold = params["small_threshold"]
        epsilon = params["epsilon"]
        first_update_threshold = params["first_update_threshold"]
        total_change_threshold = params["total_change_threshold"]
        cls.check_param("num_steps", num_steps, num_steps >= 1, "an integer >= 1")
        cls.check_param(
            "small_threshold",
            small_threshold,
            0 <= small_threshold < large_threshold,
            f">= 0 and below large_threshold ({large_threshold})",
        )
        cls.check_param("epsilon", epsilon, epsilon > 0, "a number > 0")
        cls.check_param(
            "first_update_threshold",
            first_update_threshold,
            first_update_threshold > 0,
            "a ratio > 0",
        )
        cls.check_param(
            "total_change_threshold",
            total_change_threshold,
            total_change_threshold >= 0,
            "a ratio >= 0",
        )
        growth_threshold = params["growth_threshold"]
        cls.check_param("growth_threshold", growth_threshold, growth_threshold > 1, "a ratio > 1")

    def __init__(
        self,
        base_trial: Any,
        num_steps: int = 100,
        large_threshold: float = 10.0,
        small_threshold: float = 1e-8,
        epsilon: float = 1e-9,
        first_update_threshold: float = 0.1,
        total_change_threshold: float = 0.01,
        growth_threshold: float = GROWTH_THRESHOLD,
    ) -> None:
        super().__init__(base_trial)
        self.num_steps = num_steps
        self.large_threshold, self.small_threshold = large_threshold, small_threshold
        self.epsilon = epsilon
        self.first_update_threshold = first_update_threshold
        self.total_change_threshold = total_change_threshold
        self.growth_threshold = growth_threshold
        self._growth_said = False  # the growth is reported once
        self._growth_from: int | None = None  # the first TRAIN step with weights seen
        self._first_norms: dict[str, tuple[int, tuple[int, ...], float]] = {}
        self._last_checked: int | None = None
        self._losses: list[float] = []  # the training loss at the TRAIN steps seen
        self._loss_steps: tuple[int, int] | None = None  # the steps of the first and last
        # (weight, ratio) of a first update reported large, until the loss diverges after it
        self._large_first: tuple[str, float] | None = None

    def invoke_at_step(self, step: int) -> bool:
        training = training_step(self.base_trial, step)
        if training is None:
            mode = step_mode(self.base_trial, step)[0]
            self.explain(NOT_TRAINING.format(mode=mode.name), judged=False)
            return False
        mode, s = training
        self._track_loss(step)
        if self._diverged(step):
            return True
        names = names_in(self.base_trial, "weights", step)
        if not names:
            raise self.skip("no weights saved at this step")
        if self._grown(names, s, mode):  # at every saved step of the first ones, whatever
            return True  # the gradients (units the updates killed have none)
        if self._last_checked is not None and s < self._last_checked + self.num_steps:
            self.explain(f"not a check step (checked every {self.num_steps} steps)")
            return False
        pairs = gradients_by_parameter(self.base_trial, step)
        if pairs:  # judge only what the optimizer is meant to move
            if zero_gradients(self.base_trial, step, pairs):
                self._last_checked = s
                return self._zero(step, sorted(pairs))
            trained = trained_parameters(self.base_trial, step, pairs)
            names = [n for n in names if n in trained]
            if not names:
                raise self.skip("no weight has a gradient worth judging at this step")
        bad = nonfinite_names(self.base_trial, names, step)
        if bad:
            return fire_nonfinite(self, bad, "the weight")
        # (ratio, weight, the first update, an update proportional to the gradient)
        ratios: list[tuple[float, str, bool, bool]] = []
        no_size: list[str] = []  # weights that moved from a norm of 0 (at most epsilon)
        snapshots = set(names_in(self.base_trial, INITIAL_WEIGHTS, step))
        for name in names:
            tensor = self.base_trial.tensor(name)
            w = tensor.value(s, mode=mode)
            earlier = [p for p in tensor.steps(mode=mode) if p < s]
            w_prev = None
            if earlier:
                p = earlier[-1]
                w_prev = tensor.value(p, mode=mode)
                if w_prev.shape != w.shape:  # another model's weight under this name (a new
                    w_prev, earlier = None, []  # stage of training): no update between them
            if w_prev is None and INITIAL_PREFIX + name in snapshots:
                p = s - 1  # the weights before this step's update
                w_prev = self.base_trial.tensor(INITIAL_PREFIX + name).value(step)
            if w_prev is None or w_prev.shape != w.shape:
                continue
            delta = (w - w_prev).ravel()
            update = float(np.linalg.norm(delta)) / (s - p)
            norm = float(np.linalg.norm(w_prev.ravel()))
            if norm <= self.epsilon and update > 0:
                # started at 0: an update has no size to be measured against (the ratio would
                # be update / epsilon, however small the learning rate)
                no_size.append(name)
                continue
            # an adaptive optimizer's first step moves every weight alike: its size is the
            # learning rate over the weights' scale, judged by large_threshold alone
            ratio = update / (norm + self.epsilon)
            ratios.append((ratio, name, not earlier, not moved_alike(delta)))
        if not ratios:
            if no_size:
                raise self.skip(
                    "every weight compared moved from 0: an update has no ratio to a norm of 0 "
                    f"({', '.join(no_size[:3])})"
                )
            raise self.skip("no earlier saved step of the weights to compare with")
        if all(r[2] and r[0] == 0 for r in ratios):
            # the first step ended before the optimizer first stepped (an accumulation's first
            # micro-batches, before the hook met the optimizer): the next saved step is judged
            raise self.skip("the first saved step held no update yet")
        self._last_checked = s
        low, high = min(ratios), max(ratios)
        first = max((r for r in ratios if r[2] and r[3]), default=None)
        if high[0] > self.large_threshold:
            self.explain(
                f"update/weight ratio of {high[1]} is {high[0]:.3g}, above "
                f"{self.large_threshold:g}{_left_out(no_size)}",
                tensors=[high[1]],
                value=high[0],
                threshold=self.large_threshold,
                direction="large",
                first_update=high[2],
                cause="lr_too_high",
            )
            return True
        if low[0] < self.small_threshold:
            share = self._loss_share() if low[0] > 0 else None
            at_minimum = share is not None and share < _CONVERGED
            note = (
                f"; the training loss is {100 * share:.2g}% of where it started, and small "
                "updates are expected at a minimum"
                if share is not None and at_minimum
                else ""
            )
            self.explain(
                f"update/weight ratio of {low[1]} is {low[0]:.3g}, below {self.small_threshold:g}"
                f"{_left_out(no_size)}{note}",
                tensors=[low[1]],
                value=low[0],
                threshold=self.small_threshold,
                severity=Severity.ADVICE if at_minimum else None,
                direction="small",
                cause="not_updating" if low[0] == 0 else "lr_too_low",
            )
            return True
        if self._too_little(names, s, mode):
            return True
        if first is not None and first[0] > self.first_update_threshold:
            self._large_first = (first[1], first[0])
            self.explain(
                f"the first update (following the gradient, as SGD's does) moved {first[1]} by "
                f"{first[0]:.3g} of its norm, above {self.first_update_threshold:g}: a large "
                "first step, the learning rate may be too high (a warning: healthy SGD moves a "
                "network's weights by 1e-5 to 4e-3 at learning rates up to 1e-2, but a new "
                "classifier head or a regression far from its solution reaches 0.2; a problem "
                f"above {self.large_threshold:g}){_left_out(no_size)}",
                tensors=[first[1]],
                value=first[0],
                threshold=self.first_update_threshold,
                severity=Severity.WARNING,
                direction="large",
                first_update=True,
                cause="lr_too_high",
            )
            return True
        self.explain(
            f"update/weight ratios between {low[0]:.3g} and {high[0]:.3g}{_left_out(no_size)}",
            value=high[0],
            threshold=(self.small_threshold, self.large_threshold),
        )
        return False

    def _loss_share(self) -> float | None:
        """The training loss now as a share of where it started (the medians of its last and
        first 3 values saved); None with fewer than 6 values or a start at or below 0."""
        losses = self._losses
        if len(losses) < 6:
            return None
        begin, end = float(np.median(losses[:3])), float(np.median(losses[-3:]))
        return end / begin if begin > 0 and end >= 0 else None

    def _track_loss(self, step: int) -> None:
        names = loss_names(self.base_trial, True, None, step)
        if names:
            value = float(np.mean([scalar(self.base_trial.tensor(n), step) for n in names]))
            if math.isfinite(value):
                self._losses.append(value)
                begin = step if self._loss_steps is None else self._loss_steps[0]
                self._loss_steps = (begin, step)

    def _diverged(self, step: int) -> bool:
        """After a first update reported large, a training loss that rose by more than
        ``_DIVERGED`` times its first value: the learning rate is too high (a problem, once)."""
        if self._large_first is None or self._loss_steps is None or self._loss_steps[1] != step:
            return False
        if len(self._losses) < _SPAN + 1:
            return False
        # the median of the last values: one batch of a heavy-tailed loss (a regression with
        # outliers) can be 10x the first, a diverging loss stays there
        first = self._losses[0]
        now = float(np.median(self._losses[-_SPAN:]))
        if now - first <= _DIVERGED * abs(first):
            return False
        weight, ratio = self._large_first
        self._large_first = None
        self.explain(
            f"the training loss rose from {first:.4g} at step {self._loss_steps[0]} to {now:.4g} "
            f"(the median of its last {_SPAN} values, to step {step}), over {_DIVERGED:g} times "
            "its first value, after a first "
            f"update of {ratio:.3g} times {weight}'s norm (above "
            f"{self.first_update_threshold:g}; healthy SGD's reaches 0.35 at most): the learning "
            "rate is too high, its updates overshoot and the loss diverges",
            tensors=[weight],
            value=ratio,
            threshold=self.first_update_threshold,
            direction="large",
            first_update=True,
            diverged=True,
            cause="lr_too_high",
        )
        return True

    def _too_little(self, names: list[str], s: int, mode: ModeKeys) -> bool:
        """The total change since the first saved step, judged with the loss's progress."""
        changes = []
        for name in names:
            tensor = self.base_trial.tensor(name)
            steps = tensor.steps(mode=mode)
            if not steps or s - steps[0] < _LOW_AFTER:
                continue
            start = np.asarray(tensor.value(steps[0], mode=mode), dtype=np.float64)
            now = np.asarray(tensor.value(s, mode=mode), dtype=np.float64)
            size = float(np.linalg.norm(start))
            change = float(np.linalg.norm(now - start)) / size if size else 0.0
            if change > 0:
                changes.append(change)
        if not changes:
            return False
        moved = float(np.median(changes))
        if moved >= self.total_change_threshold:
            return False
        losses = self._losses
        learned = None
        if len(losses) >= 6:
            begin, end = float(np.median(losses[:3])), float(np.median(losses[-3:]))
            learned = (begin - end) / abs(begin) if begin else None
        if learned is not None and learned >= _NO_PROGRESS:
            return False
        said = (
            "no training loss was saved to tell"
            if learned is None
            else f"the training loss came down {100 * learned:.3g}% (under {100 * _NO_PROGRESS:g}%)"
        )
        self.explain(
            f"the weights moved by a median {moved:.3g} of their norm over the {len(changes)} "
            f"tensors that moved, in {s} TRAIN steps (limit {self.total_change_threshold:g}; "
            f"healthy runs move 0.06 or more by step {_LOW_AFTER}), and {said}: the learning "
            "rate is far too low; raise it (try 10-100x)",
            value=moved,
            threshold=self.total_change_threshold,
            severity=Severity.WARNING if learned is None else None,
            direction="small",
            total_change=True,
            cause="lr_too_low",
        )
        return True

    def _grown(self, names: list[str], s: int, mode: ModeKeys) -> bool:
        """Weights that grew ``growth_threshold`` times in norm or more (the median over the
        weights judged) within ``_GROWTH_WITHIN`` TRAIN steps of their first saved step:
        updates far larger than the weights, whatever the optimizer (evidence that needs harm,
        reported once)."""
        if self._growth_said:
            return False
        if self._growth_from is None:
            self._growth_from = s
        if s - self._growth_from > _GROWTH_WITHIN:  # past the window: nothing more to read
            return False
        growths: list[tuple[float, str]] = []
        first = s
        for name in names:
            if name not in self._first_norms:  # (its first saved step, shape and norm)
                tensor = self.base_trial.tensor(name)
                steps = tensor.steps(mode=mode)
                start = np.asarray(tensor.value(steps[0], mode=mode), dtype=np.float64)
                self._first_norms[name] = (steps[0], start.shape, float(np.linalg.norm(start)))
            begun, shape, begin = self._first_norms[name]
            if begun >= s or s - begun > _GROWTH_WITHIN:
                continue
            now = np.asarray(self.base_trial.tensor(name).value(s, mode=mode), dtype=np.float64)
            if now.shape != shape:  # another model's weight under this name
                continue
            end = float(np.linalg.norm(now))
            if begin > self.epsilon and math.isfinite(begin) and math.isfinite(end):
                growths.append((end / begin, name))
                first = min(first, begun)
        if not growths:
            return False
        growth = float(np.median([g for g, _ in growths]))
        if growth < self.growth_threshold:
            return False
        self._growth_said = True
        worst = sorted(growths, reverse=True)[:3]
        self.explain(
            f"the weights grew {growth:.3g} times in norm from step {first} to step {s} (the "
            f"median over {len(growths)} weight tensors: "
            f"{', '.join(f'{n} {g:.3g}x' for g, n in worst)}; limit {self.growth_threshold:g}x "
            f"within {_GROWTH_WITHIN} steps): the updates outgrow the weights, the learning rate "
            "is too high (an adaptive optimizer moves every weight by about its learning rate "
            "each step, whatever the gradients); lower it, or warm it up",
            tensors=[worst[0][1]],
            value=growth,
            threshold=self.growth_threshold,
            severity=Severity.WARNING,
            direction="large",
            growth=True,
            needs_harm=True,
            cause="lr_too_high",
        )
        return True

    def _zero(self, step: int, params: list[str]) -> bool:
        if loss_is_zero(self.base_trial, step):
            self.explain("every gradient is 0, as the loss is: a minimum, nothing to update")
            return False
        self.explain(
            f"every gradient of the {len(params)} parameters with one is exactly 0: the "
            "weights cannot be updated",
            tensors=params,
            value=0.0,
            threshold=self.small_threshold,
            direction="small",
            cause="not_updating",
            zero_gradients=True,
        )
        return True


def _left_out(names: list[str]) -> str:
    """What a finding says of the weights that moved from 0 (no ratio to judge)."""
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"; left out, as they started from 0 and an update has no ratio to a norm of 0: "
        f"{shown} (not a learning rate too high)"
    )


def moved_alike(delta: np.ndarray) -> bool:
    """Whether the weights that moved all moved by about the same amount (within 10% between
    the quartiles): the first step of Adam, AdamW, RMSprop or Adagrad, ``lr * sign(gradient)``
    (RMSprop's 10 times that), whereas SGD's follows the gradient."""
    moved = np.abs(delta[delta != 0])
    if moved.size < 4:
        return False
    low, median, high = np.percentile(moved, [25, 50, 75])
    return bool(high - low <= 0.1 * median)
