"""A training script for a job whose rule asks for a rollback (RollbackTraining): batch 8's labels
are 1000 times too large; the script waits at the boundary after step 12 (polling, with a
deadline) until the rule's request has come, so that it lands at a known step. Prints a JSON
line: the rollback's events and the batches trained.

Usage: rollback_job_train.py (in a job: $TENSORTAP_CONFIG and $TENSORTAP_JOB_DIR set)
"""

from __future__ import annotations

import json
import time

import torch
from torch import nn

import tensortap.pytorch as tt

STEPS, BAD, WAIT_AFTER = 24, 8, 12


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    data = []
    for position in range(40):
        x = torch.randn(8, 4, generator=generator)
        y = x[:, :1] - x[:, 1:2]
        data.append((x, y * 1000 if position == BAD else y))
    saved: dict[int, dict] = {}

    def save(step: int) -> None:
        saved[step] = {k: v.clone() for k, v in model.state_dict().items()}

    def load(step: int) -> None:
        model.load_state_dict(saved[step])

    def make_hook() -> tt.Hook:
        hook = tt.Hook.create_from_json_file()  # the job's trial
        hook.register_module(model)
        return hook

    rollback = tt.Rollback(
        tt.FunctionCheckpoints(save, load),
        every=5,
        batches=tt.SkipBatches(data),
        make_hook=make_hook,  # requests: the job's rollback file, found through $TENSORTAP_JOB_DIR
    )
    trained = []
    waited = False
    for step, batch_id, (x, y) in rollback.steps(STEPS):
        trained.append(batch_id)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == WAIT_AFTER and not waited:
            waited = True
            assert rollback.hook is not None
            rollback.hook.flush()  # published: the rule judges it
            deadline = time.monotonic() + 120
            while not rollback.pending and time.monotonic() < deadline:
                time.sleep(0.05)
    rollback.close()
    events = [[e.kind, e.step, e.restored_step, list(e.batches)] for e in rollback.events]
    print(json.dumps({"events": events, "trained": trained}), flush=True)


if __name__ == "__main__":
    main()
