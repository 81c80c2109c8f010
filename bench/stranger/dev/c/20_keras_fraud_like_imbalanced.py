"""Keras binary classifier for a rare-event (~3% positive) tabular problem. Reports accuracy and minority recall."""
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, recall_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(20)

X, y = make_classification(n_samples=6000, n_features=16, n_informative=6, n_redundant=2, weights=[0.97, 0.03],
                           class_sep=0.8, flip_y=0.0, random_state=20)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, stratify=y, random_state=20)
sc = StandardScaler().fit(X_tr)
X_tr, X_te = sc.transform(X_tr).astype("float32"), sc.transform(X_te).astype("float32")
print("positives in train:", int(y_tr.sum()), "of", len(y_tr))

model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(X_tr, y_tr, epochs=10, batch_size=64, validation_split=0.2, verbose=2)

pred = (model.predict(X_te, verbose=0).ravel() > 0.5).astype(int)
print(f"test accuracy {np.mean(pred == y_te):.4f}  minority recall {recall_score(y_te, pred):.4f}  "
      f"balanced accuracy {balanced_accuracy_score(y_te, pred):.4f}")
