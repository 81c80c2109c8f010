"""AllZero: a tensor whose values are (nearly) all zero."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.rules.builtin._common import fire_nonfinite, nonfinite_names, select
from tensortap.rules.rule import Rule


class AllZero(Rule):
    """Fires when at least ``threshold`` percent of a selected tensor's values are zero.

    Tensors: ``collection_names`` / ``tensor_regex``; when neither is given, every tensor but
    the ``biases`` (which start at zero in most models) and class ids: the ``labels`` and
    ``predictions`` collections and integer tensors (a batch of class 0 is not "all zero").
    With only reductions saved, a tensor whose max |value| is 0 is all zero; partial
    percentages need the raw tensor. NaN is not zero: a tensor holding NaN or inf is reported
    as non-finite (a problem) instead.
    """

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        threshold: float = 100.0,
    ) -> None:
        super().__init__(base_trial)
        self.check_param("threshold", threshold, 0 < threshold <= 100, "a percentage in (0, 100]")
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.threshold = threshold

    def _names(self, step: int) -> list[str]:
        return select(
            self.base_trial,
            self.collection_names,
            self.tensor_regex,
            step=step,
            exclude=["biases", "labels", "predictions"],
        )

    def _zero_percents(self, step: int) -> list[tuple[float, str]]:
        """(percent of zeros, name) of every selected tensor that can be judged."""
        block = self.base_trial.step_block(step)
        names = self._names(step)
        raw, reduced = block.split_raw(names)
        if not (self.collection_names or self.tensor_regex):
            raw = [n for n, d in zip(raw, block.dtypes(raw), strict=True) if d.kind in "fc"]
        zeros, sizes = block.count_where(raw, _is_zero), block.sizes(raw)
        judged = [
            (100.0 * z / size, n)
            for n, z, size in zip(raw, zeros.tolist(), sizes.tolist(), strict=True)
            if size
        ]
        for name in reduced:
            pct = self._zero_percent(block.saved_reductions(name))
            if pct is not None:
                judged.append((pct, name))
        return judged

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
        bad = nonfinite_names(self.base_trial, self._names(step), step)
        if bad:
            return fire_nonfinite(self, bad, "the tensor")
        judged = self._zero_percents(step)
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
