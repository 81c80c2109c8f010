"""Overhead of the trainer callbacks (issue 22): a Hugging Face ``Trainer`` (a GPT-2 of 4 layers,
d=128, built from a config, on random tokens) and a Lightning ``Trainer`` (the MLP of
bench_pytorch: 2.4M parameters, batch 64), each with and without ``TensortapCallback``; and a
jitted Optax loop on the same MLP in JAX with and without ``tensortap.jax.record`` (its two
ways: a host callback in the step, or statistics carried out in the optimizer state).

A trainer runs its own loop, so configurations cannot take turns step by step: whole runs
alternate (A B A B ...), and a timing callback measures every step (the time between two
consecutive step ends, so the callback's own work is inside it). The figure is the median step
time over all runs of a configuration, as a ratio to no callback.

    .venv/bin/python bench/bench_trainers.py [--runs 4] [--steps 40] [--only optax]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import tensortap as tt

CONFIGS: dict[str, dict[str, Any] | None] = {
    "no callback": None,
    "callback, default (losses, metrics)": {},
    "callback, weights+gradients every 10 steps": {
        "include_collections": ["weights", "biases", "gradients", "losses", "metrics"],
        "save_config": tt.SaveConfig(save_interval=10),
    },
}


def hf_run(out: Path, config: dict[str, Any] | None, steps: int) -> list[float]:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from tensortap.huggingface import TensortapCallback

    times: list[float] = []

    class Timer(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter())

    torch.manual_seed(0)
    gpt = GPT2Config(vocab_size=512, n_positions=64, n_embd=128, n_layer=4, n_head=4)
    model = GPT2LMHeadModel(gpt)
    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 512, (steps * 16, 64))]
    args = TrainingArguments(
        str(out),
        max_steps=steps,
        per_device_train_batch_size=16,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    callbacks: list[Any] = [Timer()]
    if config is not None:
        callbacks.append(TensortapCallback(**config))
    Trainer(model, args, train_dataset=data, callbacks=callbacks).train()
    return [b - a for a, b in itertools.pairwise(times)][2:]  # after warm-up


def lightning_run(out: Path, config: dict[str, Any] | None, steps: int) -> list[float]:
    import lightning.pytorch as L
    from torch import nn

    from tensortap.lightning import TensortapCallback

    times: list[float] = []

    class Timer(L.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, *args: Any) -> None:
            times.append(time.perf_counter())

    class MLP(L.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(1024, 1536),
                nn.ReLU(),
                nn.Linear(1536, 512),
                nn.ReLU(),
                nn.Linear(512, 10),
            )

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64 * steps, 1024), torch.randint(0, 10, (64 * steps,))
    )
    callbacks: list[Any] = [Timer()]
    if config is not None:
        callbacks.append(TensortapCallback(**config))
    trainer = L.Trainer(
        max_steps=steps,
        default_root_dir=str(out),
        callbacks=callbacks,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(MLP(), torch.utils.data.DataLoader(data, batch_size=64))
    return [b - a for a, b in itertools.pairwise(times)][2:]


def optax_run(
    out: Path, config: dict[str, Any] | None, steps: int, via: str = "callback"
) -> list[float]:
    """The same MLP in JAX, a jitted SGD step; with a hook: ``record(hook, via=via)`` first in
    the Optax chain and the loss saved after each step (losses every step; gradients, when
    included, as their l2 norm: ``via="state"`` carries statistics, not raw values)."""
    import jax
    import jax.numpy as jnp
    import optax

    import tensortap.jax as ttj

    hook = None
    chain = [optax.sgd(0.01)]
    if config is not None:
        hook = ttj.Hook(out, **config)
        hook.get_collection("losses").save_config = ttj.SaveConfig(save_interval=1)
        hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(norms=["l2"])
        chain.insert(0, ttj.record(hook, via=via))
    optimizer = optax.chain(*chain)
    key = jax.random.PRNGKey(0)
    params = []
    for a, b in itertools.pairwise((1024, 1536, 512, 10)):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (a, b)) * 0.02, "b": jnp.zeros(b)})
    state = optimizer.init(params)

    def loss_fn(params: Any, x: Any, y: Any) -> Any:
        for layer in params[:-1]:
            x = jax.nn.relu(x @ layer["w"] + layer["b"])
        logits = x @ params[-1]["w"] + params[-1]["b"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(params: Any, state: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    x = jax.random.normal(key, (64, 1024))
    y = jnp.arange(64) % 10
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        if hook is not None:
            hook.save_scalar("loss", loss, "losses")
            if via == "state":
                hook.end_step(state)
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
    if hook is not None:
        hook.close()
    return times[2:]  # after compiling


WORKLOADS: dict[str, Callable[[Path, dict[str, Any] | None, int], list[float]]] = {
    "Hugging Face Trainer (GPT-2 4x128, batch 16x64)": hf_run,
    "Lightning Trainer (MLP 2.4M, batch 64)": lightning_run,
    "Optax loop, jitted (the same MLP in JAX), record(hook)": optax_run,
    "Optax loop, jitted (the same MLP in JAX), record(hook, via='state')": functools.partial(
        optax_run, via="state"
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4, help="runs per configuration")
    parser.add_argument("--steps", type=int, default=40, help="steps per run")
    parser.add_argument("--only", help="run only the workloads whose name contains this")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "transformers", "tensortap"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    machine = f"{platform.machine()} {platform.processor() or ''}".strip()
    print(f"# {machine}, cpus={os.cpu_count()}, torch {torch.__version__}, 1 torch thread")
    print(f"# {args.runs} runs x {args.steps} steps per configuration, runs alternating")
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        for workload, run in WORKLOADS.items():
            if args.only and args.only.lower() not in workload.lower():
                continue
            times: dict[str, list[float]] = {c: [] for c in CONFIGS}
            for r in range(args.runs):
                for i, (config_name, config) in enumerate(CONFIGS.items()):
                    times[config_name] += run(root / f"{r}-{i}", config, args.steps)
            base = statistics.median(times["no callback"])
            print(f"\n## {workload}")
            print("| configuration | median step | ratio |")
            print("|---|---|---|")
            for config_name, values in times.items():
                median = statistics.median(values)
                print(f"| {config_name} | {median * 1e3:.2f} ms | {median / base:.3f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
