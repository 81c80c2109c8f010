"""Write/open/read benchmark of the framework-free hook and trial (issue: foundation).

Writes STEPS steps x TENSORS float32 tensors of 32x32, then opens the trial, lists steps and
names, and reads every value. Prints the median of REPEATS runs of each phase.

    .venv/bin/python bench/bench_format.py [--steps 2000] [--tensors 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import tensortap as tt


def run_once(root: Path, steps: int, tensors: int) -> dict[str, float]:
    out = root / "trial"
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(tensors)]
    names = [f"layer{i}/weights" for i in range(tensors)]
    t0 = time.perf_counter()
    with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.set_mode(tt.modes.TRAIN)
        for _ in range(steps):
            for name, value in zip(names, values):
                hook.save_tensor(name, value)
            hook.next_step()
    t_write = time.perf_counter() - t0

    t0 = time.perf_counter()
    trial = tt.create_trial(out)
    listed_steps = trial.steps()
    listed_names = trial.tensor_names()
    t_open = time.perf_counter() - t0
    assert len(listed_steps) == steps and len(listed_names) == tensors

    t0 = time.perf_counter()
    total = 0
    for name in listed_names:
        tensor = trial.tensor(name)
        for step in listed_steps:
            total += tensor.value(step).size
    t_read = time.perf_counter() - t0
    assert total == steps * tensors * 32 * 32
    nbytes = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    nfiles = sum(1 for f in out.rglob("*") if f.is_file())
    shutil.rmtree(out)
    return {
        "write_s": t_write,
        "open_list_s": t_open,
        "read_all_s": t_read,
        "mib": nbytes / 2**20,
        "files": nfiles,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tensors", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir, prefix="tt-bench-"))
    try:
        runs = [run_once(root, args.steps, args.tensors) for _ in range(args.repeats)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"machine: {platform.node()} {platform.machine()} python {platform.python_version()} "
        f"numpy {np.__version__}"
    )
    print(
        f"{args.steps} steps x {args.tensors} tensors of 32x32 float32, "
        f"median of {args.repeats} runs:"
    )
    for key in ("write_s", "open_list_s", "read_all_s", "mib", "files"):
        vals = [r[key] for r in runs]
        print(
            f"  {key:12s} median {statistics.median(vals):8.3f}   "
            f"(all: {', '.join(f'{v:.3f}' for v in vals)})"
        )


if __name__ == "__main__":
    main()
