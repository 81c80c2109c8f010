"""Digits classification with a tf.keras Sequential MLP on standardised pixels.

Keras holds out the last 20% of the (shuffled) training arrays through
validation_split; labels are one-hot encoded for categorical cross-entropy.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler

SEED = 5
tf.keras.utils.set_random_seed(SEED)

digits = load_digits()
rng = np.random.default_rng(SEED)
order = rng.permutation(len(digits.target))
X = digits.data[order].astype("float32")
y = digits.target[order]

n_val = int(0.2 * len(X))
scaler = StandardScaler().fit(X[:-n_val])  # statistics of the training part only
X = scaler.transform(X).astype("float32")
Y = tf.keras.utils.to_categorical(y, num_classes=10)

LEARNING_RATE = 0.1  # Adam step size
BATCH_SIZE = 64

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(256, activation="relu"),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=LEARNING_RATE),
    loss="categorical_crossentropy",
    metrics=["accuracy"],
)

history = model.fit(
    X,
    Y,
    validation_split=0.2,
    epochs=15,
    batch_size=BATCH_SIZE,
    verbose=0,
    callbacks=[
        tf.keras.callbacks.LambdaCallback(
            on_epoch_end=lambda e, l: print(
                "epoch %02d loss %.4f acc %.4f val_loss %.4f val_acc %.4f"
                % (e + 1, l["loss"], l["accuracy"], l["val_loss"], l["val_accuracy"])
            )
        )
    ],
)

val_loss, val_acc = model.evaluate(X[-n_val:], Y[-n_val:], verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
