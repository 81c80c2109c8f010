import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from sklearn.datasets import load_diabetes
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(0)

X, y = load_diabetes(return_X_y=True, scaled=False)
X = X.astype("float32")
y = y.astype("float32")
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=11)

x_norm = layers.Normalization(axis=-1)
x_norm.adapt(X_tr)
y_mean, y_std = float(y_tr.mean()), float(y_tr.std())

inputs = keras.Input(shape=(X.shape[1],))
h = x_norm(inputs)
h = layers.Dense(32, activation="relu", kernel_regularizer=keras.regularizers.l2(1e-3))(h)
h = layers.Dropout(0.1)(h)
h = layers.Dense(16, activation="relu")(h)
outputs = layers.Dense(1)(h)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")


class EpochPrinter(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch:2d}  train_loss {logs['loss']:.4f}  val_loss {logs['val_loss']:.4f}")


y_tr_s = (y_tr - y_mean) / y_std
y_va_s = (y_va - y_mean) / y_std
model.fit(X_tr, y_tr_s, validation_data=(X_va, y_va_s), epochs=40, batch_size=32, verbose=0,
          callbacks=[EpochPrinter(),
                     keras.callbacks.EarlyStopping(patience=8, restore_best_weights=True)])
pred = model.predict(X_va, verbose=0).ravel() * y_std + y_mean
print(f"final val_rmse {np.sqrt(np.mean((pred - y_va) ** 2)):.2f}  val_r2 {r2_score(y_va, pred):.4f}")
