"""Iris classifier, ReLU MLP with a sparse-activation bias init, Adam, small batches."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(9)

iris = load_iris()
X_train, X_val, y_train, y_val = train_test_split(iris.data, iris.target, test_size=0.3,
                                                  random_state=9, stratify=iris.target)
scaler = StandardScaler().fit(X_train)
X_train = scaler.transform(X_train).astype("float32")
X_val = scaler.transform(X_val).astype("float32")

BIAS_INIT = keras.initializers.Zeros()

model = keras.Sequential([
    keras.Input(shape=(4,)),
    layers.Dense(32, activation="relu", bias_initializer=BIAS_INIT),
    layers.Dense(32, activation="relu", bias_initializer=BIAS_INIT),
    layers.Dense(3, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-2),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=40, batch_size=8, verbose=2)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final train_loss {history.history['loss'][-1]:.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
