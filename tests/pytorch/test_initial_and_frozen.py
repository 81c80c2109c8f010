"""The PyTorch hook saves the weights before the first update, and no gradient of what is
frozen (issue 18)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

import tensortap.pytorch as tt


def train(out: Path, steps: int = 12, freeze: bool = False) -> tuple[nn.Sequential, dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    before = {n: p.detach().clone().numpy() for n, p in model.named_parameters()}
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    if freeze:  # fine-tuning: a step taken before freezing leaves a stale .grad behind
        nn.functional.mse_loss(model(x), y).backward()
        for p in model[0].parameters():
            p.requires_grad_(False)
    hook = tt.Hook(
        str(out),
        save_config=tt.SaveConfig(save_interval=5),
        include_collections=["weights", "biases", "gradients"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    hook.close()
    return model, before


def test_the_weights_before_the_first_update_are_saved_once(tmp_path: Path) -> None:
    _, before = train(tmp_path)
    trial = tt.create_trial(str(tmp_path))
    snapshot = trial.tensor_names(collection="initial_weights")
    assert snapshot == ["initial/0.weight", "initial/2.weight"]  # weights, not biases
    for name in snapshot:
        assert trial.tensor(name).steps() == [0]
        np.testing.assert_array_equal(trial.tensor(name).value(0), before[name[8:]])
    # the step's own weights are after its update
    assert not np.array_equal(trial.tensor("0.weight").value(0), before["0.weight"])
    assert "initial/0.weight" not in trial.tensor_names(collection="weights")


def test_frozen_parameters_have_no_gradient_saved(tmp_path: Path) -> None:
    model, _ = train(tmp_path, freeze=True)
    assert model[0].weight.grad is not None  # the stale gradient the hook must not save
    trial = tt.create_trial(str(tmp_path))
    assert trial.tensor_names(collection="gradients") == ["gradient/2.bias", "gradient/2.weight"]
    assert trial.tensor_names(collection="initial_weights") == ["initial/2.weight"]
    assert "0.weight" in trial.tensor_names(collection="weights")  # still saved as a weight
