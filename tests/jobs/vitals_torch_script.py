"""A plain PyTorch loop (it never imports tensortap) that writes what it trained on each
optimizer step to ``--log`` (JSON): the loss as a trainer logs it under gradient accumulation
(the mean over the micro-batches), the total gradient norm ``clip_grad_norm_`` returned (before
clipping) and the learning rate the update used. ``--loss module`` uses ``nn.CrossEntropyLoss``;
``functional`` calls ``F.cross_entropy`` and divides each micro-batch's loss for accumulation;
``bound`` does too, through ``cross_entropy`` and ``clip_grad_norm_`` bound to names of the
script's own at its top."""

import argparse
import json

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.functional import cross_entropy
from torch.nn.utils import clip_grad_norm_

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--loss", default="module")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--accumulate", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
loss_module = nn.CrossEntropyLoss()
logged = []
batch = 16
for step in range(args.steps):
    optimizer.zero_grad()
    total = 0.0
    for micro in range(args.accumulate):
        i = ((step * args.accumulate + micro) * batch) % (len(y) - batch)
        out = model(x[i : i + batch])
        if args.loss == "module":
            loss = loss_module(out, y[i : i + batch])
            total += loss.item() / args.accumulate
            (loss / args.accumulate).backward()
        else:
            ce = cross_entropy if args.loss == "bound" else F.cross_entropy
            loss = ce(out, y[i : i + batch]) / args.accumulate
            total += loss.item()
            loss.backward()
    clip = clip_grad_norm_ if args.loss == "bound" else torch.nn.utils.clip_grad_norm_
    norm = clip(model.parameters(), max_norm=0.3)
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    logged.append(
        {"loss": total, "grad_norm": float(norm), "lr": lr, "samples": batch * args.accumulate}
    )
with open(args.log, "w") as f:
    json.dump(logged, f)
