"""A trial with a rollback's branch, made by a real Rollback and the framework-free hook (the
dashboard's and the report's tests draw it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensortap as tt
import tensortap.pytorch as ttp

HOSTILE = "<img src=x onerror=window.__xss='branch'>"


def write_branched_trial(out: Path) -> None:
    """20 TRAIN steps; batch 12 spikes, so step 12 asks for a rollback: the checkpoint of step 10
    is restored and a second session (the branch) trains steps 10-19 again."""

    def make_hook() -> tt.Hook:
        return tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))

    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(lambda step: None, lambda step: None),
        every=5,
        batches=ttp.SkipBatches(list(range(30))),
        make_hook=make_hook,
    )
    for step, batch_id, _ in rollback.steps(20):
        hook = rollback.hook
        assert hook is not None
        hook.set_mode(tt.modes.TRAIN)
        loss = 100.0 if batch_id == 12 else 1.0 / (step + 1)
        hook.save_tensor("loss", np.float32(loss), collections="losses")
        hook.next_step()
        if loss > 10:
            rollback.request(step, [batch_id], f"loss spike {HOSTILE}")
    rollback.close()


#: The loss of the first session's step 12: an outlier the rollback undid (issue 46).
OUTLIER = 1.9e6


def write_thrice_rolled_back_trial(out: Path) -> None:
    """30 TRAIN steps, checkpoints every 5, rolled back three times to the checkpoint of step
    10: the first session's step 12 has a loss of :data:`OUTLIER` and every one of the first
    three sessions has a NaN loss at step 13, which asks for the rollback (its batch skipped).
    The fourth session trains steps 10-29. Global steps: 0-13, 14-17, 18-21 and 22-41."""

    def make_hook() -> tt.Hook:
        return tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))

    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(lambda step: None, lambda step: None),
        every=5,
        batches=ttp.SkipBatches(list(range(60))),
        make_hook=make_hook,
    )
    for step, batch_id, _ in rollback.steps(30):
        hook = rollback.hook
        assert hook is not None
        hook.set_mode(tt.modes.TRAIN)
        bad = step == 13 and rollback.rollbacks < 3
        loss = 1.0 + 1.0 / (step + 1)
        if step == 12 and rollback.rollbacks == 0:
            loss = OUTLIER
        hook.save_tensor("loss", np.float32(np.nan if bad else loss), collections="losses")
        hook.next_step()
        if bad:
            rollback.request(step, [batch_id], "NaN loss")
    rollback.close()
