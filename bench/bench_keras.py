"""KerasHook overhead on a small CNN's ``fit`` (Keras 3, TensorFlow backend, CPU).

Configurations, each with its own copy of the model, take turns one ``fit`` of ``--steps``
batches at a time so the machine's drift hits them alike; the figure is the median time per
batch over ``--rounds`` rounds, and its ratio to training without the hook.

    .venv/bin/python bench/bench_keras.py [--rounds 5] [--steps 40]
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


VARIABLES = ["weights", "biases", "gradients", "losses", "metrics", "optimizer_variables"]
COMPUTED = ["layers", "relu_activations", "inputs", "outputs", "labels", "predictions"]


def hooks(root: Path) -> dict[str, tt.KerasHook | None]:
    every10, every1 = tt.SaveConfig(save_interval=10), tt.SaveConfig(save_interval=1)
    return {
        "no hook": None,
        "default config (losses)": tt.KerasHook(root / "default"),
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64 * args.steps, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, 64 * args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        configs = hooks(Path(tmp))
        models = {}
        for label in configs:
            keras.utils.set_random_seed(0)
            model = cnn()
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            models[label] = model
        times: dict[str, list[float]] = {label: [] for label in configs}
        for r in range(args.rounds + 1):  # round 0 traces the functions: not counted
            for label, hook in configs.items():
                callbacks = [] if hook is None else [hook]
                start = time.perf_counter()
                models[label].fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=callbacks)
                if r:
                    times[label].append((time.perf_counter() - start) / args.steps)
        for hook in configs.values():
            if hook is not None:
                hook.close()
    base = statistics.median(times["no hook"])
    print(f"small CNN, batches of 64x32x32x3, {args.steps} batches per fit, {args.rounds} rounds:")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"  {label:58s} {1000 * median:7.2f} ms/batch  {median / base:5.3f}x")


if __name__ == "__main__":
    main()
