"""SaturatedActivation: tanh and sigmoid units stuck in their flat tails."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules.builtin._activity import ActivityRule


class SaturatedActivation(ActivityRule):
    """For every tanh or sigmoid *input* matching ``tensor_regex``: a sample saturates a unit
    when its input lies outside the activation's range (tanh ``threshold_tanh``, sigmoid
    ``threshold_sigmoid``; smdebug's ``threshold_tanh_min`` etc. override one end). A unit is
    saturated when it is inside the range in less than ``threshold_inactivity`` percent of
    the samples; fires when more than ``threshold_layer`` percent of a layer's units are.
    """

    what = "saturated"
    cause = "saturated_activation"

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        super().check_values(params)
        for activation in ("tanh", "sigmoid"):
            name = f"threshold_{activation}"
            low, high = _range(params[name], params[f"{name}_min"], params[f"{name}_max"])
            cls.check_param(name, (low, high), low < high, "a range (low, high)")

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        threshold_tanh: tuple[float, float] = (-9.4999, 9.4999),
        threshold_sigmoid: tuple[float, float] = (-23.0, 16.99999),
        threshold_inactivity: float = 1.0,
        threshold_layer: float = 50.0,
        threshold_tanh_min: float | None = None,
        threshold_tanh_max: float | None = None,
        threshold_sigmoid_min: float | None = None,
        threshold_sigmoid_max: float | None = None,
    ) -> None:
        super().__init__(
            base_trial,
            tensor_regex,
            [".*tanh_input", ".*sigmoid_input"],
            threshold_inactivity,
            threshold_layer,
        )
        tanh = _range(threshold_tanh, threshold_tanh_min, threshold_tanh_max)
        sigmoid = _range(threshold_sigmoid, threshold_sigmoid_min, threshold_sigmoid_max)
        self.threshold_tanh, self.threshold_sigmoid = tanh, sigmoid

    def inactive(self, name: str, values: np.ndarray) -> np.ndarray:
        low, high = self.threshold_sigmoid if "sigmoid" in name.lower() else self.threshold_tanh
        return ~((values > low) & (values < high))


def _range(
    default: tuple[float, float], low: float | None, high: float | None
) -> tuple[float, float]:
    """The range ``default`` with smdebug's ``..._min``/``..._max`` overriding an end."""
    return (default[0] if low is None else low, default[1] if high is None else high)
