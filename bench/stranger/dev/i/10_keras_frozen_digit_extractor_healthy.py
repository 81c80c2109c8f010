"""Keras transfer learning on 8x8 digits: a small CNN is first trained on digits 0-4, then its convolutional
base is frozen on purpose and a new head (dropout, label smoothing) is trained on a small set of digits 5-9."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 41
keras.utils.set_random_seed(SEED)

d = load_digits()
X = (d.images / 16.0).astype("float32")[..., None]
y = d.target
src, tgt = y < 5, y >= 5
Xs_tr, Xs_va, ys_tr, ys_va = train_test_split(X[src], y[src], test_size=0.2, random_state=SEED, stratify=y[src])
Xt, yt = X[tgt], y[tgt] - 5
Xt_tr, Xt_va, yt_tr, yt_va = train_test_split(Xt, yt, train_size=200, random_state=SEED, stratify=yt)


class PrintEpoch(keras.callbacks.Callback):
    def __init__(self, tag):
        super().__init__()
        self.tag = tag

    def on_epoch_end(self, epoch, logs=None):
        print(f"[{self.tag}] epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
              f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f}")


# stage 1: train the feature extractor on the source task (digits 0-4)
base = keras.Sequential([
    keras.Input(shape=(8, 8, 1)),
    layers.Conv2D(32, 3, padding="same", activation="relu"),
    layers.Conv2D(32, 3, padding="same", activation="relu"),
    layers.MaxPooling2D(),
    layers.Conv2D(64, 3, padding="same", activation="relu"),
    layers.Flatten(),
], name="digit_base")
src_model = keras.Sequential([base, layers.Dense(5, activation="softmax")])
src_model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
src_model.fit(Xs_tr, ys_tr, validation_data=(Xs_va, ys_va), epochs=15, batch_size=32, verbose=0,
              callbacks=[PrintEpoch("source")])

# stage 2: freeze the base, new head for digits 5-9 trained on 200 labelled images
base.trainable = False
inputs = keras.Input(shape=(8, 8, 1))
feats = base(inputs, training=False)
h = layers.Dense(64, activation="relu")(feats)
h = layers.Dropout(0.5)(h)
outputs = layers.Dense(5, activation="softmax")(h)
tgt_model = keras.Model(inputs, outputs)
tgt_model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.CategoricalCrossentropy(label_smoothing=0.1), metrics=["accuracy"])
print(f"target head: {len(tgt_model.trainable_weights)} trainable tensors, "
      f"{len(tgt_model.non_trainable_weights)} frozen; train {len(Xt_tr)}, val {len(Xt_va)}")
Yt_tr, Yt_va = keras.utils.to_categorical(yt_tr, 5), keras.utils.to_categorical(yt_va, 5)
tgt_model.fit(Xt_tr, Yt_tr, validation_data=(Xt_va, Yt_va), epochs=40, batch_size=16, verbose=0,
              callbacks=[PrintEpoch("target"),
                         keras.callbacks.EarlyStopping(monitor="val_loss", patience=6, restore_best_weights=True)])
val_loss, val_acc = tgt_model.evaluate(Xt_va, Yt_va, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
