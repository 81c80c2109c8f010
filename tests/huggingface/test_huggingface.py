"""Hugging Face Trainer: a real ``Trainer.train()`` of a tiny GPT-2 built from a config (no
download) with TensortapCallback, explicit, by ``report_to``, and added by ``tensortap run``.
Steps are optimizer steps, the saved loss and metrics are the Trainer's own (whoever computes
the loss, under accumulation and DDP), gradients are the ones before clipping, transformers'
own activation modules are captured, each evaluation is an EVAL step (one after training too),
a job's stop request stops training gracefully, and the built-in rules find a learning rate far
too high and stay quiet on the healthy twin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import tensortap as tt
from tensortap.hook._config import CONFIG_ENV
from tensortap.huggingface import TensortapCallback

EXAMPLES = Path(__file__).parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
from huggingface_trainer import Counting  # noqa: E402


def _trainer(out: Path, callbacks=(), trainer_class=Trainer, trainer_kwargs=None, **overrides):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    config.eos_token_id = config.bos_token_id = None
    settings: dict[str, Any] = dict(
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
    return trainer_class(
        GPT2LMHeadModel(config),
        TrainingArguments(str(out), **settings),
        train_dataset=Counting(64, 0),
        eval_dataset=Counting(16, 1),
        callbacks=list(callbacks),
        **(trainer_kwargs or {}),
    )


def _logged(trainer: Trainer, key: str) -> dict[int, float]:
    """``key`` as the Trainer logged it, by tensortap's TRAIN step (global_step - 1)."""
    return {int(h["step"]) - 1: h[key] for h in trainer.state.log_history if key in h}


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The causal LM loss, computed outside the model (labels shifted)."""
    flat = logits[:, :-1].reshape(-1, logits.shape[-1])
    return torch.nn.functional.cross_entropy(flat, labels[:, 1:].reshape(-1))


def _loss_func(outputs, labels, num_items_in_batch=None) -> torch.Tensor:
    return _cross_entropy(outputs.logits, labels)


class _OwnLoss(Trainer):
    """A ``compute_loss`` override: the model is given no labels and returns no loss."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = _cross_entropy(outputs.logits, labels)
        return (loss, outputs) if return_outputs else loss


@pytest.mark.parametrize(
    ("computed_by", "settings"),
    [
        ("the label smoother", {"label_smoothing_factor": 0.1}),
        ("compute_loss_func", {"trainer_kwargs": {"compute_loss_func": _loss_func}}),
        ("a compute_loss override", {"trainer_class": _OwnLoss}),
    ],
)
@pytest.mark.parametrize("accumulation", [2, 4])
def test_the_loss_is_the_one_the_trainer_optimises_whoever_computes_it(
    tmp_path: Path, computed_by: str, settings: dict, accumulation: int
) -> None:
    """The Trainer, not the model, computes these losses (the model returns none), and
    divides them for accumulation or not as its rules say: the saved loss is what it logs."""
    callback = TensortapCallback(include_collections=["losses"])
    trainer = _trainer(
        tmp_path,
        [callback],
        max_steps=3,
        eval_strategy="no",
        gradient_accumulation_steps=accumulation,
        per_device_train_batch_size=2,
        **settings,
    )
    trainer.train()
    loss = tt.create_trial(tmp_path / "tensortap").tensor("loss")
    logged = _logged(trainer, "loss")
    assert loss.steps(mode=tt.modes.TRAIN) == sorted(logged) == [0, 1, 2]
    for step, want in logged.items():
        assert loss.value(step, mode=tt.modes.TRAIN) == pytest.approx(want, rel=1e-5), computed_by


class _LearningRateJump(TrainerCallback):
    """Sets the learning rate far too high from the 13th optimizer step on."""

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        if state.global_step == 12:
            for group in optimizer.param_groups:
                group["lr"] = 100.0


