"""Small real models and real data (scikit-learn's load_digits) for the PyTorch hook tests."""

from __future__ import annotations

import functools
from typing import TypeVar, overload

import torch
from torch import nn


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The 1,797 8x8 digit images, flattened to 64 features in [0, 1], and their labels."""
    x, y = _digits()
    return x.clone(), y.clone()


def batches(batch_size: int = 32, count: int | None = None):
    """Successive batches of the digits (wrapping around)."""
    x, y = _digits()
    n = len(x) // batch_size
    i = 0
    while count is None or i < count:
        j = i % n
        yield x[j * batch_size : (j + 1) * batch_size], y[j * batch_size : (j + 1) * batch_size]
        i += 1


class Net(nn.Module):
    """An MLP with named layers (fc1, relu1, fc2, tanh, fc3)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(32, 16)
        self.tanh = nn.Tanh()
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.tanh(self.fc2(self.relu1(self.fc1(x)))))


class ConvNet(nn.Module):
    """A small CNN on the 8x8 digits, built from nn.Sequential (layers named by index)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3)
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Sigmoid(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.view(-1, 1, 8, 8)))


M = TypeVar("M", bound=nn.Module)


@overload
def make(model_cls: type[M], seed: int = 0) -> M: ...
@overload
def make(*, seed: int = 0) -> Net: ...
def make(model_cls: type[nn.Module] = Net, seed: int = 0) -> nn.Module:
    """A fresh ``model_cls()`` (a :class:`Net` by default) after seeding torch with ``seed``."""
    torch.manual_seed(seed)
    return model_cls()
