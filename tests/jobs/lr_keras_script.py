"""A plain Keras script (it never imports tensortap) for the learning-rate verdict: an MLP on
scikit-learn's digits, standardised, trained by SGD for 4 epochs with a validation set. At
--lr 0.05 (the default) it reaches about 87% validation accuracy; at --lr 5, 100x too high,
the loss diverges and overflows (accuracy at chance)."""

import argparse

import keras
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()

keras.utils.set_random_seed(0)
x, y = load_digits(return_X_y=True)
x_train, y_train, x_val, y_val = x[:1200], y[:1200], x[1200:], y[1200:]
mean, std = x_train.mean(0), x_train.std(0)
std[std == 0] = 1.0
x_train = ((x_train - mean) / std).astype("float32")
x_val = ((x_val - mean) / std).astype("float32")
model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(
    optimizer=keras.optimizers.SGD(args.lr),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)
history = model.fit(
    x_train, y_train, batch_size=32, epochs=4, validation_data=(x_val, y_val), verbose=0
)
print("validation accuracy", history.history["val_accuracy"][-1])
