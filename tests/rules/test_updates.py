"""WeightsNotUpdating and WeightUpdateRatio on real training: a conv bias feeding BatchNorm is
not "not updating", a model whose every gradient is 0 is a problem (not "all frozen"), and a
large first update is reported with its cause."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tensortap.rules import RuleStatus, WeightsNotUpdating, WeightUpdateRatio, invoke_rule
from tensortap.rules._finding import Finding, Severity
from tensortap.testing import TrialBuilder
from tests.helpers import job_runs

F32 = np.float32


def noise_images(size: int = 16, n: int = 800) -> job_runs.Data:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, size, size, generator=gen)
    y = (x[:, 0].mean((1, 2)) > 0).long()
    return job_runs.Data(x[:600], y[:600], x[600:], y[600:])


def bn_cnn(channels: int = 16) -> nn.Sequential:
    """Convolutions with biases, each feeding BatchNorm."""
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 2),
    )  # fmt: skip


def test_a_conv_bias_feeding_batchnorm_is_not_judged(tmp_path: Path) -> None:
    """Its gradient is ~1e-5 of the step's median (above the old cut of 1e-6) and ~1e-5 of its
    own weights'; with SGD at 0.01 its update falls below one float32 ulp. Before, this was
    "1 of 10 parameters with a non-zero gradient did not change: 0.bias"."""
    torch.manual_seed(0)
    trial = job_runs.train(
        tmp_path,
        bn_cnn(),
        noise_images(),
        lambda p: torch.optim.SGD(p, lr=0.01),
        nn.CrossEntropyLoss(),
        steps=60,
        batch=64,
        eval_every=0,
    )
    summary = invoke_rule(WeightsNotUpdating(trial))
    assert summary.status is RuleStatus.NO_ISSUES_FOUND, summary.findings[:1]


def _multiplied_by_zero(step: int, loss: torch.Tensor) -> torch.Tensor:
    return loss * 0.0  # a loss weight of 0 by mistake: every gradient is exactly 0


@pytest.mark.parametrize("rule", [WeightsNotUpdating, WeightUpdateRatio])
def test_every_gradient_exactly_zero_is_a_problem(tmp_path: Path, rule: type) -> None:
    """Before, both rules said NoData ("all frozen")."""
    torch.manual_seed(0)
    trial = job_runs.train(
        tmp_path,
        nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)),
        job_runs.digits(),
        lambda p: torch.optim.SGD(p, lr=0.1),
        nn.CrossEntropyLoss(),
        steps=30,
        eval_every=0,
        before_backward=_multiplied_by_zero,
    )
    summary = invoke_rule(rule(trial))
    assert summary.worst_severity is Severity.PROBLEM
    finding = summary.findings[0]
    assert finding.details["cause"] == "not_updating" and finding.details["zero_gradients"]


def test_weights_without_a_gradient_are_frozen_not_zero(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for step in range(3):
        builder.step({"fc.weight": np.full((4, 3), 0.5 + step, F32), "loss": F32(1.0)})
    trial = builder.close()
    for rule in (WeightsNotUpdating(trial), WeightUpdateRatio(trial, num_steps=1)):
        summary = invoke_rule(rule)
        assert summary.worst_severity is not Severity.PROBLEM
    summary = invoke_rule(WeightsNotUpdating(trial))
    assert summary.status is RuleStatus.NO_DATA and "frozen" in summary.details


def test_zero_gradients_at_a_zero_loss_are_a_minimum(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for _ in range(3):
        builder.step(
            {"fc.weight": np.ones((4, 3), F32), "gradient/fc.weight": np.zeros((4, 3), F32)}
            | {"loss": F32(0.0)}
        )
    assert invoke_rule(WeightsNotUpdating(builder.close())).triggered == 0


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def first_update(path: Path, optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]):
    torch.manual_seed(0)
    trial = job_runs.train(
        path, mlp(), job_runs.digits(), optimizer, nn.CrossEntropyLoss(), steps=20, eval_every=0
    )
    return invoke_rule(WeightUpdateRatio(trial))


def test_a_large_first_update_is_reported_with_its_cause(tmp_path: Path) -> None:
    """SGD at 0.5 on an MLP: the first update moves the first layer's weights by ~0.17 of their
    norm, 50x what SGD at 0.01 does. Before: NoIssuesFound (the limit was 10)."""
    summary = first_update(tmp_path, lambda p: torch.optim.SGD(p, lr=0.5))
    assert summary.worst_severity is Severity.WARNING
    finding = summary.findings[0]
    assert finding.details["cause"] == "lr_too_high" and finding.details["first_update"]
    assert 0.1 < finding.value < 1.0


def test_a_large_first_update_then_a_diverging_loss_is_the_learning_rate(tmp_path: Path) -> None:
    """SGD at 10 on the MLP (100x a rate that trains): the first update moves a weight by more
    than its norm, and the loss rises from ~2.3 past 10 times that: a problem, the learning
    rate, before the weights overflow. Before: a warning, then NaN weights (cause nonfinite)."""
    summary = first_update(tmp_path, lambda p: torch.optim.SGD(p, lr=10.0))
    assert summary.worst_severity is Severity.PROBLEM
    first, diverged = summary.findings[:2]
    assert first.severity is Severity.WARNING and first.details["first_update"]
    assert diverged.severity is Severity.PROBLEM and diverged.details["diverged"]
    assert diverged.details["cause"] == "lr_too_high" and diverged.value == first.value
    assert "the loss diverges" in diverged.message


def test_a_learning_rate_that_kills_the_units_is_named_before_they_die(tmp_path: Path) -> None:
    """The digits scaled to [0, 1], SGD at 50: no NaN, the ReLU units die (a tester's Lightning
    run, diagnosed "tensors are all zero"); the loss rises past 10 times its first value in
    the first steps, and that names the learning rate. Before: a warning only."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    xs, ys = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    data = job_runs.Data(xs[:1200], ys[:1200], xs[1200:], ys[1200:])
    torch.manual_seed(0)
    trial = job_runs.train(
        tmp_path, mlp(), data, lambda p: torch.optim.SGD(p, lr=50.0), nn.CrossEntropyLoss(),
        steps=20, eval_every=0,
    )  # fmt: skip
    summary = invoke_rule(WeightUpdateRatio(trial))
    assert summary.worst_severity is Severity.PROBLEM, summary.findings
    (diverged,) = [f for f in summary.findings if f.severity is Severity.PROBLEM]
    assert diverged.details["cause"] == "lr_too_high" and diverged.details["diverged"]
    assert not diverged.details.get("nonfinite")


