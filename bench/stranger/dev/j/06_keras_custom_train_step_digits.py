"""Digits classifier written as a subclassed keras.Model with its own
train_step / test_step (gradient-norm clipping done by hand), fed from a
tf.data pipeline; a Rescaling preprocessing layer maps raw 0-16 pixel
intensities to [0, 1]; ReduceLROnPlateau and EarlyStopping watch val_loss."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from tensorflow import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 13
BATCH_SIZE = 32
EPOCHS = 20
CLIP_NORM = 5.0
keras.utils.set_random_seed(SEED)

digits = load_digits()
X = digits.data.astype("float32")  # raw intensities 0..16
y = digits.target.astype("int32")
X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.2, stratify=y, random_state=SEED
)

train_ds = (
    tf.data.Dataset.from_tensor_slices((X_train, y_train))
    .shuffle(len(X_train), seed=SEED)
    .batch(BATCH_SIZE)
    .prefetch(tf.data.AUTOTUNE)
)
val_ds = tf.data.Dataset.from_tensor_slices((X_val, y_val)).batch(128)


class DigitNet(keras.Model):
    def __init__(self, num_classes=10, **kwargs):
        super().__init__(**kwargs)
        self.rescale = keras.layers.Rescaling(1.0 / 16.0)
        self.fc1 = keras.layers.Dense(128, activation="relu")
        self.drop = keras.layers.Dropout(0.25)
        self.fc2 = keras.layers.Dense(64, activation="relu")
        self.head = keras.layers.Dense(num_classes)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.acc = keras.metrics.SparseCategoricalAccuracy(name="acc")

    def call(self, x, training=False):
        x = self.rescale(x)
        x = self.fc1(x)
        x = self.drop(x, training=training)
        x = self.fc2(x)
        return self.head(x)

    @property
    def metrics(self):
        return [self.loss_tracker, self.acc]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = self.loss_fn(y, logits)
        grads = tape.gradient(loss, self.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, CLIP_NORM)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        self.acc.update_state(y, logits)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        logits = self(x, training=False)
        self.loss_tracker.update_state(self.loss_fn(y, logits))
        self.acc.update_state(y, logits)
        return {m.name: m.result() for m in self.metrics}


model = DigitNet(name="digit_net")
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3))


class EpochLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f} lr {lr:.1e}",
            flush=True,
        )


model.fit(
    train_ds,
    validation_data=val_ds,
    epochs=EPOCHS,
    callbacks=[
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.3, patience=2, min_lr=1e-5),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, restore_best_weights=True),
        EpochLogger(),
    ],
    verbose=0,
)

results = model.evaluate(val_ds, verbose=0, return_dict=True)
print(f"final val_loss {results['loss']:.4f} val_acc {results['acc']:.4f}")
