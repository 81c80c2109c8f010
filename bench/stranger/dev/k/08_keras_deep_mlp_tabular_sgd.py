"""Five-class tabular classification with a deep tf.keras MLP (functional API).

Synthetic data from sklearn's make_classification; features are standardised
with StandardScaler. The network stacks eight hidden blocks and is trained
with SGD + Nesterov momentum; the best epoch is kept by EarlyStopping.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SEED = 29
tf.keras.utils.set_random_seed(SEED)

X, y = make_classification(
    n_samples=3000,
    n_features=20,
    n_informative=10,
    n_redundant=4,
    n_classes=5,
    n_clusters_per_class=2,
    class_sep=1.5,
    random_state=SEED,
)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=SEED, stratify=y)
scaler = StandardScaler().fit(X_train)
X_train = scaler.transform(X_train).astype("float32")
X_val = scaler.transform(X_val).astype("float32")
print(f"train {X_train.shape} val {X_val.shape}")

DEPTH = 8
WIDTH = 64
ACTIVATION = "sigmoid"

inputs = tf.keras.Input(shape=(X_train.shape[1],))
h = inputs
for i in range(DEPTH):
    h = tf.keras.layers.Dense(WIDTH, activation=ACTIVATION, name=f"hidden_{i}")(h)
outputs = tf.keras.layers.Dense(5, activation="softmax")(h)
model = tf.keras.Model(inputs, outputs)

model.compile(
    optimizer=tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9, nesterov=True),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)


class EpochLine(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            "epoch {:02d} loss {:.4f} acc {:.4f} val_loss {:.4f} val_acc {:.4f}".format(
                epoch + 1, logs["loss"], logs["accuracy"], logs["val_loss"], logs["val_accuracy"]
            )
        )


model.fit(
    X_train,
    y_train,
    validation_data=(X_val, y_val),
    epochs=30,
    batch_size=32,
    verbose=0,
    callbacks=[
        tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, restore_best_weights=True),
        EpochLine(),
    ],
)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
