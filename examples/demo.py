"""The main job (`make demo`): debug a training run while it runs.

`examples/train_digits.py` is an ordinary PyTorch script: 12 sigmoid layers learning
scikit-learn's handwritten digits. Its gradients vanish (each sigmoid scales them by at most
0.25), so it never learns: its accuracy stays at chance. The demo runs it under `tensortap run`
with five built-in rules evaluated beside training; the diagnosis names the vanishing gradients
as the cause of the accuracy at chance (AccuracyAtChance is the harm that makes the symptoms a
problem). The script is not changed: the hook attaches itself. The demo then
shows each rule's verdict, where the trial and the logs are, and the gradient magnitudes per
layer that explain the verdict.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import tensortap as tt
from tensortap.jobs import shell_command as tensortap_command

HERE = Path(__file__).parent
RULES = [
    "vanishing_gradient",
    "exploding_tensor",
    "loss_not_decreasing:mode=TRAIN,num_steps=20,diff_percent=1",
    "accuracy_at_chance",
    "weights_not_updating",
]


def main() -> int:
    name = f"digits-sigmoid-{time.strftime('%Y%m%d-%H%M%S')}"
    command = [sys.executable, "-m", "tensortap.cli", "run", "--output", "runs", "--name", name]
    for rule in RULES:
        command += ["--rule", rule]
    command += ["--hook-param", "save_interval=5", "--"]
    command += ["python", str(HERE / "train_digits.py"), "--epochs", "3"]
    print("$ tensortap run " + " ".join(command[4:]), flush=True)
    done = subprocess.run(command, check=False)  # the live view draws on this terminal
    job_dir = Path("runs") / name
    if done.returncode not in (0, 3) or not (job_dir / "summary.json").is_file():
        print(f"the job did not run (exit status {done.returncode})", file=sys.stderr)
        return 1

    trial = tt.create_trial(job_dir / "trial")
    first = trial.steps()[0]
    block = trial.step_block(first)
    names = block.names(collection="gradients")
    weights = sorted(
        (n for n in names if n.endswith(".weight")),
        key=lambda n: int(n.split("/")[1].split(".")[0]),
    )
    means = block.reduce(weights, "mean", abs=True)
    print(f"\nwhy: mean |gradient| per layer at step {first} (the input layer first):")
    for name, mean in zip(weights, means, strict=True):
        bar = "#" * max(1, int(np.log10(max(mean, 1e-30)) + 12))
        print(f"  {name:<22} {mean:9.2e}  {bar}")
    ratio = means[-1] / max(means[0], 1e-30)
    print(f"the last layer's gradients are {ratio:.0e} times the first's: the first layers")
    print("barely move, so the model stays at chance (AccuracyAtChance saw it).")
    tensortap = tensortap_command()  # as a new shell finds it (.venv/bin/tensortap)
    print("\nthe healthy twin, for comparison:")
    print(
        f"  {tensortap} run --rule vanishing_gradient -- python examples/train_digits.py "
        "--activation relu --depth 2"
    )
    print("\nwatch it in the browser (the curves, the findings on them, the dead layers):")
    print(f"  {tensortap} serve {job_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
