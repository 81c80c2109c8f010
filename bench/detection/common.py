"""What every detection program shares: the data, the models' pieces, one training loop.

Data is scikit-learn's bundled digits (1,797 real 8x8 images, 10 classes) or synthetic; nothing
is downloaded. Every program is deterministic (fixed seeds, one thread).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import tensortap.pytorch as tt

#: Training steps per program and how often a held-out evaluation pass runs.
STEPS = 200
EVAL_EVERY = 50
BATCH = 32


@dataclass(frozen=True)
class Data:
    """Train and validation splits: ``x`` float32 (N, 64) or (N, 1, 8, 8), ``y`` int64 labels."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


def digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """The digits as loaded: pixel values 0..16, labels 0..9, in a fixed shuffled order."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    return x[order].astype(np.float32), y[order].astype(np.int64)


def split(x: np.ndarray, y: np.ndarray, n_train: int = 1400) -> Data:
    return Data(
        torch.from_numpy(x[:n_train]),
        torch.from_numpy(y[:n_train]),
        torch.from_numpy(x[n_train:]),
        torch.from_numpy(y[n_train:]),
    )


def standardised(x: np.ndarray, x_ref: np.ndarray | None = None) -> np.ndarray:
    """Per-feature standardisation done right (a constant pixel divides by 1, not 0)."""
    ref = x if x_ref is None else x_ref
    std = ref.std(axis=0)
    return ((x - ref.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def digits(images: bool = False, normalise: bool = True) -> Data:
    x, y = digits_raw()
    if normalise:
        x = standardised(x, x[:1400])
    if images:
        x = x.reshape(-1, 1, 8, 8)
    return split(x, y)


def mlp(sizes: list[int], act: Callable[[], nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def cnn(batchnorm: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(1, 16, 3, padding=1)]
    if batchnorm:
        layers.append(nn.BatchNorm2d(16))
    layers += [nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1)]
    if batchnorm:
        layers.append(nn.BatchNorm2d(32))
    layers += [nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def batches(n: int, batch: int, steps: int, seed: int) -> list[torch.Tensor]:
    """Index batches for ``steps`` steps: reshuffled epochs, fixed by ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    out: list[torch.Tensor] = []
    while len(out) < steps:
        perm = torch.randperm(n, generator=gen)
        out += [perm[i : i + batch] for i in range(0, n - batch + 1, batch)]
    return out[:steps]


def fit(
    hook: tt.Hook,
    model: nn.Module,
    data: Data,
    optimizer: torch.optim.Optimizer | None,
    loss_fn: nn.Module | None = None,
    *,
    steps: int = STEPS,
    batch: int = BATCH,
    eval_every: int | None = EVAL_EVERY,
    eval_batches: list[torch.Tensor] | None = None,
    classify: bool = True,
    autoencode: bool = False,
    step_optimizer: bool = True,
    before_step: Callable[[int], None] | None = None,
    loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    seed: int = 0,
) -> None:
    """Train ``model`` as a user's script does, with the hook attached: forward, loss, backward,
    optimizer step; every ``eval_every`` steps an evaluation pass over the validation set.
    An autoencoder's target is its input. Classifiers also save their labels and predictions
    (what ClassImbalance and Confusion read).
    """
    loss_fn = loss_fn or (nn.CrossEntropyLoss() if classify else nn.MSELoss())
    hook.register_module(model)
    hook.register_loss(loss_fn)
    val_batches = eval_batches or [
        torch.arange(i, min(i + 100, len(data.y_val))) for i in range(0, len(data.y_val), 100)
    ]

    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x)
        loss = loss_of(out, y) if loss_of is not None else loss_fn(out, y)
        if classify:
            hook.save_tensor("labels", y, "labels")
            hook.save_tensor("predictions", out.detach().argmax(dim=1), "predictions")
        return loss

    for step, idx in enumerate(batches(len(data.x), batch, steps, seed)):
        if eval_every and step and step % eval_every == 0:
            model.eval()
            with torch.no_grad():
                for vidx in val_batches:
                    target = data.x_val[vidx] if autoencode else data.y_val[vidx]
                    run(data.x_val[vidx], target)
            model.train()
        if before_step is not None:
            before_step(step)
        x = data.x[idx]
        target = x if autoencode else data.y[idx]
        if optimizer is not None:
            optimizer.zero_grad()
        loss = run(x, target)
        loss.backward()
        if optimizer is not None and step_optimizer:
            optimizer.step()
