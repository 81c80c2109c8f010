"""Waveform-type classification (sine / square / sawtooth / triangle) with a Conv1D net.

Signals are synthetic, with random frequency, phase, amplitude and noise. The
model is trained with SGD + momentum whose learning rate follows a staircase
exponential decay: halve it every 5 epochs.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras
from keras import layers

SEED = 17
keras.utils.set_random_seed(SEED)
rng = np.random.default_rng(SEED)

N, T = 3200, 64
t = np.linspace(0.0, 1.0, T, dtype="float32")


def waveform(kind, freq, phase):
    p = (freq * t + phase) % 1.0
    if kind == 0:
        return np.sin(2 * np.pi * p)
    if kind == 1:
        return np.sign(np.sin(2 * np.pi * p))
    if kind == 2:
        return 2.0 * p - 1.0
    return 2.0 * np.abs(2.0 * p - 1.0) - 1.0


kinds = rng.integers(0, 4, size=N)
X = np.stack(
    [
        rng.uniform(0.5, 1.5) * waveform(k, rng.uniform(1.5, 4.0), rng.uniform())
        + rng.normal(0.0, 0.35, size=T)
        for k in kinds
    ]
).astype("float32")[..., None]
y = kinds.astype("int32")

n_val = 640
x_train, y_train = X[:-n_val], y[:-n_val]
x_val, y_val = X[-n_val:], y[-n_val:]
print(f"train {x_train.shape} val {x_val.shape}")

BATCH_SIZE = 64
EPOCHS = 20
steps_per_epoch = int(np.ceil(len(x_train) / BATCH_SIZE))

lr_schedule = keras.optimizers.schedules.ExponentialDecay(
    initial_learning_rate=0.05,
    decay_steps=5,  # halve every 5 epochs
    decay_rate=0.5,
    staircase=True,
)

model = keras.Sequential(
    [
        keras.Input(shape=(T, 1)),
        layers.Conv1D(16, 5, padding="same", activation="relu"),
        layers.MaxPooling1D(2),
        layers.Conv1D(32, 5, padding="same", activation="relu"),
        layers.MaxPooling1D(2),
        layers.Conv1D(32, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling1D(),
        layers.Dense(32, activation="relu"),
        layers.Dense(4, activation="softmax"),
    ]
)
model.compile(
    optimizer=keras.optimizers.SGD(learning_rate=lr_schedule, momentum=0.9),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)


def show(epoch, logs):
    print(
        f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
        f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f}"
    )


model.fit(
    x_train,
    y_train,
    batch_size=BATCH_SIZE,
    epochs=EPOCHS,
    validation_data=(x_val, y_val),
    callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=show)],
    verbose=0,
)

val_loss, val_acc = model.evaluate(x_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
