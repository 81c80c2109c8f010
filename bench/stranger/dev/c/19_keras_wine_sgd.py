# Keras Sequential classifier for the 13 wine chemistry features, SGD + momentum, simple train/val split.
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(19)

data = load_wine()
X = data.data.astype("float32")
y = keras.utils.to_categorical(data.target, 3)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=19, stratify=data.target)

model = keras.Sequential([
    keras.Input(shape=(13,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(3, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
              loss="categorical_crossentropy", metrics=["accuracy"])
history = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=60, batch_size=8, verbose=2)
h = history.history
print(f"final: loss {h['loss'][-1]:.4f} val_loss {h['val_loss'][-1]:.4f} val_accuracy {h['val_accuracy'][-1]:.4f}")
