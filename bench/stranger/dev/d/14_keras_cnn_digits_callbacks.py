"""Keras CNN on the 8x8 digits with BatchNorm, Dropout, EarlyStopping(restore_best_weights) and ReduceLROnPlateau."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(1234)

digits = load_digits()
images = (digits.images / 16.0).astype("float32")[..., np.newaxis]
x_tr, x_te, y_tr, y_te = train_test_split(images, digits.target, test_size=0.2, random_state=1234, stratify=digits.target)
x_tr, x_va, y_tr, y_va = train_test_split(x_tr, y_tr, test_size=0.15, random_state=1234, stratify=y_tr)
y_tr_oh = keras.utils.to_categorical(y_tr, 10)
y_va_oh = keras.utils.to_categorical(y_va, 10)
y_te_oh = keras.utils.to_categorical(y_te, 10)

inputs = keras.Input(shape=(8, 8, 1))
x = keras.layers.Conv2D(32, 3, padding="same", use_bias=False)(inputs)
x = keras.layers.BatchNormalization()(x)
x = keras.layers.Activation("relu")(x)
x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
x = keras.layers.MaxPooling2D()(x)
x = keras.layers.Dropout(0.25)(x)
x = keras.layers.Flatten()(x)
x = keras.layers.Dense(64, activation="relu")(x)
x = keras.layers.Dropout(0.4)(x)
outputs = keras.layers.Dense(10, activation="softmax")(x)
model = keras.Model(inputs, outputs, name="digits_cnn")

model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.02, momentum=0.9),
              loss=keras.losses.CategoricalCrossentropy(label_smoothing=0.05),
              metrics=["accuracy"])
callbacks = [
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=4, restore_best_weights=True),
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2, min_lr=1e-4),
]
hist = model.fit(x_tr, y_tr_oh, validation_data=(x_va, y_va_oh), epochs=30, batch_size=32,
                 callbacks=callbacks, verbose=2)
loss, acc = model.evaluate(x_te, y_te_oh, verbose=0)
print(f"trained {len(hist.history['loss'])} epochs; best val_loss {min(hist.history['val_loss']):.4f}; test_loss {loss:.4f} test_acc {acc:.4f}")
