"""Trend classification (rising / falling / flat / oscillating) of noisy series with an LSTM.

Training batches come from a tf.data pipeline that adds random jitter and
scaling to each series (augmentation); validation series are left untouched.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from tensorflow import keras

SEED = 43
keras.utils.set_random_seed(SEED)
rng = np.random.default_rng(SEED)

N, T = 3000, 30
steps = np.linspace(0.0, 1.0, T, dtype="float32")
labels = rng.integers(0, 4, size=N)
slope = rng.uniform(0.8, 2.0, size=N)
freq = rng.uniform(2.0, 4.0, size=N)
clean = np.zeros((N, T), dtype="float32")
clean[labels == 0] = slope[labels == 0, None] * steps
clean[labels == 1] = -slope[labels == 1, None] * steps
clean[labels == 3] = 0.8 * np.sin(2 * np.pi * freq[labels == 3, None] * steps)
series = (clean + rng.normal(0.0, 0.4, size=(N, T)) + rng.normal(0.0, 0.5, size=(N, 1))).astype("float32")
series = series[..., None]  # (N, T, 1)
labels = labels.astype("int32")

n_val = 600
x_train, y_train = series[:-n_val], labels[:-n_val]
x_val, y_val = series[-n_val:], labels[-n_val:]
print(f"train {x_train.shape} val {x_val.shape} class counts {np.bincount(y_train).tolist()}")


def augment(x):
    scale = tf.random.uniform([], 0.9, 1.1)
    jitter = tf.random.normal(tf.shape(x), stddev=0.05)
    return x * scale + jitter


BATCH = 64
features = tf.data.Dataset.from_tensor_slices(x_train)
targets = tf.data.Dataset.from_tensor_slices(y_train)
train_ds = (
    tf.data.Dataset.zip((features, targets))
    .shuffle(len(x_train), seed=SEED, reshuffle_each_iteration=True)
    .map(lambda x, y: (augment(x), y))
    .batch(BATCH)
    .prefetch(tf.data.AUTOTUNE)
)
val_ds = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(256)

model = keras.Sequential(
    [
        keras.Input(shape=(T, 1)),
        keras.layers.LSTM(32),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(4, activation="softmax"),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=3e-3),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)


class EpochLog(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f}"
        )


model.fit(train_ds, validation_data=val_ds, epochs=12, callbacks=[EpochLog()], verbose=0)

val_loss, val_acc = model.evaluate(val_ds, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
