"""A rule registered where it is defined, as a new built-in rule would be (test_registry.py
imports this module, and a job's rule host imports it by name to find the rule)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensortap.rules import Rule, register_rule


@register_rule
class LossAbove(Rule):
    """Fires at a step whose loss is above ``threshold``."""

    collections_needed = ("losses",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        cls.check_param("threshold", threshold, threshold >= 0, "a number >= 0")

    def __init__(self, base_trial: Any, threshold: float = 100.0) -> None:
        super().__init__(base_trial)
        self.threshold = threshold

    def invoke_at_step(self, step: int) -> bool:
        names = self.base_trial.tensor_names(collection="losses", step=step)
        if not names:
            raise self.skip("no loss saved at this step")
        loss = float(self.base_trial.tensor(names[0]).value(step))
        self.explain(f"the loss is {loss:.3g}", names[0], loss, self.threshold)
        return loss > self.threshold
