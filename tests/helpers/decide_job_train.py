"""A training script for a job: a small GPT whose ``blocks.2`` writes NaN at steps 60 and 61
whatever the batch, with the guard, the replayer and the rollback wired as the docs show (with
remedies). Prints a JSON line: the rollback's events (kind, restored step, decision) and the
batches it left out.

Usage: decide_job_train.py (in a job: $TENSORTAP_CONFIG and $TENSORTAP_JOB_DIR set)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import tensortap.pytorch as tt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.tiny_gpt import BATCH, GPT, LayerFault, gpt_step, tokens


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    fault = LayerFault(model.blocks[2], {60, 61})
    saved: dict[int, tuple[dict[str, Any], Any]] = {}

    def save(step: int) -> None:
        saved[step] = (
            {k: v.clone() for k, v in model.state_dict().items()},
            _cloned(optimizer.state_dict()),
        )

    def load(step: int) -> None:
        model.load_state_dict(saved[step][0])
        optimizer.load_state_dict(_cloned(saved[step][1]))

    def make_hook() -> tt.Hook:
        hook = tt.Hook.create_from_json_file()  # the job's trial
        hook.register_module(model)
        return hook

    rollback = tt.Rollback(
        tt.FunctionCheckpoints(save, load),
        every=10,
        batches=tt.SkipBatches(DataLoader(tokens(130), batch_size=BATCH)),
        make_hook=make_hook,
        remedies=tt.Remedies(optimizer, lr_factor=0.1, clip_norm=0.5, steps=20),
    )
    guard = tt.Guard(
        optimizer, model, budget=tt.SkipBudget(2, 10, then="rollback"), rollback=rollback
    )
    replayer = tt.Replayer(model, gpt_step)
    replayer.follow(guard, rollback=rollback)
    for step, batch_id, batch in rollback.steps(120):
        replayer.capture(batch, batch_id=batch_id, step=step)
        fault.step = step
        optimizer.zero_grad()
        loss = gpt_step(model, batch)
        replayer.after_backward(loss)
        guard.observe(loss, batch=batch_id, step=step)
        optimizer.step()
    guard.flush()
    rollback.close()
    guard.remove()
    events = [
        [e.kind, e.restored_step, None if e.decision is None else e.decision.to_dict()]
        for e in rollback.events
    ]
    skipped = sorted(map(str, rollback.batches.skip)) if rollback.batches is not None else []
    print(json.dumps({"events": events, "skipped": skipped}), flush=True)


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cloned(v) for v in value]
    return value


if __name__ == "__main__":
    main()
