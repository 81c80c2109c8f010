"""Lightning: a real ``Trainer.fit`` on CPU with TensortapCallback (both spellings of the
package, explicit and added by ``tensortap run``, and under DDP with two processes). Steps are
optimizer steps, gradients are the ones the optimizer applies (Lightning runs the backward pass
inside ``optimizer.step``, before ``gradient_clip_val`` clips them), logged values are saved once
(step values at each step, epoch values once per epoch, validation values in EVAL mode, by when
Lightning computes them, not by name), validation runs are EVAL steps (a ``validate()`` after
``fit`` too), the sanity check leaves nothing, a job's stop request stops training, and the
built-in rules find a learning rate far too high and stay quiet on the healthy twin."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lightning.pytorch")
import lightning.pytorch as L
import torch

import tensortap as tt
from tensortap.hook._config import CONFIG_ENV
from tensortap.lightning import PLTensortapCallback, TensortapCallback

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from lightning_trainer import DigitsMLP, loaders  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet() -> None:
    warnings.filterwarnings("ignore", module="lightning")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


class Recording(DigitsMLP):
    """Keeps each batch's loss and, right before each update, fc0's gradient."""

    def __init__(self, lr: float) -> None:
        super().__init__(lr)
        self.losses: list[float] = []
        self.grads: list[np.ndarray] = []

    def training_step(self, batch, index):
        loss = super().training_step(batch, index)
        self.losses.append(float(loss.detach()))
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        self.grads.append(self.net[0].weight.grad.detach().clone().numpy())


def _fit(
    out: Path, module: L.LightningModule, callback, ckpt_path: str | None = None, **settings
) -> L.Trainer:
    args: dict[str, Any] = dict(
        max_epochs=1,
        default_root_dir=str(out),
        callbacks=[callback, *settings.pop("more_callbacks", [])],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accumulate_grad_batches=2,
        limit_train_batches=8,
        limit_val_batches=2,
        val_check_interval=4,
    )
    args.update(settings)
    trainer = L.Trainer(**args)
    trainer.fit(module, *loaders(), ckpt_path=ckpt_path)  # type: ignore[misc]
    return trainer


def test_steps_losses_gradients_and_validations(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Recording(0.5)
    callback = TensortapCallback(
        include_collections=["losses", "metrics", "gradients", "relu_activations"],
        save_config=tt.SaveConfig(save_interval=1),
    )
    trainer = _fit(tmp_path, module, callback)
    assert trainer.global_step == 4  # 8 batches, 2 per optimizer step
    trial = tt.create_trial(tmp_path / "tensortap")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == [0, 1, 2, 3]
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1]  # after batch 4 and 8; no sanity check
    for step in range(4):  # the step's loss: the mean of its two batches' losses
        want = np.mean(module.losses[2 * step : 2 * step + 2])
        assert loss.value(step, mode=tt.modes.TRAIN) == pytest.approx(want, rel=1e-5)
    grad = trial.tensor("gradient/net.0.weight")
    assert len(module.grads) == 4
    for step, before in enumerate(module.grads):
        np.testing.assert_array_equal(grad.value(step, mode=tt.modes.TRAIN), before)
    val_loss = [trial.tensor("loss").value(s, mode=tt.modes.EVAL) for s in (0, 1)]
    assert all(np.isfinite(v) for v in val_loss)
    assert trial.tensor("acc").steps(mode=tt.modes.EVAL) == [0, 1]
    assert trial.tensor("learning_rate").value(0, mode=tt.modes.TRAIN) == pytest.approx(0.5)
    # The module's training_step calls self.net(x), not the module: activations still come.
    assert trial.tensor("net.1/relu_output_0").steps(mode=tt.modes.TRAIN) == [0, 1, 2, 3]
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] == 0


def test_gradients_are_the_ones_before_the_clip_and_the_clip_is_saved(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Recording(0.5)
    callback = TensortapCallback(
        include_collections=["gradients"], save_config=tt.SaveConfig(save_interval=1)
    )
    _fit(tmp_path, module, callback, gradient_clip_val=0.01, limit_val_batches=0)
    trial = tt.create_trial(tmp_path / "tensortap")
    grad = trial.tensor("gradient/net.0.weight")
    for step, want in enumerate(module.grads):  # as on_before_optimizer_step saw them
        np.testing.assert_array_equal(grad.value(step, mode=tt.modes.TRAIN), want)
    assert np.linalg.norm(module.grads[0]) > 0.01  # so the update got clipped ones
    clip = trial.tensor("gradient_clip/max_norm")
    assert clip.steps(mode=tt.modes.TRAIN) == [0, 1, 2, 3]
    assert clip.value(3, mode=tt.modes.TRAIN) == pytest.approx(0.01)


class EpochLogging(DigitsMLP):
    """Logs a value per step and per epoch, one per epoch only, and one whose name merely
    starts with "val"; keeps each batch's loss."""

    def __init__(self, lr: float) -> None:
        super().__init__(lr)
        self.losses: list[float] = []

    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("twice", 2 * loss, on_step=False, on_epoch=True)
        self.log("value_loss", 3 * loss)
        return loss


