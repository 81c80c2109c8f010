"""Small real PyTorch training runs, healthy and with classic bugs, for testing the rules.

Each run trains on scikit-learn's digits with the PyTorch hook saving every step, evaluates on
held-out digits every few steps (EVAL mode), and saves labels and predictions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt

COLLECTIONS = [
    "weights",
    "biases",
    "gradients",
    "losses",
    "relu_activations",
    "labels",
    "predictions",
    "inputs",
]


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    return torch.tensor(x / 16.0, dtype=torch.float32)[order], torch.tensor(y)[order]


class Mlp(nn.Module):
    def __init__(self, depth: int = 1, act: type[nn.Module] = nn.ReLU, width: int = 32) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(64, width), act()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), act()]
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(width, 16)
        self.tanh = nn.Tanh()
        self.out = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.tanh(self.fc(self.body(x))))


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv(x)).flatten(1))


class TokenNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(50, 8, padding_idx=0)
        self.out = nn.Linear(8, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.embedding(tokens).mean(dim=1))


@dataclass(frozen=True)
class Run:
    """How to train: every field has a healthy default; a bug changes one."""

    model: Callable[[], nn.Module] = Mlp
    lr: float = 0.01
    optimizer: str = "adam"
    steps: int = 40
    batch: int | None = None  # None: full batch
    train_size: int = 1200
    eval_every: int = 10
    seed: int = 0
    inputs: str = "flat"  # flat, images, raw_images, tokens, padded_tokens
    init: Callable[[nn.Module], None] | None = None
    labels: str = "true"  # true, imbalanced, swapped
    corrupt_step: int | None = None  # a corrupt batch at this step
    call_step: bool = True  # False: the loop forgets optimizer.step()
    pause_after: int | None = None  # block training after this step until `resume` is set
    resume: threading.Event | None = field(default=None, compare=False)


def data(run: Run) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    if run.inputs in ("tokens", "padded_tokens"):
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(1, 50, (600, 40), generator=g)
        labels = (tokens[:, :5].sum(1) > 125).long()
        if run.inputs == "padded_tokens":
            tokens[:, 8:] = 0  # 80% padding
        else:
            tokens[:, 36:] = 0
        return tokens[:400], labels[:400], tokens[400:], labels[400:]
    x, y = _digits()
    if run.inputs == "raw_images":
        x = x * 16.0
    if run.inputs in ("images", "raw_images"):
        if run.inputs == "images":
            x = (x - x.mean()) / x.std()
        x = x.view(-1, 1, 8, 8)
    xt, yt, xv, yv = x[: run.train_size], y[: run.train_size], x[1200:], y[1200:]
    if run.labels == "imbalanced":
        keep = torch.cat(
            [torch.nonzero(yt == 0).ravel()]
            + [torch.nonzero(yt == c).ravel()[:5] for c in range(1, 10)]
        )
        xt, yt = xt[keep], yt[keep]
    elif run.labels == "swapped":
        yt = torch.where(yt == 3, torch.tensor(5), yt)
    return xt, yt, xv, yv


def train(path: Path, run: Run) -> Path:
    torch.manual_seed(run.seed)
    model = run.model()
    if run.init is not None:
        with torch.no_grad():
            run.init(model)
    xt, yt, xv, yv = data(run)
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=run.lr)
        if run.optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=run.lr)
    )
    hook = tt.Hook(
        path, save_config=tt.SaveConfig(save_interval=1), include_collections=COLLECTIONS
    )
    hook.register_module(model)
    g = torch.Generator().manual_seed(run.seed)
    for step in range(run.steps):
        model.train()
        if run.batch is None:
            xb, yb = xt, yt
        else:
            idx = torch.randint(0, len(xt), (run.batch,), generator=g)
            xb, yb = xt[idx], yt[idx]
        if step == run.corrupt_step:  # a corrupt batch: scaled inputs, wrong labels
            xb, yb = xb * 100.0, (yb + 1) % 10
        opt.zero_grad()
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        hook.save_tensor("labels", yb, "labels")
        hook.save_tensor("predictions", out.argmax(1), "predictions")
        if run.call_step:
            opt.step()
        if run.pause_after is not None and step == run.pause_after and run.resume is not None:
            hook.flush()
            run.resume.wait(60)
        if (step + 1) % run.eval_every == 0:
            model.eval()
            with torch.no_grad():
                out = model(xv)
                hook.record_loss(F.cross_entropy(out, yv))
                hook.save_tensor("labels", yv, "labels")
                hook.save_tensor("predictions", out.argmax(1), "predictions")
    hook.close()
    return path


def _scale(
    name: str, factor: float = 0.0, bias: float | None = None
) -> Callable[[nn.Module], None]:
    def init(model: nn.Module) -> None:
        layer = dict(model.named_modules())[name]
        if factor:
            layer.weight.mul_(factor)
        if bias is not None:
            layer.bias.fill_(bias)

    return init


HEALTHY = Run()
RUNS: dict[str, Run] = {
    "healthy": HEALTHY,
    "healthy_rerun": replace(HEALTHY),
    "healthy_seed1": replace(HEALTHY, seed=1),
    "healthy_minibatch": replace(HEALTHY, batch=64, steps=60, lr=0.005),
    "deep_sigmoid": replace(HEALTHY, model=lambda: Mlp(depth=12, act=nn.Sigmoid)),
    "deep_relu": replace(HEALTHY, model=lambda: Mlp(depth=12, act=nn.ReLU)),
    "huge_lr": replace(HEALTHY, optimizer="sgd", lr=1e25),
    "dead_relu": replace(HEALTHY, init=_scale("body.0", bias=-10.0)),
    "zero_lr": replace(HEALTHY, lr=0.0),
    "no_optimizer_step": replace(HEALTHY, call_step=False),
    "tiny_data": replace(HEALTHY, train_size=20, steps=200, eval_every=20, lr=0.02),
    "saturated_tanh": replace(HEALTHY, init=_scale("fc", factor=50.0, bias=20.0)),
    "poor_init": replace(HEALTHY, init=_scale("fc", factor=100.0)),
    "trained": replace(HEALTHY, steps=150, lr=0.02, eval_every=50),
    "swapped_labels": replace(HEALTHY, labels="swapped", steps=150, lr=0.02, eval_every=50),
    "imbalanced": replace(HEALTHY, labels="imbalanced", steps=150, lr=0.02, eval_every=50),
    "raw_images": replace(HEALTHY, model=Cnn, inputs="raw_images", steps=5),
    "images": replace(HEALTHY, model=Cnn, inputs="images", steps=5),
    "padded_tokens": replace(HEALTHY, model=TokenNet, inputs="padded_tokens", steps=5),
    "tokens": replace(HEALTHY, model=TokenNet, inputs="tokens", steps=5),
    "spike": replace(HEALTHY, batch=64, steps=60, lr=0.005, corrupt_step=40),
}


def get(root: Path, name: str, cache: dict[str, Path]) -> Any:
    if name not in cache:
        cache[name] = train(root / name, RUNS[name])
    return tt.create_trial(cache[name])
