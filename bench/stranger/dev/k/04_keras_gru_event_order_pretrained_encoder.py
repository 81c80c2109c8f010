"""Event-order classification on synthetic two-channel sensor traces.

Each trace holds a spike on channel A and a spike on channel B; the label says
whether A fired before B. A Conv1D+GRU encoder can be warm-started from weights
saved by an earlier pre-training run (if present); a small head classifies.
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

SEED = 21
keras.utils.set_random_seed(SEED)
rng = np.random.default_rng(SEED)

N, T = 3000, 40


def make_traces(n):
    x = rng.normal(0.0, 0.3, size=(n, T, 2)).astype("float32")
    t_a = rng.integers(2, T - 2, size=n)
    t_b = rng.integers(2, T - 2, size=n)
    same = t_a == t_b
    t_b[same] = (t_b[same] + 5) % (T - 4) + 2
    x[np.arange(n), t_a, 0] += 2.5
    x[np.arange(n), t_b, 1] += 2.5
    return x, (t_a < t_b).astype("float32")


X, y = make_traces(N)
n_val = 600
X_train, y_train = X[:-n_val], y[:-n_val]
X_val, y_val = X[-n_val:], y[-n_val:]
print(f"train {X_train.shape} val {X_val.shape} positives {y_train.mean():.2f}")

PRETRAINED = os.path.join(tempfile.gettempdir(), "event_encoder_pretrained.weights.h5")

encoder = keras.Sequential(
    [
        keras.Input(shape=(T, 2)),
        layers.Conv1D(16, 5, padding="same", activation="relu"),
        layers.GRU(32),
    ],
    name="encoder",
)
if os.path.exists(PRETRAINED):
    print(f"warm-starting encoder from {PRETRAINED}")
    encoder.load_weights(PRETRAINED)
encoder.trainable = False  # keep the pre-trained encoder fixed, fit only the head

inputs = keras.Input(shape=(T, 2))
z = encoder(inputs)
z = layers.Dense(32, activation="relu")(z)
outputs = layers.Dense(1, activation="sigmoid")(z)
model = keras.Model(inputs, outputs)
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=2e-3),
    loss="binary_crossentropy",
    metrics=["accuracy"],
)

train_ds = (
    tf.data.Dataset.from_tensor_slices((X_train, y_train))
    .shuffle(len(X_train), seed=SEED)
    .batch(64)
    .prefetch(tf.data.AUTOTUNE)
)
val_ds = tf.data.Dataset.from_tensor_slices((X_val, y_val)).batch(256)


class Log(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f}"
        )


model.fit(train_ds, validation_data=val_ds, epochs=10, callbacks=[Log()], verbose=0)

val_loss, val_acc = model.evaluate(val_ds, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
