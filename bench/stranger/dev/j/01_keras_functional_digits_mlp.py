"""Handwritten-digit classifier: a functional-API MLP wrapped in a keras.Model
subclass whose train_step/test_step compute the loss with TensorFlow's fused
cross-entropy op.

The head keeps a softmax so that `model.predict` hands back class
probabilities to the serving code.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 7
EPOCHS = 15
BATCH_SIZE = 64
keras.utils.set_random_seed(SEED)

digits = load_digits()
X = (digits.data / 16.0).astype("float32")
y = digits.target.astype("int32")
X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.25, stratify=y, random_state=SEED
)


class FusedXentModel(keras.Model):
    """Functional model with a hand-written fit loop (Keras 'customizing fit' style)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.acc_metric = keras.metrics.SparseCategoricalAccuracy(name="acc")

    @property
    def metrics(self):
        return [self.loss_tracker, self.acc_metric]

    def _loss(self, y, outputs):
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=outputs)
        return tf.reduce_mean(per_example)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            outputs = self(x, training=True)
            loss = self._loss(y, outputs)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        self.acc_metric.update_state(y, outputs)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        outputs = self(x, training=False)
        self.loss_tracker.update_state(self._loss(y, outputs))
        self.acc_metric.update_state(y, outputs)
        return {m.name: m.result() for m in self.metrics}


def build_model(num_features: int, num_classes: int) -> keras.Model:
    inputs = keras.Input(shape=(num_features,), name="pixels")
    x = layers.Dense(128, activation="relu", name="dense_1")(inputs)
    x = layers.Dropout(0.2)(x)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(num_classes, activation="softmax", name="head")(x)
    return FusedXentModel(inputs, outputs, name="digits_mlp")


model = build_model(X.shape[1], 10)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.02, momentum=0.9))


class EpochLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f}",
            flush=True,
        )


model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    epochs=EPOCHS,
    batch_size=BATCH_SIZE,
    callbacks=[EpochLogger()],
    verbose=0,
)

results = model.evaluate(X_val, y_val, verbose=0, return_dict=True)
print(f"final val_loss {results['loss']:.4f} val_acc {results['acc']:.4f}")
