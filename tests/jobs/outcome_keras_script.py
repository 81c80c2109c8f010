"""A plain Keras script (it never imports tensortap) for the outcome tests: an MLP on
scikit-learn's digits, fit for 4 epochs with a validation set. --shuffle trains on labels
shuffled against the inputs (held-out accuracy at chance); --onehot compiles
categorical_crossentropy on one-hot labels instead of sparse ones; --binary learns "5 or more"
with one sigmoid output and binary_crossentropy; --own saves labels and
predictions itself at every batch, smdebug-style (``get_hook().save_tensor`` from a callback:
the one place this script names tensortap), five 3s each."""

import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--shuffle", action="store_true")
parser.add_argument("--onehot", action="store_true")
parser.add_argument("--own", action="store_true")
parser.add_argument("--binary", action="store_true")
args = parser.parse_args()

keras.utils.set_random_seed(0)
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32")
x_train, y_train, x_val, y_val = x[:1200], y[:1200], x[1200:], y[1200:]
if args.shuffle:
    y_train = np.random.default_rng(2).permutation(y_train)
loss = "sparse_categorical_crossentropy"
if args.onehot:
    y_train, y_val = np.eye(10)[y_train], np.eye(10)[y_val]
    loss = "categorical_crossentropy"
if args.binary:
    y_train, y_val = (y_train >= 5).astype("float32"), (y_val >= 5).astype("float32")
    loss = "binary_crossentropy"
model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid")
        if args.binary
        else keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=loss, metrics=["accuracy"])


class OwnOutcome(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        from tensortap.keras import get_hook

        hook = get_hook()
        if hook is not None:
            hook.save_tensor("labels", np.full(5, 3), "labels")
            hook.save_tensor("predictions", np.full(5, 3), "predictions")


callbacks = [OwnOutcome()] if args.own else []
history = model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=4,
    validation_data=(x_val, y_val),
    verbose=0,
    callbacks=callbacks,
)
print("validation accuracy", history.history["val_accuracy"][-1])
