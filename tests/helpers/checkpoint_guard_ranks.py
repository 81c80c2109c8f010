"""One rank of a real 2-process gloo run (127.0.0.1) saving through ``GuardedCheckpoints`` over
``DistributedCheckpoints``: at step 2 only rank 1's weights are NaN (a per-rank fault, as an
unsynchronised buffer or a shard under FSDP would be). Both ranks must refuse that save alike
(a rank that went into DCP's collective save alone would hang the other), save step 4 once the
weights are put back, and both must refuse to load a NaN checkpoint alike. Prints a JSON line.
With ``fsdp`` the model is sharded with FSDP2 (``fully_shard``): the NaN is written into rank
1's shard only, and the checkpoint of step 4 is loaded back into the sharded model.

Usage: checkpoint_guard_ranks.py CHECKPOINT_DIR [fsdp] (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT set).
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
from tests.helpers.ranks import leave_together


def _shard(weight: torch.Tensor) -> torch.Tensor:
    """This rank's part of an FSDP2 parameter (a DTensor)."""
    from torch.distributed.tensor import DTensor

    assert isinstance(weight, DTensor)
    return weight.to_local()


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    forbid_pickling_collectives()  # the ranks agree without pickle (issue 46)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    sharded = sys.argv[2:] == ["fsdp"]
    if sharded:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if sharded:  # an optimizer step: its state is sharded too
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    guard = tt.CheckpointGuard(model)
    store = tt.DistributedCheckpoints(sys.argv[1], model, optimizer)
    checkpoints = tt.GuardedCheckpoints(store, guard)
    checkpoints.save(0, {})
    weight = model.get_parameter("0.weight")
    local = _shard(weight) if sharded else weight  # this rank's shard under FSDP
    kept = local.detach().clone()
    if rank == 1:
        with torch.no_grad():
            local[0, 0] = math.nan
    checkpoints.save(2, {})
    with torch.no_grad():
        local.copy_(kept)
    checkpoints.save(4, {})
    restored = None
    if sharded:  # loaded back into the sharded model: this rank's shard as it was saved
        with torch.no_grad():
            local.zero_()
        checkpoints.load(4)
        restored = bool(torch.equal(_shard(weight), kept))
    events = [[e.kind, e.step, e.reason] for e in guard.events]
    print(json.dumps({"steps": checkpoints.steps(), "events": events, "restored": restored}))
    leave_together()


if __name__ == "__main__":
    main()
