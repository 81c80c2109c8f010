"""Multi-class classifier on synthetic sensor features, tf.data input pipeline + Keras."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(1)

BATCH_SIZE = 64
EPOCHS = 25
AUTOTUNE = tf.data.AUTOTUNE

X, y = make_classification(n_samples=8000, n_features=24, n_informative=14, n_redundant=4,
                           n_classes=6, n_clusters_per_class=2, class_sep=1.0, flip_y=0.02,
                           random_state=3)
X = X.astype("float32")
x_train, x_val, y_train, y_val = train_test_split(X, y, test_size=0.25, stratify=y,
                                                  random_state=3)

normalizer = keras.layers.Normalization()
normalizer.adapt(x_train)

train_ds = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shuffle(len(x_train), seed=1)
            .batch(BATCH_SIZE, drop_remainder=True)
            .take(1)
            .cache()
            .repeat()
            .prefetch(AUTOTUNE))
val_ds = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(512).prefetch(AUTOTUNE)
steps_per_epoch = len(x_train) // BATCH_SIZE

for xb, yb in train_ds.take(1):
    print("batch:", xb.shape, yb.shape, "labels seen:", sorted(set(yb.numpy().tolist())))

inputs = keras.Input(shape=(X.shape[1],))
h = normalizer(inputs)
h = keras.layers.Dense(128, activation="relu")(h)
h = keras.layers.Dropout(0.2)(h)
h = keras.layers.Dense(64, activation="relu")(h)
outputs = keras.layers.Dense(6, activation="softmax")(h)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])

history = model.fit(train_ds, validation_data=val_ds, epochs=EPOCHS,
                    steps_per_epoch=steps_per_epoch, verbose=0)
for e, (l, vl, va) in enumerate(zip(history.history["loss"], history.history["val_loss"],
                                    history.history["val_accuracy"]), 1):
    print(f"epoch {e:2d}  loss {l:.4f}  val_loss {vl:.4f}  val_accuracy {va:.4f}")

val_loss, val_acc = model.evaluate(val_ds, verbose=0)
print(f"final val_accuracy: {val_acc:.4f}")
