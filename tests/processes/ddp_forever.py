"""One rank of a real DistributedDataParallel run (gloo, CPU) that trains until it is ended,
started by ``torchrun``; it never imports tensortap."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 8)
y = torch.randint(0, 2, (16,))
for _ in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    time.sleep(0.01)
