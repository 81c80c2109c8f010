"""LossNotDecreasing: the loss did not go down over a number of steps."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensortap.core._collections import TRAINING_LOOP
from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._numbers import Scalars
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    VITAL_LOSS,
    boosting_metric_pair,
    collection_names_param,
    nonfinite_explanation,
    note_losses_asked,
    prefer_vital_loss,
    select,
    vital_at,
)
from tensortap.rules.builtin._series import (
    Change,
    LossSeries,
    Observation,
    Stages,
    change,
    progress,
)

_LOSS_LIKE = r"(?i)loss"
#: A run should come down this far (relative) from where it started: a loss shown, against its
#: own noise, to have come down less than this has made no progress.
_PROGRESS = 0.1
#: A fall smaller than this (relative) is no progress even where the noise is nil.
_MEASURABLE = 0.005
#: What a check that found no progress since the start says (kept to judge at the end).
_STUCK = "; no progress since the start"
#: Progress is judged after this many times ``num_steps`` TRAIN steps: healthy runs sit on a
#: plateau for their first 50-90 steps (a GRU with momentum SGD, a CNN with AdamW on the
#: digits) before they learn, and 5 times called them stalled.
_SPAN = 10
_FACTS = TRAINING_LOOP + "/"  # training_loop/softmax_before_loss is no loss
#: A training loss that climbs from its first step: over its first ``_CLIMB_SPAN`` values (at
#: least ``_CLIMB_MIN``), a rank correlation with the step of at least ``_CLIMB_RHO``, no jump
#: in its first 3 steps (under ``_CLIMB_JUMP`` x its first value: a step far too large jumps),
#: and at least ``_CLIMB_RISE`` x its first value. On the development split's runs whose loss
#: diverged, the wrong-sign ones climbed with 0.97-1.00, all others at most 0.86.
_CLIMB_SPAN, _CLIMB_MIN, _CLIMB_RHO, _CLIMB_JUMP, _CLIMB_RISE = 50, 10, 0.93, 3.0, 1.5
#: A training loss that falls without a floor: the median of its last 3 values below 0 and
#: ``_PLUNGE`` x further from 0 than its start (the median of its first 3, at least 1 in size).
#: A loss that is minimised has a floor (cross-entropy, squared error: 0; a Gaussian
#: likelihood's log-scale a few units below it); a log-likelihood minimised without its minus
#: sign went from -1.5 to -144 within 11 steps, and to -7e20 where nothing overflowed.
_PLUNGE = 100.0


class LossNotDecreasing(Rule):
    """Compares each loss with its value ``num_steps`` steps earlier (the newest saved step at
    or before) and fires, as smdebug's rule does, when it *rose* by at least ``diff_percent``
    percent (``diff_percent=0``: when it did not drop).

    Like is compared with like: TRAIN (or GLOBAL) steps step with step; EVAL steps are
    different validation batches, so each evaluation pass (consecutive EVAL steps) is compared
    by its mean loss with the pass before. Without ``mode`` both are judged (GLOBAL steps of a
    trial written without modes too); with a mode, only that one. Losses: the ``losses``
    collection (unless ``use_losses_collection`` is false), ``collection_names`` and tensors
    matching ``tensor_regex``; with none of those found, scalars named like ``loss``, and on
    a trial the XGBoost hook wrote, the validation set's metric (``validation-rmse``).

    Severity is judged on windows of values, never on single ones: the first third of the
    loss's observations (steps, or passes) against the last third, the difference measured in
    standard errors of the loss's own step-to-step noise (from the differences of successive
    values). A NaN or infinite loss is a problem, and so is a loss that is diverging: its
    recent values are significantly above the first ones, and the median of its last 3 values
    is more than ``increase_threshold_percent`` above that of its first 3, or the mean of its
    last third of values is that far above the mean of its first third (a loss that came down,
    then blew up past where it started), or it rose by more than that at a check (a single
    noisy batch that doubles is not). After ``10 * num_steps``
    steps or 3 passes:

    - a fall beyond the noise (and of at least 0.5%), or the median of the last 3 values 10%
      below that of the first 3, is *advice*: the run came down and has levelled off, or is
      coming down slowly (real progress, however small);
    - *no progress* is a *problem* only when it is shown against the noise: the fall is
      within it, and even its upper bound (fall + 3 standard errors, more where the noise was
      estimated from few values) is under 10% of the start;
    - otherwise (too noisy to tell, or earlier in training) it is a *warning*.
    """

    collections_needed = ("losses",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        num_steps = params["num_steps"]
        diff_percent = params["diff_percent"]
        increase_threshold_percent = params["increase_threshold_percent"]
        cls.check_param("num_steps", num_steps, num_steps >= 1, "an integer >= 1")
        cls.check_param(
            "diff_percent", diff_percent, -100 <= diff_percent <= 100, "between -100 and 100"
        )
        cls.check_param(
            "increase_threshold_percent",
            increase_threshold_percent,
            increase_threshold_percent >= 0,
            "a number >= 0",
        )

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        use_losses_collection: bool = True,
        num_steps: int = 10,
        diff_percent: float = 0.0,
        increase_threshold_percent: float = 100.0,
        mode: ModeKeys | None = None,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.use_losses_collection = use_losses_collection
        self.num_steps = num_steps
        self.diff_percent = diff_percent
        self.increase_threshold_percent = increase_threshold_percent
        self.mode = mode
        losses = Scalars(self._loss_names, pick=functools.partial(prefer_vital_loss, base_trial))
        self._series = LossSeries(base_trial, self.reads(losses))
        self._last_checked: dict[tuple[str, ModeKeys], int] = {}
        # the training losses whose last check found no progress since the start: a warning
        # while training goes on (a plateau before the model learns), a problem if it ended so
        self._stuck: dict[tuple[str, ModeKeys], dict[str, Any]] = {}
        self._stages = Stages(base_trial)

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        names = collection_names_param(params)
        use = str(params.get("use_losses_collection", True)).lower() not in ("false", "0")
        return tuple(dict.fromkeys([*(["losses"] if use else []), *names]))

    def _names(self, step: int) -> list[str]:
        vital = self.use_losses_collection and vital_at(self.base_trial, VITAL_LOSS, step)
        use = self.use_losses_collection and not vital  # the loss of every step stands for it
        collections = [*self.collection_names, *(["losses"] if use else [])]
        names = select(self.base_trial, collections, self.tensor_regex, step=step, default=[])
        if vital:
            note_losses_asked(self.base_trial)
            return [VITAL_LOSS, *(n for n in names if n != VITAL_LOSS)]
        if names or self.collection_names or self.tensor_regex:
            return names
        trial = self.base_trial  # a loss saved by hand lands in `default`: find it by name
        found = trial.tensor_names(step=step, regex=_LOSS_LIKE)
        found = [n for n in found if not n.startswith(_FACTS) and _is_scalar(trial, n)]
        if found:
            return found
        pair = boosting_metric_pair(trial, step)  # a boosted model: its validation metric
        return [] if pair is None else trial.tensor_names(step=step, regex=pair[1])

    def _judged(self, obs: Observation) -> bool:
        if self.mode is None or self.mode == ModeKeys.GLOBAL:
            return True
        return obs.mode == self.mode

    def _loss_names(self, step: int | None) -> list[str]:
        """The losses at ``step`` (see :meth:`_names`); at any step (None), those named by
        collection or regex (a loss found by its name is read at its step)."""
        if step is not None:
            return self._names(step)
        collections = [*self.collection_names, *(["losses"] if self.use_losses_collection else [])]
        names = select(self.base_trial, collections, self.tensor_regex, default=[])
        if self.use_losses_collection and self.base_trial.has_tensor(VITAL_LOSS):
            names = [VITAL_LOSS, *(n for n in names if n != VITAL_LOSS)]
        return names

    def invoke_at_step(self, step: int) -> bool:
        if self._stages.entered(step):  # a new stage of training: compared from here
            self._series.new_stage()
            self._last_checked = {}
            self._stuck = {}
        observations = [o for o in self._series.observe(step) if self._judged(o)]
        if not observations and not self._names(step):
            raise self.skip("no loss saved at this step")
        return self._answer(observations)

    def invoke_at_end(self, last_step: int) -> bool | None:
        """A training loss whose last check found no progress since the start ended so: a
        problem now (a warning while training went on: it may have been a plateau before the
        model learned). Else the evaluation pass that ended the run, when it was read live (its
        end was not known then, so its mean was never compared): compared now."""
        observations = [o for o in self._series.end() if self._judged(o)]
        if self._stuck:
            stuck = next(iter(self._stuck.values()))
            self.explain(
                **{
                    **stuck,
                    "message": stuck["message"] + " (to the end of training)",
                    "severity": Severity.PROBLEM,
                }
            )
            return True
        return self._answer(observations) if observations else None

    def _answer(self, observations: list[Observation]) -> bool:
        """Whether the loss failed to decrease at any of ``observations`` (explained)."""
        verdicts = [v for v in map(self._verdict, observations) if v is not None]
        if not verdicts:
            self.explain(
                "nothing to compare yet: LossNotDecreasing compares each loss with its value "
                f"{self.num_steps} saved steps earlier (an evaluation pass with the pass before)",
                judged=False,
            )
            return False
        fired = [v for v in verdicts if v[0]]
        _, _, explanation = min(fired, key=lambda v: v[1]) if fired else verdicts[-1]
        self.explain(**explanation)
        return bool(fired)

    def _verdict(self, obs: Observation) -> tuple[bool, int, dict[str, Any]] | None:
        """(fired, severity rank, explanation) for one observation; None if not compared."""
        key = (obs.key, obs.mode)
        history = self._series.history[key]
        if not obs.finite:
            self._last_checked[key] = obs.mode_step
            nonfinite = nonfinite_explanation(obs.tensors, "the loss")
            rho = None if obs.mode == ModeKeys.EVAL else climb(history)
            fell = None if obs.mode == ModeKeys.EVAL else plunge(self._series.values(key))
            if rho is not None:  # the loss climbed steadily from its first step up to it
                nonfinite["cause"] = "wrong_sign"
                nonfinite["message"] += (
                    f"; before it, the loss climbed steadily from its first step (rank "
                    f"correlation with the step {rho:.2f}, no jump): each update ascends the loss"
                )
            elif fell is not None:  # it fell without a floor up to it
                nonfinite["cause"] = "wrong_sign"
                nonfinite["message"] += (
                    f"; before it, the loss fell without a floor, from {fell[0]:.4g} at its "
                    f"start to {fell[1]:.4g}: {_UNBOUNDED}"
                )
            return True, 0, nonfinite
        previous = self._previous(key, obs, history)
        if previous is None:
            return None
        self._last_checked[key] = obs.mode_step
        fell = None if obs.mode == ModeKeys.EVAL else plunge(self._series.values(key))
        if fell is not None:  # judged as often as a rise is (every num_steps), not every step
            return self._unbounded(obs, fell, previous.mode_step)
        before, now = previous.value, obs.value
        rise = 100.0 * (now - before) / abs(before) if before else (100.0 if now > 0 else 0.0)
        fired = rise >= self.diff_percent
        made = progress(history)
        moved = change(self._series.values(key))
        what = f"{obs.key} ({'pass mean' if obs.mode == ModeKeys.EVAL else obs.mode.name})"
        went = f"rose {rise:.3g}%" if rise > 0 else f"fell {-rise:.3g}%"
        text = (
            f"{what} {went} from {before:.4g} at step {previous.mode_step} to {now:.4g} at "
            f"step {obs.mode_step}"
        )
        # a single noisy batch can double: diverging means the recent values significantly
        # above the first ones (against the loss's own step-to-step noise), and the median of
        # the last 3 above that of the first 3 by the limit, or a jump beyond the limit (five
        # noisy regression batches moved the medians 254% in a healthy run)
        limit = self.increase_threshold_percent
        above_start = moved is not None and moved.significant(-moved.fall)
        # ... or its last third of values above its first third by the limit: a loss that came
        # down and then blew up past where it started (a one-cycle peak too high) has a first
        # 3 values as high as its last, yet its recent level is far above its early one
        blown_up = moved is not None and moved.relative < -limit / 100.0
        diverging = above_start and (
            made < -limit / 100.0 or (rise > limit and made < 0) or blown_up
        )
        cause = "no_progress"
        if not fired:
            severity, text = Severity.ADVICE, text + f"; fires when it rises {self.diff_percent:g}%"
        elif diverging:
            severity, cause = Severity.PROBLEM, "lr_too_high"
            text += f"; diverging ({-100 * made:.3g}% above where it started)"
            trained = self._training_progress() if obs.mode == ModeKeys.EVAL else None
            rho = self._training_climb() if obs.mode == ModeKeys.EVAL else climb(history)
            if trained is not None:  # the validation loss rises while the training loss fell
                cause = "overfitting"
                text += (
                    f"; the training loss came down {100 * trained:.3g}% meanwhile: the model "
                    "fits its training data, not the validation data"
                )
            elif rho is not None:
                cause = "wrong_sign"
                what = "; the training loss climbed" if obs.mode == ModeKeys.EVAL else ", climbing"
                text += (
                    f"{what} steadily from its first step (rank correlation with the step "
                    f"{rho:.2f} over its first values, no jump): each update ascends the loss"
                )
        else:
            severity, cause, said = self._progress(obs, history, moved, made)
            text += said
        explanation = {
            "message": text,
            "tensors": list(obs.tensors),
            "value": rise,
            "threshold": self.diff_percent,
            "severity": severity,
            "diverging": diverging,
            "progress": made if moved is None else moved.relative,
            "previous_step": previous.mode_step,
            "mode": obs.mode,
            "cause": cause,
        }
        if obs.mode != ModeKeys.EVAL:  # stuck since the start, as of this check (or not)
            said = text if fired else self._progress(obs, history, moved, made)[2]
            if not diverging and _STUCK in said:
                self._stuck[key] = explanation if fired else {**explanation, "message": text + said}
            else:
                self._stuck.pop(key, None)
        return fired, severity.rank, explanation

    def _unbounded(
        self, obs: Observation, fell: tuple[float, float], previous_step: int
    ) -> tuple[bool, int, dict[str, Any]]:
        """A training loss that fell without a floor (see ``_PLUNGE``): a problem."""
        start, low = fell
        text = (
            f"{obs.key} ({obs.mode.name}) fell without a floor, from {start:.4g} at its start "
            f"to {low:.4g} at step {obs.mode_step} (the median of its last 3 values): {_UNBOUNDED}"
        )
        return (
            True,
            Severity.PROBLEM.rank,
            {
                "message": text,
                "tensors": list(obs.tensors),
                "value": low,
                "threshold": self.diff_percent,
                "severity": Severity.PROBLEM,
                "diverging": True,
                "progress": 0.0,
                "previous_step": previous_step,
                "mode": obs.mode,
                "cause": "wrong_sign",
            },
        )

    def _progress(
        self, obs: Observation, history: list[Observation], moved: Change | None, made: float
    ) -> tuple[Severity, str, str]:
        """(severity, cause, words) of a loss that did not drop at a check: how far it came
        down since the start, judged against its own noise."""
        if moved is None:
            return Severity.WARNING, "no_progress", "; too few values to judge progress yet"
        what = "pass" if obs.mode == ModeKeys.EVAL else "value"
        if moved.window == 1:
            first, last = f"the first {what} {moved.start:.4g}", f"the last {moved.recent:.4g}"
        else:
            first = f"the mean of the first {moved.window} {what}{'es' if what == 'pass' else 's'}"
            first += f" {moved.start:.4g}"
            last = f"of the last {moved.window} {moved.recent:.4g}"
        measured = (
            f" ({first}, {last}: {100 * moved.relative:.3g}% lower, standard error "
            f"{100 * moved.se / abs(moved.start) if moved.start else 0:.2g}% from the "
            "step-to-step noise)"
        )
        real = moved.significant(moved.fall) and moved.relative >= _MEASURABLE
        upper = moved.fall + moved.critical * moved.se
        if not real and self._long_enough(obs, history) and upper < _PROGRESS * abs(moved.start):
            # the first evaluation pass comes after training began: a validation loss level
            # since then may have converged before it; training's own loss, seen from its
            # first step, tells no progress for certain, but only training's end tells it is
            # not a plateau the model leaves (a problem then: invoke_at_end). A warning both.
            return (
                Severity.WARNING,
                "no_progress",
                (
                    f"{_STUCK}: {100 * moved.relative:.3g}% lower, at most "
                    f"{100 * upper / abs(moved.start):.3g}% given its noise{measured}"
                ),
            )
        if real and moved.relative >= _PROGRESS:
            return (
                Severity.ADVICE,
                "overtraining",
                (
                    f"; it came down {100 * moved.relative:.3g}% since the start and has "
                    f"levelled off{measured}"
                ),
            )
        if made >= _PROGRESS:  # a steep start, which successive differences take for noise
            return (
                Severity.ADVICE,
                "overtraining",
                (
                    f"; it came down {100 * made:.3g}% since the start (the median of its last 3 "
                    "values against its first 3) and has levelled off"
                ),
            )
        if real:
            return (
                Severity.ADVICE,
                "no_progress",
                (
                    f"; it came down only {100 * moved.relative:.3g}% since the start, but beyond "
                    f"its noise: slow progress{measured}"
                ),
            )
        if not self._long_enough(obs, history):
            return (
                Severity.WARNING,
                "no_progress",
                f"; {100 * moved.relative:.3g}% lower than at the start so far, too early to "
                f"tell progress from noise (judged after {_SPAN * self.num_steps} steps or 3 "
                f"passes){measured}",
            )
        return (
            Severity.WARNING,
            "no_progress",
            (
                f"; {100 * moved.relative:.3g}% lower than at the start, too noisy to tell "
                f"whether it is making progress{measured}"
            ),
        )

    def _training_climb(self) -> float | None:
        """For a diverging validation loss: the rank correlation of a training loss that
        climbed steadily from its first step (see :func:`climb`), None when none did: the
        validation loss rises because every update ascends the training loss, not because the
        rate is too high."""
        rhos = [
            climb(h)
            for (_, mode), h in self._series.history.items()
            if mode in (ModeKeys.TRAIN, ModeKeys.GLOBAL) and len(h) >= _CLIMB_MIN
        ]
        return max((r for r in rhos if r is not None), default=None)

    def _training_progress(self) -> float | None:
        """How far a training loss has come down (its largest fall of those saved, see
        :func:`progress`) when one came down by at least 10%; None when none did (a diverging
        validation loss then diverges with it)."""
        falls = [
            progress(h)
            for (_, mode), h in self._series.history.items()
            if mode in (ModeKeys.TRAIN, ModeKeys.GLOBAL) and len(h) >= 2
        ]
        best = max(falls, default=0.0)
        return best if best >= _PROGRESS else None

    def _previous(
        self, key: tuple[str, ModeKeys], obs: Observation, history: list[Observation]
    ) -> Observation | None:
        if obs.mode == ModeKeys.EVAL:  # pass with pass
            return history[-2] if len(history) >= 2 else None
        last = self._last_checked.setdefault(key, history[0].mode_step)
        if obs.mode_step < last + self.num_steps:
            return None
        limit = obs.mode_step - self.num_steps
        # the last one saved at or before the limit, looked for from the end (a scan of the
        # whole history at every step made a long run's walk quadratic)
        return next((o for o in reversed(history) if o.mode_step <= limit), None)

    def _long_enough(self, obs: Observation, history: list[Observation]) -> bool:
        if obs.mode == ModeKeys.EVAL:
            return len(history) >= 3
        return obs.mode_step - history[0].mode_step >= _SPAN * self.num_steps


def climb(history: Sequence[Observation]) -> float | None:
    """The rank correlation of a training loss with its step over its first values, when it
    climbs steadily from its first step (see ``_CLIMB_RHO``); None when it does not."""
    values = []
    for o in history[:_CLIMB_SPAN]:  # up to the first value that is not finite
        if not math.isfinite(o.value):
            break
        values.append(o.value)
    if len(values) < _CLIMB_MIN or values[0] <= 0:
        return None
    first = values[0]
    if max(values[1:4]) >= _CLIMB_JUMP * first or max(values) < _CLIMB_RISE * first:
        return None
    ranks = np.argsort(np.argsort(values)).astype(np.float64)
    steps = np.arange(len(values), dtype=np.float64)
    rho = float(np.corrcoef(steps, ranks)[0, 1])
    return rho if rho >= _CLIMB_RHO else None


_UNBOUNDED = (
    "a loss that is minimised has a floor, so this objective is minimised with its sign "
    "flipped (a log-likelihood without its minus) or is unbounded below"
)


def plunge(values: np.ndarray) -> tuple[float, float] | None:
    """(start, low) when a training loss (its values in order) fell without a floor (see
    ``_PLUNGE``): the median of its first 3 finite values and of its last 3; None otherwise.
    Reads a bounded window at each end, so a walk that asks at every step stays linear."""
    head = values[:_CLIMB_SPAN]
    tail = values[-_CLIMB_SPAN:]
    head, tail = head[np.isfinite(head)][:3], tail[np.isfinite(tail)][-3:]
    if len(values) < 6 or len(head) < 3 or len(tail) < 3:
        return None
    start, low = float(np.median(head)), float(np.median(tail))
    return (start, low) if low < 0 and -low >= _PLUNGE * max(abs(start), 1.0) else None


def _is_scalar(trial: Any, name: str) -> bool:
    tensor = trial.tensor(name)
    steps = tensor.steps()
    return bool(steps) and math.prod(tensor.shape(steps[-1])) == 1