def test_epoch_values_are_saved_once_per_epoch_and_step_values_at_each_step(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    module = EpochLogging(0.5)
    callback = TensortapCallback(
        include_collections=["metrics"], save_config=tt.SaveConfig(save_interval=1)
    )
    _fit(
        tmp_path,
        module,
        callback,
        max_epochs=3,
        limit_train_batches=4,
        accumulate_grad_batches=1,
        limit_val_batches=0,
    )
    trial = tt.create_trial(tmp_path / "tensortap")
    train = tt.modes.TRAIN
    assert trial.tensor("train_loss_step").steps(mode=train) == list(range(12))
    value_loss = trial.tensor("value_loss")  # a training value, whatever its name
    assert value_loss.steps(mode=train) == list(range(12))
    assert value_loss.value(5, mode=train) == pytest.approx(3 * module.losses[5], rel=1e-5)
    for name, factor in (("train_loss_epoch", 1), ("twice", 2)):
        epoch = trial.tensor(name)
        assert epoch.steps(mode=train) == [3, 7, 11], name  # each epoch's last step, once
        for i, step in enumerate(epoch.steps(mode=train)):
            want = factor * np.mean(module.losses[4 * i : 4 * i + 4])
            assert epoch.value(step, mode=train) == pytest.approx(want, rel=1e-5), name


def test_epoch_values_after_an_epoch_end_validation_and_a_validate_after_fit(
    tmp_path: Path,
) -> None:
    """A validation at an epoch's end closes the epoch's last step before Lightning computes
    the epoch's values: they go in the next epoch's first step. ``validate()`` after ``fit``
    is one more EVAL step, numbered after the others."""
    torch.manual_seed(0)
    module = EpochLogging(0.5)
    callback = TensortapCallback(
        include_collections=["losses", "metrics"], save_config=tt.SaveConfig(save_interval=1)
    )
    trainer = _fit(
        tmp_path,
        module,
        callback,
        max_epochs=2,
        limit_train_batches=4,
        accumulate_grad_batches=1,
        val_check_interval=1.0,
    )
    validated = trainer.validate(module, loaders()[1], verbose=False)[0]
    trial = tt.create_trial(tmp_path / "tensortap")
    epoch = trial.tensor("train_loss_epoch")
    assert epoch.steps(mode=tt.modes.TRAIN) == [4]
    assert epoch.value(4, mode=tt.modes.TRAIN) == pytest.approx(np.mean(module.losses[:4]))
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(8))
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2]  # two in fit, one after
    assert loss.value(2, mode=tt.modes.EVAL) == pytest.approx(validated["val_loss"], rel=1e-5)
    assert loss.global_steps(tt.modes.EVAL)[2] > loss.global_steps(tt.modes.TRAIN)[-1]
    assert trial.tensor("acc").steps(mode=tt.modes.EVAL) == [0, 1, 2]
    assert "value_loss" in trial.tensor_names(collection="metrics")  # the fit's, kept
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] == 0


def test_the_pytorch_lightning_spelling(tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    import pytorch_lightning as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(64, 10)

        def training_step(self, batch, index):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(
        max_steps=3,
        default_root_dir=str(tmp_path),
        callbacks=[PLTensortapCallback()],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), loaders()[0])
    loss = tt.create_trial(tmp_path / "tensortap").tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == [0, 1, 2]


