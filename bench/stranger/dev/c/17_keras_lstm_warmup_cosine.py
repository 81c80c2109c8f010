"""Keras LSTM: classify which of 4 frequencies generated a noisy sequence; warm-up + cosine decay schedule."""
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(17)
rng = np.random.default_rng(17)


def make(n, T=40):
    freqs = np.array([0.1, 0.2, 0.3, 0.4])
    labels = rng.integers(0, 4, n)
    phase = rng.uniform(0, 2 * np.pi, n)
    t = np.arange(T)
    x = np.sin(freqs[labels, None] * t[None] * np.pi + phase[:, None]) + 0.4 * rng.normal(size=(n, T))
    return x[..., None].astype("float32"), labels


x_train, y_train = make(1600)
x_val, y_val = make(600)

BATCH, EPOCHS = 32, 10
steps = EPOCHS * int(np.ceil(len(x_train) / BATCH))
schedule = keras.optimizers.schedules.CosineDecay(initial_learning_rate=0.0, decay_steps=steps - 100,
                                                  warmup_target=3e-3, warmup_steps=100, alpha=0.05)
model = keras.Sequential([
    keras.Input((40, 1)),
    keras.layers.LSTM(32),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(4, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=BATCH, epochs=EPOCHS, validation_data=(x_val, y_val),
                    shuffle=True, verbose=2)
print("final val_accuracy:", round(history.history["val_accuracy"][-1], 4),
      "val_loss:", round(history.history["val_loss"][-1], 4))
