"""Gradients that shrink by orders of magnitude on their way back are vanishing even where each
stays above the absolute threshold: a stranger's eight sigmoid layers on SGD (Keras) had 1.8e-7
at the first layer against 0.033 at the output, stayed at chance, and were told "the learning
rate is too low". An embedding's small gradient (only a batch's token rows get one) is not
compared; healthy spreads (two orders of magnitude) are not judged vanishing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensortap.rules import VanishingGradient, invoke_rule
from tensortap.testing import TrialBuilder
from tensortap.trials import Trial
from tests.helpers.both_ways import judged_both_ways


def stack_trial(path: Path, per_layer: float, embedding: float | None = None) -> Trial:
    """Eight hidden weights and an output whose mean |gradient| is 0.03 at the output and
    ``per_layer`` times smaller at each layer further back."""
    rng = np.random.default_rng(0)
    builder = TrialBuilder(path)
    for _ in range(4):
        tensors = {
            f"gradient/hidden_{k}/kernel": 0.03
            * per_layer ** (8 - k)
            * np.abs(rng.standard_normal((16, 16))).astype(np.float32)
            for k in range(8)
        }
        tensors["gradient/output/kernel"] = 0.03 * np.abs(rng.standard_normal((16, 4))).astype(
            np.float32
        )
        if embedding is not None:
            tensors["gradient/embedding/embeddings"] = embedding * np.ones((50, 16), np.float32)
        builder.step(tensors, mode="train")
    return builder.close()


def test_gradients_shrinking_layer_by_layer_vanish(tmp_path: Path) -> None:
    """0.25 per layer (a sigmoid's largest slope): the first layer gets 1.5e-5 of the output's,
    every value above 1e-7."""
    summary = invoke_rule(VanishingGradient(stack_trial(tmp_path, 0.25)))
    assert summary.triggered == 4, summary.findings
    message = summary.findings[0].message
    assert message.startswith("the gradients shrink on their way back"), message
    assert "(gradient/hidden_0/kernel)" in message and "(gradient/output/kernel)" in message
    assert summary.findings[0].details["cause"] == "vanishing_gradient"


@pytest.mark.parametrize("per_layer", [0.6, 0.75])
def test_a_healthy_spread_is_not_vanishing(tmp_path: Path, per_layer: float) -> None:
    """0.6 per layer: the first layer gets 1.7e-2 of the output's."""
    summary = invoke_rule(VanishingGradient(stack_trial(tmp_path, per_layer)))
    assert summary.triggered == 0 and summary.judged == 4, summary.findings


def test_an_embeddings_small_gradient_is_not_compared(tmp_path: Path) -> None:
    summary = invoke_rule(VanishingGradient(stack_trial(tmp_path, 0.75, embedding=1e-6)))
    assert summary.triggered == 0 and summary.judged == 4, summary.findings


def test_relative_threshold_zero_turns_the_comparison_off(tmp_path: Path) -> None:
    rule = VanishingGradient(stack_trial(tmp_path, 0.25), relative_threshold=0)
    assert invoke_rule(rule).triggered == 0


@pytest.mark.parametrize("per_layer", [0.25, 0.75])
def test_judged_alike_step_by_step_and_in_bulk(tmp_path: Path, per_layer: float) -> None:
    stack_trial(tmp_path, per_layer)
    found = judged_both_ways(lambda: VanishingGradient(Trial(tmp_path)))
    assert found[0] == found[1]
    assert found[0][2] == 4
