"""Dense classifier on the digit images; images are normalised by a helper and again in the pipeline."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(6)


def load_images():
    d = load_digits()
    images = d.images.astype("float32") / 16.0   # pixel intensities 0..16 -> [0, 1]
    return images, d.target.astype("int32")


images, labels = load_images()
X_train, X_val, y_train, y_val = train_test_split(images, labels, test_size=0.2, random_state=6, stratify=labels)

# usual image preprocessing: scale pixels to [0, 1]
X_train = X_train.reshape(len(X_train), -1) / 255.0
X_val = X_val.reshape(len(X_val), -1) / 255.0

model = keras.Sequential([
    keras.Input(shape=(64,)),
    layers.Dense(128, activation="relu"),
    layers.Dense(64, activation="relu"),
    layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=20, batch_size=32, verbose=2)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"input range [{X_train.min():.4f}, {X_train.max():.4f}]")
print(f"final train_loss {history.history['loss'][-1]:.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
