"""NaN is a problem in every rule that meets it: each rule of the recommended set, on real
training whose weights, activations, gradients and loss become NaN."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tensortap.diagnosis import CAUSES
from tensortap.rules import (
    BUILTIN_RULES,
    CheckInputImages,
    GradientNormSpike,
    LossSpike,
    Overtraining,
    RuleStatus,
    invoke_rule,
    rule_configs,
)
from tensortap.rules._finding import Severity
from tensortap.testing import TrialBuilder
from tests.helpers import job_runs

F32 = np.float32

#: Rules of the recommended set that never meet the NaN of these runs: the inputs stay finite
#: (and are not images), labels and predicted classes are integers, and the training loop's
#: facts and which tensors were saved are no values.
NEVER_MEET = {
    "CheckInputImages",
    "ClassImbalance",
    "UnnormalisedInput",
    "AccuracyAtChance",
    "TrainingLoop",
    "FrozenLayer",
}


def model() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 10)
    )


def nan_from(step: int, net: nn.Sequential) -> Callable[[int], None]:
    """A hook on the optimizer's steps: one weight becomes NaN after ``step`` (before training
    when ``step`` is -1), and from then on the activations, loss and gradients are NaN too."""

    def poison() -> None:
        with torch.no_grad():
            net[0].weight[0, 0] = float("nan")  # type: ignore[operator]

    if step < 0:
        poison()
    return lambda s: poison() if s == step else None


@pytest.fixture(scope="module", params=[-1, 25], ids=["from the start", "from step 25"])
def nan_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    torch.manual_seed(0)
    net = model()
    after = nan_from(request.param, net)
    trial = job_runs.train(
        tmp_path_factory.mktemp("nan"),
        net,
        job_runs.digits(),
        lambda p: torch.optim.SGD(p, lr=0.05),
        nn.CrossEntropyLoss(),
        steps=120,
        eval_every=40,
        after_step=after,
    )
    return request.param, trial


@pytest.mark.parametrize("name", [n for n in rule_configs.RECOMMENDED if n not in NEVER_MEET])
def test_every_recommended_rule_calls_nan_a_problem(nan_run: tuple, name: str) -> None:
    start, trial = nan_run  # the rules that never meet NaN here are judged below
    if name == "PoorWeightInitialization" and start >= 0:
        return  # PoorWeightInitialization judges the first steps only
    summary = invoke_rule(BUILTIN_RULES[name](trial))
    assert summary.worst_severity is Severity.PROBLEM, summary
    nonfinite = [f for f in summary.findings if f.details.get("nonfinite")]
    assert nonfinite, summary.findings[:2]
    assert all(f.severity is Severity.PROBLEM for f in nonfinite)
    assert {f.details.get("cause") for f in nonfinite} == {"nonfinite"}


def test_the_rules_that_never_meet_nan_do_not_call_it_fine(nan_run: tuple) -> None:
    _, trial = nan_run
    for name in NEVER_MEET:
        summary = invoke_rule(BUILTIN_RULES[name](trial))
        if name == "ClassImbalance":
            continue  # the classes a NaN model predicts may be given up on: true
        if name == "AccuracyAtChance":  # at chance (issue 44: its end is judged), a consequence
            causes = {f.details.get("cause") for f in summary.findings}
            assert causes <= CAUSES["nonfinite"].explains, causes
            continue
        assert summary.worst_severity is not Severity.PROBLEM, (name, summary)


def losses(path: Path, values: list[float]) -> object:
    builder = TrialBuilder(path)
    for v in values:
        builder.step({"loss": F32(v), "gradient/fc.weight": np.full(4, v, F32)})
    return builder.close()


@pytest.mark.parametrize("rule", [LossSpike, GradientNormSpike, Overtraining])
def test_a_nan_during_warm_up_is_a_problem(tmp_path: Path, rule: type) -> None:
    """Before, the spike rules took a NaN in their first 10 values for baseline material."""
    summary = invoke_rule(rule(losses(tmp_path, [2.0, 1.5, float("nan")])))
    assert summary.worst_severity is Severity.PROBLEM
    assert summary.findings[0].details["nonfinite"] is True


@pytest.mark.parametrize("rule", [LossSpike, GradientNormSpike])
def test_a_baseline_still_warming_up_is_no_data(tmp_path: Path, rule: type) -> None:
    summary = invoke_rule(rule(losses(tmp_path, [2.0, 1.5, 1.2])))
    assert summary.status is RuleStatus.NO_DATA
    assert "warming up" in summary.details


def test_overtraining_on_a_single_value_is_no_data(tmp_path: Path) -> None:
    assert invoke_rule(Overtraining(losses(tmp_path, [2.0]))).status is RuleStatus.NO_DATA


def test_nan_images_are_a_problem(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    images = np.full((600, 1, 8, 8), np.nan, F32)
    builder.step({"Net_input_0": images})
    summary = invoke_rule(CheckInputImages(builder.close(), regex="Net_input_0"))
    assert summary.worst_severity is Severity.PROBLEM
    assert summary.findings[0].details["nonfinite"] is True
