"""PoorWeightInitialization on real training: healthy initialisations (PyTorch's default on deep
networks, an autoencoder with a sigmoid output, a zero-initialised output layer) are no
problem; constant, zero and badly scaled ones are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tensortap.rules import PoorWeightInitialization, RuleStatus, RuleSummary, invoke_rule
from tensortap.rules._finding import Severity
from tensortap.testing import TrialBuilder
from tests.helpers import job_runs


def mlp(sizes: list[int], output: type[nn.Module] | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    if output is not None:
        layers.append(output())
    return nn.Sequential(*layers)


def initialised(model: nn.Sequential, init: Callable[[nn.Linear], object]) -> nn.Sequential:
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                init(layer)
    return model


def autoencoder() -> nn.Sequential:
    return mlp([64, 128, 64, 8, 64, 128, 64], output=nn.Sigmoid)


def zero_output(model: nn.Sequential) -> nn.Sequential:
    with torch.no_grad():
        model[-2].weight.zero_()  # type: ignore[operator]
    return model


def pixels() -> job_runs.Data:
    from sklearn.datasets import load_digits

    x, _ = load_digits(return_X_y=True)
    images = torch.tensor(x / 16.0, dtype=torch.float32)
    return job_runs.Data(images[:1400], images[:1400], images[1400:], images[1400:])


def judge(path: Path, model: nn.Module, autoencode: bool = False) -> RuleSummary:
    torch.manual_seed(0)
    trial = job_runs.train(
        path,
        model,
        pixels() if autoencode else job_runs.digits(),
        lambda p: torch.optim.Adam(p, lr=1e-3),
        nn.MSELoss() if autoencode else nn.CrossEntropyLoss(),
        classify=not autoencode,
        steps=20,
        eval_every=0,
    )
    return invoke_rule(PoorWeightInitialization(trial))


HEALTHY: dict[str, Callable[[], nn.Module]] = {
    # PyTorch's default shrinks the variance ~4x per ReLU layer: 178x over 5 layers
    "default init, 5 x 256 ReLU": lambda: mlp([64] + [256] * 5 + [10]),
    # hidden layers 10.5x apart; with the output sigmoid's input, 15x
    "autoencoder with a sigmoid output": autoencoder,
    "autoencoder, zero-initialised output layer": lambda: zero_output(autoencoder()),
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_a_healthy_initialisation_is_no_problem(tmp_path: Path, name: str) -> None:
    torch.manual_seed(0)
    summary = judge(tmp_path, HEALTHY[name](), autoencode="autoencoder" in name)
    assert summary.worst_severity is not Severity.PROBLEM, summary.findings[:1]
    for finding in summary.findings:  # the output's input is never compared
        assert not any("sigmoid" in t for t in finding.tensors), finding


BROKEN: dict[str, Callable[[], nn.Module]] = {
    "constant 0.05": lambda: initialised(
        mlp([64, 64, 64, 10]), lambda m: (nn.init.constant_(m.weight, 0.05), m.bias.zero_())
    ),
    "constant weights, default biases": lambda: initialised(
        mlp([64, 64, 64, 10]), lambda m: nn.init.constant_(m.weight, 0.05)
    ),
    "zeros": lambda: initialised(
        mlp([64, 64, 64, 10]), lambda m: (m.weight.zero_(), m.bias.zero_())
    ),
    "N(0, 1) regardless of fan-in": lambda: initialised(
        mlp([64, 128, 128, 128, 10]), lambda m: nn.init.normal_(m.weight, 0.0, 1.0)
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_initialisation_is_a_problem(tmp_path: Path, name: str) -> None:
    torch.manual_seed(0)
    summary = judge(tmp_path, BROKEN[name]())
    assert summary.worst_severity is Severity.PROBLEM, summary
    problem = next(f for f in summary.findings if f.severity is Severity.PROBLEM)
    assert problem.details["cause"] == "poor_init"
    if "constant" in name or name == "zeros":
        assert "got the same weights" in problem.message


def test_a_zero_initialised_classifier_is_fine(tmp_path: Path) -> None:
    """Logistic regression from zero weights: the output layer's units differ by their targets."""
    torch.manual_seed(0)
    model = initialised(mlp([64, 10]), lambda m: (m.weight.zero_(), m.bias.zero_()))
    assert judge(tmp_path, model).worst_severity is not Severity.PROBLEM


def test_without_layer_inputs_a_final_sigmoid_is_the_output(tmp_path: Path) -> None:
    """A trial with the activations only: the last activation, a sigmoid, is left out."""
    builder = TrialBuilder(tmp_path)
    rng = np.random.default_rng(0)
    builder.step(
        {
            "enc/relu_input_0": rng.normal(0, 0.3, (32, 16)).astype(np.float32),
            "dec/relu_input_0": rng.normal(0, 0.2, (32, 16)).astype(np.float32),
            "out/sigmoid_input_0": rng.normal(0, 0.001, (32, 64)).astype(np.float32),
        }
    )
    summary = invoke_rule(PoorWeightInitialization(builder.close()))
    assert summary.status is RuleStatus.NO_ISSUES_FOUND


def test_a_nan_loss_is_a_problem(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for loss in (2.3, float("nan")):
        builder.step({"loss": np.float32(loss)})
    summary = invoke_rule(PoorWeightInitialization(builder.close()))
    assert summary.worst_severity is Severity.PROBLEM
    assert summary.findings[0].details["cause"] == "nonfinite"


@pytest.mark.parametrize(
    ("losses", "cause"),
    [
        # a stranger's Keras digits MLP at Adam 0.1: 2.4 -> 42 at the first update, settled
        # near 20 by the check at step 5 (8x): the burst is the first updates', not the start's
        ([2.42, 42.4, 19.33, 26.96, 14.19, 19.62, 7.8, 3.81], "lr_too_high"),
        ([2.42, 30.0, 60.0, 40.0, 30.0, 26.0, 7.8, 3.81], "lr_too_high"),  # 10x at the check
        ([2.42, 3.0, 2.9, 2.8, 2.6, 2.5, 2.4, 2.3], "poor_init"),  # no lower: a warning
        ([2.42, 2.0, 1.8, 1.6, 1.5, 1.4, 1.3, 1.2], None),  # learning
    ],
)
def test_a_loss_that_burst_in_the_first_updates_is_learning_rate_evidence(
    tmp_path: Path, losses: list[float], cause: str | None
) -> None:
    builder = TrialBuilder(tmp_path)
    for loss in losses:
        builder.step({"loss": np.float32(loss)}, mode="train", collections={"loss": "losses"})
    summary = invoke_rule(PoorWeightInitialization(builder.close()))
    found = [f for f in summary.findings if f.triggered]
    if cause is None:
        assert found == [], [f.message for f in found]
        return
    assert found and found[0].details["cause"] == cause, [f.message for f in found]
    assert found[0].severity is Severity.WARNING
    if cause == "lr_too_high":
        assert found[0].details["needs_harm"] is True
        assert "the first updates threw the weights far" in found[0].message
    if losses[1] == 42.4:
        assert found[0].message.startswith("loss 42.4 at step 1 is 17.5x its 2.42 at step 0")
