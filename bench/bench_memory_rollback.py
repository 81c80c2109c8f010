"""The cost of Lightning's in-memory rollback checkpoints: the same ``Trainer.fit`` of an MLP
on the CPU without and with ``RollbackCallback(Rollback(MemoryCheckpoints(keep=2),
every=k))`` (no budget: the copies alone), interleaved in rounds, process CPU time, median of
the rounds; and one copy (``capture``) and one restore, timed alone.

    PYTHONPATH=$PWD/src python bench/bench_memory_rollback.py [--steps 200] [--every 10]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    import lightning.pytorch as L

    import tensortap.pytorch as tt
    from tensortap.lightning import RollbackCallback, _fit_state

    width = args.width

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(
                nn.Linear(64, width),
                nn.ReLU(),
                nn.Linear(width, width),
                nn.ReLU(),
                nn.Linear(width, 10),
            )

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    x, y = torch.randn(64 * args.steps, 64), torch.randint(0, 10, (64 * args.steps,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64)

    def fit(memory: bool) -> tuple[float, Any, Any]:
        callbacks = []
        if memory:
            rollback = tt.Rollback(tt.MemoryCheckpoints(keep=2), every=args.every)
            callbacks.append(RollbackCallback(rollback))
        trainer = L.Trainer(
            max_steps=args.steps,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=callbacks,
        )
        module = MLP()
        start = time.process_time()
        trainer.fit(module, train_dataloaders=loader)
        return time.process_time() - start, trainer, module

    times: dict[str, list[float]] = {"plain": [], "memory": []}
    fit(False)  # warm-up
    for _ in range(args.rounds):
        for name in times:
            times[name].append(fit(name == "memory")[0])
    _, trainer, module = fit(False)
    copies, restores = [], []
    for _ in range(10):
        start = time.process_time()
        state = _fit_state.capture(trainer, module)
        copies.append(time.process_time() - start)
        start = time.process_time()
        _fit_state.restore(trainer, module, state, at_batch_end=False)
        restores.append(time.process_time() - start)
    params = sum(p.numel() for p in module.parameters())
    plain, memory = (statistics.median(times[k]) for k in ("plain", "memory"))
    print(f"MLP of {params / 1e6:.2f}M parameters, AdamW, {args.steps} steps, every={args.every}")
    print(
        f"fit CPU s (median of {args.rounds}): plain {plain:.3f}, memory {memory:.3f}, "
        f"ratio {memory / plain:.3f}"
    )
    print(f"per step: plain {1e3 * plain / args.steps:.2f} ms")
    print(
        f"one copy {1e3 * statistics.median(copies):.2f} ms CPU, one restore "
        f"{1e3 * statistics.median(restores):.2f} ms CPU (median of 10)"
    )


if __name__ == "__main__":
    main()
