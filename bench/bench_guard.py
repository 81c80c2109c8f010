"""What the guard costs a training step on the CPU (issue 35: the guard without a sync).

Trains the MLP of bench_pytorch (about 2.4M parameters, batch 64, synthetic data, 1 torch
thread) with AdamW, fused AdamW and SGD (momentum), without a guard and with guards,
configurations interleaved round by round so machine noise hits them alike; reports the median
step time of each as a ratio to no guard, and the device memory of the guard's copies.

- "guard, record only": ``action="record", signals=("loss", "grad_norm")``: the decision on the
  device and its reading on the reader thread, no copies of the parameters or state;
- "guard (default)": ``action="skip"``: with AdamW and SGD also the copies of parameters and
  optimizer state before the step, the update norm and the ``torch.where`` undo after it; with
  fused AdamW the optimizer's own skip (``found_inf``), nothing copied;
- "guard (default), compile=True": the update norm and the undo compiled.

    .venv/bin/python bench/bench_guard.py [--rounds 5] [--steps 30]

On a GPU, bench/bench_gpu.py's "guard" configuration times the default guard.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
    "AdamW fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9),
}
CONFIGS: dict[str, dict[str, Any] | None] = {
    "no guard": None,
    "guard, record only": {"action": "record", "signals": ("loss", "grad_norm")},
    "guard (default)": {},
    "guard (default), compile=True": {"compile": True},
}


class Runner:
    def __init__(self, optimizer: str, config: str) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Linear(1024, 1536), nn.ReLU(), nn.Linear(1536, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        self.opt = OPTIMIZERS[optimizer](self.model.parameters())
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 1024, generator=generator)
        self.y = torch.randint(0, 10, (64,), generator=generator)
        options = CONFIGS[config]
        self.guard = None if options is None else tt.Guard(self.opt, self.model, **options)

    def round(self, steps: int) -> list[float]:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self.x), self.y)
            loss.backward()
            if self.guard is not None:
                self.guard.observe(loss)
            self.opt.step()
            times.append(time.perf_counter() - start)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for optimizer in OPTIMIZERS:
        runners = {config: Runner(optimizer, config) for config in CONFIGS}
        times: dict[str, list[float]] = {config: [] for config in CONFIGS}
        for runner in runners.values():
            runner.round(3)  # warm up: allocations, the guard's buffers and reader thread
        for _ in range(args.rounds):
            for config, runner in runners.items():
                times[config].extend(runner.round(args.steps))
        base = statistics.median(times["no guard"])
        params = sum(p.numel() * p.element_size() for p in runners["no guard"].model.parameters())
        print(f"{optimizer}: {params / 2**20:.1f} MiB of parameters, step {base * 1e3:.2f} ms")
        for config, runner in runners.items():
            ratio = statistics.median(times[config]) / base
            copies = runner.guard.status.snapshot_bytes if runner.guard is not None else 0
            print(f"  {config:<22} {ratio:.3f}x   copies {copies / 2**20:.1f} MiB")
            if runner.guard is not None:
                runner.guard.remove()


if __name__ == "__main__":
    main()
