"""The main job for now: train a tiny NumPy model with the framework-free hook, read it back live.

Run with `make demo`. Later issues turn this into a full debugging run with a framework and rules.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

import tensortap as tt

OUT = Path("runs/demo")


def train(hook: tt.Hook, steps: int = 60) -> None:
    """Logistic regression on synthetic data, trained by hand with gradient descent."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 8))
    true_w = rng.standard_normal(8)
    y = (x @ true_w > 0).astype(np.float64)
    w = np.zeros(8)
    hook.set_mode(tt.modes.TRAIN)
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w)))
        loss = -np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))
        grad = x.T @ (p - y) / len(y)
        hook.save_scalar("loss", loss, collections="losses")
        hook.save_tensor("weights/w", w, collections="weights")
        hook.save_tensor("gradients/w", grad, collections="gradients")
        w -= 0.5 * grad
        hook.next_step()
    hook.set_mode(tt.modes.EVAL)
    for _ in range(3):
        p = 1 / (1 + np.exp(-(x @ w)))
        hook.save_scalar("accuracy", float(np.mean((p > 0.5) == y)), collections="metrics")
        hook.next_step()


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    hook = tt.Hook(
        OUT,
        save_config=tt.SaveConfig(save_interval=10),
        include_collections=["losses", "metrics", "weights", "gradients", "scalars"],
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
        norms=["l2"], reductions=["max"], save_raw_tensor=True
    )
    hook.get_collection("losses").save_config = tt.SaveConfig(save_interval=1)
    hook.get_collection("metrics").save_config = tt.SaveConfig(save_interval=1)
    trial = tt.create_trial(OUT)  # opened before training: it follows along
    train(hook)
    status = hook.close()

    written = status.writer
    print(
        f"wrote {written.steps_written} steps ({written.bytes_written} bytes of tensors) to {OUT}"
    )
    print(f"workers: {trial.workers()}  modes: {[m.name for m in trial.modes()]}")
    print(f"all steps loaded: {trial.loaded_all_steps}")
    print(f"train steps saved: {trial.steps(mode=tt.modes.TRAIN)[:8]} ...")
    print(f"losses: {trial.tensor_names(collection='losses')}")
    loss = trial.tensor("loss")
    for step in loss.steps(mode=tt.modes.TRAIN)[::15]:
        print(f"  train step {step:3d}: loss {float(loss.value(step, mode=tt.modes.TRAIN)):.4f}")
    grad = trial.tensor("gradients/w")
    for step in grad.steps():
        print(
            f"  step {step:3d}: |grad|_2 = {grad.reduction_value(step, 'l2'):.5f}, "
            f"weights = {np.round(trial.tensor('weights/w').value(step), 2)[:4]} ..."
        )
    acc = trial.tensor("accuracy").values(mode=tt.modes.EVAL)
    print(f"eval accuracy by eval step: { {s: round(float(v), 3) for s, v in acc.items()} }")
    try:
        loss.value(10_000)
    except tt.exceptions.NoMoreData as exc:
        print(f"asking past the end says: {exc}")
    return 0 if status.healthy else 1


if __name__ == "__main__":
    sys.exit(main())
