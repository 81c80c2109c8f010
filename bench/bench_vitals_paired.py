"""What the vital signs cost a PyTorch job, paired in one process: the job's default hook (as
``tensortap run`` attaches it) with the ``vitals`` collection switched on and off by blocks of
steps, the blocks alternating (ABBA), so that a shared machine's drift hits both alike. Reports
the medians over blocks of the CPU time per step, of every thread (the writer's work too) and
of the training thread alone, and their difference. Steadier than fresh processes
(bench_vitals.py) on a loaded machine: no process start, no import, no closing in the figure.

``--no-norm`` leaves the total gradient norm out of the "on" blocks (the rest of the vital
signs still saved): the norm's share of the cost.

    .venv/bin/python bench/bench_vitals_paired.py --model small|mlp|cnn [--blocks 30]
        [--steps 20] [--no-norm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from torch import nn

import tensortap.pytorch as tt
from tensortap.jobs._specs import Rule, hook_config
from tensortap.pytorch import _vitals
from tensortap.rules import rule_configs


def model_and_shape(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    """bench/vitals_train.py's models."""
    if name == "small":
        return nn.Sequential(
            nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
        ), (128, 256)
    if name == "mlp":
        return nn.Sequential(
            nn.Linear(1024, 1536), nn.ReLU(), nn.Linear(1536, 512), nn.ReLU(), nn.Linear(512, 10)
        ), (64, 1024)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128 * 4 * 4, 384), nn.ReLU(), nn.Linear(384, 10),
    ), (64, 3, 32, 32)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["small", "mlp", "cnn"], default="small")
    parser.add_argument("--blocks", type=int, default=30, help="blocks per configuration")
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--no-norm", action="store_true", help="the norm left out of 'on'")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, shape = model_and_shape(args.model)
    xs, ys = torch.randn(8, *shape), torch.randint(0, 10, (8, shape[0]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    specs = [Rule.builtin(c) for c in rule_configs.recommended()]
    hook = hook_config(tempfile.mkdtemp(), None, specs, None).create_hook(tt.Hook)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    included = hook._recorder.include_collections
    take_norm = _vitals.StepVitals.on_gradients
    step = 0

    def block(vitals: bool) -> tuple[float, float]:
        nonlocal step
        if vitals:
            included.add("vitals")
        else:
            included.discard("vitals")
        skip = vitals and args.no_norm
        _vitals.StepVitals.on_gradients = (lambda *a, **k: None) if skip else take_norm  # type: ignore[method-assign]
        cpu, own = time.process_time(), time.thread_time()
        for _ in range(args.steps):
            optimizer.zero_grad()
            loss_fn(model(xs[step % 8]), ys[step % 8]).backward()
            optimizer.step()
            step += 1
        return (time.process_time() - cpu) / args.steps, (time.thread_time() - own) / args.steps

    block(True), block(False)  # warm up
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    for b in range(args.blocks):
        for vitals in (True, False) if b % 2 == 0 else (False, True):
            (on if vitals else off).append(block(vitals))
    hook.close()
    load = os.getloadavg()[0]
    what = "vitals without the norm" if args.no_norm else "vitals"
    print(f"{args.model}: {args.blocks} blocks of {args.steps} steps each way, load {load:.1f}")
    for label, i in (("CPU, every thread", 0), ("CPU, training thread", 1)):
        with_ = statistics.median(x[i] for x in on)
        without = statistics.median(x[i] for x in off)
        print(
            f"  {label:20s} {what} {1e3 * with_:.3f} ms, without {1e3 * without:.3f} ms: "
            f"{with_ / without:.3f}x (+{1e6 * (with_ - without):.0f} us)"
        )


if __name__ == "__main__":
    main()
