"""Breast-cancer screening model: Keras functional API with an adapted
Normalization layer, balanced class weights, validation_split and the usual
EarlyStopping / ReduceLROnPlateau callbacks."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.utils.class_weight import compute_class_weight

SEED = 11
keras.utils.set_random_seed(SEED)

data = load_breast_cancer()
X = data.data.astype("float32")
y = data.target.astype("float32")  # 1 = benign, 0 = malignant
X_train, X_hold, y_train, y_hold = train_test_split(
    X, y, test_size=0.2, stratify=y, random_state=SEED
)

weights = compute_class_weight("balanced", classes=np.array([0.0, 1.0]), y=y_train)
class_weight = {0: float(weights[0]), 1: float(weights[1])}
print("class weights", {k: round(v, 3) for k, v in class_weight.items()})

normalizer = layers.Normalization(axis=-1, name="standardize")
normalizer.adapt(X_train)

inputs = keras.Input(shape=(X.shape[1],), name="features")
x = normalizer(inputs)
x = layers.Dense(32, activation="relu", kernel_regularizer=keras.regularizers.l2(1e-4))(x)
x = layers.Dropout(0.3)(x)
x = layers.Dense(16, activation="relu")(x)
outputs = layers.Dense(1, activation="sigmoid", name="p_benign")(x)
model = keras.Model(inputs, outputs, name="cancer_mlp")

model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss="binary_crossentropy",
    metrics=[keras.metrics.BinaryAccuracy(name="acc")],
)


class EpochLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f} lr {lr:.2e}",
            flush=True,
        )


callbacks = [
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=3, min_lr=1e-5),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=8, restore_best_weights=True),
    EpochLogger(),
]

model.fit(
    X_train,
    y_train,
    validation_split=0.2,
    epochs=40,
    batch_size=32,
    class_weight=class_weight,
    callbacks=callbacks,
    verbose=0,
)

val_loss, val_acc = model.evaluate(X_hold, y_hold, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
