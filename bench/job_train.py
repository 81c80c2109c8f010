"""The training script of bench_jobs.py: an MLP on synthetic data that times its own loop."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("-o", "--output", required=True)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(4096, 256)
y = torch.randint(0, 10, (4096,))
model = nn.Sequential(
    nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = nn.CrossEntropyLoss()
start = time.perf_counter()
for _ in range(args.steps):
    batch = torch.randint(0, 4096, (128,))
    loss = loss_fn(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
with open(args.output, "w") as f:
    f.write(str(time.perf_counter() - start))
