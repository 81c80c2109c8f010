"""DeadRelu: ReLU layers whose units have stopped firing."""

from __future__ import annotations

from typing import Any

from tensortap.rules.builtin._activity import judge_layers, raw_matching
from tensortap.rules.rule import Rule


class DeadRelu(Rule):
    """For every ReLU output matching ``tensor_regex``: a unit (an element of a dense layer, a
    channel of a convolution) is dead when it is positive in less than
    ``threshold_inactivity`` percent of the samples of the batch; fires when more than
    ``threshold_layer`` percent of a layer's units are dead.
    """

    collections_needed = ("relu_activations",)

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        threshold_inactivity: float = 1.0,
        threshold_layer: float = 50.0,
    ) -> None:
        super().__init__(base_trial)
        for name, value in (
            ("threshold_inactivity", threshold_inactivity),
            ("threshold_layer", threshold_layer),
        ):
            self.check_param(name, value, 0 <= value <= 100, "a percentage in [0, 100]")
        self.tensor_regex = tensor_regex or [".*relu_output"]
        self.threshold_inactivity = threshold_inactivity
        self.threshold_layer = threshold_layer

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
            lambda _name, values: ~(values > 0),  # NaN counts as inactive
            self.threshold_inactivity,
            self.threshold_layer,
            "dead",
        )
