import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(0)

data = load_wine()
X = data.data.astype("float32")
y = data.target
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.3, random_state=4, stratify=y)

norm = layers.Normalization(axis=-1)
norm.adapt(X_tr)


class WineNet(keras.Model):
    def __init__(self, normalizer, n_classes=3):
        super().__init__()
        self.normalizer = normalizer
        self.hidden1 = layers.Dense(32, activation="relu")
        self.hidden2 = layers.Dense(16, activation="relu")
        self.out = layers.Dense(n_classes)

    def call(self, x, training=False):
        h = self.normalizer(x)
        h = self.hidden1(h)
        h = self.hidden2(h)
        return self.out(h)


train_ds = tf.data.Dataset.from_tensor_slices((X_tr, y_tr)).shuffle(len(X_tr), seed=0).batch(16)
val_ds = tf.data.Dataset.from_tensor_slices((X_va, y_va)).batch(64)

model = WineNet(norm)
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])


class PrintLoss(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch:2d}  train_loss {logs['loss']:.4f}  train_acc {logs['accuracy']:.4f}")


model.fit(train_ds, epochs=30, verbose=0, callbacks=[PrintLoss()])
val_loss, val_acc = model.evaluate(val_ds, verbose=0)
print(f"final val_loss {val_loss:.4f}  val_acc {val_acc:.4f}")
