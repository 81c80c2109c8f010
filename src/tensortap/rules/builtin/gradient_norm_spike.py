"""GradientNormSpike: the global gradient norm jumped far above its recent baseline."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from tensortap.core._vitals import Vital
from tensortap.rules._finding import Finding, StepRun
from tensortap.rules.builtin._bulk import any_at, chunks, one_numbers, per_step, steps_array
from tensortap.rules.builtin._common import fire_nonfinite, names_in, scalar, vital_at
from tensortap.rules.builtin._spike import SpikeRule, Values
from tensortap.trials._records import saved_records

_NO_GRADIENTS = "no gradients saved at this step"


class GradientNormSpike(SpikeRule):
    """The global gradient norm (the L2 norm over every tensor in ``gradients``) against the
    median of its last ``window`` saved values: the early warning of divergence. Uses a saved
    ``l2`` norm of each gradient, or computes it from the raw gradient. A spike is a warning,
    however long (recurrent LSTM gradients spike 10x their median two saved steps in a row in
    healthy runs); the damage, when there is some, shows in the loss (LossSpike,
    LossNotDecreasing) and NaN/inf gradients are a problem. Where the vital sign
    ``vitals/grad_norm`` was saved (the total norm before clipping, at every step) it is the
    global norm, and no gradient is read.
    """

    collections_needed = ("gradients",)
    cause = "exploding_gradient"
    lasting_is_problem = False

    def invoke_at_step(self, step: int) -> bool:
        if vital_at(self.base_trial, Vital.GRAD_NORM, step):
            norm = scalar(self.base_trial.tensor(Vital.GRAD_NORM), step)
            if not math.isfinite(norm):
                return fire_nonfinite(self, [Vital.GRAD_NORM], "the gradient")
            return self.judge_value("global", norm, "global gradient norm", [Vital.GRAD_NORM])
        names = names_in(self.base_trial, "gradients", step)
        if not names:
            raise self.skip(_NO_GRADIENTS)
        norms = self.base_trial.step_block(step).reduce(names, "l2")
        if not np.isfinite(norms).all():
            bad = [n for n, v in zip(names, norms.tolist(), strict=True) if not math.isfinite(v)]
            return fire_nonfinite(self, bad, "the gradient")
        return self.judge_value(
            "global", math.sqrt(float(np.sum(norms**2))), "global gradient norm", names
        )

    def judge_steps(self, steps: Sequence[int]) -> Iterator[Finding | StepRun]:
        """The global norm of every step whose gradients all have a saved, finite ``l2``
        (once, for all those steps), replayed through the baseline; the other steps are
        evaluated one by one."""
        at = steps_array(steps)
        if self.base_trial.has_tensor(Vital.GRAD_NORM):
            yield from self._judge_vitals(at)
            return
        with self.asking():
            names = names_in(self.base_trial, "gradients")
        saved = saved_records(self.base_trial, names)
        if saved.workers > 1:
            yield from super().judge_steps(steps)
            return
        l2 = saved.reduction_rows("l2")
        doubt = saved.repeated() | (l2 & ~np.isfinite(saved.value))
        for part in chunks(at, len(names)):
            present = per_step(part, saved.step, saved.name, len(names), saved.value)[1] > 0
            norms, found = per_step(
                part, saved.step[l2], saved.name[l2], len(names), saved.value[l2]
            )
            whole = present.all(axis=1) & (found == 1).all(axis=1)
            whole &= ~any_at(part, saved.step, doubt)
            total = np.sqrt(np.sum(norms**2, axis=1))
            nothing = np.logical_not(present.any(axis=1)).tolist()
            inputs: list[Values | StepRun | None] = []
            whole_at = whole.tolist()
            for i in range(len(part)):
                if nothing[i]:
                    inputs.append(self.skipped(part[i : i + 1], _NO_GRADIENTS))
                elif whole_at[i]:
                    inputs.append((("global", float(total[i])),))
                else:
                    inputs.append(None)
            yield from self.replay(part, inputs)

    def _judge_vitals(self, at: np.ndarray) -> Iterator[Finding | StepRun]:
        """The steps' ``vitals/grad_norm`` read at once and replayed through the baseline;
        a step without a finite one is evaluated (its gradients, or non-finite: a finding)."""
        found = one_numbers(self.base_trial, [Vital.GRAD_NORM], at)
        if found is None:
            yield from super().judge_steps(at.tolist())
            return
        inputs: list[Values | StepRun | None] = [
            (("global", values[0][1]),) if values else None for values in found
        ]
        yield from self.replay(at, inputs)