def test_a_first_update_beyond_large_threshold_is_a_problem(tmp_path: Path) -> None:
    summary = first_update(tmp_path, lambda p: torch.optim.Adam(p, lr=1.0))
    assert summary.worst_severity is Severity.PROBLEM
    assert summary.findings[0].details["cause"] == "lr_too_high"


@pytest.mark.parametrize(
    "optimizer",
    [
        lambda p: torch.optim.SGD(p, lr=1e-2),
        lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
        lambda p: torch.optim.Adam(p, lr=1e-3),
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        # an adaptive first step moves every weight by the learning rate (RMSprop's by 10x
        # it): 0.14 and 1.4 of this MLP's first layer, judged by large_threshold alone
        lambda p: torch.optim.Adam(p, lr=1e-2),
        lambda p: torch.optim.RMSprop(p, lr=1e-2),
    ],
    ids=["sgd", "momentum", "adam", "adamw", "adam 1e-2", "rmsprop 1e-2"],
)
def test_a_typical_first_update_is_quiet(
    tmp_path: Path, optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]
) -> None:
    assert first_update(tmp_path, optimizer).triggered == 0


def test_a_weight_that_started_at_zero_has_no_update_ratio(tmp_path: Path) -> None:
    """A zero-initialised tensor (a LoRA B, a zero head, a bias taken for a weight) moved by
    an ordinary first update: before, its ratio was update / epsilon (3e6 here), "the learning
    rate is too high". It is left out, and the finding says so; the others are judged."""
    builder = TrialBuilder(tmp_path)
    fc = np.random.default_rng(0).normal(size=(4, 3)).astype(F32)
    initial = {"initial/lora_b.weight": np.zeros((4, 3), F32), "initial/fc.weight": fc}
    for step in range(3):
        moved = {"lora_b.weight": np.full((4, 3), 1e-3 * (step + 1), F32)}
        weights = moved | {"fc.weight": fc * F32(1 + 1e-3 * (step + 1)), "loss": F32(1.0)}
        builder.step(
            weights | (initial if step == 0 else {}),
            collections={n: "initial_weights" for n in initial},
        )
    trial = builder.close()
    said: list[Finding] = []
    summary = invoke_rule(WeightUpdateRatio(trial, num_steps=1), on_finding=said.append)
    assert summary.status is RuleStatus.NO_ISSUES_FOUND, summary.findings[:1]
    assert said[0].step == 0 and said[0].value is not None and said[0].value < 0.01
    assert "left out, as they started from 0" in said[0].message
    assert "lora_b.weight" in said[0].message
    assert "left out" not in said[1].message  # from step 1 on, lora_b has a size


