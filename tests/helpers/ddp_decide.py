"""One rank of a 2-process gloo run: the ranks decide a rollback request alike from every rank's
evidence. Rank 1 asks to roll back step 6 (batch 6) with no replay of its own; rank 0's replay
said the step was transient (``--data``: rank 1's replay also said data, the graver). Prints a
JSON line: the events (kind, decision's action and evidence) and the skip list.

Usage: ddp_decide.py [--data] (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast

import torch
import torch.distributed as dist

import tensortap.pytorch as tt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.no_pickle import forbid_pickling_collectives
from tests.helpers.ranks import leave_together

STEPS, BAD = 12, 6


def main() -> None:
    data = "--data" in sys.argv[1:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    forbid_pickling_collectives()  # the ranks agree without pickle (issue 46)
    rank = dist.get_rank()
    saved: dict[int, int] = {}
    rollback = tt.Rollback(
        tt.FunctionCheckpoints(lambda s: saved.update({s: s}), lambda s: None),
        every=4,
        batches=tt.SkipBatches(list(range(32))),
    )
    for step, batch_id, _ in rollback.steps(STEPS):
        if step == BAD and not rollback.events:
            if rank == 0:  # this rank's replay found the step fine
                rollback.attributed(tt.Attribution("transient", step, None, {}, "", batch=batch_id))
            elif data:
                rollback.attributed(tt.Attribution("data", step, "0", {}, "", batch=batch_id))
            if rank == 1:
                rollback.request(step, [batch_id], f"a check of rank {rank}")
    events = [
        [
            e.kind,
            e.decision.action if e.decision else None,
            e.decision.evidence if e.decision else None,
        ]
        for e in rollback.events
    ]
    skip = sorted(cast("set[int]", rollback.batches.skip if rollback.batches else set()))
    print(json.dumps({"events": events, "skip": skip}), flush=True)
    leave_together()


if __name__ == "__main__":
    main()
