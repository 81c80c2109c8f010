"""Train with a rollback whose DistributedCheckpoints directory fills up: each save past the
first few fails for want of space. Prints a JSON line: the rollback's events, the checkpoints
saved, the directories left, the steps trained, and the checkpoint a late rollback restored.

Usage: checkpoint_disk_full.py CHECKPOINT_DIR (a small filesystem)
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch import nn

import tensortap.pytorch as tt

STEPS = 24


def main() -> None:
    directory = sys.argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 4))  # ~27 KB of weights
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = [torch.randn(8, 64) for _ in range(STEPS)]
    rollback = tt.Rollback(
        tt.DistributedCheckpoints(directory, model, optimizer),
        every=2,
        batches=tt.SkipBatches(data),
        margin=0,
        max_rollbacks=1,
    )
    trained = 0
    for step, _, x in rollback.steps(STEPS):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trained = max(trained, step + 1)
        if step == STEPS - 3 and rollback.rollbacks == 0:
            rollback.request(step, [], "a late check")
    restored = [e.restored_step for e in rollback.events if e.kind == "rollback"]
    print(
        json.dumps(
            {
                "events": [[e.kind, e.step] for e in rollback.events],
                "saved": rollback.checkpoints.steps(),
                "left": sorted(os.listdir(directory)),
                "trained": trained,
                "steps": STEPS,
                "restored": restored[0] if restored else None,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
