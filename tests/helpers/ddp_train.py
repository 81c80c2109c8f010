"""One rank of a real 2-process DistributedDataParallel run (gloo, 127.0.0.1) with the hook.

Usage: ddp_train.py OUT_DIR STEPS (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tensortap.pytorch as tt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.ranks import leave_together
from tests.helpers.torch_models import Net, batches, make


def main() -> None:
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    hook = tt.Hook(
        out_dir,
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["weights", "gradients", "losses"],
    )
    model = DistributedDataParallel(make(Net))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(16)
    for _ in range(rank):
        next(data)  # each rank trains on different batches
    for _ in range(steps):
        xb, yb = next(data)
        next(data)
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
    hook.close()
    print(f"rank {rank} done as {hook.worker}", flush=True)
    leave_together()


if __name__ == "__main__":
    main()
