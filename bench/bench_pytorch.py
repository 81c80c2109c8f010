"""Overhead of the PyTorch hook on real training steps (issue: PyTorch hook).

Trains an MLP of about 2.4M parameters and a CNN of about 0.8M (batch 64, synthetic data,
1 torch thread) with and without the hook, in one process, configurations interleaved round by
round so that machine noise hits them alike. Reports the median step time of each configuration
as a ratio to training without the hook, and for "every tensor every step" also the floor: the
same training step plus copying the same number of bytes and writing them to this disk.

    .venv/bin/python bench/bench_pytorch.py [--rounds 5] [--steps 30] [--model mlp|cnn|both]
        [--compile]

With ``--compile`` every model is ``torch.compile``d (inductor) and the hook is given the compiled
module; the graph breaks Dynamo counted are reported with the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(1024, 1536), nn.ReLU(), nn.Linear(1536, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128 * 4 * 4, 384),
        nn.ReLU(),
        nn.Linear(384, 10),
    )


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (mlp, (64, 1024)),
    "cnn": (cnn, (64, 3, 32, 32)),
}

CONFIGS: dict[str, dict[str, Any] | None] = {
    "no hook": None,
    "default (losses)": {},
    "training loop facts + losses every 10 steps": {
        "save_config": tt.SaveConfig(save_interval=10),
        "include_collections": ["losses", "training_loop"],
    },
    "weights+gradients every 10 steps": {
        "save_config": tt.SaveConfig(save_interval=10),
        "include_collections": ["weights", "biases", "gradients", "losses"],
    },
    "gradient reductions every step": {
        "save_config": tt.SaveConfig(save_interval=1),
        "reduction_config": tt.ReductionConfig(
            reductions=["min", "max", "mean"], norms=["l1", "l2"]
        ),
        "include_collections": ["gradients", "losses"],
    },
    "every tensor every step": {
        "save_config": tt.SaveConfig(save_interval=1),
        "include_collections": ["all"],
    },
}
FLOOR = "floor: copy + write the same bytes"
COPY_ONLY = "copy the same bytes only"


class Runner:
    """One model, one optimizer, optionally one hook: runs timed training steps."""

    def __init__(
        self, model_name: str, config: dict[str, Any] | None, out: Path, compiled: bool = False
    ) -> None:
        factory, shape = MODELS[model_name]
        torch.manual_seed(0)
        self.model = factory()
        self.runner: nn.Module = torch.compile(self.model) if compiled else self.model
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(shape)
        self.y = torch.randint(0, 10, (shape[0],))
        self.hook = None
        self.out = out
        self.copy_bytes = 0
        self.write = False
        self.sink: Any = None
        if config is not None:
            self.hook = tt.Hook(out, **config)
            self.hook.register_module(self.runner)

    def step(self) -> None:
        self.opt.zero_grad()
        F.cross_entropy(self.runner(self.x), self.y).backward()
        self.opt.step()
        if self.copy_bytes:
            self._copy_and_write()

    def _copy_and_write(self) -> None:
        """The floor: copy params, grads and activation-sized bytes once, write them to disk."""
        assert self.sink is not None
        left = self.copy_bytes
        for p in self.model.parameters():
            for t in (p.detach(), p.grad):
                if t is not None:
                    data = t.clone().numpy()
                    if self.write:
                        self.sink.write(memoryview(data).cast("B"))
                    left -= data.nbytes
        if left > 0:
            data = self.activations[: left // 4].clone().numpy()
            if self.write:
                self.sink.write(memoryview(data).cast("B"))

    def enable_floor(self, bytes_per_step: int, write: bool) -> None:
        self.copy_bytes = bytes_per_step
        self.write = write
        self.activations = torch.randn(max(bytes_per_step // 4, 1))
        self.out.mkdir(parents=True, exist_ok=True)
        self.sink = open(self.out / "floor.bin", "wb", buffering=1 << 20)  # noqa: SIM115

    def round(self, steps: int) -> list[float]:
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - t0)
        return times

    def settle(self) -> None:
        """Between rounds: let the hook publish, and the floor's file reach the disk."""
        if self.hook is not None:
            self.hook.flush()
        if self.sink is not None:
            self.sink.flush()
            os.fsync(self.sink.fileno())
            self.sink.seek(0)
            self.sink.truncate()

    def written(self, steps: int) -> tuple[float, float]:
        """Bytes and files written per training step so far."""
        assert self.hook is not None
        self.hook.flush()
        status = self.hook.status.writer
        files = sum(1 for p in Path(self.hook.out_dir).rglob("*") if p.is_file())
        return status.bytes_written / steps, files / steps

    def close(self) -> None:
        if self.hook is not None:
            self.hook.close()
        if self.sink is not None:
            self.sink.close()