def test_gradients_are_saved_before_clipping_with_the_clip(tmp_path: Path) -> None:
    """With the Trainer's default max_grad_norm=1.0 the update sees gradients of norm 1 at
    most; the saved ones are those before the clip (their norm is the logged grad_norm), so
    the gradient rules see the jump, and the clip is saved with them."""
    from tensortap.rules import GradientNormSpike, invoke_rule

    callback = TensortapCallback(
        include_collections=["losses", "gradients"], save_config=tt.SaveConfig(save_interval=1)
    )
    trainer = _trainer(
        tmp_path,
        [callback, _LearningRateJump()],
        max_steps=16,
        gradient_accumulation_steps=1,
        lr_scheduler_type="constant",
        optim="sgd",
        eval_strategy="no",
    )
    assert trainer.args.max_grad_norm == 1.0
    trainer.train()
    trial = tt.create_trial(tmp_path / "tensortap")
    names = trial.tensor_names(collection="gradients")
    assert names and not any(n.startswith("gradient_clip") for n in names)
    logged = _logged(trainer, "grad_norm")
    assert max(logged.values()) > 10  # the jump: clipped, the update saw a norm of 1
    for step, want in logged.items():
        grads = [trial.tensor(n).value(step).astype(np.float64) for n in names]
        norm = np.sqrt(sum(float(np.sum(g**2)) for g in grads))
        assert norm == pytest.approx(want, rel=1e-4)
    clip = trial.tensor("gradient_clip/max_norm")
    assert clip.steps() == list(range(16))
    assert all(clip.value(s) == 1.0 for s in clip.steps())
    assert "gradient_clip/max_norm" in trial.tensor_names(collection="gradient_clip")
    summary = invoke_rule(GradientNormSpike(trial))
    assert summary.triggered and summary.findings[0].step == 13, summary


def test_transformers_activation_modules_are_captured(tmp_path: Path) -> None:
    """GPT-2's MLP activation is transformers' NewGELUActivation, not a torch.nn module."""
    callback = TensortapCallback(
        include_collections=["relu_activations"], save_config=tt.SaveConfig(save_interval=1)
    )
    trainer = _trainer(tmp_path, [callback], max_steps=2, eval_strategy="no")
    assert type(trainer.model.transformer.h[0].mlp.act).__name__ == "NewGELUActivation"
    trainer.train()
    trial = tt.create_trial(tmp_path / "tensortap")
    names = trial.tensor_names(collection="relu_activations")
    assert names == [
        "transformer.h.0.mlp.act/gelu_input_0",
        "transformer.h.0.mlp.act/gelu_output_0",
    ]
    assert trial.tensor(names[1]).value(0).shape == (4, 32, 64)  # batch, positions, 4 * n_embd
    # GPT-2 has no ReLU: DeadRelu judges nothing, and says why (not "save relu_activations").
    from tensortap.rules import DeadRelu, RuleStatus, invoke_rule

    summary = invoke_rule(DeadRelu(trial))
    assert summary.status is RuleStatus.NO_DATA
    assert "activations are gelu" in summary.details, summary.details
    assert "include_collections" not in summary.details


def test_an_evaluation_after_training_is_recorded_without_runtimes(tmp_path: Path) -> None:
    callback = TensortapCallback(include_collections=["losses", "metrics"])
    trainer = _trainer(tmp_path, [callback], max_steps=4, eval_steps=2)
    trainer.train()
    final = trainer.evaluate()
    trial = tt.create_trial(tmp_path / "tensortap")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == [0, 1, 2, 3]
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2]  # two during training, one after
    assert loss.value(2, mode=tt.modes.EVAL) == pytest.approx(final["eval_loss"], rel=1e-5)
    last_train = loss.global_steps(tt.modes.TRAIN)[-1]
    assert loss.global_steps(tt.modes.EVAL)[2] > last_train
    metrics = trial.tensor_names(collection="metrics")
    assert "epoch" in metrics and "grad_norm" in metrics  # training's, kept by the new session
    logged = [n for n in trial.tensor_names() if not n.startswith("vitals/")]  # the Trainer's
    assert not [n for n in logged if "runtime" in n or "per_second" in n]
    assert "train_loss" not in trial.tensor_names()  # the summary of the whole run
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] == 0


