"""A plain PyTorch training script (it never imports tensortap) run by the job tests.

--model mlp trains a healthy MLP on scikit-learn's digits; --model deep_sigmoid a 12-layer
sigmoid MLP whose first layers' gradients vanish. --crash-at raises at that step, --kill-at
kills the process with SIGKILL (no hook can close), --sleep slows each step, --nan-at makes
the loss NaN from that step on, after waiting (with a deadline) for --wait-for FILE to exist.
"""

import argparse
import os
import signal
import time

import torch
from sklearn.datasets import load_digits
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="mlp")
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--crash-at", type=int, default=-1)
parser.add_argument("--kill-at", type=int, default=-1)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--nan-at", type=int, default=-1)
parser.add_argument("--wait-for", default=None)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
if args.model == "deep_sigmoid":
    layers: list[nn.Module] = []
    width = 64
    for _ in range(12):
        layers += [nn.Linear(width, 32), nn.Sigmoid()]
        width = 32
    model = nn.Sequential(*layers, nn.Linear(32, 10))
else:
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
loss_fn = nn.CrossEntropyLoss()
generator = torch.Generator().manual_seed(1)
for step in range(args.steps):
    if step == args.crash_at:
        raise RuntimeError(f"planted crash at step {step}")
    if step == args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if step == args.nan_at and args.wait_for:
        deadline = time.monotonic() + 120
        while not os.path.exists(args.wait_for) and time.monotonic() < deadline:
            time.sleep(0.05)
    batch = torch.randint(0, len(y), (64,), generator=generator)
    loss = loss_fn(model(x[batch]), y[batch])
    if 0 <= args.nan_at <= step:
        loss = loss * float("nan")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if args.sleep:
        time.sleep(args.sleep)
print(f"trained {args.steps} steps")
