"""Rules that name a cause: UnnormalisedInput (inputs far from order 1), AccuracyAtChance
(evaluation passes no better than always answering the most common class) and FrozenLayer (the
output layer does not train), on trials written through the hook."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.rules import AccuracyAtChance, FrozenLayer, UnnormalisedInput, invoke_rule


def inputs_trial(out: Path, scale: float, integer: bool = False, steps: int = 12) -> tt.Trial:
    rng = np.random.default_rng(0)
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_collections=["inputs"])
    for _ in range(steps):
        hook.set_mode(tt.modes.TRAIN)
        x = rng.normal(0, 1, (32, 8)) * scale
        value = rng.integers(0, 50, (32, 8)) if integer else x.astype(np.float32)
        hook.save_tensor("0_input_0", value, collections="inputs")
        hook.save_tensor("1_input_0", np.maximum(x, 0).astype(np.float32), collections="inputs")
        hook.next_step()
    hook.close()
    return tt.create_trial(out)


def test_unnormalised_input_fires_on_raw_scales_only(tmp_path: Path) -> None:
    fine = invoke_rule(UnnormalisedInput(inputs_trial(tmp_path / "ok", 1.0)))
    assert fine.status.value == "NoIssuesFound"
    raw = invoke_rule(UnnormalisedInput(inputs_trial(tmp_path / "raw", 120.0)))
    assert raw.status.value == "IssuesFound" and raw.severities == {"problem": 11}  # steps 1 to 11
    finding = raw.findings[0]
    assert finding.details["cause"] == "unnormalised_input" and finding.step == 1  # 64 samples
    assert "root mean square of 1" in finding.message and "0_input_0" in finding.message
    ids = invoke_rule(UnnormalisedInput(inputs_trial(tmp_path / "ids", 1.0, integer=True)))
    assert ids.status.value == "NoData"  # token ids are not judged
    short = invoke_rule(UnnormalisedInput(inputs_trial(tmp_path / "short", 120.0, steps=1)))
    assert short.status.value == "NoData" and "32 of 64 input samples seen" in short.details


def chance_trial(out: Path, accuracy: list[float], n: int = 100, classes: int = 4) -> tt.Trial:
    """Training steps, then an evaluation pass of two batches per entry of ``accuracy``."""
    rng = np.random.default_rng(1)
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1),
                   include_collections=["labels", "predictions"])  # fmt: skip
    for acc in accuracy:
        hook.set_mode(tt.modes.TRAIN)
        hook.save_tensor("labels", rng.integers(0, classes, 8), collections="labels")
        hook.next_step()
        hook.set_mode(tt.modes.EVAL)
        for _ in range(2):
            y = rng.integers(0, classes, n)
            right = rng.random(n) < acc
            p = np.where(right, y, (y + 1) % classes)
            hook.save_tensor("labels", y, collections="labels")
            hook.save_tensor("predictions", p, collections="predictions")
            hook.next_step()
    hook.close()
    return tt.create_trial(out)


def test_accuracy_at_chance_is_a_problem_when_the_run_ends_at_chance(tmp_path: Path) -> None:
    learned = invoke_rule(AccuracyAtChance(chance_trial(tmp_path / "ok", [0.25, 0.6, 0.8, 0.9])))
    assert learned.status.value == "NoIssuesFound"  # the first pass at chance is not enough
    shuffled = invoke_rule(AccuracyAtChance(chance_trial(tmp_path / "bad", [0.25] * 4)))
    assert shuffled.severities == {"warning": 2, "problem": 1}  # passes 2 and 3, then the end
    gravest = shuffled.gravest
    assert gravest is not None and gravest.details["cause"] == "no_learnable_signal"
    assert "no better than chance in 4 evaluation passes in a row to the end of training" in (
        gravest.message
    )
    plateau = invoke_rule(AccuracyAtChance(chance_trial(tmp_path / "p", [0.25, 0.25, 0.25, 0.9])))
    assert plateau.severities == {"warning": 2}  # a slow start that learned: never a problem
    one = invoke_rule(AccuracyAtChance(chance_trial(tmp_path / "one", [0.25])))
    assert one.status.value == "NoData"  # one pass: nothing judged


@pytest.mark.parametrize("accuracy", [0.5, 0.7])
def test_a_model_clearly_above_chance_never_fires(tmp_path: Path, accuracy: float) -> None:
    trial = chance_trial(tmp_path / "t", [accuracy] * 5)
    assert invoke_rule(AccuracyAtChance(trial)).triggered == 0


@pytest.mark.parametrize("frozen", ["head", "backbone", "none"])
def test_frozen_layer_names_a_frozen_output_layer_not_a_frozen_backbone(
    tmp_path: Path, frozen: str
) -> None:
    import torch
    from torch import nn

    import tensortap.pytorch as tp

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 8), nn.ReLU()),
                          nn.Linear(8, 3))  # fmt: skip
    if frozen == "head":
        model[3].requires_grad_(False)
    elif frozen == "backbone":
        model[0].requires_grad_(False)
        model[2].requires_grad_(False)
    hook = tp.Hook(tmp_path / "t", save_config=tp.SaveConfig(save_interval=2),
                   include_collections=["inputs", "weights", "gradients"])  # fmt: skip
    hook.register_module(model)
    loss_fn = nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(6):
        opt.zero_grad()
        loss_fn(model(torch.randn(16, 6)), torch.randint(0, 3, (16,))).backward()
        opt.step()
    hook.close()
    summary = invoke_rule(FrozenLayer(tt.create_trial(tmp_path / "t")))
    if frozen == "head":
        assert summary.severities == {"problem": 3}
        finding = summary.findings[0]
        assert finding.details["cause"] == "frozen_layer" and finding.tensors == ("3.weight",)
        assert finding.message.startswith("the output layer 3 (3.weight) gets no gradient")
    else:
        assert summary.status.value == "NoIssuesFound"
