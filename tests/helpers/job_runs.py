"""Tiny real PyTorch training runs saved as a job saves them for the recommended rules: the
collections those rules read, every 10th TRAIN step and every EVAL step (see
tensortap.jobs._specs), so that the rules see what they see under ``tensortap run``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import tensortap.pytorch as tt
from tensortap.jobs._specs import Rule as RuleSpec
from tensortap.jobs._specs import hook_config
from tensortap.rules import rule_configs


@dataclass(frozen=True)
class Data:
    """Training and validation splits."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


def job_hook(path: Path) -> tt.Hook:
    """The hook a job attaches for the recommended rule set."""
    specs = [RuleSpec.builtin(config) for config in rule_configs.recommended()]
    return hook_config(str(path), None, specs, None).create_hook(tt.Hook)


def train(
    path: Path,
    model: nn.Module,
    data: Data,
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    loss_fn: nn.Module,
    *,
    steps: int = 200,
    batch: int = 32,
    eval_every: int = 50,
    eval_batch: int = 100,
    classify: bool = True,
    seed: int = 0,
    before_backward: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
    after_step: Callable[[int], None] | None = None,
    evaluate_at_end: bool = False,
) -> tt.Trial:
    """Train ``model`` with the job's hook; every ``eval_every`` steps an evaluation pass over
    the validation split in batches of ``eval_batch``. Classifiers save labels and predictions.
    ``before_backward(step, loss)`` may replace the loss; ``after_step(step)`` runs after the
    optimizer's step; ``evaluate_at_end`` adds a last evaluation pass after training. Returns
    the trial."""
    torch.set_num_threads(1)
    hook = job_hook(path)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    opt = optimizer(list(model.parameters()))
    gen = torch.Generator().manual_seed(seed)

    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x)
        loss = loss_fn(out, y)
        if classify:
            hook.save_tensor("labels", y, "labels")
            hook.save_tensor("predictions", out.detach().argmax(dim=1), "predictions")
        return loss

    def evaluate() -> None:
        model.eval()
        with torch.no_grad():
            for i in range(0, len(data.y_val), eval_batch):
                run(data.x_val[i : i + eval_batch], data.y_val[i : i + eval_batch])
        model.train()

    try:
        for step in range(steps):
            if eval_every and step and step % eval_every == 0:
                evaluate()
            idx = torch.randint(0, len(data.y), (batch,), generator=gen)
            opt.zero_grad()
            loss = run(data.x[idx], data.y[idx])
            if before_backward is not None:
                loss = before_backward(step, loss)
            loss.backward()
            opt.step()
            if after_step is not None:
                after_step(step)
        if evaluate_at_end:
            evaluate()
    finally:
        hook.close()
    return tt.create_trial(str(path))


def digits(n_train: int = 1200) -> Data:
    """scikit-learn's digits, standardised per pixel (a constant pixel divides by 1)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x_t = torch.tensor(x, dtype=torch.float32)[order]
    y_t = torch.tensor(y)[order]
    mean, std = x_t[:n_train].mean(0), x_t[:n_train].std(0)
    x_t = (x_t - mean) / torch.where(std > 0, std, torch.ones_like(std))
    return Data(x_t[:n_train], y_t[:n_train], x_t[1200:], y_t[1200:])


def sequences(n: int = 1000, length: int = 12, seed: int = 0) -> Data:
    """Noisy sequences whose class is the sign of a weak, long-range sum: learned slowly."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, length, 4, generator=gen)
    y = ((x[:, :, 0].sum(1) + 2.0 * torch.randn(n, generator=gen)) > 0).long()
    cut = int(0.8 * n)
    return Data(x[:cut], y[:cut], x[cut:], y[cut:])


class Gru(nn.Module):
    """A one-layer GRU classifier on the last hidden state."""

    def __init__(self, inputs: int = 4, hidden: int = 16, classes: int = 2) -> None:
        super().__init__()
        self.gru = nn.GRU(inputs, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.gru(x)[0][:, -1])
