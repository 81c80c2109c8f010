"""What the job's default hook costs a GPU loop that never synchronises (issue 43's vital signs).

``bench_gpu.py`` ends every step with a synchronize, so a hook that waits for the device once
a step costs nothing there. A real loop does not wait: the CPU queues the next steps while the
GPU runs, and a read of the step's values at its end stalls that. Here each configuration
trains its own copy of ``bench_gpu``'s GPT for ``--steps`` steps in a row, timed from a
synchronize before to one after (one per round, not per step); configurations take turns
round by round; the figure is the median time a step:

- no hook;
- the default hook (``tt.Hook(out)``: losses, every step's vital signs), the vital signs
  copied to pinned host memory without waiting (the writer waits for the copy);
- the same hook with the vital signs read back as each step ends (as before 9282725), each
  tensor value by its own ``.cpu()`` (the loss and the gradient norm here: two reads a step,
  where that version stacked them into one transfer; the second read finds the device idle).

    python bench/bench_gpu_vitals.py [--small] [--rounds 5] [--steps 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_gpu import Run35
from tensortap.pytorch import _vitals

_arriving_read = _vitals._read


def _reading_read(values: dict[str, Any]) -> tuple[dict[str, float], list[Any]]:
    """The values read back as the step ends (one synchronisation a step): the earlier way."""
    out = {k: float(v) for k, v in values.items() if isinstance(v, float)}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            out[name] = float(value.detach().double().cpu())
    return out, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-vitals-", dir=os.environ.get("BENCH_DIR")))
    try:
        _bench(args, device, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _bench(args: argparse.Namespace, device: torch.device, root: Path) -> None:
    configs = ["no hook", "default hook (arriving)", "default hook (read as the step ends)"]
    runs = {}
    for i, name in enumerate(configs):
        run = Run35(device, root / str(i), args.small, False, "inductor")
        if name != "no hook":
            run.hooked()
        runs[name] = run

    def train(name: str, steps: int) -> float:
        _vitals._read = _reading_read if "read as" in name else _arriving_read  # type: ignore[assignment]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        for _ in range(steps):
            runs[name].step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - began) / steps

    for name in configs:
        train(name, 5)  # warm up
    times: dict[str, list[float]] = {n: [] for n in configs}
    for _ in range(args.rounds):
        for name in configs:
            times[name].append(train(name, args.steps))
    _vitals._read = _arriving_read
    print(f"# {torch.cuda.get_device_name(device) if device.type == 'cuda' else device}")
    print(f"# {args.rounds} rounds x {args.steps} steps in a row each, one synchronize a round")
    print("| configuration | median step | ratio |")
    print("|---|---|---|")
    base = statistics.median(times["no hook"])
    for name in configs:
        m = statistics.median(times[name])
        print(f"| {name} | {m * 1e3:.2f} ms | {m / base:.3f}x |")
    for run in runs.values():
        run.close()


if __name__ == "__main__":
    main()