def test_an_evaluation_after_training_leaves_the_loops_counts_as_training_ended(
    tmp_path: Path,
) -> None:
    """``trainer.evaluate()`` after ``train()`` is a session of its own that steps no
    optimizer: it must not save the training loop's counters again at 0 (a stranger's ELECTRA
    run ended with ``optimizer_steps`` 0 after 512 steps, shadowing what training did)."""
    callback = TensortapCallback(include_collections=["losses", "training_loop"])
    trainer = _trainer(tmp_path, [callback], max_steps=4, eval_steps=2)
    trainer.train()
    trainer.evaluate()
    trial = tt.create_trial(tmp_path / "tensortap")
    for fact, count in (("optimizer_steps", 4), ("backward_passes", 8)):
        tensor = trial.tensor(f"training_loop/{fact}")
        assert int(tensor.value(tensor.steps()[-1])) == count, (fact, tensor.steps())


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
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] == 0


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
    from tests.conftest import helper_cmd
    from tests.helpers.ranks import run_ranks

    done = run_ranks(helper_cmd("hf_ddp.py", tmp_path / "out"), 2, helper_env, timeout=300)
    assert [p.returncode for p in done] == [0, 0], [p.stderr for p in done]
    trial = tt.create_trial(tmp_path / "out" / "tensortap")
    assert trial.workers() == ["worker_0", "worker_1"]
    # Each worker saves its own share of the loss at full scale: their mean is what the
    # Trainer logs (it gathers the workers' losses and takes the mean).
    history = json.loads((tmp_path / "out" / "log_history_0.json").read_text())
    logged = {h["step"] - 1: h["loss"] for h in history if "loss" in h}
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == sorted(logged) == [0, 1, 2]
    for step, want in logged.items():
        mean = np.mean([loss.value(step, worker=w, mode=tt.modes.TRAIN) for w in trial.workers()])
        assert mean == pytest.approx(want, rel=1e-5)
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
    assert second.started is not None and first.started is not None
    assert second.pid == first.pid and second.started >= first.started


@pytest.mark.parametrize("hooks", ["given", "own"])
def test_a_trainer_of_another_model_in_one_process_is_a_new_stage(
    tmp_path: Path, hooks: str
) -> None:
    """Two Trainers of two models in one process, with one hook given to both or each
    callback making its own in one directory (as under ``tensortap run``): the second is a new
    stage of training, marked at its first TRAIN step; its steps go on after the first's (its
    global_step starts at 0 again: not a rollback)."""
    settings: dict[str, Any] = dict(
        include_collections=["losses", "training_loop"],
        save_config=tt.SaveConfig(save_interval=1),
    )
    hook = (
        tt.pytorch.Hook(tmp_path / "t", auto_step=False, **settings) if hooks == "given" else None
    )
    for out in ("pretrain", "finetune"):
        callback = (
            TensortapCallback(hook=hook) if hook else TensortapCallback(tmp_path / "t", **settings)
        )
        trainer = _trainer(tmp_path / out, [callback], eval_strategy="no")
        trainer.train()
    if hook:
        hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == list(range(12))
    logged = _logged(trainer, "loss")  # the second Trainer's, by its global step
    for step in range(6, 12):
        value = trial.tensor("loss").value(step, mode=tt.modes.TRAIN)
        assert value == pytest.approx(logged[step - 6], rel=1e-5)
    stage = trial.tensor("training_loop/stage")
    assert stage.steps(mode=tt.modes.TRAIN) == [6]
    sessions = trial.sessions()
    assert len(sessions) == (1 if hook else 2)
    assert all(s.rolled_back == () for s in sessions)
