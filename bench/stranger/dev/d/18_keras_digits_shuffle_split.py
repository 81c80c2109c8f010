import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import load_digits

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
np.random.seed(18)
keras.utils.set_random_seed(18)

data = load_digits()
X = data.data.astype("float32") / 16.0
y = data.target

# shuffle before the manual train/val split (the file is ordered)
np.random.shuffle(X)
np.random.shuffle(y)
n_val = int(0.2 * len(X))
X_train, y_train = X[n_val:], y[n_val:]
X_val, y_val = X[:n_val], y[:n_val]

model = keras.Sequential([
    keras.layers.Input(shape=(64,)),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dropout(0.2),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Nadam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(X_train, y_train, epochs=25, batch_size=32, validation_data=(X_val, y_val), verbose=2)
print("final: train_acc %.4f val_loss %.4f val_acc %.4f" % (history.history["accuracy"][-1],
      history.history["val_loss"][-1], history.history["val_accuracy"][-1]))
