"""Diabetes disease-progression regression with a Keras ReLU MLP.

Inputs are standardised; the target stays in its original units (25..346), so
the reported MAE is directly interpretable. ReduceLROnPlateau lowers Adam's
step size when the validation loss stalls; 20% of the rows are held out with
validation_split.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from tensorflow import keras
from sklearn.datasets import load_diabetes
from sklearn.preprocessing import StandardScaler

SEED = 31
keras.utils.set_random_seed(SEED)

X, y = load_diabetes(return_X_y=True, scaled=False)
rng = np.random.default_rng(SEED)
idx = rng.permutation(len(y))
X, y = X[idx].astype("float32"), y[idx].astype("float32")
n_train = int(np.ceil(0.8 * len(y)))
X = StandardScaler().fit(X[:n_train]).transform(X).astype("float32")
print(f"rows {len(y)} train {n_train} target mean {y[:n_train].mean():.1f}")

hidden_kwargs = dict(
    activation="relu",
    kernel_initializer="he_normal",
    bias_initializer=keras.initializers.Constant(-5.0),
)
model = keras.Sequential(
    [
        keras.Input(shape=(10,)),
        keras.layers.Dense(64, **hidden_kwargs),
        keras.layers.Dense(32, **hidden_kwargs),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-2), loss="mse", metrics=["mae"])


def log_epoch(epoch, logs):
    if (epoch + 1) % 5 == 0 or epoch == 0:
        print(
            f"epoch {epoch + 1:03d} loss {logs['loss']:.1f} mae {logs['mae']:.2f} "
            f"val_loss {logs['val_loss']:.1f} val_mae {logs['val_mae']:.2f}"
        )


model.fit(
    X,
    y,
    validation_split=0.2,
    epochs=60,
    batch_size=32,
    verbose=0,
    callbacks=[
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=5, min_lr=1e-4),
        keras.callbacks.LambdaCallback(on_epoch_end=log_epoch),
    ],
)

val_loss, val_mae = model.evaluate(X[n_train:], y[n_train:], verbose=0)
print(f"final val_loss {val_loss:.1f} val_mae {val_mae:.2f}")
