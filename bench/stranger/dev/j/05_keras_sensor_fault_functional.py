"""Fault-type classifier for a pump test rig: twelve sensor channels in their
raw engineering units (pressures in Pa, temperatures in K, vibration RMS,
flow, ...). Functional tf.keras model with a Normalization preprocessing
layer adapted on the training split, plus ReduceLROnPlateau."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split

SEED = 21
tf.keras.utils.set_random_seed(SEED)

# Synthetic stand-in for the rig log: standardised signals mapped to raw units.
X, y = make_classification(
    n_samples=3000, n_features=12, n_informative=8, n_redundant=2,
    n_classes=4, n_clusters_per_class=2, class_sep=1.2, random_state=SEED,
)
CHANNEL_SCALE = np.array([2.5e4, 0.02, 40.0, 1.0, 350.0, 0.5, 1.2e3, 6.0, 0.05, 90.0, 2.0, 8.0e3])
CHANNEL_OFFSET = np.array([1.0e5, 0.1, 300.0, 0.0, 2.0e3, 1.0, 5.0e3, 20.0, 0.2, 400.0, 5.0, 3.0e4])
X = (X * CHANNEL_SCALE + CHANNEL_OFFSET).astype("float32")
y = y.astype("int32")

X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.25, stratify=y, random_state=SEED
)

layers = tf.keras.layers
norm = layers.Normalization(axis=-1, name="channel_norm")
norm.adapt(X_train)

inputs = tf.keras.Input(shape=(X.shape[1],), name="sensors")
x = norm(inputs)
x = layers.Dense(64, activation="relu", name="fc1")(inputs)
x = layers.BatchNormalization(name="bn1")(x)
x = layers.Dense(64, activation="relu", name="fc2")(x)
x = layers.Dropout(0.1)(x)
logits = layers.Dense(4, name="fault_logits")(x)
model = tf.keras.Model(inputs, logits, name="fault_classifier")

model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=1e-3),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="acc")],
)

log_epoch = tf.keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(
        f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
        f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f}",
        flush=True,
    )
)
model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    epochs=25,
    batch_size=64,
    callbacks=[
        tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=3),
        log_epoch,
    ],
    verbose=0,
)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
