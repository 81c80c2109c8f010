"""The PyTorch hook tells a bias by name, shape and use, not by a name ending in ``bias``
(issue 44): recurrent layers' ``bias_ih_l0``/``bias_hh_l0``, attention's ``bias_k``, a zero
vector beside its module's weight; a norm layer's 1-D scale stays a weight."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import tensortap.pytorch as tt


class Custom(nn.Module):
    """``x @ w + b0`` with a bias not named bias, and a scale of ones beside a kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 5))
        self.b0 = nn.Parameter(torch.zeros(5))
        self.a_log = nn.Parameter(torch.randn(5, 2))
        self.d = nn.Parameter(torch.ones(5))  # a skip scale (Mamba's D), not a bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w + self.b0
        return h * self.d + h @ self.a_log @ self.a_log.T


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(3, 3, nonlinearity="relu", batch_first=True)
        self.attn = nn.MultiheadAttention(3, 1, add_bias_kv=True, batch_first=True)
        self.norm = nn.LayerNorm(3)
        self.bn = nn.BatchNorm1d(3)
        nn.init.zeros_(self.bn.weight)  # a zero-initialised scale (ResNet's last BN) stays one
        self.custom = Custom()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.rnn(x)[0]
        h = self.norm(self.attn(h, h, h)[0])[:, -1]
        return self.custom(self.bn(h))


def test_biases_are_told_by_name_shape_and_use(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    hook = tt.Hook(str(tmp_path), include_collections=["weights", "biases", "gradients"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 5, 3)).square().mean().backward()
        opt.step()
    hook.close()
    trial = tt.create_trial(str(tmp_path))
    biases = set(trial.tensor_names(collection="biases"))
    weights = set(trial.tensor_names(collection="weights"))
    assert biases == {
        "rnn.bias_ih_l0",
        "rnn.bias_hh_l0",
        "attn.in_proj_bias",
        "attn.bias_k",
        "attn.bias_v",
        "attn.out_proj.bias",
        "norm.bias",
        "bn.bias",
        "custom.b0",
    }
    assert {"norm.weight", "bn.weight", "custom.d", "rnn.weight_hh_l0"} <= weights
    assert not biases & weights
    # the weights before the first update hold weights only: no bias is judged by its start
    initial = set(trial.tensor_names(collection="initial_weights"))
    assert initial == {"initial/" + n for n in weights}
