"""Digits CNN with BatchNormalization, dropout and ReduceLROnPlateau (Keras model.fit)."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(26)
d = load_digits()
x = (d.images / 16.0).astype("float32")[..., None]
x_train, x_test, y_train, y_test = train_test_split(x, d.target, test_size=0.2, stratify=d.target,
                                                    random_state=26)
x_train, x_val, y_train, y_val = train_test_split(x_train, y_train, test_size=0.15,
                                                  stratify=y_train, random_state=26)

model = keras.Sequential([
    keras.Input(shape=(8, 8, 1)),
    layers.Conv2D(32, 3, padding="same", use_bias=False),
    layers.BatchNormalization(),
    layers.ReLU(),
    layers.Conv2D(32, 3, padding="same", use_bias=False),
    layers.BatchNormalization(),
    layers.ReLU(),
    layers.MaxPooling2D(),
    layers.Flatten(),
    layers.Dropout(0.3),
    layers.Dense(64, activation="relu"),
    layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=15, batch_size=32, verbose=2,
          callbacks=[keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2,
                                                       min_lr=1e-5, verbose=1)])
test_loss, test_acc = model.evaluate(x_test, y_test, verbose=0)
print(f"final test_loss={test_loss:.4f} test_acc={test_acc:.4f}")
