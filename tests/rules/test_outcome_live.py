"""AccuracyAtChance read live, as a job reads a trial while it is written: a pass whose last
step is read before any later step is published is judged at the next step, not merged with
the next pass (a trainer's evaluation run is one EVAL step: every pass ended that way)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensortap as tt
from tensortap.rules import AccuracyAtChance
from tensortap.rules._finding import Outcome


def test_each_pass_is_judged_when_read_as_it_is_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1),
                   include_collections=["labels", "predictions"])  # fmt: skip
    trial = None
    rule = None
    findings = []
    read = 0
    for _ in range(3):
        for mode in (tt.modes.TRAIN, tt.modes.EVAL):  # one training step, one evaluation run
            hook.set_mode(mode)
            y = rng.integers(0, 4, 200)
            hook.save_tensor("labels", y, collections="labels")
            hook.save_tensor("predictions", rng.integers(0, 4, 200), collections="predictions")
            hook.next_step()
            assert hook.flush(timeout=60)
            if trial is None:
                trial = tt.create_trial(tmp_path)
                rule = AccuracyAtChance(trial)
            trial.refresh()
            assert rule is not None
            for step in trial.steps()[read:]:  # each step once, as soon as it is published
                findings.append(rule.evaluate(step))
            read = len(trial.steps())
    hook.close()
    judged = [f for f in findings if f.outcome in (Outcome.OK, Outcome.TRIGGERED)]
    assert [f.step for f in judged] == [2, 4]  # passes 1 and 2, each at the next TRAIN step
    assert all("over 200 samples" in f.message for f in judged)  # never two passes merged
    assert judged[-1].triggered  # at chance twice in a row
