"""Keras regression on a synthetic make_regression problem: functional MLP, Huber loss,
CosineDecay with warm-up, L2 regularisation and a held-out test evaluation."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from keras import layers, regularizers
from sklearn.datasets import make_regression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(99)

X, y = make_regression(n_samples=3000, n_features=12, n_informative=8, noise=10.0, random_state=99)
y = y + 0.002 * y ** 2  # mild non-linearity
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=99)
xs = StandardScaler().fit(X_train)
y_mu, y_sd = y_train.mean(), y_train.std()
X_train, X_test = xs.transform(X_train), xs.transform(X_test)
t_train, t_test = (y_train - y_mu) / y_sd, (y_test - y_mu) / y_sd

EPOCHS, BS = 25, 64
steps = EPOCHS * int(np.ceil(len(X_train) * 0.85 / BS))
schedule = keras.optimizers.schedules.CosineDecay(initial_learning_rate=0.0, decay_steps=steps - 100,
                                                  warmup_target=3e-3, warmup_steps=100, alpha=0.05)

inp = keras.Input(shape=(12,))
h = layers.Dense(128, activation="gelu", kernel_regularizer=regularizers.l2(1e-5))(inp)
h = layers.Dense(64, activation="gelu", kernel_regularizer=regularizers.l2(1e-5))(h)
out = layers.Dense(1)(h)
model = keras.Model(inp, out)
model.compile(optimizer=keras.optimizers.AdamW(learning_rate=schedule, weight_decay=1e-4),
              loss=keras.losses.Huber(delta=1.0), metrics=["mae", "mse"])
hist = model.fit(X_train, t_train, validation_split=0.15, epochs=EPOCHS, batch_size=BS, verbose=2)

pred = model.predict(X_test, verbose=0).ravel() * y_sd + y_mu
r2 = 1 - np.sum((pred - y_test) ** 2) / np.sum((y_test - y_test.mean()) ** 2)
print(f"final val_loss {hist.history['val_loss'][-1]:.4f} val_mae(std units) {hist.history['val_mae'][-1]:.4f}  test R^2 {r2:.4f}")
