"""Healthy training programs that look suspicious to a careless rule (hard negatives).

Each trains correctly; its docstring says what about it has fooled rules before.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import tensortap.pytorch as tt
from bench.detection.common import (
    Data,
    cnn,
    digits,
    digits_raw,
    fit,
    mlp,
    split,
    standardised,
)


def converged_flat(hook: tt.Hook) -> None:
    """Logistic regression that converges in ~60 steps and then trains on, flat: nothing is
    wrong with a run that has converged."""
    torch.manual_seed(101)
    model = nn.Linear(64, 10)
    fit(hook, model, digits(), torch.optim.Adam(model.parameters(), lr=0.05), steps=300)


def frozen_backbone(hook: tt.Hook) -> None:
    """Fine-tuning: a backbone trained first, then frozen (requires_grad=False, out of the
    optimizer) while a new head trains; the backbone's parameters still hold a stale .grad."""
    torch.manual_seed(102)
    data = digits()
    backbone = mlp([64, 64, 32])
    head = nn.Linear(32, 10)
    model = nn.Sequential(backbone, nn.ReLU(), head)
    warm = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(300):  # "pre-training", before the hook watches
        idx = torch.arange(i * 32, i * 32 + 32) % len(data.y)
        warm.zero_grad()
        nn.functional.cross_entropy(model(data.x[idx]), data.y[idx]).backward()
        warm.step()
    for p in backbone.parameters():
        p.requires_grad_(False)
    head.reset_parameters()  # a new head for the new task
    fit(hook, model, data, torch.optim.SGD(head.parameters(), lr=0.1))


def batchnorm_cnn(hook: tt.Hook) -> None:
    """Convolutions with biases feeding BatchNorm: the bias gradient is ~0 by construction and
    its updates fall below one float32 ulp."""
    torch.manual_seed(103)
    model = cnn(batchnorm=True)
    fit(hook, model, digits(images=True), torch.optim.SGD(model.parameters(), lr=0.05))


def noisy_small_batch(hook: tt.Hook) -> None:
    """SGD with batches of 4: single-batch losses jump by 2-3x from step to step."""
    torch.manual_seed(104)
    model = mlp([64, 64, 10])
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.02), batch=4, steps=300)


def lr_warmup(hook: tt.Hook) -> None:
    """Linear warm-up from lr 1e-6 over 60 steps, then 0.05: the first steps barely move."""
    torch.manual_seed(105)
    model = mlp([64, 64, 10])
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def warmup(step: int) -> None:
        for group in opt.param_groups:
            group["lr"] = 1e-6 + (0.05 - 1e-6) * min(1.0, step / 60)

    fit(hook, model, digits(), opt, before_step=warmup, steps=240)


def eval_difficulty(hook: tt.Hook) -> None:
    """Evaluation batches sorted from easy to hard classes: within each evaluation pass the
    loss climbs from batch to batch, while pass over pass it falls."""
    torch.manual_seed(106)
    data = digits()
    order = torch.argsort(data.y_val, stable=True)
    val = [order[i : i + 50] for i in range(0, len(order), 50)]
    model = mlp([64, 64, 10])
    fit(hook, model, data, torch.optim.SGD(model.parameters(), lr=0.05), eval_batches=val)


def autoencoder(hook: tt.Hook) -> None:
    """A digits autoencoder (linear 8-unit code) with a sigmoid output on 0..1 pixels: unlike
    a classifier, its gradients are small and its layers' input variances differ by design."""
    torch.manual_seed(107)
    x, y = digits_raw()
    x = x / 16.0
    data = split(x, y)
    model = nn.Sequential(
        nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.Linear(8, 32), nn.ReLU(),
        nn.Linear(32, 64), nn.Sigmoid(),
    )  # fmt: skip
    fit(
        hook,
        model,
        data,
        torch.optim.Adam(model.parameters(), lr=3e-3),
        classify=False,
        autoencode=True,
    )


