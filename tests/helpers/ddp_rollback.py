"""One rank of a real 2-process DDP run (gloo, 127.0.0.1) with a rollback: only rank 1 reads a
bad batch (id 6); both ranks restore the same checkpoint (torch.distributed.checkpoint) and skip
the same batch. Prints a JSON line: the events, the skip list, the first loss and the mean of the last
4, the weights.

Usage: ddp_rollback.py OUT_DIR CHECKPOINT_DIR [--damage] (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT set). With --damage, rank 0 truncates a shard of the checkpoint of step 4 before the
bad batch: both ranks must refuse it alike and restore the one of step 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import tensortap.pytorch as tt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.no_pickle import forbid_pickling_collectives
from tests.helpers.ranks import leave_together

STEPS, BAD = 24, 6


def main() -> None:
    out_dir, checkpoint_dir = sys.argv[1], sys.argv[2]
    damage = "--damage" in sys.argv[3:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    forbid_pickling_collectives()  # the ranks agree without pickle (issue 46)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    data = []
    for position in range(32):
        x = torch.randn(8, 4, generator=generator)
        y = x[:, :1] - x[:, 1:2]
        if rank == 1 and position == BAD:
            y = y * 1e4
        data.append((x, y))

    def make_hook() -> tt.Hook:
        hook = tt.Hook(out_dir, save_config=tt.SaveConfig(save_interval=1))
        hook.register_module(model)
        return hook

    checkpoints = tt.DistributedCheckpoints(checkpoint_dir, model, optimizer)
    rollback = tt.Rollback(
        checkpoints,
        every=4,
        batches=tt.SkipBatches(data),
        make_hook=make_hook,
    )
    losses: list[float] = []
    for step, batch_id, (x, y) in rollback.steps(STEPS):
        if damage and step == BAD - 1 and not rollback.events:
            if rank == 0:
                path = checkpoints.path(4)
                shard = max(
                    (os.path.join(path, n) for n in os.listdir(path) if n.endswith(".distcp")),
                    key=os.path.getsize,
                )
                with open(shard, "r+b") as f:
                    f.truncate(os.path.getsize(shard) // 2)
            dist.barrier()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if loss.item() > 100:  # this rank's own check: the other rank sees nothing wrong
            rollback.request(step, [batch_id], f"loss {loss.item():.3g} on rank {rank}")
    rollback.close()
    weights = [round(float(v), 6) for v in model.module[0].weight.flatten()[:8]]
    result = {
        "events": [[e.kind, e.step, e.restored_step, list(e.batches)] for e in rollback.events],
        "skip": sorted(
            cast("set[int]", rollback.batches.skip if rollback.batches is not None else set())
        ),
        "first_loss": losses[0],
        "final_loss": sum(losses[-4:]) / 4,
        "weights": weights,
    }
    print(json.dumps(result), flush=True)
    leave_together()


if __name__ == "__main__":
    main()
