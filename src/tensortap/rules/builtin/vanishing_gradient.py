"""VanishingGradient: a gradient whose mean absolute value fell below a threshold."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tensortap.core._records import RecordKind
from tensortap.exceptions import TensorUnavailableForStep
from tensortap.rules._finding import Severity
from tensortap.rules._numbers import DOUBT, Numbers, Skipped
from tensortap.rules._rule import Rule, StepSkipped
from tensortap.rules.builtin._common import (
    GRADIENT_PREFIXES,
    fire_nonfinite,
    loss_names,
    names_in,
    optional_names_in,
    scalar,
)
from tensortap.trials._records import SavedRecords, chunks, name_sets, per_step, saved_records

_NO_GRADIENTS = "no gradients saved at this step"


def _no_mean(name: str) -> str:
    return (
        f"no mean |gradient| of {name} at this step: neither its raw value nor its mean "
        "absolute value (reduction abs_mean) was saved; save the gradients raw, or with "
        "ReductionConfig(abs_reductions=['mean'])"
    )


#: A loss under this share of its first value: the model is at (or near) a minimum.
_CONVERGED = 0.05

#: The fewest weights whose gradients are compared with each other (``relative_threshold``).
_RELATIVE_MIN = 3


def _compared(name: str) -> bool:
    """Whether the gradient of ``name`` is compared with the others': not an embedding's (only
    the rows of the tokens in a batch get one, so its mean is small by nature)."""
    return "embed" not in name.lower()


#: An attention block's projections, by the last part of their module's name (Hugging Face's
#: BERT family, LLaMA/GPT-NeoX/T5/DistilBERT names): the score projections (query, key) and
#: the value projection that takes the same input.
_SCORE_PROJECTIONS = re.compile(r"^(query|key|q_proj|k_proj|q|k|wq|wk|q_lin|k_lin)$")
_VALUE_PROJECTIONS = ("value", "v_proj", "v", "wv", "v_lin")


def _attention_scores(names: Sequence[str], means: Sequence[float], threshold: float) -> set[str]:
    """The weights of attention score projections (query, key) whose mean |gradient| is
    below ``threshold`` while the value projection of the same attention block, which takes
    the same input, gets one at or above it: the gradient reached that depth, and the scores'
    projections get little of it by the nature of attention (near-uniform attention moves the
    loss little, as in a model that has learned nothing of its inputs; a key's bias gets none
    at all), not because it vanished on its way back."""
    mean_of = dict(zip(names, means, strict=True))
    found: set[str] = set()
    for name, mean in mean_of.items():
        parent, _, last = name.rpartition(".")
        block, _, module = parent.rpartition(".")
        if last != "weight" or mean >= threshold or not _SCORE_PROJECTIONS.match(module):
            continue
        values = [mean_of.get(f"{block}.{v}.weight") for v in _VALUE_PROJECTIONS]
        if any(v is not None and v >= threshold for v in values):
            found.add(name)
    return found


class Means(NamedTuple):
    """The mean |gradient| of each judged gradient at a step (``names``, in order)."""

    names: tuple[str, ...]
    values: list[float]


class GradientMeans(Numbers[Means]):
    """The mean |gradient| of each gradient saved at a step, those of the biases left out
    where a bias was saved with it (unless that leaves none): a saved ``abs_mean`` reduction,
    or from the raw gradient. Skipped at a step without gradients, or where one has neither.
    In bulk, from the saved reductions; a step where a judged gradient was saved raw only, or
    a record twice, is read live."""

    def read(self, step: int) -> Means:
        trial = self.trial
        names = names_in(trial, "gradients", step)
        if not names:
            raise StepSkipped(_NO_GRADIENTS)
        biases = names_in(trial, "biases", step)
        if biases:  # their gradients are not judged (see the rule)
            of_biases = {p + b for b in biases for p in GRADIENT_PREFIXES}
            names = [n for n in names if n not in of_biases] or names
        # every gradient of the step in one read and one vectorised reduction
        try:
            means = trial.step_block(step).reduce(names, "mean", abs=True)
        except TensorUnavailableForStep as exc:  # neither the raw value nor the reduction
            raise StepSkipped(_no_mean(exc.tname)) from None
        return Means(tuple(names), means.tolist())

    def count(self, numbers: Means) -> int:
        return len(numbers.names)

    def gather(self, steps: np.ndarray) -> Iterator[Means | Skipped | Any]:
        trial = self.trial
        grads = names_in(trial, "gradients")
        if not grads:
            return itertools.repeat(Skipped(_NO_GRADIENTS), len(steps))
        biases = optional_names_in(trial, "biases")
        saved = saved_records(trial, grads)
        if saved.workers > 1 or (biases and saved_records(trial, biases).workers > 1):
            return itertools.repeat(DOUBT, len(steps))
        self.asks = frozenset({"biases"})  # asked for at each step with gradients
        # the gradient of each bias (judged only where the bias is not saved at the step)
        position = {g: j for j, g in enumerate(grads)}
        of_bias = [
            (b, position[p + b]) for b in biases for p in GRADIENT_PREFIXES if p + b in position
        ]
        return self._means(
            steps, grads, saved, of_bias, saved_records(trial, [b for b, _ in of_bias])
        )

    def _means(
        self,
        steps: np.ndarray,
        grads: list[str],
        saved: SavedRecords,
        of_bias: list[tuple[str, int]],
        bias_rows: SavedRecords,
    ) -> Iterator[Means | Skipped | Any]:
        none_saved = Skipped(_NO_GRADIENTS, frozenset({"gradients"}))
        missing_mean = {j: Skipped(_no_mean(g)) for j, g in enumerate(grads)}
        means_rows = saved.reduction_rows("mean", abs=True)
        raw_rows = saved.kind == RecordKind.TENSOR
        repeated = saved.repeated()
        n = len(grads)
        for part in chunks(steps, n):
            present = per_step(part, saved.step, saved.name, n, saved.value)[1] > 0
            means, found = per_step(
                part, saved.step[means_rows], saved.name[means_rows], n, saved.value[means_rows]
            )
            raw = per_step(
                part, saved.step[raw_rows], saved.name[raw_rows], n, saved.value[raw_rows]
            )[1]
            doubt = per_step(
                part, saved.step[repeated], saved.name[repeated], n, saved.value[repeated]
            )[1]
            judged = present.copy()
            if of_bias:
                bias_at = (
                    per_step(part, bias_rows.step, bias_rows.name, len(of_bias), bias_rows.value)[1]
                    > 0
                )
                for k, (_, j) in enumerate(of_bias):
                    judged[:, j] &= ~bias_at[:, k]
                judged = np.where(judged.any(axis=1, keepdims=True), judged, present)
            has_mean = found == 1
            missing = judged & ~has_mean & (raw == 0)
            first_missing = np.argmax(missing, axis=1).tolist()
            unsure = (doubt > 0).any(axis=1) | (judged & ~has_mean & (raw > 0)).any(axis=1)
            sets = name_sets(grads, judged)
            rows: list[list[float]] = means.tolist()
            masks: list[list[bool]] = judged.tolist()
            whole: list[bool] = np.asarray(judged.all(axis=1)).tolist()
            at_all: list[bool] = np.asarray(present.any(axis=1)).tolist()
            skip: list[bool] = np.asarray(missing.any(axis=1)).tolist()
            unsure_at: list[bool] = np.asarray(unsure).tolist()
            for i in range(len(part)):
                if not at_all[i]:
                    yield none_saved
                elif skip[i]:
                    yield missing_mean[first_missing[i]]
                elif unsure_at[i]:
                    yield DOUBT
                else:
                    row = rows[i]
                    if not whole[i]:
                        row = [
                            v for v, judged_here in zip(row, masks[i], strict=True) if judged_here
                        ]
                    yield Means(sets[i], row)


class VanishingGradient(Rule):
    """Fires when the mean |gradient| of any tensor in ``gradients`` is below ``threshold``.

    The gradients of biases are not judged when there are others: a bias feeding a
    normalisation layer (Conv -> BatchNorm) has a gradient of ~0 by construction, and a
    vanishing gradient shows in the weights. Frozen parameters (``requires_grad=False``) have
    no saved gradient. A NaN or infinite gradient is a problem (non-finite), never "vanishing"
    or fine. Works from the raw gradients or from a saved ``mean`` reduction on absolute values.
    An attention block's query and key projections (``query``/``key``, ``q_proj``/``k_proj``,
    ``q``/``k``, ``wq``/``wk``, ``q_lin``/``k_lin``) are not judged while the value projection
    beside them, which takes the same input, gets a gradient at or above the threshold: the
    gradient reached that depth, and near-uniform attention (a model that learned nothing of its
    inputs) gives the scores' projections little of it by nature (a stranger's ELECTRA on
    shuffled labels: 2e-9 against a median of 1e-4).

    It fires too when the gradients shrink by orders of magnitude on their way back: of at
    least three weights (embeddings left out: only the rows of a batch's tokens get a
    gradient), the smallest mean |gradient| is under ``relative_threshold`` times the largest
    (a stranger's eight sigmoid layers on SGD: 1.8e-7 at the first layer, 0.033 at the output,
    a ratio of 5e-6, with every value above ``threshold``; healthy networks stay within two
    orders of magnitude).

    Severity: a problem, unless the loss (where saved) has come down to under 5% of its
    first saved value: a model at its minimum has small gradients by nature (advice). As a
    symptom, it is a problem of the run only where the run is harmed (see the diagnosis).
    """

    collections_needed = ("gradients",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        cls.check_param("threshold", threshold, threshold >= 0, "a number >= 0")
        relative = params["relative_threshold"]
        cls.check_param("relative_threshold", relative, 0 <= relative < 1, "in [0, 1)")

    def __init__(
        self, base_trial: Any, threshold: float = 1e-7, relative_threshold: float = 1e-4
    ) -> None:
        super().__init__(base_trial)
        self.threshold = threshold
        self.relative_threshold = relative_threshold
        self._first_loss: float | None = None
        self._looked = False
        self._compared: dict[tuple[str, ...], list[int]] = {}
        self.reads(GradientMeans())

    def judge(self, step: int, found: Means) -> bool:
        names, means = found.names, found.values
        if not all(map(math.isfinite, means)):
            bad = [n for n, m in zip(names, means, strict=True) if not math.isfinite(m)]
            return fire_nonfinite(self, bad, "the gradient")
        # (the attention score projections are among the means below the threshold)
        smallest = min(means)
        scores = (
            _attention_scores(names, means, self.threshold) if smallest < self.threshold else set()
        )
        if scores and len(scores) < len(names):  # judged without them (see _attention_scores)
            kept = [j for j, n in enumerate(names) if n not in scores]
            names, means = tuple(names[j] for j in kept), [means[j] for j in kept]
            smallest = min(means)
        worst = names[means.index(smallest)]  # (the first of the smallest)
        fired = smallest < self.threshold
        verb = "is below" if fired else "is above"
        shrunk = None if fired else self._shrunk(names, means)
        if shrunk is not None:
            fired, worst, smallest = True, shrunk[0], shrunk[1]
        severity, note = Severity.PROBLEM, ""
        # the first step's loss is the reference; after it, the loss matters only when firing
        loss = self._loss_share(step) if fired or not self._looked else None
        if loss is not None and loss < _CONVERGED:
            severity = Severity.ADVICE
            note = (
                f"; the loss is {100 * loss:.2g}% of where it started, and small gradients are "
                "expected at a minimum"
            )
        if scores:
            note += (
                f" (not judged: the attention score projections {', '.join(sorted(scores))}, "
                "whose gradients are small while attention is near uniform, though the "
                "value projection beside each gets its gradient)"
            )
        if shrunk is not None:
            _, _, top, largest = shrunk
            self.explain(
                f"the gradients shrink on their way back: the smallest mean |gradient|, "
                f"{smallest:.3g} ({worst}), is {smallest / largest:.2g} of the largest, "
                f"{largest:.3g} ({top}) (limit {self.relative_threshold:g}): the layers far "
                "from the loss barely learn (saturating activations such as sigmoid or tanh "
                f"stacked deep, or a poor initialisation){note}",
                tensors=[worst, top],
                value=smallest / largest,
                threshold=self.relative_threshold,
                severity=severity,
                cause="vanishing_gradient",
            )
            return True
        self.explain(
            lambda: (
                f"smallest mean |gradient| is {smallest:.3g} ({worst}), which {verb} the "
                f"threshold {self.threshold:g}{note}"
            ),
            tensors=[worst],
            value=smallest,
            threshold=self.threshold,
            severity=severity,
            cause="vanishing_gradient",
        )
        return fired

    def _shrunk(
        self, names: Sequence[str], means: list[float]
    ) -> tuple[str, float, str, float] | None:
        """(the smallest, its mean, the largest, its mean) of the compared gradients where the
        smallest mean is under ``relative_threshold`` times the largest (see the class). An
        attention block's query and key projections are left out where the value projection
        beside them is within that range of the largest (a BERT whose attention is near
        uniform, on labels it cannot learn: query 2.2e-7 against a classifier's 6.4e-3)."""
        kept = self._compared_among(names)
        if len(kept) < _RELATIVE_MIN:
            return None
        compared = [means[j] for j in kept]
        largest = max(compared)
        if not min(compared) < self.relative_threshold * largest:
            return None  # (leaving some out below would only raise the smallest)
        # a score projection whose value projection is within range: attention, not depth
        scores = _attention_scores(names, means, self.relative_threshold * largest)
        kept = [j for j in kept if names[j] not in scores]
        low = min(kept, key=means.__getitem__)
        high = max(kept, key=means.__getitem__)
        small, large = means[low], means[high]
        if not (large > 0 and small < self.relative_threshold * large):
            return None
        return names[low], small, names[high], large

    def _compared_among(self, names: Sequence[str]) -> list[int]:
        """The positions of the gradients of ``names`` compared with each other (see
        :func:`_compared`), kept per list of names (the same at most steps)."""
        key = tuple(names)
        found = self._compared.get(key)
        if found is None:
            if len(self._compared) > 64:
                self._compared.clear()
            found = self._compared[key] = [j for j, n in enumerate(names) if _compared(n)]
        return found

    def _loss_share(self, step: int) -> float | None:
        """The loss at ``step`` as a share of the first loss this rule saw (None: no loss)."""
        self._looked = True
        names = loss_names(self.base_trial, True, None, step)
        if not names:
            return None
        loss = float(np.mean([scalar(self.base_trial.tensor(n), step) for n in names]))
        if self._first_loss is None:
            self._first_loss = loss
        first = self._first_loss
        return loss / first if first > 0 and math.isfinite(loss) else None
