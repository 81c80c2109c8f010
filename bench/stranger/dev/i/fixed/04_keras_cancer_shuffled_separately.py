"""Breast-cancer diagnosis with a Keras MLP; manual shuffle + hold-out split before fitting."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_breast_cancer

SEED = 21
keras.utils.set_random_seed(SEED)
rng = np.random.default_rng(SEED)

data = load_breast_cancer()
X = data.data.astype("float32")
y = data.target.astype("float32")

# shuffle, then take the last 20% as the validation split
perm = rng.permutation(len(X))
X, y = X[perm], y[perm]
n_val = int(0.2 * len(X))
X_train, X_val = X[:-n_val], X[-n_val:]
y_train, y_val = y[:-n_val], y[-n_val:]

norm = layers.Normalization()
norm.adapt(X_train)

model = keras.Sequential([
    keras.Input(shape=(X.shape[1],)),
    norm,
    layers.Dense(64, activation="relu", kernel_regularizer=keras.regularizers.l2(1e-4)),
    layers.Dropout(0.3),
    layers.Dense(32, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
              loss="binary_crossentropy", metrics=["accuracy"])


class PrintEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
              f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f}")


model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=40, batch_size=16,
          verbose=0, callbacks=[PrintEpoch()])
val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"majority-class val_acc {max(y_val.mean(), 1 - y_val.mean()):.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
