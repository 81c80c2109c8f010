"""Keras MLP on breast-cancer data: Normalization layer, class weights, EarlyStopping(restore_best_weights)."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(15)

X, y = load_breast_cancer(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X.astype("float32"), y, test_size=0.2, random_state=15, stratify=y)

norm = layers.Normalization()
norm.adapt(X_train)
model = keras.Sequential([
    keras.Input(shape=(30,)),
    norm,
    layers.Dense(32, activation="relu"),
    layers.Dropout(0.3),
    layers.Dense(16, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy",
              metrics=["accuracy", keras.metrics.AUC(name="auc")])

neg, pos = np.bincount(y_train)
class_weight = {0: len(y_train) / (2 * neg), 1: len(y_train) / (2 * pos)}
print("class weights:", {k: round(v, 3) for k, v in class_weight.items()})
es = keras.callbacks.EarlyStopping(monitor="val_loss", patience=10, restore_best_weights=True)
hist = model.fit(X_train, y_train, validation_split=0.2, epochs=150, batch_size=16,
                 class_weight=class_weight, callbacks=[es], verbose=2)
loss, acc, auc = model.evaluate(X_test, y_test, verbose=0)
print(f"trained {len(hist.history['loss'])} epochs; test loss {loss:.4f} acc {acc:.4f} auc {auc:.4f}")