def test_a_jobs_stop_request_stops_the_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = tmp_path / "stop"
    stop.write_text("rule asked to stop")
    config = {"out_dir": str(tmp_path / "trial"), "stop_file": str(stop)}
    (tmp_path / "hook.json").write_text(json.dumps(config))
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "hook.json"))
    trainer = _fit(tmp_path / "out", DigitsMLP(0.5), TensortapCallback(), val_check_interval=1.0)
    assert trainer.global_step == 1
    loss = tt.create_trial(tmp_path / "trial").tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == [0]


def _run(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_rules_find_a_learning_rate_far_too_high_and_not_a_healthy_run(
    tmp_path: Path,
) -> None:
    out = _run(tmp_path, str(ROOT / "examples" / "lightning_trainer.py"), "--quick")
    healthy, broken = out.split("learning rate far too high")
    assert "rules that found a problem: none" in healthy
    assert "LossNotDecreasing" in broken.split("rules that found a problem:")[1]


def test_tensortap_run_adds_the_callback_to_an_unmodified_script(tmp_path: Path) -> None:
    config = {"out_dir": str(tmp_path / "trial"), "collection_configurations": [{"name": "losses"}]}
    (tmp_path / "hook.json").write_text(json.dumps(config))
    script = str(ROOT / "examples" / "lightning_trainer.py")
    _run(tmp_path, "-m", "tensortap.attach", "--config", "hook.json", script, "--quick", "--plain")
    loss = tt.create_trial(tmp_path / "trial").tensor("loss")
    assert len(loss.steps(mode=tt.modes.TRAIN)) == 48  # every optimizer step of 2 epochs
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2, 3]  # every validation run


def test_ddp_ranks_write_as_workers(tmp_path: Path) -> None:
    _run(tmp_path, str(ROOT / "tests" / "helpers" / "lightning_ddp.py"), str(tmp_path / "run"))
    trial = tt.create_trial(tmp_path / "run" / "tensortap")
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps(mode=tt.modes.EVAL) == [0]
    grad = trial.tensor("gradient/net.0.weight")
    assert grad.steps(mode=tt.modes.TRAIN) == [0]  # on the hook's schedule
    assert trial.tensor("vitals/loss").steps(mode=tt.modes.TRAIN) == trial.steps(tt.modes.TRAIN)
    np.testing.assert_array_equal(
        grad.value(0, worker="worker_0"), grad.value(0, worker="worker_1")
    )
    losses = [trial.tensor("loss").value(0, worker=w, mode=tt.modes.TRAIN) for w in trial.workers()]
    assert losses[0] != losses[1]  # each rank's own batches


def test_a_fit_resumed_from_its_checkpoint_continues_the_trainers_steps(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    def fit(epochs: int, ckpt_path: str | None) -> tuple[L.Trainer, Recording]:
        torch.manual_seed(0)
        module = Recording(0.5)
        callback = TensortapCallback(include_collections=["losses"])
        keep = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
        trainer = _fit(
            tmp_path,
            module,
            callback,
            ckpt_path,
            max_epochs=epochs,
            enable_checkpointing=True,
            more_callbacks=[keep],
        )
        return trainer, module

    first, _ = fit(1, None)
    assert first.global_step == 4
    trainer, module = fit(2, str(tmp_path / "ckpt" / "last.ckpt"))
    assert trainer.global_step == 8  # the Trainer ran 8 optimizer steps, 4 of them resumed
    trial = tt.create_trial(tmp_path / "tensortap")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(8))
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2, 3]
    assert len(trial.steps()) == 12  # no global step written twice
    for step in range(4, 8):  # the resumed steps hold the resumed fit's losses
        want = np.mean(module.losses[2 * (step - 4) : 2 * (step - 4) + 2])
        assert loss.value(step, mode=tt.modes.TRAIN) == pytest.approx(want, rel=1e-5)
    first_session, second = trial.sessions()
    assert second.resumed_from_step == first_session.last_step == 5
    assert second.first_step == 6 and trial.mode_step(6) == 4


