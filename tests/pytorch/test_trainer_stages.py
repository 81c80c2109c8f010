"""A trainer's fit of another model with the same hook (tensortap.pytorch._trainer_session): a
new stage of training whose trainer counts its steps from 0 again. Its steps are numbered on
after the trial's, and its trainer's step k stays the trial's step k + offset when that trainer
restores an earlier step of its own (a rollback, a resume): counting them again never reaches
back into the stage before."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import tensortap as tt
from tensortap.pytorch import Hook
from tensortap.pytorch._trainer_session import TrainerSession


def _train(session: TrainerSession, model: nn.Module, steps: int) -> None:
    for _ in range(steps):
        session.close_step()
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        session.add_loss(loss)
        session.end_step()


def test_a_new_stages_trainer_steps_are_numbered_after_the_stage_before(tmp_path: Path) -> None:
    hook = Hook(
        tmp_path / "t",
        include_collections=["losses", "training_loop"],
        save_config=tt.SaveConfig(save_interval=1),
        auto_step=False,
    )
    first, second = nn.Linear(3, 1), nn.Linear(3, 1)
    pretrain = TrainerSession(hook, None)
    pretrain.start(first, tmp_path)
    pretrain.follow(0, "the Trainer's global_step")
    _train(pretrain, first, 5)  # TRAIN 0-4
    pretrain.finish()
    finetune = TrainerSession(hook, None)
    finetune.start(second, tmp_path)
    finetune.follow(0, "the Trainer's global_step")  # the trial's step 5
    _train(finetune, second, 4)  # 5-8: the trainer's 0-3
    finetune.finish()  # the same model again: restored to its trainer's step 2 (a rollback)
    finetune.start(second, tmp_path)
    finetune.follow(2, "the Trainer's global_step")
    _train(finetune, second, 3)  # 7-9 again, from the trainer's 2
    finetune.finish()
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == list(range(10))
    stage = trial.tensor("training_loop/stage")
    assert stage.steps(mode=tt.modes.TRAIN) == [5]
    (session,) = trial.sessions()
    assert session.rolled_back == (("TRAIN", 7, 8),)  # within the new stage only
