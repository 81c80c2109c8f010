"""TensorVariance: a tensor whose variance is above or below set limits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import has_raw, select


class TensorVariance(Rule):
    """Fires when the variance of a selected tensor (more than one element) is above
    ``max_threshold`` or below ``min_threshold`` (give at least one). Tensors:
    ``collection_names`` / ``tensor_regex``, every tensor when neither is given. Uses a saved
    ``variance`` or ``std`` reduction when the raw tensor was not saved.
    """

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        max_threshold = params["max_threshold"]
        min_threshold = params["min_threshold"]
        cls.check_param(
            "max_threshold",
            max_threshold,
            max_threshold is not None or min_threshold is not None,
            "given (or min_threshold): the rule needs at least one limit",
        )
        if max_threshold is not None and min_threshold is not None:
            cls.check_param(
                "min_threshold", min_threshold, min_threshold < max_threshold, "below max_threshold"
            )

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        max_threshold: float | None = None,
        min_threshold: float | None = None,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.max_threshold, self.min_threshold = max_threshold, min_threshold

    def _variance(self, name: str, step: int) -> float | None:
        tensor = self.base_trial.tensor(name)
        if has_raw(tensor, step):
            array = tensor.value(step)
            return float(np.var(array, dtype=np.float64)) if array.size > 1 else None
        if int(np.prod(tensor.shape(step))) <= 1:
            return None
        saved = tensor.reduction_values(step)
        if ("variance", False) in saved:
            return saved[("variance", False)]
        if ("std", False) in saved:
            return saved[("std", False)] ** 2
        return None

    def invoke_at_step(self, step: int) -> bool:
        names = select(self.base_trial, self.collection_names, self.tensor_regex, step=step)
        judged = [(v, n) for n in names if (v := self._variance(n, step)) is not None]
        if not judged:
            raise self.skip("no selected tensor with a variance (raw, variance or std) here")
        high, low = max(judged), min(judged)
        if self.max_threshold is not None and high[0] > self.max_threshold:
            self.explain(
                f"variance of {high[1]} is {high[0]:.3g}, above {self.max_threshold:g}",
                tensors=[high[1]],
                value=high[0],
                threshold=self.max_threshold,
            )
            return True
        if self.min_threshold is not None and low[0] < self.min_threshold:
            self.explain(
                f"variance of {low[1]} is {low[0]:.3g}, below {self.min_threshold:g}",
                tensors=[low[1]],
                value=low[0],
                threshold=self.min_threshold,
            )
            return True
        self.explain(
            f"variances between {low[0]:.3g} and {high[0]:.3g}",
            value=high[0],
            threshold=(self.min_threshold, self.max_threshold),
        )
        return False
