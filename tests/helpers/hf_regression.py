"""A small regression model for Hugging Face's ``Trainer`` whose chosen forward pass gives NaN
outputs, and its samples: shared by the HF checkpoint-guard tests and their 2-rank helper."""

from __future__ import annotations

import math

import torch
from torch import nn

BATCH = 8


class Regression(nn.Module):
    """A small regression whose ``fault_at``-th forward pass (1-based) gives NaN outputs: its
    update makes every weight NaN (plain SGD, no clipping), as a bad kernel or batch would."""

    def __init__(self, fault_at: int | None = 13) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.fault_at, self.calls = fault_at, 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        out = self.net(x)
        if self.calls == self.fault_at:
            out = out * math.nan
        return {"loss": nn.functional.mse_loss(out, labels)}


def samples() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=generator)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    return [{"x": a, "labels": b} for a, b in zip(x, y, strict=True)]