def test_only_weights_that_started_at_zero_are_skipped(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step(
        {"initial/b.weight": np.zeros(4, F32), "b.weight": np.full(4, 0.1, F32)},
        collections={"initial/b.weight": "initial_weights", "b.weight": "weights"},
    )
    summary = invoke_rule(WeightUpdateRatio(builder.close()))
    assert summary.status is RuleStatus.NO_DATA
    assert "moved from 0" in summary.details


def _large_first_update(path: Path, losses: list[float]) -> object:
    """A weight moved by 0.5 of its norm at the first step (a large first update, a warning),
    then the given training losses, step by step."""
    from tensortap.testing import TrialBuilder

    rng = np.random.default_rng(0)
    w0 = rng.normal(0, 0.1, (16, 16)).astype(np.float32)
    step = rng.normal(size=w0.shape)  # an update like SGD's: not every weight alike
    w = (w0 + 0.5 * np.linalg.norm(w0) * step / np.linalg.norm(step)).astype(np.float32)
    builder = TrialBuilder(path)
    for i, loss in enumerate(losses):
        saved = {"fc.weight": w + 1e-3 * i, "loss": np.float32(loss)}
        kinds = {"fc.weight": "weights", "loss": "losses"}
        if i == 0:
            saved["initial/fc.weight"] = w0
            kinds["initial/fc.weight"] = "initial_weights"
        builder.step(saved, mode="train", collections=kinds)
    return builder.close()


def test_one_batch_of_a_heavy_tailed_loss_is_not_a_divergence(tmp_path: Path) -> None:
    """After a large first update, a loss that stays 10x above its first value is the learning
    rate (a problem); one batch 15x it, as a regression with outliers gives, is not: judged on
    the median of the last 3 losses (the family split's Student-t regressions: 5 healthy runs
    with this problem before)."""
    spiky = invoke_rule(WeightUpdateRatio(_large_first_update(
        tmp_path / "spiky", [1.0, 0.9, 15.0, 0.8, 0.9, 12.0, 0.7, 0.8])))  # fmt: skip
    assert spiky.worst_severity is Severity.WARNING, spiky.findings
    diverging = invoke_rule(WeightUpdateRatio(_large_first_update(
        tmp_path / "up", [1.0, 14.0, 30.0, 60.0, 90.0, 120.0])))  # fmt: skip
    assert diverging.worst_severity is Severity.PROBLEM, diverging.findings
    assert any(f.details.get("diverged") for f in diverging.findings)


def _tiny_updates(path: Path, losses: list[float]) -> object:
    """A weight that moves by 1e-3 of its norm a step for 6 steps, then by 1e-10, beside the
    given training losses."""
    w = np.random.default_rng(0).normal(0, 0.1, (16, 16)).astype(np.float64)
    builder = TrialBuilder(path)
    for i, loss in enumerate(losses):
        w = w * (1 + (1e-3 if i < 6 else 1e-10))
        builder.step(
            {"fc.weight": w.copy(), "loss": np.float32(loss)},
            mode="train",
            collections={"fc.weight": "weights", "loss": "losses"},
        )
    return builder.close()


def test_tiny_updates_at_a_minimum_are_not_a_learning_rate_too_low(tmp_path: Path) -> None:
    """A model that memorised its 42 training rows: its loss fell to 1e-9 of where it started
    and its updates are 1e-9 of the weights, as at any minimum. Before, "the learning rate is
    too low: update/weight ratio ... below 1e-08", named first. Without the fall it still is."""
    memorised = [1.0, 0.9, 0.8, 1e-3, 1e-6, 1e-9, 1e-9, 1e-9, 1e-9]
    summary = invoke_rule(
        WeightUpdateRatio(_tiny_updates(tmp_path / "min", memorised), num_steps=1)
    )
    assert summary.worst_severity is Severity.ADVICE, summary.findings
    assert "small updates are expected at a minimum" in summary.findings[0].message
    stuck = invoke_rule(
        WeightUpdateRatio(_tiny_updates(tmp_path / "stuck", [1.0] * 9), num_steps=1)
    )
    assert stuck.worst_severity is Severity.PROBLEM, stuck.findings
    assert stuck.findings[0].details["cause"] == "lr_too_low"


def _warmed_up(path: Path, lr: float) -> object:
    """An MLP initialised as Hugging Face models are (normal, std 0.02; LayerNorm), trained
    by AdamW at ``lr`` after a linear warm-up from 0 over 10 steps (as a Trainer's
    ``warmup_steps``): the first update is at a rate of 0 and says nothing."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU(),
        nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 10),
    )  # fmt: skip
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
    schedulers: list[torch.optim.lr_scheduler.LRScheduler] = []

    def adamw(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(params, lr=lr)
        schedulers.append(torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, k / 10)))
        return opt

    return job_runs.train(
        path, model, job_runs.digits(), adamw, nn.CrossEntropyLoss(), steps=60,
        eval_every=0, after_step=lambda step: schedulers[0].step(),
    )  # fmt: skip


def test_weights_that_grow_manyfold_early_are_evidence_of_a_learning_rate_too_high(
    tmp_path: Path,
) -> None:
    """A stranger's ELECTRA fine-tuned by AdamW at 5e-2 after a warm-up collapsed to one
    answer, diagnosed "gradients vanish": its first update was at a rate of 0, and each step
    moved the weights by about 0.2 of their norm, never past the limit of 10. Its weights grew
    9x in norm in 60 steps (the generated development split's healthy runs: 5x at most in 200
    steps). The growth is evidence that needs harm; at AdamW's usual 1e-3 there is none."""
    high = invoke_rule(WeightUpdateRatio(_warmed_up(tmp_path / "high", 5e-2)))
    [grown] = [f for f in high.findings if f.triggered and f.details.get("growth")]
    assert grown.severity is Severity.WARNING and grown.details["needs_harm"] is True
    assert grown.details["cause"] == "lr_too_high"
    assert grown.value is not None and grown.value >= 8
    assert "the weights grew" in grown.message
    usual = invoke_rule(WeightUpdateRatio(_warmed_up(tmp_path / "usual", 1e-3)))
    assert not [f for f in usual.findings if f.triggered], usual.findings


def test_a_growth_after_a_large_first_update_is_kept_as_evidence_beside_it(
    tmp_path: Path,
) -> None:
    """SGD's first update moved the weight by 0.5 of its norm (a warning, the rule's gravest
    finding: the first of its gravest severity), then the weight grew 3x a step: the growth,
    evidence that needs harm, is the summary's ``evidence`` for the diagnosis to weigh."""
    rng = np.random.default_rng(0)
    w0 = rng.normal(0, 0.1, (16, 16))
    kick = rng.normal(size=w0.shape)
    w = w0 + 0.5 * np.linalg.norm(w0) * kick / np.linalg.norm(kick)
    builder = TrialBuilder(tmp_path)
    for i in range(4):
        saved = {"fc.weight": (w * 3.0**i).astype(F32), "loss": F32(2.3)}
        kinds = {"fc.weight": "weights", "loss": "losses"}
        if i == 0:
            saved["initial/fc.weight"] = w0.astype(F32)
            kinds["initial/fc.weight"] = "initial_weights"
        builder.step(saved, mode="train", collections=kinds)
    summary = invoke_rule(WeightUpdateRatio(builder.close()))
    gravest = summary.gravest
    assert gravest is not None and gravest.details["first_update"] and gravest.step == 0
    [grown] = summary.evidence
    assert grown.details["growth"] and grown.details["needs_harm"] and grown.step == 2
