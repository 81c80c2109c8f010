"""Small CNN on the 8x8 digits with on-the-fly augmentation layers and ReduceLROnPlateau."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(0)

digits = load_digits()
X = (digits.images / 16.0).astype("float32")[..., None]   # (N, 8, 8, 1) in [0, 1]
y = digits.target.astype("int32")
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)

augment = keras.Sequential([
    layers.RandomTranslation(0.1, 0.1, fill_mode="constant"),
    layers.RandomZoom(0.1, fill_mode="constant"),
], name="augment")

inputs = keras.Input(shape=(8, 8, 1))
x = augment(inputs)
x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
x = layers.MaxPooling2D()(x)
x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
x = layers.GlobalAveragePooling2D()(x)
x = layers.Dropout(0.3)(x)
outputs = layers.Dense(10, activation="softmax")(x)
model = keras.Model(inputs, outputs)

model.compile(optimizer=keras.optimizers.Adam(learning_rate=3e-3),
              loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])

reduce_lr = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2, min_lr=1e-5, verbose=1)
history = model.fit(X_train, y_train, validation_data=(X_val, y_val),
                    epochs=25, batch_size=32, callbacks=[reduce_lr], verbose=2)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final train_loss {history.history['loss'][-1]:.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
