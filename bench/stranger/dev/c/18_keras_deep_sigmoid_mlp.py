"""Deep (10 hidden layers) Keras MLP on digits trained with SGD+momentum."""
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(18)

X, y = load_digits(return_X_y=True)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=18, stratify=y)
scaler = StandardScaler().fit(X_tr)
X_tr, X_te = scaler.transform(X_tr).astype("float32"), scaler.transform(X_te).astype("float32")

ACT = "sigmoid"
inp = keras.Input(shape=(64,))
x = inp
for units in [128, 128, 96, 96, 64, 64, 64, 48, 48, 32]:
    x = layers.Dense(units, activation=ACT)(x)
out = layers.Dense(10, activation="softmax")(x)
model = keras.Model(inp, out)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(X_tr, y_tr, epochs=15, batch_size=32, validation_split=0.15, verbose=2)
test_loss, test_acc = model.evaluate(X_te, y_te, verbose=0)
print(f"test loss {test_loss:.4f} test accuracy {test_acc:.4f}")
