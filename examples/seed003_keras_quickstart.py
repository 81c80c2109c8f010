"""Seed 003, the quick start: a tf.keras model with the hook as a callback, then a trial.

The seed's Python example, unchanged but for its import and its data: a Keras model learns
scikit-learn's digits (shipped with the package, where the seed loads MNIST), `KerasHook` is
passed to `fit` and `evaluate`, and a trial reads back what was saved. (The seed's
`trial.tensor('CrossEntropyLoss:0')` names a TensorFlow 1 graph tensor; Keras 3 calls the loss
`loss`.)

    .venv/bin/python examples/seed003_keras_quickstart.py [--out_dir runs/seed003] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter

import numpy as np
from sklearn.datasets import load_digits

import tensortap.keras as smd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", default="runs/seed003")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one epoch (the tests' mode)")
    args = parser.parse_args(argv)
    shutil.rmtree(args.out_dir, ignore_errors=True)

    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    (x_train, y_train), (x_test, y_test) = (x[:1500], y[:1500]), (x[1500:], y[1500:])

    hook = smd.KerasHook(out_dir=args.out_dir)
    model = tf.keras.models.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(
        x_train, y_train, epochs=1 if args.quick else args.epochs, callbacks=[hook], verbose=0
    )
    model.evaluate(x_test, y_test, callbacks=[hook], verbose=0)

    trial = smd.create_trial(out_dir=args.out_dir)
    print(f"Saved tensor values for {trial.tensors()}")
    loss = trial.tensor("loss")
    print(f"Loss values were {loss}: {[round(float(v), 4) for v in loss.values().values()]}")
    print(f"eval loss: {[round(float(v), 4) for v in loss.values(mode=smd.modes.EVAL).values()]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
