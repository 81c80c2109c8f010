"""What a Keras job's default hook costs per batch, by kind of batch, once the save budget has
widened the tensors' interval: the batches due only for the outcome sample (every 10th) and
the others (vital signs only, kept in the ring). A timing callback after the hook notes the
process CPU time (every thread: the writer's too) and the main thread's at each batch end;
the figures are the medians over the batches of each kind (a whole-``fit`` ratio moves by
more than the change on a loaded machine; the median of hundreds of batches of one kind does
not).

Each configuration runs in a process of its own: no hook, this tree's hook, and with
``--before SRC`` the hook of another checkout's ``src`` (put first on ``PYTHONPATH``), taking
turns round by round. The budget's factor is set as it stands after a long run (``--factor``
64: the tensors every 640th batch), so every batch in ``--fits`` fits of ``--steps`` batches
is due for the outcome or for nothing but vital signs.

    .venv/bin/python bench/bench_keras_batches.py [--rounds 3] [--before /path/to/other/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def measure(hooked: bool, fits: int, steps: int, factor: int) -> dict[str, float]:
    """In this process: per batch CPU (us) medians by kind of batch."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    callbacks: list[Any] = []
    if hooked:
        import tensortap.keras as tt
        from tensortap.core._save_budget import widened
        from tensortap.jobs._specs import DebuggerHookConfig, Rule, hook_config
        from tensortap.rules import rule_configs

        specs = [Rule.builtin(config) for config in rule_configs.recommended()]
        given = DebuggerHookConfig(hook_parameters={"save_budget": "0.05"})
        out = tempfile.mkdtemp()
        hook = hook_config(out + "/job", given, specs, None).create_hook(tt.KerasHook)
        budget = hook._save_budget
        budget.policy.factor, budget.policy.saving_steps = factor, 100
        hook._recorder.save_config = widened(budget.base, factor)
        callbacks.append(hook)

    class Timer(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[tuple[int, float, float]] = []
            self.last: tuple[float, float] | None = None

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            now = (time.process_time(), time.thread_time())
            if self.last is not None:
                self.rows.append((batch, now[0] - self.last[0], now[1] - self.last[1]))
            self.last = now

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32 * steps, 64)).astype("float32")
    y = rng.integers(0, 10, 32 * steps)
    timer = Timer()
    for fit in range(fits + 1):  # the first fit traces the functions: not counted
        timer.last = None
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[*callbacks, timer])
        if not fit:
            timer.rows = []
    for hook in callbacks:
        hook.close()

    def median(due: bool, column: int) -> float:
        kind = [r[column] for r in timer.rows if (r[0] % 10 == 0) == due and r[0] % 10 != 1]
        return 1e6 * statistics.median(kind)

    return {
        "outcome, process": median(True, 1),
        "outcome, main thread": median(True, 2),
        "other, process": median(False, 1),
        "other, main thread": median(False, 2),
        "mean, process": 1e6 * statistics.mean(r[1] for r in timer.rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fits", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--factor", type=int, default=64, help="the save budget's factor")
    parser.add_argument("--before", help="another checkout's src, run as a configuration too")
    parser.add_argument("--child", choices=["hook", "plain"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        found = measure(args.child == "hook", args.fits, args.steps, args.factor)
        print("RESULT", " ".join(f"{v:.1f}" for v in found.values()))
        return
    configs: dict[str, tuple[str, str | None]] = {"no hook": ("plain", None)}
    configs["job default, this tree"] = ("hook", None)
    if args.before:
        configs["job default, before"] = ("hook", str(Path(args.before).resolve()))
    columns = ["outcome, process", "outcome, main thread", "other, process"]
    columns += ["other, main thread", "mean, process"]
    found: dict[str, list[list[float]]] = {name: [] for name in configs}
    loads = []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for name, (child, src) in configs.items():
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
            command = [sys.executable, str(HERE), "--child", child, "--fits", str(args.fits)]
            command += ["--steps", str(args.steps), "--factor", str(args.factor)]
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
            line = [s for s in done.stdout.splitlines() if s.startswith("RESULT")][-1]
            found[name].append([float(v) for v in line.split()[1:]])
    print(f"load average (1 min) over the rounds: {min(loads):.1f} to {max(loads):.1f}")
    print(f"CPU us per batch, medians of {args.rounds} processes' medians:")
    print(f"{'configuration':26}" + "".join(f"{c:>22}" for c in columns))
    for name, rows in found.items():
        medians = [statistics.median(r[i] for r in rows) for i in range(len(columns))]
        print(f"{name:26}" + "".join(f"{m:22.0f}" for m in medians))


if __name__ == "__main__":
    main()
