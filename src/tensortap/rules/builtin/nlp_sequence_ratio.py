"""NLPSequenceRatio: token sequences dominated by one token (usually padding)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import has_raw


class NLPSequenceRatio(Rule):
    """For the token-id inputs matching ``tensor_regex`` (smdebug's name; ``tokens_regex`` is
    kept as an alias), the percentage of tokens equal to
    each of ``token_values``; fires when one exceeds its ``token_thresholds_percent`` (the
    lists pair up; one threshold applies to every value).
    """

    collections_needed = ("inputs",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        given = params["token_thresholds_percent"]
        values, thresholds = _pairs(params["token_values"], given)
        cls.check_param(
            "token_thresholds_percent",
            given,
            len(thresholds) == len(values) and all(0 <= t <= 100 for t in thresholds),
            f"one percentage in [0, 100], or one per token value ({len(values)})",
        )

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: str = ".*embedding.*_input_0",
        token_values: list[int] | None = None,
        token_thresholds_percent: list[float] | None = None,
        tokens_regex: str | None = None,
    ) -> None:
        super().__init__(base_trial)
        tokens_regex = tokens_regex or tensor_regex
        values, thresholds = _pairs(token_values, token_thresholds_percent)
        self.tokens_regex = tokens_regex
        self.token_values, self.token_thresholds_percent = values, thresholds

    def invoke_at_step(self, step: int) -> bool:
        trial = self.base_trial
        names = [
            n
            for n in trial.tensor_names(step=step, regex=self.tokens_regex)
            if has_raw(trial.tensor(n), step)
        ]
        if not names:
            raise self.skip(f"no tensor matching {self.tokens_regex!r} saved at this step")
        worst: tuple[float, float, str, int] | None = None
        for name in names:
            tokens = trial.tensor(name).value(step)
            if tokens.size == 0:
                continue
            for value, limit in zip(self.token_values, self.token_thresholds_percent, strict=True):
                percent = 100.0 * float(np.count_nonzero(tokens == value)) / tokens.size
                if worst is None or percent - limit > worst[0] - worst[1]:
                    worst = (percent, limit, name, value)
        if worst is None:
            raise self.skip("the token tensors are empty at this step")
        percent, limit, name, value = worst
        self.explain(
            f"{percent:.3g}% of the tokens of {name} are {value} (limit {limit:g}%)",
            tensors=[name],
            value=percent,
            threshold=limit,
        )
        return percent > limit


def _pairs(
    token_values: list[int] | None, token_thresholds_percent: list[float] | None
) -> tuple[list[int], list[float]]:
    """The token values and their thresholds (one threshold applies to every value)."""
    values = [0] if token_values is None else token_values
    thresholds = [50.0] if token_thresholds_percent is None else token_thresholds_percent
    if len(thresholds) == 1:
        thresholds = thresholds * len(values)
    return values, thresholds