def imbalanced_weighted(hook: tt.Hook) -> None:
    """Imbalanced data (class 0 is 8x the others) handled with class weights in the loss: the
    model learns every class."""
    torch.manual_seed(108)
    x, y = digits_raw()
    x = standardised(x)
    keep = (y == 0) | (np.arange(len(y)) % 2 == 0)
    x, y = np.concatenate([x[keep]] + [x[y == 0]] * 7), np.concatenate([y[keep]] + [y[y == 0]] * 7)
    order = np.random.default_rng(1).permutation(len(y))
    data = split(x[order], y[order], n_train=int(len(y) * 0.8))
    counts = np.bincount(data.y.numpy(), minlength=10)
    weights = torch.tensor(counts.sum() / (10 * counts), dtype=torch.float32)
    model = mlp([64, 64, 10])
    fit(
        hook,
        model,
        data,
        torch.optim.SGD(model.parameters(), lr=0.05),
        nn.CrossEntropyLoss(weight=weights),
    )


def cnn_digits(hook: tt.Hook) -> None:
    """The plain healthy CNN on normalised digits."""
    torch.manual_seed(109)
    model = cnn()
    fit(hook, model, digits(images=True), torch.optim.Adam(model.parameters(), lr=2e-3))


def tabular_global_norm(hook: tt.Hook) -> None:
    """Tabular features normalised with one global mean and std (not per feature): features
    keep means far from 0, which is fine for an MLP."""
    torch.manual_seed(110)
    x, y = digits_raw()
    x = (x - x.mean()) / x.std()
    model = mlp([64, 64, 10])
    fit(hook, model, split(x, y), torch.optim.SGD(model.parameters(), lr=0.05))


def tanh_mlp(hook: tt.Hook) -> None:
    """A tanh MLP with Xavier initialisation: some units saturate sometimes, as they should."""
    torch.manual_seed(111)
    model = mlp([64, 128, 64, 10], nn.Tanh)
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.05))


def dropout_mlp(hook: tt.Hook) -> None:
    """Dropout 0.5: the training loss sits above the validation loss the whole time."""
    torch.manual_seed(112)
    model = nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10)
    )  # fmt: skip
    fit(hook, model, digits(), torch.optim.Adam(model.parameters(), lr=1e-3))


def binary_sigmoid(hook: tt.Hook) -> None:
    """A binary classifier (even vs odd digit) with a sigmoid output and BCE on a small
    learning rate, learning slowly but steadily."""
    torch.manual_seed(113)
    x, y = digits_raw()
    x = standardised(x)
    data = split(x, (y % 2).astype(np.float32)[:, None])
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
    fit(
        hook,
        model,
        data,
        torch.optim.SGD(model.parameters(), lr=0.02),
        nn.BCELoss(),
        classify=False,
        loss_of=lambda out, t: nn.functional.binary_cross_entropy(out, t),
    )


def weight_decay_long(hook: tt.Hook) -> None:
    """AdamW with weight decay trained long past convergence at a decayed learning rate: the
    weights and loss barely change over the last hundred steps."""
    torch.manual_seed(114)
    model = mlp([64, 64, 10])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def decay(step: int) -> None:
        for group in opt.param_groups:
            group["lr"] = 3e-3 if step < 100 else 3e-5

    fit(hook, model, digits(), opt, before_step=decay, steps=300)


#: name -> program
HEALTHY = {
    "converged_flat": converged_flat,
    "frozen_backbone": frozen_backbone,
    "batchnorm_cnn": batchnorm_cnn,
    "noisy_small_batch": noisy_small_batch,
    "lr_warmup": lr_warmup,
    "eval_difficulty": eval_difficulty,
    "autoencoder": autoencoder,
    "imbalanced_weighted": imbalanced_weighted,
    "cnn_digits": cnn_digits,
    "tabular_global_norm": tabular_global_norm,
    "tanh_mlp": tanh_mlp,
    "dropout_mlp": dropout_mlp,
    "binary_sigmoid": binary_sigmoid,
    "weight_decay_long": weight_decay_long,
}

__all__ = ["HEALTHY", "Data"]
