"""AccuracyAtChance: evaluation passes no better than always answering the most common class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._chance import PassScore, classified, label_shift, regressed
from tensortap.rules.builtin._common import names_in, step_mode
from tensortap.rules.builtin._labels import labels_and_predictions, regression_targets
from tensortap.rules.builtin._linear import SHARE, AgainstLine
from tensortap.rules.builtin._series import Stages, pass_ends_at
from tensortap.rules.builtin._training_record import (
    AT_ENTROPY,
    AT_VARIANCE,
    END_VALUES,
    LOSS,
    TrainingRecord,
    matrix_input,
)

#: a pass that learned: a quarter of the way from chance to perfect (balanced accuracy, or R^2)
_LEARNED = 0.25
#: saved training steps walked before a pass that learned counts as learning
_TRAINED_BEFORE = 2
#: a pass above chance that kept under this share of the best pass's gain (of the way from
#: chance to perfect) lost what the model learned
_KEPT = 0.5


class AccuracyAtChance(Rule):
    """Judges each whole evaluation pass (consecutive EVAL steps) of a classifier: its accuracy
    against *chance*, the share of the pass's most common label (what always answering that
    class scores), and its balanced accuracy (the mean recall over the classes present)
    against 1/K (what predictions that ignore the inputs score, however they are spread). A
    pass is at chance when neither is ``z_threshold`` standard errors above its chance
    (``sqrt(c (1 - c) / n)`` for the accuracy; for the balanced accuracy, from each class's
    count and the share of predictions naming it; the default 2 is a one-sided test at about
    97.5%): on an imbalanced validation set a model that learned every class may score under
    the majority's share (a healthy GRU: accuracy 0.64 against 0.68). It fires when
    ``passes`` passes in a row are at chance: a warning while training goes on (a model may
    sit on a plateau before it learns), a problem when those passes end the run (the trial
    has ended and holds no later step): the model learned nothing that carries to held-out
    data, most often because the labels do not follow from the inputs (shuffled,
    misaligned); a loop that does not train at all is named by the rules about updates
    first. At the end of training every pass at chance is the run's outcome however few
    (one evaluation after training), and so are the last passes at chance when training went
    on after them for no more saved steps than before them.

    Needs at least ``min_samples`` labels in a pass. Reads the ``labels`` and
    ``predictions`` collections (predictions as classes or scores per class).

    Told apart from training on too long: where an earlier pass was far above chance (twice
    ``z_threshold``, and a quarter of the way to perfect: ``_LEARNED``) once the training loss
    had fallen below its first value (before that, it is the untrained model's luck: a linear
    model on well-separated classes can map them right at random), the labels carry signal
    the model learned and lost by training on: the cause is ``overtraining``, unless the model
    lost its fit of the training data too (its training loss ended at the entropy of the training
    labels' class shares, as ``TrainingRecord.loss_at_chance`` judges it): training on too long fits
    the training data ever better, so the updates broke what it learned: ``lr_too_high``. Told
    apart from an
    imbalance: where the training labels saved are distributed unlike the pass's (a class that
    is most of the training labels and far less of the evaluation's: odds ``SHIFT_ODDS`` times
    the pass's or more, over at least ``MIN_TRAIN`` training labels), the model learned the
    training set's imbalance, not labels that do not follow from the inputs (shuffled labels
    keep their classes' shares): the cause is ``class_imbalance``, and the message says why the
    other was ruled out.

    At the end of training, passes at chance in at least half the run (and ``passes`` or more)
    with none far above it, though the run did not end at chance, are a warning that is
    evidence needing harm (``details["needs_harm"]``): the model never learned what the labels
    say, which the diagnosis names where training is harmed in a way it explains. Where the
    pass that ended training was at chance too (one barely above chance before it broke the
    row), the run ended at chance: a problem.

    A regression (no labels saved; a regression loss module such as ``MSELoss``, or a
    functional one such as ``F.mse_loss``, whose prediction and target inputs are saved) is
    judged the same way against always answering the mean of the training targets: at chance
    when the model's squared error is not ``z_threshold`` standard errors (of the per-sample
    differences) below that constant's; and, with no pass far above chance, a regression whose
    predictions on its last training batches explain under ``AT_VARIANCE`` (10%) of their
    targets' spread at the end (``TrainingRecord.fit_at_chance``) fit neither those nor
    held-out ones: a problem, as a classifier's training loss at its labels' entropy is. A
    model whose input is a matrix of features is also
    compared with a linear model of its inputs, fitted on the training targets or labels saved
    (``_linear.LinearFit``, a regression's straight line; ``_linear.LinearClassifier``, a
    classifier's least-squares linear discriminant): a last pass, to the end of training, that
    gets under ``SHARE`` (70%) of what the line gets is a problem named ``underfitting``, and
    passes at chance whose targets or labels the line gets are ``underfitting`` too, not labels
    that do not follow from the inputs; a last pass under the line after an earlier one that
    scored ``SHARE`` of it or more is ``overtraining``: the model had fit and lost it.
    """

    collections_needed = ("labels", "predictions")

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        z_threshold = params["z_threshold"]
        passes = params["passes"]
        min_samples = params["min_samples"]
        cls.check_param("z_threshold", z_threshold, z_threshold >= 0, "a number >= 0")
        cls.check_param("passes", passes, passes >= 1, "an integer >= 1")
        cls.check_param("min_samples", min_samples, min_samples >= 1, "an integer >= 1")

    def __init__(
        self,
        base_trial: Any,
        z_threshold: float = 2.0,
        passes: int = 2,
        min_samples: int = 30,
        labels_regex: str = "labels",
        predictions_regex: str = "predictions",
    ) -> None:
        super().__init__(base_trial)
        self.z_threshold = z_threshold
        self.passes = passes
        self.min_samples = min_samples
        self.labels_regex = labels_regex
        self.predictions_regex = predictions_regex
        self._labels: list[np.ndarray] = []
        self._predictions: list[np.ndarray] = []
        self._regression: list[tuple[np.ndarray, np.ndarray]] = []  # (predicted, target)
        self._pass_inputs: list[np.ndarray | None] = []  # the model's inputs of the pass's steps
        self._underfit: AgainstLine | None = None  # the pass judged last, if under the line
        self._names: list[str] = []
        self._stages = Stages(base_trial)
        self._start_stage(0)

    def _start_stage(self, stage_from: int) -> None:
        """Judge passes from here (TRAIN step ``stage_from``: the run's start, or a new stage
        of training: another model's fit, on another task whose chance and training labels are
        its own)."""
        self._training = TrainingRecord(self, stage_from, self.labels_regex)
        self._at_chance = 0  # passes in a row at chance
        self._judged = 0
        # the pass whose model scored best against a line (its number, and how): a model that
        # ends below the line after a pass that scored as well as it had fit and lost it
        self._best_against: tuple[int, AgainstLine] | None = None
        self._pass_labels = np.zeros(0, dtype=np.int64)  # the last pass judged's, by class
        # the first pass far above chance: its number, what it measured
        self._above: tuple[int, str] | None = None
        # the pass that learned most (its number, gain and what it measured), and the passes in
        # a row since that kept under _KEPT of its gain (above chance, or not)
        self._best: tuple[int, float, str] | None = None
        self._lost = 0
        # passes at chance (in a row or not), and the pass with the largest gain over chance
        # (its gain and what it measured)
        self._chance_passes = 0
        self._peak: tuple[float, str] | None = None
        # the last pass judged: what it measured, its value and chance, TRAIN steps before
        # it, and whether it ended the run
        self._last: tuple[str, float, float, int, bool] | None = None

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        return (*cls.collections_needed, "inputs")  # a regression loss's targets

    def invoke_at_step(self, step: int) -> bool:
        mode = step_mode(self.base_trial, step)[0]
        if self._stages.entered(step):
            stage_from = self.base_trial.mode_step(step)
            if self._labels or self._regression:  # the stage before's last pass, read live
                try:
                    return self._judge_pass(step, ends_here=False)
                finally:
                    self._start_stage(stage_from)
                    if mode is ModeKeys.TRAIN:
                        self._training.walk(step, bool(self._regression))
            self._start_stage(stage_from)
        if mode is ModeKeys.TRAIN:
            self._training.walk(step, bool(self._regression))
        if mode is not ModeKeys.EVAL:
            if self._labels or self._regression:
                # the pass's last step was read before any later step was published (a live
                # job): it ended there, and is judged now, not merged with the next pass
                return self._judge_pass(step, ends_here=False)
            raise self.skip("not an evaluation step")
        found = None
        if not (self._labels or self._has_labels(step)):
            found = regression_targets(self.base_trial, step)
        if found is not None:
            self._regression.append(found[:2])
            self._pass_inputs.append(matrix_input(self, step))
            self._names = found[2]
        else:
            y, p, self._names = labels_and_predictions(
                self, step, self.labels_regex, self.predictions_regex, argmax=False
            )
            self._labels.append(y)
            self._predictions.append(p)
            fitting = self._training.class_line.fitting
            self._pass_inputs.append(matrix_input(self, step) if fitting else None)
        if not pass_ends_at(self.base_trial, step):
            raise self.skip("the evaluation pass goes on")
        return self._judge_pass(step)

    def invoke_at_end(self, last_step: int) -> bool | None:
        """The evaluation pass that ended the run, when it was read live (its end was not known
        then): judged now, as the end of training."""
        if (self._labels or self._regression) and (
            step_mode(self.base_trial, last_step)[0] is ModeKeys.EVAL
        ):
            return self._judge_pass(last_step) or self._never_learned()
        ended = self._ended_after_pass(last_step)
        if ended:
            return ended
        if self._last is not None and self._last[4] and self._at_chance:
            return self._never_learned()  # the last pass, judged as the run's end, was at chance
        return self._training_loss_at_chance() or self._never_learned() or ended

    def _never_learned(self) -> bool | None:
        """At the end of training: a run whose evaluation passes were at chance in ``passes``
        or more of them (at least half), and never far above it (``_LEARNED`` of the way to
        perfect, beyond the noise), though not at chance to the end: the model never learned
        what the labels say, only noise about chance (a regression's R^2 wobbling about 0).
        Where the pass that ended training was at chance too (one barely above chance broke
        the row before it), the run ended at chance: a problem. Else evidence that needs harm
        (``details["needs_harm"]``): a hard task may sit near chance while training goes well,
        so this names the cause only where training is harmed in a way it explains (no
        progress, overfitting). None where not judged."""
        if self._above is not None or self._best is not None or self._peak is None:
            return None
        last = self._last
        if last is not None and last[4] and self._at_chance_to_end():
            return None  # at chance to the end: a problem already
        if self._chance_passes < max(self.passes, (self._judged + 1) // 2):
            return None
        gain, said = self._peak
        other = self._other_cause()
        # the pass that ended the run at chance as well: the run's outcome is at chance (a
        # pass between barely above it, R^2 0.03, broke the row but not what the run achieved)
        ended = last is not None and last[4] and self._at_chance > 0
        self.explain(
            f"{self._chance_passes} of {self._judged} evaluation passes were at chance and "
            f"none far above it (a gain of {_LEARNED:g} of the way from chance to perfect, "
            f"beyond the noise)"
            + (", the pass that ended training among them" if ended else "")
            + f"; the best: {said}: "
            + (
                other[1]
                if other
                else "the model never learned what the labels say (do they follow from the inputs?)"
            ),
            tensors=self._names,
            value=gain,
            threshold=_LEARNED,
            # not ended at chance: a problem where the diagnosis finds harm it explains
            severity=Severity.PROBLEM if ended else Severity.WARNING,
            judged=True,
            cause=other[0] if other else "no_learnable_signal",
            needs_harm=not ended,
        )
        return True

    def _ended_after_pass(self, last_step: int) -> bool | None:
        """Training ended with TRAIN steps after its last evaluation pass: that pass is the
        run's outcome when every pass was at chance or the last ``passes`` were, and it came
        at least halfway through training (a run evaluated early on a plateau and trained long
        after is not judged by it)."""
        if self._last is None or self._last[4] or not self._at_chance:
            return None
        said, value, threshold, before, _ = self._last
        after = self._training.steps - before
        if not self._at_chance_to_end():
            return None
        if after > before:
            return None
        other = self._other_cause()
        self.explain(
            f"{said}; no better than chance in {self._outcome_passes()} to the end of "
            f"training ({after} saved training steps followed it, and no evaluation): "
            + (
                other[1]
                if other
                else "the model learned nothing that carries to held-out data (do the labels "
                "follow from the inputs?)"
            ),
            tensors=self._names,
            value=value,
            threshold=threshold,
            severity=Severity.PROBLEM,
            judged=True,
            cause=other[0] if other else "no_learnable_signal",
        )
        return True

    def _training_loss_at_chance(self) -> bool | None:
        """A classifier whose training ended with its loss at the entropy of the training
        labels' class shares (``TrainingRecord.loss_at_chance``): the model learned nothing
        beyond how often each class occurs, whatever the evaluation (none, or a pass above
        chance: then it is not judged here). None where not judged."""
        if self._above is not None:
            return None
        if self._training.target_mean() is not None:
            return self._training_fit_at_chance()
        found = self._training.loss_at_chance()
        if found is None:
            return None
        final, entropy, last = found
        train = self._training.labels
        other = self._other_cause()
        self.explain(
            f"training ended with its loss at {final:.4g} (the median of its last {END_VALUES} "
            f"values, after {last} training steps): {100 * final / entropy:.3g}% of "
            f"{entropy:.4g}, the cross-entropy of always answering the {int(train.sum())} "
            "training labels' class shares; "
            + (
                other[1]
                if other
                else "the model learned nothing beyond how often each class occurs (do the "
                "labels follow from the inputs?)"
            ),
            tensors=[LOSS],
            value=final,
            threshold=AT_ENTROPY * entropy,
            severity=Severity.PROBLEM,
            judged=True,
            cause=other[0] if other else "no_learnable_signal",
        )
        return True

    def _training_fit_at_chance(self) -> bool | None:
        """A regression whose training ended with its predictions on the training batches
        explaining under ``AT_VARIANCE`` of the training targets' variance
        (``TrainingRecord.fit_at_chance``), and no evaluation pass that learned: the model fit
        neither its training targets nor held-out ones (a model that memorises targets that do
        not follow from its inputs fits the training ones, and is judged by its passes). None
        where not judged."""
        found = self._training.fit_at_chance()
        if found is None:
            return None
        r2, samples, last = found
        other = self._other_cause()
        self.explain(
            f"training ended with the model's predictions on its training batches explaining "
            f"{max(r2, 0.0):.1%} of the training targets' spread (1 - (median absolute error / "
            f"median absolute deviation)^2 = {r2:.3f} over the {samples} targets of its last "
            f"saved training steps, to step {last}), and no evaluation pass learned: "
            + (
                other[1]
                if other
                else "the model fit neither its training targets nor held-out ones (do the "
                "targets follow from the inputs?)"
            ),
            tensors=self._names,
            value=r2,
            threshold=AT_VARIANCE,
            severity=Severity.PROBLEM,
            judged=True,
            cause=other[0] if other else "no_learnable_signal",
        )
        return True

    def _at_chance_to_end(self) -> bool:
        """Whether the passes judged end at chance as the run's outcome: the last ``passes``
        of them, or every one (however few)."""
        return self._at_chance >= self.passes or self._at_chance == self._judged

    def _outcome_passes(self) -> str:
        if self._at_chance == self._judged == 1:
            return "its only evaluation pass"
        return f"{self._at_chance} evaluation passes in a row"

    def _judge_pass(self, step: int, ends_here: bool = True) -> bool:
        """Judge the evaluation pass gathered so far: it ended at ``step`` (``ends_here``), or
        before it."""
        judged = self._regressed() if self._regression else self._classified()
        if judged is None:
            raise self.skip(f"an evaluation pass of fewer than {self.min_samples} samples")
        at_chance, said, z, gain = judged.at_chance, judged.said, judged.z, judged.gain
        value, threshold = judged.value, judged.chance
        self._at_chance = self._at_chance + 1 if at_chance else 0
        self._chance_passes += at_chance
        if self._peak is None or gain > self._peak[0]:
            self._peak = (gain, said)
        self._judged += 1
        trial = self.base_trial
        final = ends_here and trial.loaded_all_steps and step == trial.steps()[-1]
        trained = self._training.steps
        self._last = (said, value, threshold, trained, final)
        # at the end of training, a run whose every pass was at chance (fewer than `passes`
        # of them: most often one, after training) ended at chance
        fired = self._at_chance >= self.passes or (final and self._at_chance_to_end())
        other = self._other_cause() if at_chance else None
        # far above chance: beyond sampling noise, and a quarter of the way to perfect, after
        # some training (an untrained linear model on well-separated classes can map them right
        # by chance: a shuffled-label wine run's pass before training was at 0.64)
        learned = z >= 2 * self.z_threshold and gain >= _LEARNED
        # ... and the training loss has fallen by then: a pass far above chance while it has
        # not is the untrained model's luck (a linear model on well-separated classes: a
        # shuffled-label wine run at 0.61 after 6 steps whose loss had risen)
        learned = learned and trained >= _TRAINED_BEFORE and self._training.loss_fell()
        if learned and self._above is None:
            self._above = (self._judged, said)
        if learned and (self._best is None or gain > self._best[1]):
            self._best = (self._judged, gain, said)
        best = self._best
        self._lost = (
            self._lost + 1 if best is not None and best[0] < self._judged and gain < _KEPT * best[1]
            else 0
        )  # fmt: skip
        lost = best is not None and self._lost >= self.passes
        if final and not fired and not at_chance and best is not None and lost:
            return self._lost_what_it_learned(best, said, value, threshold, gain)
        if final and not fired and not at_chance and self._underfit is not None:
            return self._below_the_line(self._underfit, said)
        verdict = (
            f"no better than chance in {self._outcome_passes()}"
            + (
                " to the end of training: "
                + (
                    other[1]
                    if other
                    else "the model learned nothing that carries to held-out data (do the labels "
                    "follow from the inputs?)"
                )
                if final
                else " so far" + (f": {other[1]}" if other else "")
            )
            if fired
            else ("at chance" if at_chance else "above chance")
        )
        self.explain(
            f"{said}; {verdict}",
            tensors=self._names,
            value=value,
            threshold=threshold,
            severity=Severity.PROBLEM if final else Severity.WARNING,
            judged=self._judged >= self.passes or fired,
            cause=other[0] if other else "no_learnable_signal",
        )
        return fired

    def _lost_what_it_learned(
        self, best: tuple[int, float, str], said: str, value: float, threshold: float, gain: float
    ) -> bool:
        """The last ``passes`` passes, to the end of training, kept under ``_KEPT`` of what the
        ``best`` pass had gained over chance: harm, whose cause :meth:`_other_cause` tells
        (training on too long, or updates that broke the fit)."""
        number, reached, best_said = best
        other = self._other_cause()
        self.explain(
            f"{said}: {gain:.0%} of the way from chance to perfect; under {_KEPT:.0%} of what "
            f"evaluation pass {number} had reached ({reached:.0%}: {best_said}) in each of the "
            f"last {self._lost} evaluation passes, to the end of training: the model lost most "
            "of what it learned" + (f"; {other[1]}" if other else ""),
            tensors=self._names,
            value=value,
            threshold=threshold,
            severity=Severity.PROBLEM,
            judged=True,
            cause=other[0] if other else "overtraining",
        )
        return True

    def _below_the_line(self, found: AgainstLine, said: str) -> bool:
        """The regression's last evaluation pass, to the end of training, explains under
        ``SHARE`` of the targets' variance that a straight line through the model's inputs
        explains (see ``_linear.LinearFit``): harm (the model fits worse than a linear model of
        its inputs), whose cause the diagnosis looks for among the set-up's (unnormalised
        features, a learning rate too low, an initialisation that stalls). Where an earlier
        pass fit about as well as the line, the model fit and lost it by training on:
        ``overtraining``, not underfitting."""
        best = self._best_against
        lost = best is not None and best[0] < self._judged and best[1].model >= SHARE * found.line
        if best is not None and lost:
            number, then = best
            why, cause = (
                f"; not underfitting: evaluation pass {number} scored {then.model:.3g}, "
                f"{then.model / found.line:.0%} of the line's now, so the model had fit and lost "
                "it by training on (keep the best checkpoint and stop earlier, or regularise)",
                "overtraining",
            )
        else:
            why, cause = (
                ": it fits worse than a linear model of its inputs (features on their own "
                "scales, a learning rate too low, or training too short?)",
                "underfitting",
            )
        self.explain(
            f"{said}; {found.fitted()} does better on the same samples: {found.scored()} "
            f"({found.z:.1f} standard errors better), the model under {SHARE:.0%} of the line's "
            f"at the end of training{why}",
            tensors=self._names,
            value=found.model,
            threshold=SHARE * found.line,
            severity=Severity.PROBLEM,
            judged=True,
            cause=cause,
        )
        return True

    def _against_line(self, found: AgainstLine | None) -> None:
        """The pass being judged against the line: an underfit or not, and the best pass so
        far by the model's score (the passes share their samples)."""
        self._underfit = found if found is not None and found.under(self.z_threshold) else None
        best = self._best_against
        if found is not None and (best is None or found.model > best[1].model):
            self._best_against = (self._judged + 1, found)  # (numbered as _judge_pass will)

    def _has_labels(self, step: int) -> bool:
        trial = self.base_trial
        return bool(
            names_in(trial, "labels", step)
            or trial.tensor_names(step=step, regex=self.labels_regex)
        )

    def _classified(self) -> PassScore | None:
        """The classifier's pass gathered so far, judged (None: too few samples)."""
        labels, predicted = np.concatenate(self._labels), np.concatenate(self._predictions)
        inputs = _one_matrix(self._pass_inputs)
        self._labels, self._predictions, self._pass_inputs, self._underfit = [], [], [], None
        if labels.size < self.min_samples:
            return None
        self._pass_labels = np.bincount(labels) if labels.min() >= 0 else np.zeros(0, np.int64)
        if inputs is not None:
            line = self._training.class_line
            self._against_line(line.compare(inputs, labels, predicted))
        return classified(labels, predicted, self.z_threshold)

    def _other_cause(self) -> tuple[str, str] | None:
        """(cause, why) where passes at chance are not labels that do not follow from the
        inputs: an earlier pass was far above chance (twice ``z_threshold``: no fluke among many
        passes; the labels carry signal, and training on lost it),
        a regression's targets follow from its inputs (a straight line through them explains
        them: see ``_linear.LinearFit``), or the training labels are distributed unlike the
        pass's (see ``_chance.label_shift``)."""
        training = self._training
        if self._above is not None and not training.loss_nonfinite():
            number, said = self._above
            found = training.loss_at_chance()
            if found is not None:
                final, entropy, _ = found
                return "lr_too_high", (
                    f"not training on too long: evaluation pass {number} was above chance "
                    f"({said}), and the model then lost its fit of the training data too (its "
                    f"training loss ended at {final:.4g}, {100 * final / entropy:.3g}% of "
                    f"{entropy:.4g}, the cross-entropy of always answering the training labels' "
                    "class shares; training on too long fits the training data ever better): "
                    "the updates broke what it learned, as a learning rate too high (or a "
                    "schedule peaking too high) does"
                )
            return "overtraining", (
                f"not labels that do not follow from the inputs: evaluation pass {number} was "
                f"above chance ({said}), so they carry signal the model learned, then lost by "
                "training on (keep the best checkpoint and stop earlier, or regularise)"
            )
        line = self._underfit
        if line is not None:
            return "underfitting", (
                f"not {'labels' if line.classifier else 'targets'} that do not follow from the "
                f"inputs: {line.fitted()} does better: {line.scored()}, so the model fits worse "
                "than a linear model of its inputs (features on their own scales, a learning "
                "rate too low, or updates that do not reach the weights?)"
            )
        shift = label_shift(training.labels, self._pass_labels)
        return None if shift is None else ("class_imbalance", shift)

    def _regressed(self) -> PassScore | None:
        """The regression's pass gathered so far, judged against always answering the training
        targets' mean (the pass's own where no training target was saved); None: too few."""
        predicted = np.concatenate([p.ravel() for p, _ in self._regression]).astype(np.float64)
        target = np.concatenate([t.ravel() for _, t in self._regression]).astype(np.float64)
        inputs = _one_matrix(self._pass_inputs)
        self._regression, self._pass_inputs, self._underfit = [], [], None
        if target.size < self.min_samples:
            return None
        trained = self._training.target_mean()
        mean = float(target.mean()) if trained is None else trained
        if trained is not None and inputs is not None:
            line = self._training.line
            self._against_line(line.compare(inputs, target, predicted, mean))
        return regressed(predicted, target, mean, self.z_threshold)


def _one_matrix(inputs: list[np.ndarray | None]) -> np.ndarray | None:
    """A pass's steps' inputs as the rows of one matrix, or None where a step's is missing or
    they differ in width."""
    if not inputs or any(x is None for x in inputs):
        return None
    matrices = [x for x in inputs if x is not None]
    if len({x.shape[1] for x in matrices}) != 1:
        return None
    return np.concatenate(matrices)
