"""Binary classifier on the breast-cancer data, plain SGD, batch 16."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(7)

data = load_breast_cancer()
X_train, X_val, y_train, y_val = train_test_split(data.data, data.target.astype("float32"),
                                                  test_size=0.25, random_state=7, stratify=data.target)
scaler = StandardScaler().fit(X_train)
X_train = scaler.transform(X_train).astype("float32")
X_val = scaler.transform(X_val).astype("float32")

LEARNING_RATE = 2.0

model = keras.Sequential([
    keras.Input(shape=(30,)),
    layers.Dense(64, activation="relu"),
    layers.Dense(64, activation="relu"),
    layers.Dense(32, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE),
              loss="binary_crossentropy", metrics=["accuracy", keras.metrics.AUC(name="auc")])
history = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=20, batch_size=16, verbose=2)

val_loss, val_acc, val_auc = model.evaluate(X_val, y_val, verbose=0)
print(f"final train_loss {history.history['loss'][-1]:.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f} val_auc {val_auc:.4f}")
