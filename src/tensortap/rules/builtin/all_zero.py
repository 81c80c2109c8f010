"""AllZero: a tensor whose values are (nearly) all zero."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.rules.builtin._common import has_raw, select
from tensortap.rules.rule import Rule


class AllZero(Rule):
    """Fires when at least ``threshold`` percent of a selected tensor's values are zero.

    Tensors: ``collection_names`` / ``tensor_regex``; when neither is given, every tensor but
    the ``biases`` (which start at zero in most models). With only reductions saved, a tensor
    whose max |value| is 0 is all zero; partial percentages need the raw tensor.
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
            self.base_trial, self.collection_names, self.tensor_regex, step=step, exclude=["biases"]
        )

    def set_required_tensors(self, step: int) -> None:
        for name in self._names(step):
            self.req_tensors.add(name, [step])

    def _zero_percent(self, name: str, step: int) -> float | None:
        tensor = self.base_trial.tensor(name)
        if has_raw(tensor, step):
            array = tensor.value(step)
            return 100.0 * float(np.count_nonzero(array == 0)) / array.size if array.size else None
        reductions = tensor.reduction_values(step)
        biggest = reductions.get(("max", True))
        if biggest is None and ("max", False) in reductions and ("min", False) in reductions:
            biggest = max(abs(reductions[("max", False)]), abs(reductions[("min", False)]))
        if biggest is None:
            return None
        return 100.0 if biggest == 0 else None if self.threshold < 100 else 0.0

    def invoke_at_step(self, step: int) -> bool:
        judged = [
            (pct, name)
            for name in self._names(step)
            if (pct := self._zero_percent(name, step)) is not None
        ]
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
