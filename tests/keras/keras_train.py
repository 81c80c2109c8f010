"""A plain Keras script (no tensortap in it): a deep sigmoid stack, or its healthy twin."""

import sys

import keras
from sklearn.datasets import load_digits

depth, activation = (10, "sigmoid") if sys.argv[1:] == ["sigmoid"] else (2, "relu")
keras.utils.set_random_seed(0)
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32")
layers = [keras.Input((64,))] + [
    keras.layers.Dense(16, activation=activation) for _ in range(depth)
]
model = keras.Sequential([*layers, keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x[:256], y[:256], batch_size=32, epochs=2, verbose=0)
print("trained")
