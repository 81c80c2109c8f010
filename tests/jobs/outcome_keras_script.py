"""A plain Keras script (it never imports tensortap) for the outcome tests: an MLP on
scikit-learn's digits, fit for 4 epochs with a validation set. --shuffle trains on labels
shuffled against the inputs (held-out accuracy at chance); --onehot compiles
categorical_crossentropy on one-hot labels instead of sparse ones; --own adds a callback of the
script's own that saves, after every training batch, the labels of the first 50 training rows
as both labels and predictions (through ``tensortap.keras.get_hook()``: the one tensortap
import)."""

import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--shuffle", action="store_true")
parser.add_argument("--onehot", action="store_true")
parser.add_argument("--own", action="store_true")
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
model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=loss, metrics=["accuracy"])
callbacks = []
if args.own:
    import tensortap.keras as tt

    class OwnOutcome(keras.callbacks.Callback):
        """Saves the script's own outcome: 50 rows, as classes."""

        def on_train_batch_end(self, batch, logs=None):
            own = np.asarray(y[:50], dtype=np.int32)
            hook = tt.get_hook()
            assert hook is not None, "run this script under tensortap run"
            hook.save_tensor("labels", own, "labels")
            hook.save_tensor("predictions", own, "predictions")

    callbacks = [OwnOutcome()]
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
