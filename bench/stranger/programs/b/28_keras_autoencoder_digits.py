"""Dense autoencoder (64 -> 32 -> 8 -> 32 -> 64) for the digits images, Keras.
Reports validation reconstruction MSE against the 'predict the mean image' baseline."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(28)
X = (load_digits().data / 16.0).astype("float32")
X_train, X_val = train_test_split(X, test_size=0.2, random_state=28)

inp = keras.Input(shape=(64,))
z = layers.Dense(32, activation="relu")(inp)
z = layers.Dense(8, activation="relu", name="code")(z)
h = layers.Dense(32, activation="relu")(z)
out = layers.Dense(64, activation="sigmoid")(h)
autoencoder = keras.Model(inp, out)
autoencoder.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")
hist = autoencoder.fit(X_train, X_train, validation_data=(X_val, X_val), epochs=25, batch_size=32,
                       verbose=0, callbacks=[keras.callbacks.LambdaCallback(
                           on_epoch_end=lambda e, logs: print(
                               f"epoch {e + 1:2d} loss={logs['loss']:.4f} val_loss={logs['val_loss']:.4f}")
                           if (e + 1) % 5 == 0 else None)])
baseline = float(np.mean((X_val - X_train.mean(0)) ** 2))
val_mse = autoencoder.evaluate(X_val, X_val, verbose=0)
print(f"final val_mse={val_mse:.4f} mean-image baseline mse={baseline:.4f}")
