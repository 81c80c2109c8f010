"""SaturatedActivation: tanh and sigmoid units stuck in their flat tails."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.rules.builtin._activity import judge_layers, raw_matching
from tensortap.rules.rule import Rule


class SaturatedActivation(Rule):
    """For every tanh or sigmoid *input* matching ``tensor_regex``: a sample saturates a unit
    when its input lies outside the activation's range (tanh ``threshold_tanh``, sigmoid
    ``threshold_sigmoid``; smdebug's ``threshold_tanh_min`` etc. override one end). A unit is
    saturated when it is inside the range in less than ``threshold_inactivity`` percent of
    the samples; fires when more than ``threshold_layer`` percent of a layer's units are.
    """

    collections_needed = ("relu_activations",)

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        threshold_tanh: tuple[float, float] = (-9.4999, 9.4999),
        threshold_sigmoid: tuple[float, float] = (-23.0, 16.99999),
        threshold_tanh_min: float | None = None,
        threshold_tanh_max: float | None = None,
        threshold_sigmoid_min: float | None = None,
        threshold_sigmoid_max: float | None = None,
        threshold_inactivity: float = 1.0,
        threshold_layer: float = 50.0,
    ) -> None:
        super().__init__(base_trial)
        tanh = (
            threshold_tanh[0] if threshold_tanh_min is None else threshold_tanh_min,
            threshold_tanh[1] if threshold_tanh_max is None else threshold_tanh_max,
        )
        sigmoid = (
            threshold_sigmoid[0] if threshold_sigmoid_min is None else threshold_sigmoid_min,
            threshold_sigmoid[1] if threshold_sigmoid_max is None else threshold_sigmoid_max,
        )
        self.check_param("threshold_tanh", tanh, tanh[0] < tanh[1], "a range (low, high)")
        self.check_param(
            "threshold_sigmoid", sigmoid, sigmoid[0] < sigmoid[1], "a range (low, high)"
        )
        for name, value in (
            ("threshold_inactivity", threshold_inactivity),
            ("threshold_layer", threshold_layer),
        ):
            self.check_param(name, value, 0 <= value <= 100, "a percentage in [0, 100]")
        self.tensor_regex = tensor_regex or [".*tanh_input", ".*sigmoid_input"]
        self.threshold_tanh, self.threshold_sigmoid = tanh, sigmoid
        self.threshold_inactivity = threshold_inactivity
        self.threshold_layer = threshold_layer

    def _names(self, step: int) -> list[str]:
        return raw_matching(self, self.tensor_regex, step)

    def set_required_tensors(self, step: int) -> None:
        for name in self._names(step):
            self.req_tensors.add(name, [step])

    def _saturated(self, name: str, values: np.ndarray) -> np.ndarray:
        low, high = self.threshold_sigmoid if "sigmoid" in name.lower() else self.threshold_tanh
        return ~((values > low) & (values < high))

    def invoke_at_step(self, step: int) -> bool:
        return judge_layers(
            self,
            self._names(step),
            step,
            self._saturated,
            self.threshold_inactivity,
            self.threshold_layer,
            "saturated",
        )
