"""Diabetes progression regression with a wide Keras MLP; trained for a fixed, generous
number of epochs and the final model is kept."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(19)
X, y = load_diabetes(return_X_y=True)
X_tr, X_val, y_tr, y_val = train_test_split(X, y, test_size=0.3, random_state=19)
X_tr, X_val = StandardScaler().fit(X_tr).transform(X_tr), StandardScaler().fit(X_tr).transform(X_val)
y_mu, y_sd = y_tr.mean(), y_tr.std()
y_tr, y_val = (y_tr - y_mu) / y_sd, (y_val - y_mu) / y_sd

model = keras.Sequential([
    keras.Input(shape=(10,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="mse", metrics=["mae"])
callbacks = [keras.callbacks.EarlyStopping(monitor="val_loss", patience=15,
                                           restore_best_weights=True)]
hist = model.fit(X_tr, y_tr, validation_data=(X_val, y_val), epochs=250, batch_size=64,
                 callbacks=callbacks, verbose=0)
for e in range(0, len(hist.history["loss"]), 25):
    print(f"epoch {e + 1:3d} train_loss={hist.history['loss'][e]:.4f} val_loss={hist.history['val_loss'][e]:.4f}")
best = int(np.argmin(hist.history["val_loss"]))
print(f"best val_loss during training={hist.history['val_loss'][best]:.4f} at epoch {best + 1}")
val_mse, val_mae = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_mse={val_mse:.4f} val_mae={val_mae:.4f}")