def test_a_fit_resumed_from_an_older_checkpoint_counts_its_steps_again(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    def fit(ckpt_path: str | None) -> Recording:
        torch.manual_seed(0)
        module = Recording(0.5)
        every_epoch = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)
        callback = TensortapCallback(include_collections=["losses"])
        _fit(
            tmp_path,
            module,
            callback,
            ckpt_path,
            max_epochs=2,
            enable_checkpointing=True,
            more_callbacks=[every_epoch],
        )
        return module

    first_fit = fit(None)  # 8 steps; then resumed from its checkpoint after the first epoch
    module = fit(str(tmp_path / "ckpt" / "epoch=0-step=4.ckpt"))
    trial = tt.create_trial(tmp_path / "tensortap")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(8))  # each step number once
    assert len(trial.steps()) == 12 + 6  # the first fit's 8 + 4, the resumed one's 4 + 2
    for step in range(4, 8):  # by TRAIN step: the resumed fit's losses
        want = np.mean(module.losses[2 * (step - 4) : 2 * (step - 4) + 2])
        assert loss.value(step, mode=tt.modes.TRAIN) == pytest.approx(want, rel=1e-5)
    first, second = trial.sessions()
    assert second.resumed_from_step == first.last_step == 11
    assert second.rolled_back == (("TRAIN", 4, 7),)
    assert second.step_source == "the Trainer's global_step"
    # the first fit's own step 4 is still there, under its global step
    assert first.first_step is not None and first.last_step is not None
    (earlier,) = [
        g
        for g in range(first.first_step, first.last_step + 1)
        if trial.mode(g) == tt.modes.TRAIN and trial.mode_step(g) == 4
    ]
    assert trial.global_step(tt.modes.TRAIN, 4) > first.last_step  # the resumed fit's
    assert loss.value(earlier) == pytest.approx(np.mean(first_fit.losses[8:10]), rel=1e-5)


@pytest.mark.parametrize("hooks", ["given", "own"])
def test_a_fit_of_another_model_in_one_process_is_a_new_stage(tmp_path: Path, hooks: str) -> None:
    """A fine-tuning after a pre-training in one process: the second model's fit is a new
    stage, marked at its first TRAIN step, whose steps go on after the first fit's (its Trainer
    counts from 0 again: not a rollback). A third fit, of the first model again, is another
    stage; a rollback's fit of the same model is not (see the memory rollback tests), nor a fit
    resumed from a checkpoint into a new model object (the resume tests above). With one hook
    given to every callback, and with each callback making its own in the same directory (as
    under ``tensortap run``: each fit's hook closes when it ends, and the next is a new session
    of the trial)."""
    settings: dict[str, Any] = dict(
        include_collections=["losses", "training_loop", "weights"],
        save_config=tt.SaveConfig(save_interval=1),
    )
    hook = (
        tt.pytorch.Hook(tmp_path / "t", auto_step=False, **settings) if hooks == "given" else None
    )
    torch.manual_seed(0)
    first, second = Recording(0.5), Recording(0.1)
    for module in (first, second, first):
        callback = (
            TensortapCallback(hook=hook) if hook else TensortapCallback(tmp_path / "t", **settings)
        )
        _fit(tmp_path, module, callback, val_check_interval=None)
    if hook:
        hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == list(range(12))  # 4 a fit
    stage = trial.tensor("training_loop/stage")
    assert stage.steps(mode=tt.modes.TRAIN) == [4, 8]
    assert [int(stage.value(s, mode=tt.modes.TRAIN)) for s in (4, 8)] == [1, 2]
    sessions = trial.sessions()
    assert len(sessions) == (1 if hook else 3)
    assert all(s.rolled_back == () for s in sessions)  # no step counted twice
    for step in range(4, 8):  # the second model's losses, at its own steps
        want = np.mean(second.losses[2 * (step - 4) : 2 * (step - 4) + 2])
        assert trial.tensor("loss").value(step, mode=tt.modes.TRAIN) == pytest.approx(want)
    if hook:  # each model's weights before its first update, once (a session's hook
        # snapshots what it trains at its first step that saves weights)
        initial = {n: trial.tensor(n).steps(mode=tt.modes.TRAIN) for n in trial.tensor_names()
                   if n.startswith("initial/")}  # fmt: skip
        weights = len([p for p in first.parameters() if p.dim() > 1])
        assert sorted(initial.values()) == [[0]] * weights + [[4]] * weights, initial
