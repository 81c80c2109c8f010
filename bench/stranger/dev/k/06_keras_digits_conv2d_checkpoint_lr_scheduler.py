"""Small Conv2D network on the 8x8 digits images.

Rescaling lives inside the model; a step-decay LearningRateScheduler halves the
learning rate every 6 epochs and ModelCheckpoint keeps the best model (by
validation accuracy) in a temporary directory, reloaded for the final report.
"""
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from tensorflow import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 13
keras.utils.set_random_seed(SEED)

digits = load_digits()
images = digits.images.astype("float32")[..., None]  # (n, 8, 8, 1), values 0..16
labels = digits.target.astype("int32")
x_train, x_val, y_train, y_val = train_test_split(
    images, labels, test_size=0.2, random_state=SEED, stratify=labels
)
print(f"train {x_train.shape} val {x_val.shape}")

model = keras.Sequential(
    [
        keras.Input(shape=(8, 8, 1)),
        keras.layers.Rescaling(1.0 / 16.0),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=2e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(),
    metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")],
)


def step_decay(epoch, lr):
    if epoch > 0 and epoch % 6 == 0:
        return lr * 0.5
    return lr


ckpt_dir = tempfile.mkdtemp(prefix="digits_cnn_")
ckpt_path = os.path.join(ckpt_dir, "best.keras")


class PrintEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f} "
            f"lr {logs.get('learning_rate', float('nan')):.2e}"
        )


try:
    model.fit(
        x_train,
        y_train,
        validation_data=(x_val, y_val),
        epochs=20,
        batch_size=32,
        verbose=0,
        callbacks=[
            keras.callbacks.LearningRateScheduler(step_decay),
            keras.callbacks.ModelCheckpoint(
                ckpt_path, monitor="val_acc", mode="max", save_best_only=True
            ),
            PrintEpoch(),
        ],
    )
    best = keras.models.load_model(ckpt_path)
    val_loss, val_acc = best.evaluate(x_val, y_val, verbose=0)
    print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
finally:
    shutil.rmtree(ckpt_dir, ignore_errors=True)
