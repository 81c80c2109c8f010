"""A small regression LightningModule whose chosen training step gives NaN outputs, and its
data: shared by the Lightning checkpoint-guard tests and their 2-rank helper."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class RegressionSteps:
    """Its ``fault_at``-th training step (1-based) gives NaN outputs: that update makes every
    weight NaN (plain SGD, no clipping), as a bad kernel or batch would. A LightningModule of
    either package with it: :class:`Regression`, :func:`_module_class`."""

    def __init__(self, fault_at: int | None = 13) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.fault_at, self.calls = fault_at, 0

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        self.calls += 1
        x, y = batch
        out = self.net(x)
        if self.calls == self.fault_at:
            out = out * math.nan
        return nn.functional.mse_loss(out, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)  # type: ignore[attr-defined]


class Regression(RegressionSteps, L.LightningModule):
    """:class:`RegressionSteps` as a ``lightning.pytorch`` module."""


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64 * 8, 8, generator=generator)
    return DataLoader(TensorDataset(x, torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]), batch_size=8)
