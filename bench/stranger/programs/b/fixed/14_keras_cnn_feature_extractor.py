"""Digits CNN built as a convolutional feature extractor + classifier head (Keras functional API)."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(2)

digits = load_digits()
images = (digits.images / 16.0).astype("float32")[..., None]   # (N, 8, 8, 1)
labels = digits.target
x_train, x_val, y_train, y_val = train_test_split(images, labels, test_size=0.25,
                                                  stratify=labels, random_state=2)


def make_backbone():
    inp = keras.Input(shape=(8, 8, 1))
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, x, name="backbone")


backbone = make_backbone()

inputs = keras.Input(shape=(8, 8, 1))
features = backbone(inputs, training=False)
features = layers.Dropout(0.2)(features)
outputs = layers.Dense(10, activation="softmax")(features)
model = keras.Model(inputs, outputs)
model.summary(line_length=90)

model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
model.fit(x_train, y_train, epochs=12, batch_size=32, validation_data=(x_val, y_val), verbose=2)
val_loss, val_acc = model.evaluate(x_val, y_val, verbose=0)
print(f"final val_loss={val_loss:.4f} val_acc={val_acc:.4f}")
