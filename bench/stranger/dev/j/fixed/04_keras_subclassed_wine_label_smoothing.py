"""Wine cultivar classifier: a subclassed keras.Model trained with a
hand-written label-smoothed cross-entropy (the three cultivars are close, so
the targets are softened a little), Adam and EarlyStopping."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from tensorflow import keras
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SEED = 5
NUM_CLASSES = 3
SMOOTHING = 0.1
keras.utils.set_random_seed(SEED)

X, y = load_wine(return_X_y=True)
X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.3, stratify=y, random_state=SEED
)
scaler = StandardScaler().fit(X_train)
X_train = scaler.transform(X_train).astype("float32")
X_val = scaler.transform(X_val).astype("float32")
y_train = y_train.astype("int32")
y_val = y_val.astype("int32")


class WineNet(keras.Model):
    def __init__(self, num_classes, hidden=(64, 32), dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [keras.layers.Dense(h, activation="relu") for h in hidden]
        self.dropout = keras.layers.Dropout(dropout)
        self.classifier = keras.layers.Dense(num_classes)

    def call(self, inputs, training=False):
        x = inputs
        for block in self.blocks:
            x = block(x)
            x = self.dropout(x, training=training)
        return self.classifier(x)


def smoothed_cross_entropy(y_true, logits):
    """Cross-entropy against label-smoothed one-hot targets, from logits."""
    y_true = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
    targets = tf.one_hot(y_true, NUM_CLASSES)
    targets = targets * (1.0 - SMOOTHING) + SMOOTHING / NUM_CLASSES
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    return -tf.reduce_sum(targets * log_probs, axis=-1)


model = WineNet(NUM_CLASSES, name="wine_net")
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=3e-3),
    loss=smoothed_cross_entropy,
    metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")],
)


class EpochLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f}",
            flush=True,
        )


model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    epochs=30,
    batch_size=16,
    callbacks=[
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=6, restore_best_weights=True),
        EpochLogger(),
    ],
    verbose=0,
)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
