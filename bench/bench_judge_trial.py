"""How long ``judge_trial`` takes over a finished trial (issue 49, item 2: rules written once).

A trial of ``--steps`` steps is written once (cached under ``--dir``): a scalar loss at every
step, four gradients of 16 values saved with their ``l2`` and ``abs_mean`` reductions at every
TRAIN step, and 10 EVAL steps in every 500. Then ``judge_trial`` runs over it, in a fresh
trial object each time, with: the recommended set; the rules the engine judges in bulk (they
declare the numbers they read); the set an imported run is judged with. Process CPU time (the
trial's index load included), median of ``--repeats``.

    PYTHONPATH=src .venv/bin/python bench/bench_judge_trial.py [--steps 20000] [--repeats 3]

Run it with another tree's ``src`` on ``PYTHONPATH`` to compare (it uses the public API only).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import tensortap as tt
from tensortap.diagnosis import judge_trial
from tensortap.rules import create_rule

#: The rules the engine judges in bulk, and the set an imported run (its scalars) is judged with.
SETS = {
    "engine": (
        "ExplodingTensor", "NaNInfRootCause", "VanishingGradient", "GradientNormSpike",
        "LossNotDecreasing", "LossSpike", "Overfit", "Overtraining", "WeightsNotUpdating",
        "PoorWeightInitialization", "FrozenLayer",
    ),
    "imported": (
        "ExplodingTensor", "NaNInfRootCause", "LossNotDecreasing", "LossSpike", "Overfit",
        "Overtraining",
    ),
}  # fmt: skip


def write(path: Path, steps: int) -> None:
    """The trial (see the module docstring)."""
    f32 = np.float32
    saved = ["losses", "gradients", "biases", "weights"]
    config = tt.SaveConfig(save_interval=1)
    with tt.Hook(path, save_config=config, include_collections=saved) as hook:
        hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
            norms=["l2"], abs_reductions=["mean"]
        )
        rng = np.random.default_rng(1)
        loss = 2.0
        for t in range(steps):
            evaluating = t % 500 >= 490
            hook.set_mode(tt.modes.EVAL if evaluating else tt.modes.TRAIN)
            loss = max(0.05, loss * float(rng.uniform(0.97, 1.03)))
            hook.save_tensor("loss", f32(loss), collections="losses")
            if not evaluating:
                for i in range(4):
                    grad = rng.normal(size=16).astype(f32)
                    hook.save_tensor(f"gradients/layer{i}.weight", grad, collections="gradients")
            hook.next_step()


def cpu_seconds(path: Path, names: tuple[str, ...] | None) -> float:
    """CPU time of one ``judge_trial`` over a fresh trial (``names``: None, the recommended set)."""
    trial = tt.create_trial(path)
    rules = None if names is None else [create_rule(n, trial) for n in names]
    started = time.process_time()
    judge_trial(trial, rules)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "bench-judge-trial"))
    ns = parser.parse_args()
    path = Path(ns.dir) / f"steps-{ns.steps}"
    if not path.exists():
        write(path, ns.steps)
    for label, names in (("recommended", None), *SETS.items()):
        times = [cpu_seconds(path, names) for _ in range(ns.repeats)]
        shown = ", ".join(f"{t:.3f}" for t in times)
        print(f"{label:12s} median {statistics.median(times):.3f} s CPU ({shown})")


if __name__ == "__main__":
    main()
