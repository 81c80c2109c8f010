"""DeadRelu: ReLU layers whose units have stopped firing."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.rules.builtin._activity import ActivityRule


class DeadRelu(ActivityRule):
    r"""For every ReLU output matching ``tensor_regex`` (default ``.*relu\d*_output``: PyTorch's
    ``relu_output``, Keras's, and Gluon's ``relu0_output``): a unit (an element of a dense layer, a
    channel of a convolution) is dead when it is positive in less than
    ``threshold_inactivity`` percent of the samples of the batch; fires when more than
    ``threshold_layer`` percent of a layer's units are dead. LeakyReLU outputs
    (``leaky_relu_output``) are not judged at the default: a LeakyReLU unit below zero still
    passes a gradient, so it never dies (a healthy autoencoder's decoder had 66% of its
    LeakyReLU units negative on nearly every sample, a problem before).

    Units dead at the first saved training step (before any update) and still dead on the last
    5 came so from the set-up, not from training: the finding names ``poor_init`` as evidence
    that needs harm (``details["needs_harm"]``; ``details["symptom"]`` keeps "dead_relu").
    """

    what = "dead"
    cause = "dead_relu"
    init_cause = "poor_init"

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        threshold_inactivity: float = 1.0,
        threshold_layer: float = 50.0,
    ) -> None:
        super().__init__(
            base_trial, tensor_regex, [r".*relu\d*_output"], threshold_inactivity, threshold_layer
        )

    def _names(self, step: int) -> list[str]:
        names = super()._names(step)
        if self.tensor_regex is not self.default_regex:
            return names  # the user's own choice
        return [n for n in names if "leaky_relu" not in n.rsplit("/", 1)[-1]]

    def inactive(self, name: str, values: np.ndarray) -> np.ndarray:
        return ~(values > 0)  # (non-finite layers never get here: they are reported as such)
