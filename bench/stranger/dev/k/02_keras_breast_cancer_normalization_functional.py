"""Breast-cancer diagnosis (30 tabular features) with a functional Keras model.

A Normalization layer is adapted on the training features so the model can be
served on raw measurements; early stopping watches the validation loss.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

SEED = 11
keras.utils.set_random_seed(SEED)

data = load_breast_cancer()
X = data.data.astype("float32")
y = data.target.astype("float32")
X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.3, random_state=SEED, stratify=y
)
print(f"train {X_train.shape} val {X_val.shape} positives {y_train.mean():.2f}")

# per-feature mean / variance learned from the training split only
norm = layers.Normalization(axis=-1, name="feature_norm")
norm.adapt(X_train)

inputs = keras.Input(shape=(X.shape[1],), name="measurements")
h = norm(inputs)
h = layers.Dense(32, activation="relu")(inputs)
h = layers.Dropout(0.1)(h)
h = layers.Dense(16, activation="relu")(h)
outputs = layers.Dense(1, activation="sigmoid", name="malignant_prob")(h)
model = keras.Model(inputs, outputs)

model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss="binary_crossentropy",
    metrics=[keras.metrics.BinaryAccuracy(name="acc")],
)

printer = keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(
        f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
        f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f}"
    )
)
early = keras.callbacks.EarlyStopping(monitor="val_loss", patience=6, restore_best_weights=True)

model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    epochs=40,
    batch_size=16,
    callbacks=[early, printer],
    verbose=0,
)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
