"""Shared by DeadRelu and SaturatedActivation: the share of units that are (almost) never active."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tensortap.rules.builtin._common import has_raw, unit_activity
from tensortap.rules.rule import Rule


def raw_matching(rule: Rule, regexes: list[str], step: int) -> list[str]:
    """Tensors matching any of ``regexes`` saved raw at ``step``."""
    found: set[str] = set()
    for regex in regexes:
        found.update(rule.base_trial.tensor_names(step=step, regex=regex))
    return sorted(n for n in found if has_raw(rule.base_trial.tensor(n), step))


def judge_layers(
    rule: Rule,
    names: list[str],
    step: int,
    inactive: Callable[[str, np.ndarray], np.ndarray],
    threshold_inactivity: float,
    threshold_layer: float,
    what: str,
) -> bool:
    """A unit counts as ``what`` (dead, saturated) when it is active in less than
    ``threshold_inactivity`` percent of the samples; a layer fires when more than
    ``threshold_layer`` percent of its units are. Explains the worst layer."""
    if not names:
        raise rule.skip("no matching activation saved at this step")
    worst: tuple[float, str, int, int] | None = None
    for name in names:
        values = rule.base_trial.tensor(name).value(step)
        if values.size == 0:
            continue
        activity = unit_activity(values, ~inactive(name, values))
        bad = int(np.count_nonzero(activity < threshold_inactivity))
        percent = 100.0 * bad / activity.size
        if worst is None or percent > worst[0]:
            worst = (percent, name, bad, activity.size)
    if worst is None:
        raise rule.skip("the matching activations are empty at this step")
    percent, name, bad, units = worst
    fired = percent > threshold_layer
    rule.explain(
        f"{percent:.3g}% of the units of {name} are {what} ({bad} of {units} active in less "
        f"than {threshold_inactivity:g}% of samples); limit {threshold_layer:g}%",
        tensors=[name],
        value=percent,
        threshold=threshold_layer,
    )
    return fired


class ActivityRule(Rule):
    """Base of DeadRelu and SaturatedActivation: judges the units of every raw tensor
    matching ``tensor_regex`` by how often they are active (:func:`judge_layers`)."""

    collections_needed = ("relu_activations",)
    #: What an inactive unit is called in findings ("dead", "saturated").
    what = "inactive"

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None,
        default_regex: list[str],
        threshold_inactivity: float,
        threshold_layer: float,
    ) -> None:
        super().__init__(base_trial)
        for name, value in (
            ("threshold_inactivity", threshold_inactivity),
            ("threshold_layer", threshold_layer),
        ):
            self.check_param(name, value, 0 <= value <= 100, "a percentage in [0, 100]")
        self.tensor_regex = tensor_regex or default_regex
        self.threshold_inactivity = threshold_inactivity
        self.threshold_layer = threshold_layer

    def inactive(self, name: str, values: np.ndarray) -> np.ndarray:
        """Which samples leave each unit of ``name`` inactive (booleans, like ``values``)."""
        raise NotImplementedError

    def _names(self, step: int) -> list[str]:
        return raw_matching(self, self.tensor_regex, step)

    def set_required_tensors(self, step: int) -> None:
        for name in self._names(step):
            self.req_tensors.add(name, [step])

    def invoke_at_step(self, step: int) -> bool:
        return judge_layers(
            self,
            self._names(step),
            step,
            self.inactive,
            self.threshold_inactivity,
            self.threshold_layer,
            self.what,
        )
