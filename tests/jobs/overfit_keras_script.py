"""A plain Keras script (it never imports tensortap) that overfits: an MLP of 256 units on
200 of scikit-learn's digits, 40% of their labels replaced by random ones, fit for 40 epochs
and validated every 10th (4 evaluation passes, the last one ending training). The validation
loss is lowest at the first pass and rises at each later one as the model learns the noise."""

import keras
import numpy as np
from sklearn.datasets import load_digits

keras.utils.set_random_seed(0)
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32")
x_train, y_train, x_val, y_val = x[:200], y[:200].copy(), x[1200:], y[1200:]
rng = np.random.default_rng(0)
noisy = rng.random(200) < 0.4
y_train[noisy] = rng.integers(0, 10, int(noisy.sum()))
model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
history = model.fit(
    x_train,
    y_train,
    batch_size=16,
    epochs=40,
    validation_data=(x_val, y_val),
    validation_freq=10,
    verbose=0,
)
print("val_loss of each pass:", *(round(v, 3) for v in history.history["val_loss"]))
