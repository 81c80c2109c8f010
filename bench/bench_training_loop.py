"""The measurements behind TrainingLoop's thresholds (docs/rules.md, TrainingLoop).

1. The first update's size, ||w_after - w_before|| / ||w_before||, median over a model's weights
   (what the hook saves as ``training_loop/first_update_ratio``), for SGD, Adam, AdamW, RMSprop
   and Adagrad at sane learning rates and at learning rates 30-1000x too high, on a small MLP, a
   wide MLP, a BatchNorm CNN and a GRU.
2. The share of optimizer steps whose learning rate is at most 1% of its peak so far, and the
   scheduler steps per optimizer step, for healthy schedules (per step and per epoch) and for
   per-epoch schedules stepped per batch.

    .venv/bin/python bench/bench_training_loop.py

CPU, deterministic, a few seconds.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim import lr_scheduler as sched

torch.set_num_threads(1)


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.gru = nn.Embedding(50, 32), nn.GRU(32, 64, batch_first=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.gru(self.emb(x))[0][:, -1])


def _mlp(width: int, inputs: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 10),
    )  # fmt: skip


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(128, 10),
    )  # fmt: skip


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "mlp 64": (lambda: _mlp(64, 64), lambda: torch.randn(32, 64)),
    "mlp 1024": (lambda: _mlp(1024, 512), lambda: torch.randn(32, 512)),
    "cnn": (_cnn, lambda: torch.randn(32, 1, 8, 8)),
    "gru": (GRUNet, lambda: torch.randint(0, 50, (32, 12))),
}
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "SGD 0.01": lambda p: torch.optim.SGD(p, lr=0.01),
    "SGD 0.1 momentum 0.9": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "Adam 1e-3": lambda p: torch.optim.Adam(p, lr=1e-3),
    "Adam 3e-3": lambda p: torch.optim.Adam(p, lr=3e-3),
    "AdamW 1e-3": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
    "RMSprop 1e-3": lambda p: torch.optim.RMSprop(p, lr=1e-3),
    "Adagrad 1e-2": lambda p: torch.optim.Adagrad(p, lr=1e-2),
    "RMSprop 1e-2 (torch's default)": lambda p: torch.optim.RMSprop(p, lr=1e-2),
    "too high: SGD 20": lambda p: torch.optim.SGD(p, lr=20.0),
    "too high: Adam 0.1": lambda p: torch.optim.Adam(p, lr=0.1),
    "too high: Adam 1.0": lambda p: torch.optim.Adam(p, lr=1.0),
    "too high: RMSprop 0.1": lambda p: torch.optim.RMSprop(p, lr=0.1),
}


def first_update(model_name: str, optimizer_name: str) -> float:
    torch.manual_seed(0)
    make_model, make_x = MODELS[model_name]
    model, x, y = make_model(), make_x(), torch.randint(0, 10, (32,))
    opt = OPTIMIZERS[optimizer_name](model.parameters())
    weights = {n: p for n, p in model.named_parameters() if not n.endswith("bias")}
    before = {n: p.detach().clone() for n, p in weights.items()}
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    ratios = [
        float((weights[n].detach() - before[n]).norm() / before[n].norm())
        for n in weights
        if before[n].norm() > 0
    ]
    return statistics.median(ratios)


SCHEDULES: dict[str, tuple[Callable[[Any], Any], int, int | None]] = {
    # name: (scheduler, optimizer steps, optimizer steps per scheduler step; None: every step)
    "cosine, T_max = all steps, per step": (
        lambda o: sched.CosineAnnealingLR(o, 10_000),
        10_000,
        None,
    ),
    "warm-up 500 + linear decay to 0, per step": (
        lambda o: sched.LambdaLR(o, lambda s: min(s / 500, max(0.0, (10_000 - s) / 9_500))),
        10_000,
        None,
    ),
    "one-cycle, per step": (lambda o: sched.OneCycleLR(o, 1.0, total_steps=10_000), 10_000, None),
    "polynomial (power 2), per step": (
        lambda o: sched.PolynomialLR(o, total_iters=10_000, power=2),
        10_000,
        None,
    ),
    "SGDR T_0 = 1000, per step": (
        lambda o: sched.CosineAnnealingWarmRestarts(o, 1000),
        10_000,
        None,
    ),
    "StepLR(30, 0.1), 90 epochs of 100 batches, per epoch": (
        lambda o: sched.StepLR(o, 30, 0.1),
        9_000,
        100,
    ),
    "MultiStepLR(30/60/80), per epoch": (lambda o: sched.MultiStepLR(o, [30, 60, 80]), 9_000, 100),
    "ExponentialLR(0.95), per epoch": (lambda o: sched.ExponentialLR(o, 0.95), 10_000, 100),
    "fault: StepLR(30, 0.1) per batch": (lambda o: sched.StepLR(o, 30, 0.1), 9_000, None),
    "fault: MultiStepLR(30/60/80) per batch": (
        lambda o: sched.MultiStepLR(o, [30, 60, 80]),
        9_000,
        None,
    ),
    "fault: ExponentialLR(0.95) per batch": (lambda o: sched.ExponentialLR(o, 0.95), 10_000, None),
    "fault: CosineAnnealingLR(T_max=90) per batch": (
        lambda o: sched.CosineAnnealingLR(o, 90),
        9_000,
        None,
    ),
}


def schedule(name: str) -> tuple[float, float, int]:
    """(share of steps at <= 1% of the peak lr, scheduler steps per optimizer step, scheduler
    steps)."""
    make, steps, every = SCHEDULES[name]
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.1)
    scheduler = make(opt)
    peak, low, stepped = 0.0, 0, 0
    for i in range(steps):
        opt.step()
        lr = opt.param_groups[0]["lr"]
        peak = max(peak, lr)
        low += peak > 0 and lr <= 0.01 * peak * (1 + 1e-6)
        if every is None or (i + 1) % every == 0:
            scheduler.step()
            stepped += 1
    return low / steps, stepped / steps, stepped


def main() -> None:
    warnings.simplefilter("ignore")
    print("first update, median over weights of ||w1 - w0|| / ||w0||")
    print("| optimizer | " + " | ".join(MODELS) + " |")
    print("| --- |" + " --- |" * len(MODELS))
    for opt in OPTIMIZERS:
        print(f"| {opt} | " + " | ".join(f"{first_update(m, opt):.2g}" for m in MODELS) + " |")
    print("\nlearning-rate schedules")
    print("| schedule | steps at <= 1% of the peak lr | scheduler steps per optimizer step |")
    print("| --- | --- | --- |")
    for name in SCHEDULES:
        share, per, _ = schedule(name)
        print(f"| {name} | {share:.1%} | {per:.2f} |")


if __name__ == "__main__":
    main()
