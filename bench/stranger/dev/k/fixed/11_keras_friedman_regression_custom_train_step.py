"""Friedman #1 regression with a subclassed tf.keras.Model and a custom train_step.

The model is an MLP with a residual block; train_step/test_step compute the MSE
by hand and track MAE with a Keras metric. NumPy arrays are fed directly and
the learning rate decays polynomially over the run.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from sklearn.datasets import make_friedman1
from sklearn.model_selection import train_test_split

SEED = 37
tf.keras.utils.set_random_seed(SEED)

X, y = make_friedman1(n_samples=3000, n_features=10, noise=0.5, random_state=SEED)
X = X.astype("float32")  # features are uniform on [0, 1]
y = y.astype("float32")  # shape (n,)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=SEED)
print(f"train {X_train.shape} val {X_val.shape} target std {y_train.std():.2f}")

BATCH = 64
EPOCHS = 30


def mse(y_true, y_pred):
    return tf.reduce_mean(tf.square(tf.reshape(y_true, (-1, 1)) - y_pred))


class ResidualRegressor(tf.keras.Model):
    def __init__(self, width=64):
        super().__init__()
        self.inp = tf.keras.layers.Dense(width, activation="relu")
        self.block1 = tf.keras.layers.Dense(width, activation="relu")
        self.block2 = tf.keras.layers.Dense(width)
        self.head = tf.keras.layers.Dense(1)
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")
        self.mae = tf.keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x, training=False):
        h = self.inp(x)
        h = tf.nn.relu(h + self.block2(self.block1(h)))
        return self.head(h)

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = mse(y, y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.loss_tracker.update_state(mse(y, y_pred))
        self.mae.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae.result()}


steps = EPOCHS * int(np.ceil(len(X_train) / BATCH))
schedule = tf.keras.optimizers.schedules.PolynomialDecay(
    initial_learning_rate=3e-3, decay_steps=steps, end_learning_rate=1e-4, power=1.0
)
model = ResidualRegressor()
model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=schedule))

log = tf.keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(
        f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} mae {logs['mae']:.4f} "
        f"val_loss {logs['val_loss']:.4f} val_mae {logs['val_mae']:.4f}"
    )
)
model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    batch_size=BATCH,
    epochs=EPOCHS,
    callbacks=[log],
    verbose=0,
)

res = model.evaluate(X_val, y_val, batch_size=BATCH, verbose=0, return_dict=True)
print(f"final val_loss {res['loss']:.4f} val_mae {res['mae']:.4f}")
