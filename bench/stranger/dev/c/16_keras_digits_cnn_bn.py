# Keras CNN with BatchNorm and Dropout on the 8x8 digits; ReduceLROnPlateau on val_loss.
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(16)

digits = load_digits()
images = (digits.images / 16.0).astype("float32")[..., None]
x_tr, x_val, y_tr, y_val = train_test_split(images, digits.target, test_size=0.2, random_state=16)

inputs = keras.Input((8, 8, 1))
h = keras.layers.Conv2D(32, 3, padding="same", use_bias=False)(inputs)
h = keras.layers.BatchNormalization()(h)
h = keras.layers.Activation("relu")(h)
h = keras.layers.Conv2D(64, 3, padding="same", use_bias=False)(h)
h = keras.layers.BatchNormalization()(h)
h = keras.layers.Activation("relu")(h)
h = keras.layers.MaxPooling2D()(h)
h = keras.layers.GlobalAveragePooling2D()(h)
h = keras.layers.Dropout(0.25)(h)
outputs = keras.layers.Dense(10)(h)
model = keras.Model(inputs, outputs, name="digits_cnn")

model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9, nesterov=True),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["sparse_categorical_accuracy"])
callbacks = [keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.3, patience=2, min_lr=1e-4)]
model.fit(x_tr, y_tr, batch_size=32, epochs=18, validation_data=(x_val, y_val), callbacks=callbacks, verbose=2)
val_loss, val_acc = model.evaluate(x_val, y_val, verbose=0)
print(f"validation: loss={val_loss:.4f} accuracy={val_acc:.4f}")
