"""AllZero: a tensor whose values are (nearly) all zero."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._collections import INITIAL_WEIGHTS, TRAINING_LOOP
from tensortap.core._vitals import VITALS
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import fire_nonfinite, select
from tensortap.rules.builtin._labels import loss_targets

#: Collections whose zeros are no state of the model's (see AllZero's docstring).
_NOT_MODEL_STATE = (
    "biases",
    "labels",
    "predictions",
    "metrics",
    "hyperparameters",
    VITALS,
    TRAINING_LOOP,
)


class AllZero(Rule):
    """Fires when at least ``threshold`` percent of a selected tensor's values are zero.

    Tensors: ``collection_names`` / ``tensor_regex``; when neither is given, every tensor but
    the ``biases`` (which start at zero in most models), the weights before the first update
    (``initial_weights``: a tensor that starts at zero, a LoRA B or a zero head, is an
    initialisation; the same tensor after each update is judged under its own name), class
    ids (the ``labels`` and ``predictions`` collections and integer tensors: a batch of class
    0 is not "all zero"), the targets a loss module was given (its inputs after the first,
    ``BCEWithLogitsLoss_input_1``: a batch of a 0/1 task whose targets are all 0 is data, not
    the model's state), and numbers that are not tensors of the model: the ``metrics`` (a
    classification error of 0 is a perfect score), XGBoost's ``hyperparameters``, the
    ``vitals`` (a learning rate of 0 at step 0 is where a warm-up starts) and the
    ``training_loop`` facts (counts and flags, 0 when all is well).
    With only reductions saved, a tensor whose max |value| is 0 is all zero; partial
    percentages need the raw tensor. NaN is not zero: a tensor holding NaN or inf is reported
    as non-finite (a problem) instead.
    """

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        cls.check_param("threshold", threshold, 0 < threshold <= 100, "a percentage in (0, 100]")

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        threshold: float = 100.0,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.threshold = threshold

    def _names(self, step: int) -> list[str]:
        names = select(
            self.base_trial,
            self.collection_names,
            self.tensor_regex,
            step=step,
            exclude=[*_NOT_MODEL_STATE, INITIAL_WEIGHTS],
        )
        if self.collection_names or self.tensor_regex:
            return names
        targets = loss_targets(self.base_trial, names)
        return [n for n in names if n not in targets]

    def _zero_percents(self, step: int) -> tuple[list[tuple[float, str]], list[str]]:
        """(percent of zeros, name) of every selected tensor that can be judged, and the
        names of those holding NaN or inf. One vectorised max |x| per tensor tells both (NaN
        and inf propagate; 0 means all zero); only a threshold under 100 counts the zeros."""
        block = self.base_trial.step_block(step)
        raw, reduced = block.split_raw(self._names(step))
        if not (self.collection_names or self.tensor_regex):
            raw = [n for n, d in zip(raw, block.dtypes(raw), strict=True) if d.kind in "fc"]
        sizes = block.sizes(raw)
        raw = [n for n, size in zip(raw, sizes.tolist(), strict=True) if size]
        biggest = block.reduce(raw, "max", abs=True).tolist() if raw else []
        bad = [n for n, b in zip(raw, biggest, strict=True) if not math.isfinite(b)]
        if self.threshold < 100 and raw:
            counts = block.count_where(raw, _is_zero).tolist()
            sizes = block.sizes(raw)
            percents = [100.0 * z / n for z, n in zip(counts, sizes.tolist(), strict=True)]
        else:
            percents = [100.0 if b == 0 else 0.0 for b in biggest]
        judged = [(p, n) for p, n in zip(percents, raw, strict=True) if n not in bad]
        for name in reduced:
            reductions = block.saved_reductions(name)
            if any(not math.isfinite(v) for v in reductions.values()):
                bad.append(name)
                continue
            pct = self._zero_percent(reductions)
            if pct is not None:
                judged.append((pct, name))
        return judged, bad

    def _zero_percent(self, reductions: dict[tuple[str, bool], float]) -> float | None:
        """From saved reductions: 100 when max |value| is 0, else unknown unless the threshold
        is 100 (then 0: not all zero)."""
        biggest = reductions.get(("max", True))
        if biggest is None and ("max", False) in reductions and ("min", False) in reductions:
            biggest = max(abs(reductions[("max", False)]), abs(reductions[("min", False)]))
        if biggest is None:
            return None
        return 100.0 if biggest == 0 else None if self.threshold < 100 else 0.0

    def invoke_at_step(self, step: int) -> bool:
        judged, bad = self._zero_percents(step)
        if bad:
            return fire_nonfinite(self, bad, "the tensor")
        if not judged:
            raise self.skip("no selected tensor saved (raw or with min/max) at this step")
        worst = max(judged)
        zero = [name for pct, name in judged if pct >= self.threshold]
        self.explain(
            f"{len(zero)} of {len(judged)} tensors are at least {self.threshold:g}% zeros"
            + (f" ({', '.join(zero[:5])})" if zero else f"; most: {worst[1]} {worst[0]:.3g}%"),
            tensors=zero or [worst[1]],
            value=worst[0],
            threshold=self.threshold,
        )
        return bool(zero)


def _is_zero(x: np.ndarray) -> np.ndarray:
    found: np.ndarray = x == 0
    return found
