"""One rank of a real 2-process gloo run (127.0.0.1) saving through ``GuardedCheckpoints`` over
``DistributedCheckpoints``: at step 2 only rank 1's weights are NaN (a per-rank fault, as an
unsynchronised buffer or a shard under FSDP would be). Both ranks must refuse that save alike
(a rank that went into DCP's collective save alone would hang the other), save step 4 once the
weights are put back, and both must refuse to load a NaN checkpoint alike. Prints a JSON line.

Usage: checkpoint_guard_ranks.py CHECKPOINT_DIR (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import tensortap.pytorch as tt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.no_pickle import forbid_pickling_collectives


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    forbid_pickling_collectives()  # the ranks agree without pickle (issue 46)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = tt.CheckpointGuard(model)
    store = tt.DistributedCheckpoints(sys.argv[1], model, optimizer)
    checkpoints = tt.GuardedCheckpoints(store, guard)
    checkpoints.save(0, {})
    weight = model.get_parameter("0.weight")
    kept = weight.detach().clone()
    if rank == 1:
        with torch.no_grad():
            weight[0, 0] = math.nan
    checkpoints.save(2, {})
    with torch.no_grad():
        weight.copy_(kept)
    checkpoints.save(4, {})
    events = [[e.kind, e.step, e.reason] for e in guard.events]
    print(json.dumps({"steps": checkpoints.steps(), "events": events}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
