"""Handwritten digits (8x8) with a functional Keras MLP.

Pixels are rescaled inside the model, the learning rate is reduced when the
validation loss plateaus, and early stopping restores the best weights.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 7
keras.utils.set_random_seed(SEED)

X, y = load_digits(return_X_y=True)
X = X.astype("float32")
y = y.astype("int32")
X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.25, random_state=SEED, stratify=y
)
print(f"train {X_train.shape} val {X_val.shape}")

inputs = keras.Input(shape=(64,), name="pixels")
x = layers.Rescaling(1.0 / 16.0)(inputs)
x = layers.Dense(128, activation="relu")(x)
x = layers.Dropout(0.2)(x)
x = layers.Dense(64, activation="relu")(x)
outputs = layers.Dense(10, activation="softmax")(x)
model = keras.Model(inputs, outputs, name="digits_mlp")

model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)


class EpochPrinter(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f} lr {lr:.2e}"
        )


callbacks = [
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=3, min_lr=1e-5),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=8, restore_best_weights=True),
    EpochPrinter(),
]

model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    epochs=40,
    batch_size=32,
    callbacks=callbacks,
    verbose=0,
)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