GROUPS = (
    (
        "no hook",
        "default (losses)",
        "training loop facts + losses every 10 steps",
        "weights+gradients every 10 steps",
        "gradient reductions every step",
    ),
    ("no hook", "every tensor every step", FLOOR, COPY_ONLY),
)


def bench(
    model_name: str, rounds: int, steps: int, root: Path, compiled: bool = False
) -> dict[str, Any]:
    """Per group, configurations take turns one step at a time (noise hits them alike)."""
    groups = GROUPS[:1] if compiled else GROUPS
    wanted = {name for group in groups for name in group}
    runners = {
        name: Runner(model_name, config, root / f"{model_name}-{i}", compiled)
        for i, (name, config) in enumerate(CONFIGS.items())
        if name in wanted
    }
    for runner in runners.values():  # warm up (and compile); tells the floor what to copy
        runner.round(3)
    if not compiled:
        per_step = runners["every tensor every step"].written(3)[0]
        runners[FLOOR] = Runner(model_name, None, root / f"{model_name}-floor")
        runners[FLOOR].enable_floor(int(per_step), write=True)
        runners[COPY_ONLY] = Runner(model_name, None, root / f"{model_name}-copy")
        runners[COPY_ONLY].enable_floor(int(per_step), write=False)
    medians: dict[tuple[int, str], float] = {}
    for g, group in enumerate(groups):
        times: dict[str, list[float]] = {name: [] for name in group}
        for _ in range(rounds):
            for _ in range(steps):
                for name in group:
                    times[name].extend(runners[name].round(1))
            for name in group:
                runners[name].settle()
        for name in group:
            medians[(g, name)] = statistics.median(times[name])
    total_steps = 3 + 2 * rounds * steps
    result: dict[str, Any] = {
        "params": sum(p.numel() for p in runners["no hook"].model.parameters()),
        "rows": [],
    }
    for g, group in enumerate(groups):
        base = medians[(g, "no hook")]
        for name in group:
            if g == 1 and name == "no hook":
                continue
            runner = runners[name]
            if runner.hook is not None:
                written = runner.written(total_steps if g == 0 else 3 + rounds * steps)
            else:
                written = (float(runner.copy_bytes if runner.write else 0), 0.0)
            ratio = f"{medians[(g, name)] / base:.3f}x"
            if name == "every tensor every step":
                ratio += f" (vs floor {medians[(g, name)] / medians[(g, FLOOR)]:.3f}x)"
            result["rows"].append((name, medians[(g, name)] * 1e3, ratio, *written))
    for runner in runners.values():
        runner.close()
    return result


def nothing_due_overhead(calls: int = 5000) -> float:
    """Microseconds the hook adds to a step when nothing is due (a tiny model, so the hook's
    cost is not lost in the model's)."""
    model, x = nn.Linear(4, 2), torch.randn(1, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    twin = nn.Linear(4, 2)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.0)
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-"))
    hook = tt.Hook(root / "t", save_config=tt.SaveConfig(save_interval=10**9, start_step=1))
    hook.register_module(model)

    def loop(m: nn.Module, o: torch.optim.Optimizer) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            o.zero_grad()
            m(x).sum().backward()
            o.step()
        return (time.perf_counter() - t0) / calls

    with_hook, without = [], []
    for _ in range(7):  # alternate, then compare medians: single loops vary by more than this
        with_hook.append(loop(model, opt))
        without.append(loop(twin, twin_opt))
    hook.close()
    shutil.rmtree(root, ignore_errors=True)
    return (statistics.median(with_hook) - statistics.median(without)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    parser.add_argument("--compile", action="store_true", help="torch.compile every model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    machine = f"{platform.machine()} {platform.processor() or ''}".strip()
    print(f"# {machine}, cpus={os.cpu_count()}, torch {torch.__version__}, 1 torch thread")
    print(f"# {args.rounds} rounds x {args.steps} steps per configuration; configurations take")
    print("# turns one step at a time within a group; ratios are to 'no hook' of the same group")
    print(f"# hook cost of a step when nothing is due: {nothing_due_overhead():.1f} us")
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        for model_name in ["mlp", "cnn"] if args.model == "both" else [args.model]:
            result = bench(model_name, args.rounds, args.steps, root, args.compile)
            how = ", torch.compile (inductor)" if args.compile else ""
            print(f"\n## {model_name} ({result['params'] / 1e6:.2f}M parameters, batch 64{how})")
            print("| configuration | median step | ratio | bytes/step | files/step |")
            print("|---|---|---|---|---|")
            for name, ms, ratio, nbytes, files in result["rows"]:
                print(f"| {name} | {ms:.2f} ms | {ratio} | {nbytes / 1e6:.2f} MB | {files:.2f} |")
        if args.compile:
            from torch._dynamo.utils import counters

            print(f"\ngraph breaks counted by Dynamo: {sum(counters['graph_break'].values())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
