"""``trial.config()`` of real, unmodified scripts run under ``tensortap run``: each framework's
run records its learning rate and batch size (and what else its trainer shows) with no code
change (issue 43, item 3)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tensortap import create_trial
from tensortap.jobs._record import JobRecord


def run_config(tmp_path: Path, script: str, *args: str) -> dict[str, Any]:
    """Run ``script`` (its source) under ``tensortap run``; the trial's configuration."""
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    command = [sys.executable, "-m", "tensortap.cli", "run", "--output", "runs", "--"]
    done = subprocess.run(
        [*command, "python", str(path), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = (tmp_path / "runs").iterdir()
    with create_trial(JobRecord(job).trial_location) as trial:
        assert not [p for p in trial.problems() if "config" in p]
        return trial.config()


def common_checks(config: dict[str, Any], *packages: str) -> None:
    """What every run records: the command line and the framework's package versions."""
    assert Path(config["command"][0]).name == "train.py"
    assert "python" in config["packages"]
    for name in packages:
        assert name in config["packages"], config["packages"]
    assert "git" not in config  # tmp_path is in no repository


TORCH = """
    import torch
    from torch import nn

    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(96, 8), torch.randint(0, 3, (96,))
    for step in range(12):
        i = (step * 24) % 96
        opt.zero_grad()
        loss = loss_fn(model(x[i : i + 24]), y[i : i + 24])
        loss.backward()
        opt.step()
        sched.step()
"""


def test_a_pytorch_loop_records_its_optimizer_batch_size_and_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    config = run_config(tmp_path, TORCH, "--hub_token", "hf_secret")
    common_checks(config, "torch")
    assert config["command"][1:] == ["--hub_token", "<redacted>"]
    assert config["learning_rate"] == 0.05  # the configured rate (the schedule decays it)
    assert config["batch_size"] == 24
    (group,) = config["optimizer"]["param_groups"]
    assert config["optimizer"]["class"] == "torch.optim.sgd.SGD"
    assert (group["momentum"], group["weight_decay"], group["parameters"]) == (0.9, 1e-4, 195)
    (scheduler,) = config["schedulers"]
    assert scheduler["class"].endswith("StepLR")
    assert (scheduler["step_size"], scheduler["gamma"]) == (5, 0.5)
    assert config["model"] == {
        "class": "torch.nn.modules.container.Sequential",
        "parameters": 195,
        "trainable_parameters": 195,
        "first_layer": "torch.nn.modules.linear.Linear",
    }
    assert config["seeds"] == {"torch": 3}
    (job,) = (tmp_path / "runs").iterdir()
    summary = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "summary", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert (
        "config: learning_rate 0.05 · batch_size 24 · optimizer SGD · model Sequential "
        "(195 parameters)\n"
    ) in summary.stdout


HUGGINGFACE = """
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Counting(Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, i):
            ids = torch.arange(i, i + 8) % 64
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    config.eos_token_id = config.bos_token_id = None
    args = TrainingArguments(
        "out", max_steps=4, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        learning_rate=2e-3, weight_decay=0.01, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, seed=7, hub_token="hf_secret",
    )
    Trainer(GPT2LMHeadModel(config), args, train_dataset=Counting()).train()
"""


def test_a_hugging_face_trainer_records_its_training_arguments(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    config = run_config(tmp_path, HUGGINGFACE)
    common_checks(config, "torch", "transformers")
    assert config["learning_rate"] == 2e-3
    assert config["batch_size"] == 4
    arguments = config["trainer"]["arguments"]
    assert arguments["gradient_accumulation_steps"] == 2
    assert arguments["weight_decay"] == 0.01
    assert "hf_secret" not in str(config)
    assert config["seeds"]["trainer"] == 7
    assert config["optimizer"]["class"].endswith("AdamW")
    assert {g["weight_decay"] for g in config["optimizer"]["param_groups"]} == {0.0, 0.01}
    assert config["model"]["class"].endswith("GPT2LMHeadModel")
    assert config["model"]["parameters"] > 0
    assert config["schedulers"][0]["class"].endswith("LambdaLR")


LIGHTNING = """
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self, lr, hidden):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 3))

        def training_step(self, batch, index):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            return [opt], [torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)]

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=2,
    )
    trainer.fit(Module(0.02, 16), DataLoader(data, batch_size=16))
"""


def test_a_lightning_fit_records_hparams_flags_and_optimizer(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    config = run_config(tmp_path, LIGHTNING)
    common_checks(config, "torch", "lightning")
    assert config["learning_rate"] == 0.02
    assert config["batch_size"] == 16
    assert config["hparams"] == {"lr": 0.02, "hidden": 16}
    flags = config["trainer"]["flags"]
    assert (flags["max_epochs"], flags["accumulate_grad_batches"]) == (2, 2)
    assert config["optimizer"]["class"] == "torch.optim.adam.Adam"
    assert config["schedulers"][0]["gamma"] == 0.9


KERAS = """
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(96, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(2)])
    model.compile(
        keras.optimizers.Adam(0.01),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
"""


def test_a_keras_fit_records_compile_and_fit_arguments(tmp_path: Path) -> None:
    pytest.importorskip("keras")
    config = run_config(tmp_path, KERAS)
    common_checks(config, "keras")
    assert config["learning_rate"] == 0.01
    assert config["batch_size"] == 16
    assert config["trainer"]["fit"]["epochs"] == 2
    assert config["trainer"]["fit"]["steps"] == 6  # 96 rows by 16
    assert config["optimizer"]["class"].endswith("Adam")
    assert config["model"]["parameters"] == 8 * 8 + 8 + 8 * 2 + 2
    assert "accuracy" in str(config["trainer"]["compile"]["metrics"])


JAX = """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4)).astype("float32")
    y = x @ np.array([1.0, -2.0, 0.5, 0.0], "float32")
    params = {"w": jnp.zeros(4), "b": jnp.zeros(())}

    def loss_fn(p, xb, yb):
        return jnp.mean((xb @ p["w"] + p["b"] - yb) ** 2)

    optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=0.03, b1=0.8)
    state = optimizer.init(params)

    @jax.jit
    def step(p, s, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    for i in range(8):
        params, state, loss = step(params, state, x[i * 16 : i * 16 + 16], y[i * 16 : i * 16 + 16])
"""


def test_an_optax_loop_records_its_injected_hyperparameters(tmp_path: Path) -> None:
    pytest.importorskip("optax")
    config = run_config(tmp_path, JAX)
    common_checks(config, "jax", "optax")
    assert config["learning_rate"] == 0.03
    assert config["batch_size"] == 16
    optimizer = config["optimizer"]
    assert optimizer["class"] == "optax.adam" and optimizer["injected"] is True
    assert optimizer["hyperparams"] == {"learning_rate": 0.03, "b1": 0.8}


def test_a_plain_optax_optimizer_records_its_learning_rate(tmp_path: Path) -> None:
    pytest.importorskip("optax")
    plain = JAX.replace("optax.inject_hyperparams(optax.adam)(", "optax.sgd(")
    config = run_config(tmp_path, plain.replace(", b1=0.8", ", momentum=0.8"))
    assert config["learning_rate"] == 0.03
    assert config["optimizer"]["class"] == "optax.sgd"
    assert config["optimizer"]["injected"] is False
    assert config["optimizer"]["hyperparams"] == {"learning_rate": 0.03, "momentum": 0.8}


XGBOOST = """
    import sys

    import xgboost as xgb
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    n = 400
    if sys.argv[1:] == ["sklearn"]:
        model = xgb.XGBClassifier(n_estimators=8, learning_rate=0.15, max_depth=3)
        model.fit(x[:n], y[:n], eval_set=[(x[:n], y[:n]), (x[n:], y[n:])], verbose=False)
    else:
        dtrain, dvalid = xgb.DMatrix(x[:n], label=y[:n]), xgb.DMatrix(x[n:], label=y[n:])
        params = {"objective": "binary:logistic", "eta": 0.2, "max_depth": 3}
        xgb.train(params, dtrain, 8, evals=[(dtrain, "train"), (dvalid, "validation")])
"""


@pytest.mark.parametrize("api", ["train", "sklearn"])
def test_xgboost_records_its_parameters_and_training_rows(tmp_path: Path, api: str) -> None:
    pytest.importorskip("xgboost")
    config = run_config(tmp_path, XGBOOST, api)
    common_checks(config, "xgboost")
    assert config["learning_rate"] == (0.2 if api == "train" else 0.15)
    assert config["batch_size"] == 400  # each round fits the whole training set
    trainer = config["trainer"]
    assert trainer["num_boost_round"] == 8
    assert trainer["booster_params"]["max_depth"] == "3"
    if api == "train":
        assert trainer["params"]["eta"] == 0.2
        assert trainer["evals"] == ["train", "validation"]
    else:
        assert trainer["evals"] == ["validation_0", "validation_1"]
