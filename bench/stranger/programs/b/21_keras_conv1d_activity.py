"""1-D CNN for synthetic 'accelerometer' activity windows (4 activities), Keras model.fit
with SGD + Nesterov momentum."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(21)
T, C = 64, 3


def windows(n, rng):
    t = np.arange(T)[None, :, None]
    y = rng.integers(0, 4, size=n)
    freq = np.array([0.02, 0.06, 0.12, 0.2])[y][:, None, None]
    amp = np.array([0.3, 1.0, 1.0, 0.6])[y][:, None, None]
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1, C))
    x = amp * np.sin(2 * np.pi * freq * t + phase) + rng.normal(0, 0.5, size=(n, T, C))
    return x.astype("float32"), y


rng = np.random.default_rng(21)
x_train, y_train = windows(2500, rng)
x_val, y_val = windows(500, rng)

model = keras.Sequential([
    keras.Input(shape=(T, C)),
    layers.Conv1D(32, 5, activation="relu"),
    layers.MaxPooling1D(2),
    layers.Conv1D(32, 5, activation="relu"),
    layers.GlobalAveragePooling1D(),
    layers.Dense(32, activation="relu"),
    layers.Dense(4, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.5, momentum=0.9, nesterov=True),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=10, batch_size=32, verbose=2)
vl, va = model.evaluate(x_val, y_val, verbose=0)
print(f"final val_loss={vl:.4f} val_acc={va:.4f}")
