"""What the guard costs a training step on the CPU (issue 35: the guard without a sync).

Trains the MLP of bench_pytorch (about 2.4M parameters, batch 64, synthetic data, 1 torch
thread), or with ``--model gpt`` a small GPT (4 blocks of 128 wide, 0.8M parameters in 53
tensors, 16 sequences of 64 tokens), with AdamW, fused AdamW and SGD (momentum), without a
guard and with guards,
configurations interleaved round by round so machine noise hits them alike; reports the median
step time of each as a ratio to no guard, and the device memory of the guard's copies.

- "guard, record only": ``action="record", signals=("loss", "grad_norm")``: the decision on the
  device and its reading on the reader thread, no copies of the parameters or state;
- "guard (default)": ``action="skip"``: with AdamW and SGD also the copies of parameters and
  optimizer state before the step, the update norm and the ``torch.where`` undo after it; with
  fused AdamW the optimizer's own skip (``found_inf``), nothing copied;
- "guard (default), compile=True": the update norm and the undo compiled.

    .venv/bin/python bench/bench_guard.py [--model mlp|gpt] [--clock wall|cpu] [--rounds 5]
        [--steps 30]

``--clock cpu`` times each step by the training thread's CPU time (``time.thread_time``), which
a busy machine disturbs less than the wall clock (the guard's reader thread is then not
counted: it runs beside the step).

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


class Block(nn.Module):
    """A pre-norm transformer block as a hand-written GPT has it (separate parameters)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        out: torch.Tensor = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return out


class GPT(nn.Module):
    def __init__(self, vocab: int = 256, width: int = 128, blocks: int = 4, length: int = 64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.Sequential(*(Block(width, 4) for _ in range(blocks)))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits: torch.Tensor = self.head(self.ln(self.blocks(x)))
        return logits.flatten(0, 1)


class Runner:
    def __init__(self, optimizer: str, config: str, model: str = "mlp") -> None:
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(1)
        if model == "gpt":
            self.model: nn.Module = GPT()
            self.x = torch.randint(0, 256, (16, 64), generator=generator)
            self.y = torch.randint(0, 256, (16 * 64,), generator=generator)
        else:
            self.model = nn.Sequential(
                nn.Linear(1024, 1536),
                nn.ReLU(),
                nn.Linear(1536, 512),
                nn.ReLU(),
                nn.Linear(512, 10),
            )
            self.x = torch.randn(64, 1024, generator=generator)
            self.y = torch.randint(0, 10, (64,), generator=generator)
        self.opt = OPTIMIZERS[optimizer](self.model.parameters())
        options = CONFIGS[config]
        self.guard = None if options is None else tt.Guard(self.opt, self.model, **options)

    def round(self, steps: int, clock: Callable[[], float] = time.perf_counter) -> list[float]:
        times = []
        for _ in range(steps):
            start = clock()
            self.opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self.x), self.y)
            loss.backward()
            if self.guard is not None:
                self.guard.observe(loss)
            self.opt.step()
            times.append(clock() - start)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("mlp", "gpt"), default="mlp")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    for optimizer in OPTIMIZERS:
        runners = {config: Runner(optimizer, config, args.model) for config in CONFIGS}
        times: dict[str, list[float]] = {config: [] for config in CONFIGS}
        for runner in runners.values():
            runner.round(3)  # warm up: allocations, the guard's buffers and reader thread
        for _ in range(args.rounds):
            for config, runner in runners.items():
                times[config].extend(runner.round(args.steps, clock))
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
