"""Hugging Face Trainer: a real ``Trainer.train()`` of a tiny GPT-2 built from a config (no
download) with TensortapCallback, explicit, by ``report_to``, and added by ``tensortap run``.
Steps are optimizer steps, the saved loss and metrics are the Trainer's own, each evaluation is
an EVAL step, a job's stop request stops training gracefully, and the built-in rules find a
learning rate far too high and stay quiet on the healthy twin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import tensortap as tt
from tensortap.hook_config import CONFIG_ENV
from tensortap.huggingface import TensortapCallback

EXAMPLES = Path(__file__).parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
from huggingface_trainer import Counting  # noqa: E402


def _trainer(out: Path, callbacks=(), **overrides) -> Trainer:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    config.eos_token_id = config.bos_token_id = None
    settings = dict(
        max_steps=6,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        eval_strategy="steps",
        eval_steps=3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    settings.update(overrides)
    return Trainer(
        GPT2LMHeadModel(config),
        TrainingArguments(str(out), **settings),
        train_dataset=Counting(64, 0),
        eval_dataset=Counting(16, 1),
        callbacks=list(callbacks),
    )


def test_steps_losses_and_metrics_are_the_trainers(tmp_path: Path) -> None:
    callback = TensortapCallback(
        include_collections=["losses", "metrics", "gradients"],
        save_config=tt.SaveConfig(save_interval=1),
    )
    trainer = _trainer(tmp_path, [callback])
    trainer.train()
    trial = tt.create_trial(tmp_path / "tensortap")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(6))  # 6 optimizer steps, 12 batches
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1]  # two evaluations
    history = trainer.state.log_history
    logged = {h["step"]: h for h in history if "loss" in h}
    evals = [h["eval_loss"] for h in history if "eval_loss" in h]
    lr = trial.tensor("learning_rate")
    for step in range(6):  # tensortap's step k is the Trainer's global_step k + 1
        entry = logged[step + 1]
        assert loss.value(step, mode=tt.modes.TRAIN) == pytest.approx(entry["loss"], rel=1e-5)
        assert lr.value(step, mode=tt.modes.TRAIN) == pytest.approx(entry["learning_rate"])
        grad_norm = trial.tensor("grad_norm").value(step, mode=tt.modes.TRAIN)
        assert grad_norm == pytest.approx(entry["grad_norm"], rel=1e-5)
    for i, value in enumerate(evals):
        assert loss.value(i, mode=tt.modes.EVAL) == pytest.approx(value, rel=1e-5)
    assert "gradient/transformer.h.0.mlp.c_fc.weight" in trial.tensor_names(collection="gradients")
    # Global steps interleave: the first evaluation comes right after TRAIN step 2.
    assert loss.global_steps(tt.modes.EVAL)[0] == loss.global_steps(tt.modes.TRAIN)[2] + 1
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] == 0


def test_gradients_are_the_accumulated_ones_right_before_the_update(tmp_path: Path) -> None:
    seen: list[np.ndarray] = []

    class Spy(TensortapCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            weight = kwargs["model"].transformer.h[0].mlp.c_fc.weight
            seen.append(weight.grad.detach().clone().numpy())

    callback = Spy(include_collections=["gradients"], save_config=tt.SaveConfig(save_interval=1))
    _trainer(tmp_path, [callback], max_steps=3, eval_strategy="no").train()
    grad = tt.create_trial(tmp_path / "tensortap").tensor(
        "gradient/transformer.h.0.mlp.c_fc.weight"
    )
    assert grad.steps() == [0, 1, 2]
    for step, want in enumerate(seen):
        np.testing.assert_array_equal(grad.value(step), want)


def test_a_trainer_that_compiles_the_model_is_recorded_too(tmp_path: Path) -> None:
    callback = TensortapCallback(
        include_collections=["losses", "gradients"], save_config=tt.SaveConfig(save_interval=1)
    )
    trainer = _trainer(tmp_path, [callback], torch_compile=True, max_steps=2, eval_strategy="no")
    trainer.train()
    trial = tt.create_trial(tmp_path / "tensortap")
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    loss = trial.tensor("loss")
    assert loss.steps() == [0, 1]
    assert [loss.value(s) for s in (0, 1)] == pytest.approx(logged, rel=1e-5)
    assert "gradient/transformer.h.0.mlp.c_fc.weight" in trial.tensor_names(collection="gradients")
    assert trial.worker_status("worker_0")["internal_errors"] == 0


def test_report_to_tensortap_adds_the_callback(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, report_to="tensortap", max_steps=2, eval_strategy="no")
    assert any(isinstance(c, TensortapCallback) for c in trainer.callback_handler.callbacks)
    trainer.train()
    trial = tt.create_trial(tmp_path / "tensortap")
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == [0, 1]


def test_a_jobs_stop_request_stops_training_gracefully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = tmp_path / "stop"
    stop.write_text("LossNotDecreasing asked to stop")
    config = {"out_dir": str(tmp_path / "trial"), "stop_file": str(stop)}
    (tmp_path / "hook.json").write_text(json.dumps(config))
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "hook.json"))
    trainer = _trainer(tmp_path / "out", [TensortapCallback()], max_steps=5, eval_strategy="no")
    trainer.train()  # no exception: the Trainer was asked to stop, and did
    assert trainer.state.global_step == 1
    assert tt.create_trial(tmp_path / "trial").tensor("loss").steps() == [0]


def _run_example(tmp_path: Path, *args: str) -> str:
    cmd = [sys.executable, *args]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_rules_find_a_learning_rate_far_too_high_and_not_a_healthy_run(
    tmp_path: Path,
) -> None:
    out = _run_example(tmp_path, str(EXAMPLES / "huggingface_trainer.py"), "--quick")
    healthy, broken = out.split("learning rate far too high")
    assert "rules that found a problem: none" in healthy
    found = broken.split("rules that found a problem:")[1]
    assert "LossNotDecreasing" in found and "WeightUpdateRatio" in found


def test_tensortap_run_adds_the_callback_to_an_unmodified_script(tmp_path: Path) -> None:
    config = {
        "out_dir": str(tmp_path / "trial"),
        "hook_parameters": {"save_interval": "5"},
        "collection_configurations": [{"name": "losses"}, {"name": "gradients"}],
    }
    (tmp_path / "hook.json").write_text(json.dumps(config))
    script = str(EXAMPLES / "huggingface_trainer.py")
    _run_example(
        tmp_path, "-m", "tensortap.attach", "--config", "hook.json", script, "--quick", "--plain"
    )
    trial = tt.create_trial(tmp_path / "trial")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == [0, 5, 10, 15, 20, 25]  # 30 optimizer steps
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2]  # every evaluation
    assert trial.tensor_names(collection="gradients")
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] == 0


def test_under_ddp_each_rank_writes_as_a_worker(tmp_path: Path, helper_env) -> None:
    from conftest import free_port, helper_cmd

    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(helper_env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(
            subprocess.Popen(
                helper_cmd("hf_ddp.py", tmp_path / "out"),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    trial = tt.create_trial(tmp_path / "out" / "tensortap")
    assert trial.workers() == ["worker_0", "worker_1"]
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == [0, 1, 2]
    assert loss.value(0, worker="worker_0") != loss.value(0, worker="worker_1")  # own batches
    grad = trial.tensor("gradient/transformer.h.0.mlp.c_fc.weight")
    for step in (0, 1, 2):  # DDP averaged them: every rank saved the same gradient
        np.testing.assert_allclose(
            grad.value(step, worker="worker_0"), grad.value(step, worker="worker_1"), rtol=1e-6
        )


def test_a_run_resumed_from_its_checkpoint_continues_the_trainers_steps(tmp_path: Path) -> None:
    callback = TensortapCallback(include_collections=["losses", "metrics"])

    def run(max_steps: int, resume: bool) -> Trainer:
        trainer = _trainer(
            tmp_path,
            [callback],
            max_steps=max_steps,
            gradient_accumulation_steps=1,
            eval_steps=5,
            save_strategy="steps",
            save_steps=10,
        )
        trainer.train(resume_from_checkpoint=resume or None)
        return trainer

    run(10, resume=False)
    # from checkpoint-10, into the same output and trial, with the same callback
    trainer = run(20, resume=True)
    assert trainer.state.global_step == 20
    trial = tt.create_trial(tmp_path / "tensortap")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(20))  # the Trainer ran 20 steps
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2, 3]  # and 4 evaluations
    assert len(trial.steps()) == 24  # no global step written twice
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    evals = [h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h]
    assert sorted(logged) == list(range(1, 21))  # the checkpoint kept the first run's logs
    for step in range(20):  # tensortap's step k is still the Trainer's global_step k + 1
        assert loss.value(step, mode=tt.modes.TRAIN) == pytest.approx(logged[step + 1], rel=1e-5)
    assert [loss.value(i, mode=tt.modes.EVAL) for i in range(4)] == pytest.approx(evals, rel=1e-5)
    first, second = trial.sessions()
    assert (first.index, first.resumed_from_step, first.first_step) == (0, None, 0)
    assert second.index == 1 and second.resumed_from_step == first.last_step == 11
    assert second.first_step == 12 and trial.mode_step(12) == 10
    assert second.pid == first.pid and second.started >= first.started
