"""Wine cultivar classifier; data are shuffled before a manual train/validation split."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_wine

keras.utils.set_random_seed(8)
rng = np.random.default_rng(8)

wine = load_wine()
X = wine.data.astype("float32")
y = wine.target.astype("int32")

# the file is sorted by class: shuffle before splitting
perm = rng.permutation(len(X))
X, y = X[perm], y[perm]

n_val = 45
X_train, X_val = X[n_val:], X[:n_val]
y_train, y_val = y[n_val:], y[:n_val]
mean, std = X_train.mean(0), X_train.std(0)
X_train, X_val = (X_train - mean) / std, (X_val - mean) / std

model = keras.Sequential([
    keras.Input(shape=(13,)),
    layers.Dense(32, activation="relu"),
    layers.Dropout(0.2),
    layers.Dense(16, activation="relu"),
    layers.Dense(3, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Nadam(learning_rate=3e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=60, batch_size=16, verbose=2)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final train_loss {history.history['loss'][-1]:.4f} train_acc {history.history['accuracy'][-1]:.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
