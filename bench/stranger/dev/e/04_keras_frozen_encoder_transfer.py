"""Train an encoder on digits 0-9, then freeze it on purpose and fit a new head for a second task
(is the digit >= 5?) on a disjoint, smaller labelled split."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(3)

digits = load_digits()
X = (digits.data / 16.0).astype("float32")
y = digits.target.astype("int32")
# split A: pre-training the encoder on 10-way classification; split B: the downstream task
X_a, X_b, y_a, y_b = train_test_split(X, y, test_size=0.5, random_state=3, stratify=y)
X_b_train, X_b_val, y_b_train, y_b_val = train_test_split(X_b, y_b, test_size=0.4, random_state=3, stratify=y_b)
X_a_train, X_a_val, y_a_train, y_a_val = train_test_split(X_a, y_a, test_size=0.2, random_state=3, stratify=y_a)

encoder = keras.Sequential([
    keras.Input(shape=(64,)),
    layers.Dense(128, activation="relu"),
    layers.Dropout(0.2),
    layers.Dense(32, activation="relu"),
], name="encoder")

print("== stage 1: pre-train encoder on 10-class digits ==")
pretrain = keras.Sequential([encoder, layers.Dense(10, activation="softmax")])
pretrain.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
pretrain.fit(X_a_train, y_a_train, validation_data=(X_a_val, y_a_val), epochs=20, batch_size=32, verbose=2)
_, acc_a = pretrain.evaluate(X_a_val, y_a_val, verbose=0)
print(f"stage1 val_acc {acc_a:.4f}")

print("== stage 2: frozen encoder, new binary head (digit >= 5) ==")
encoder.trainable = False          # keep the learned features fixed; only the new head learns
inp = keras.Input(shape=(64,))
feat = encoder(inp, training=False)
h = layers.Dense(16, activation="relu")(feat)
out = layers.Dense(1, activation="sigmoid")(h)
downstream = keras.Model(inp, out)
downstream.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
yb_tr = (y_b_train >= 5).astype("float32")
yb_va = (y_b_val >= 5).astype("float32")
frozen_before = [w.copy() for w in encoder.get_weights()]
downstream.fit(X_b_train, yb_tr, validation_data=(X_b_val, yb_va), epochs=15, batch_size=32, verbose=2)
unchanged = all(np.array_equal(a, b) for a, b in zip(frozen_before, encoder.get_weights()))
val_loss, val_acc = downstream.evaluate(X_b_val, yb_va, verbose=0)
print(f"encoder weights unchanged in stage 2: {unchanged}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
