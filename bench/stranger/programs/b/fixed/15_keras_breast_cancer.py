"""Breast-cancer diagnosis with a Keras MLP. We shuffle the training data once up front
and hold out 20% for validation."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(15)
np.random.seed(15)

X, y = load_breast_cancer(return_X_y=True)
X = StandardScaler().fit_transform(X).astype("float32")
y = y.astype("float32")

perm = np.random.permutation(len(X))
X, y = X[perm], y[perm]

split = int(0.8 * len(X))
x_train, y_train, x_val, y_val = X[:split], y[:split], X[split:], y[split:]

model = keras.Sequential([
    keras.Input(shape=(30,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dropout(0.2),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer="rmsprop", loss="binary_crossentropy",
              metrics=["accuracy", keras.metrics.AUC(name="auc")])
model.fit(x_train, y_train, epochs=40, batch_size=16, validation_data=(x_val, y_val), verbose=2)
res = model.evaluate(x_val, y_val, verbose=0, return_dict=True)
print(f"final val_loss={res['loss']:.4f} val_acc={res['accuracy']:.4f} val_auc={res['auc']:.4f}")
