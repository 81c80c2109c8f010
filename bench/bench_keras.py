"""KerasHook overhead on a small CNN's or a small MLP's ``fit`` (Keras 3, TensorFlow backend,
CPU).

Configurations, each with its own copy of the model, take turns one ``fit`` of ``--steps``
batches at a time so the machine's drift hits them alike; the figures are the median time per
batch over ``--rounds`` rounds (wall clock, and the process's CPU time, which a loaded machine
disturbs less), and their ratio to training without the hook. "job default" is the hook zero
code change attaches under ``tensortap run`` (the recommended rules' collections, every 10th
TRAIN step, and the vital signs at every batch).

    .venv/bin/python bench/bench_keras.py [--model cnn|mlp] [--rounds 5] [--steps 40]
        [--only "job default" --only "vital signs"]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

import tensortap.keras as tt
from tensortap.jobs._specs import DebuggerHookConfig, hook_config
from tensortap.jobs._specs import Rule as RuleSpec
from tensortap.rules import rule_configs


def cnn() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def mlp() -> keras.Model:
    """A step of about a millisecond: where a per-batch cost shows most."""
    return keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )


#: Each model: (constructor, input shape, batch size).
MODELS = {"cnn": (cnn, (32, 32, 3), 64), "mlp": (mlp, (64,), 32)}

VARIABLES = ["weights", "biases", "gradients", "losses", "metrics", "optimizer_variables"]
COMPUTED = ["layers", "relu_activations", "inputs", "outputs", "labels", "predictions"]


def job_hook(root: Path, budget: str | None = None) -> tt.KerasHook:
    """What ``tensortap run`` attaches: the recommended rules' collections; ``budget``: its
    save budget (``"off"``; None: the job's default, core._save_budget)."""
    specs = [RuleSpec.builtin(config) for config in rule_configs.recommended()]
    given = None if budget is None else DebuggerHookConfig(hook_parameters={"save_budget": budget})
    out = str(root / ("job" if budget is None else f"job-{budget}"))
    return hook_config(out, given, specs, None).create_hook(tt.KerasHook)


def hooks(root: Path) -> dict[str, tt.KerasHook | None]:
    every10, every1 = tt.SaveConfig(save_interval=10), tt.SaveConfig(save_interval=1)
    return {
        "no hook": None,
        "vital signs only": tt.KerasHook(root / "vitals", include_collections=["vitals"]),
        "default config (losses, vital signs)": tt.KerasHook(root / "default"),
        "job default (zero code change)": job_hook(root),
        "job default, save budget off": job_hook(root, "off"),
        "weights + gradients every 10 steps": tt.KerasHook(
            root / "wg", save_config=every10, include_collections=["weights", "gradients", "losses"]
        ),
        "everything every step": tt.KerasHook(
            root / "all", save_config=every1, include_collections=VARIABLES
        ),
        "everything every step, with activations and layer outputs": tt.KerasHook(
            root / "acts", save_config=every1, include_collections=VARIABLES + COMPUTED
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument(
        "--only", action="append", default=[], help="measure only configurations named so"
    )
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    make, shape, batch = MODELS[args.model]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * args.steps, *shape)).astype("float32")
    y = rng.integers(0, 10, batch * args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        configs = hooks(Path(tmp))
        for label in [c for c in configs if args.only and c != "no hook"]:
            if not any(part in label for part in args.only):
                hook = configs.pop(label)
                if hook is not None:
                    hook.close()
        models = {}
        for label in configs:
            keras.utils.set_random_seed(0)
            model = make()
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            models[label] = model
        times: dict[str, list[float]] = {label: [] for label in configs}
        cpu: dict[str, list[float]] = {label: [] for label in configs}
        for r in range(args.rounds + 1):  # round 0 traces the functions: not counted
            for label, hook in configs.items():
                callbacks = [] if hook is None else [hook]
                start, start_cpu = time.perf_counter(), time.process_time()
                models[label].fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)
                if r:
                    times[label].append((time.perf_counter() - start) / args.steps)
                    cpu[label].append((time.process_time() - start_cpu) / args.steps)
        for hook in configs.values():
            if hook is not None:
                hook.close()
    base, base_cpu = statistics.median(times["no hook"]), statistics.median(cpu["no hook"])
    size = "x".join(map(str, shape))
    print(f"small {args.model.upper()}, batches of {batch}x{size}, {args.steps} batches per fit, "
          f"{args.rounds} rounds (wall; CPU):")  # fmt: skip
    for label, values in times.items():
        median, median_cpu = statistics.median(values), statistics.median(cpu[label])
        print(
            f"  {label:58s} {1000 * median:7.2f} ms/batch  {median / base:5.3f}x;"
            f"  {1000 * median_cpu:7.2f} ms  {median_cpu / base_cpu:5.3f}x"
        )


if __name__ == "__main__":
    main()
