"""The first update of healthy training, relative to the weights: what WeightUpdateRatio's
``first_update_threshold`` is set from.

Small models (MLPs, a CNN, a GRU, a linear regression) train on the digits or synthetic data with
SGD (plain and with momentum 0.9), Adam, AdamW and RMSprop at learning rates 1e-4, 1e-3 and
1e-2. For each run: the largest ``||w_1 - w_0|| / ||w_0||`` over the weight tensors (what
WeightUpdateRatio computes for the first update, from the hook's ``initial_weights``), whether
the weights that moved all moved alike (the first step of an adaptive optimizer, which
WeightUpdateRatio leaves to ``large_threshold``) or by the gradient (SGD's, which it also holds to
``first_update_threshold``), and whether the run is healthy (its training loss after 100 steps is
finite and below the first).

    .venv/bin/python bench/bench_first_update.py [--steps 100]
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from bench.detection.common import digits
from tensortap.rules.builtin.weight_update_ratio import moved_alike


def _digits_flat() -> tuple[torch.Tensor, torch.Tensor]:
    data = digits()
    return data.x, data.y


def _digits_images() -> tuple[torch.Tensor, torch.Tensor]:
    data = digits(images=True)
    return data.x, data.y


def _sequences() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1200, 12, 8, generator=gen)
    return x, (x[:, :, 0].sum(1) > 0).long()


def _regression() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1200, 20, generator=gen)
    w = torch.randn(20, 1, generator=gen)
    return x, x @ w + 0.1 * torch.randn(1200, 1, generator=gen)


class _Gru(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 32, batch_first=True)
        self.out = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.gru(x)[0][:, -1])


def _mlp(*sizes: int) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    return make


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, 10),
    )  # fmt: skip


Loader = Callable[[], tuple[torch.Tensor, torch.Tensor]]

#: name -> (model, data, loss)
MODELS: dict[str, tuple[Callable[[], nn.Module], Loader, nn.Module]] = {
    "mlp 64-64-10": (_mlp(64, 64, 10), _digits_flat, nn.CrossEntropyLoss()),
    "mlp 64-256-256-10": (_mlp(64, 256, 256, 10), _digits_flat, nn.CrossEntropyLoss()),
    "cnn": (_cnn, _digits_images, nn.CrossEntropyLoss()),
    "gru": (_Gru, _sequences, nn.CrossEntropyLoss()),
    "linear regression": (lambda: nn.Linear(20, 1), _regression, nn.MSELoss()),
}  # fmt: skip

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda p, lr: torch.optim.SGD(p, lr=lr),
    "sgd+momentum": lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9),
    "adam": lambda p, lr: torch.optim.Adam(p, lr=lr),
    "adamw": lambda p, lr: torch.optim.AdamW(p, lr=lr),
    "rmsprop": lambda p, lr: torch.optim.RMSprop(p, lr=lr),
}

LEARNING_RATES = (1e-4, 1e-3, 1e-2)


def first_update(
    model_name: str, optimizer: str, lr: float, steps: int
) -> tuple[float, bool, bool]:
    """(largest first-update ratio over the weight tensors, whether every tensor's weights
    moved alike, whether the run is healthy)."""
    make, load, loss_fn = MODELS[model_name]
    torch.manual_seed(0)
    model = make()
    x, y = load()
    opt = OPTIMIZERS[optimizer](model.parameters(), lr)
    weights = {n: p for n, p in model.named_parameters() if n.endswith("weight") or "weight_" in n}
    before = {n: p.detach().clone() for n, p in weights.items()}
    gen = torch.Generator().manual_seed(0)
    first_loss = last_loss = math.nan
    ratio, alike = 0.0, False
    for step in range(steps):
        idx = torch.randint(0, len(x), (32,), generator=gen)
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if step == 0:
            first_loss = float(loss.detach())
            deltas = {n: (p.detach() - before[n]).numpy().ravel() for n, p in weights.items()}
            ratio = max(
                float(np.linalg.norm(d)) / float(torch.linalg.vector_norm(before[n]))
                for n, d in deltas.items()
            )
            alike = all(moved_alike(d) for d in deltas.values())
        last_loss = float(loss.detach())
    return ratio, alike, math.isfinite(last_loss) and last_loss < first_loss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    ns = parser.parse_args(argv)
    torch.set_num_threads(1)
    by_optimizer: dict[str, list[float]] = defaultdict(list)
    shapes: dict[str, set[str]] = defaultdict(set)
    print("| model | optimizer | " + " | ".join(f"lr {lr:g}" for lr in LEARNING_RATES) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in LEARNING_RATES) + " |")
    for model_name in MODELS:
        for optimizer in OPTIMIZERS:
            cells = []
            for lr in LEARNING_RATES:
                ratio, alike, healthy = first_update(model_name, optimizer, lr, ns.steps)
                shapes[optimizer].add("alike" if alike else "by the gradient")
                if healthy:
                    by_optimizer[optimizer].append(ratio)
                cells.append(f"{ratio:.2g}" + ("" if healthy else " (not learning)"))
            print(f"| {model_name} | {optimizer} | " + " | ".join(cells) + " |")
    print()
    print("| optimizer | first update moves weights | healthy runs | median | largest |")
    print("| --- | --- | --- | --- | --- |")
    for optimizer, ratios in by_optimizer.items():
        print(
            f"| {optimizer} | {', '.join(sorted(shapes[optimizer]))} | {len(ratios)} | "
            f"{float(np.median(ratios)):.2g} | {max(ratios):.2g} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
