"""An attention block's query and key projections get little gradient while attention is near
uniform (a model that has learned nothing of its inputs: a stranger's ELECTRA on shuffled
labels had key and query gradients of 2e-9 against a median of 1e-4, and "gradients vanish"
was named first). Where the value projection beside them, which takes the same input, gets its
gradient, the gradient reached that depth: VanishingGradient leaves them out. Where the value
projection's gradient is as small, the gradient did vanish."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensortap.rules import VanishingGradient, invoke_rule
from tensortap.rules._finding import Severity
from tensortap.testing import TrialBuilder
from tensortap.trials import Trial
from tests.helpers.both_ways import judged_both_ways

BLOCK = "gradient/electra.encoder.layer.0.attention.self"


def attention_trial(
    path: Path, value_scale: float, score_scale: float = 2e-9, head_scale: float = 1e-3
) -> Trial:
    rng = np.random.default_rng(0)
    builder = TrialBuilder(path)
    for _ in range(4):
        builder.step(
            {
                f"{BLOCK}.query.weight": score_scale
                * rng.standard_normal((8, 8)).astype(np.float32),
                f"{BLOCK}.key.weight": score_scale * rng.standard_normal((8, 8)).astype(np.float32),
                f"{BLOCK}.value.weight": value_scale
                * rng.standard_normal((8, 8)).astype(np.float32),
                "gradient/classifier.dense.weight": head_scale
                * rng.standard_normal((2, 8)).astype(np.float32),
            },
            mode="train",
        )
    return builder.close()


def test_query_and_key_beside_a_value_with_gradient_are_not_vanishing(tmp_path: Path) -> None:
    summary = invoke_rule(VanishingGradient(attention_trial(tmp_path, 1e-4)))
    assert summary.triggered == 0 and summary.judged == 4, summary.findings


def test_a_value_projection_as_small_is_a_vanishing_gradient(tmp_path: Path) -> None:
    summary = invoke_rule(VanishingGradient(attention_trial(tmp_path, 1e-9)))
    assert summary.worst_severity is Severity.PROBLEM
    assert summary.gravest is not None and "value.weight" in summary.gravest.message


@pytest.mark.parametrize("value_scale", [1e-4, 3e-7])
def test_query_and_key_far_below_the_largest_beside_a_value_within_range(
    tmp_path: Path, value_scale: float
) -> None:
    """The relative check alike: a tiny BERT on labels it cannot learn had query gradients of
    2.2e-7 (above the absolute threshold) against its classifier's 6.4e-3, 3.4e-5 of it, and
    "gradients vanish" was named first at step 0. Where the value projection is within 1e-4
    of the largest, the gradient reached that depth; where it is as small, it did not."""
    trial = attention_trial(tmp_path, value_scale, score_scale=3e-7, head_scale=1e-2)
    summary = invoke_rule(VanishingGradient(trial))
    if value_scale > 1e-6:
        assert summary.triggered == 0 and summary.judged == 4, summary.findings
    else:
        assert summary.worst_severity is Severity.PROBLEM
        assert summary.gravest is not None and "shrink" in summary.gravest.message


@pytest.mark.parametrize("value_scale", [1e-4, 1e-9])
def test_judged_alike_step_by_step_and_in_bulk(tmp_path: Path, value_scale: float) -> None:
    attention_trial(tmp_path, value_scale)
    found = judged_both_ways(lambda: VanishingGradient(Trial(tmp_path)))
    assert found[0] == found[1]
