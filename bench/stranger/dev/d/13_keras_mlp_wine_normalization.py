import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(42)

X, y = load_wine(return_X_y=True)
x_train, x_test, y_train, y_test = train_test_split(X.astype("float32"), y, test_size=0.25, random_state=42, stratify=y)

norm = layers.Normalization()
norm.adapt(x_train)

model = keras.Sequential([
    keras.Input(shape=(13,)),
    norm,
    layers.Dense(64, activation="relu"),
    layers.Dropout(0.3),
    layers.Dense(32, activation="relu"),
    layers.Dense(3, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.summary()

history = model.fit(x_train, y_train, validation_split=0.2, epochs=60, batch_size=16, verbose=2)
test_loss, test_acc = model.evaluate(x_test, y_test, verbose=0)
print(f"final val_accuracy {history.history['val_accuracy'][-1]:.3f}  test_loss {test_loss:.4f}  test_acc {test_acc:.3f}")
