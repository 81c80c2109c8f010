"""Iris classifier in Keras (functional API). Weights initialised deterministically."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(18)
iris = load_iris()
X_train, X_test, y_train, y_test = train_test_split(iris.data, iris.target, test_size=0.3,
                                                    stratify=iris.target, random_state=18)
sc = StandardScaler().fit(X_train)
X_train, X_test = sc.transform(X_train), sc.transform(X_test)

init = keras.initializers.GlorotUniform(seed=18)
inp = keras.Input(shape=(4,), name="measurements")
x = layers.Dense(16, activation="relu", kernel_initializer=init)(inp)
x = layers.Dense(16, activation="relu", kernel_initializer=init)(x)
out = layers.Dense(3, activation="softmax", kernel_initializer=init)(x)
model = keras.Model(inp, out)
model.compile(optimizer=keras.optimizers.Adam(5e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
model.fit(X_train, y_train, epochs=60, batch_size=8, validation_data=(X_test, y_test), verbose=2)
loss, acc = model.evaluate(X_test, y_test, verbose=0)
print(f"final val_loss={loss:.4f} val_acc={acc:.4f}")
