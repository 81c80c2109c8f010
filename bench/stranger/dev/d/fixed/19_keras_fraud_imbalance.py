# Binary "fraud"-style detection: ~2% positives. Keras MLP, reports recall / balanced accuracy on validation.
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, recall_score, f1_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(19)

X, y = make_classification(n_samples=8000, n_features=16, n_informative=5, n_redundant=2, weights=[0.98, 0.02],
                           class_sep=0.5, flip_y=0.0, random_state=19)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, stratify=y, random_state=19)
sc = StandardScaler().fit(X_tr)
X_tr, X_va = sc.transform(X_tr), sc.transform(X_va)
print("positives in train:", int(y_tr.sum()), "of", len(y_tr))

neg, pos = np.bincount(y_tr)
class_weight = {0: (neg + pos) / (2 * neg), 1: (neg + pos) / (2 * pos)}

model = keras.Sequential([
    keras.layers.Input((16,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy",
              metrics=["accuracy", keras.metrics.Recall(name="recall"), keras.metrics.AUC(name="auc")])
hist = model.fit(X_tr, y_tr, validation_data=(X_va, y_va), epochs=10, batch_size=128, verbose=2,
                 class_weight=class_weight)

pred = (model.predict(X_va, verbose=0).ravel() > 0.5).astype(int)
print(f"final val_accuracy {np.mean(pred == y_va):.4f}  minority recall {recall_score(y_va, pred):.3f}  "
      f"minority F1 {f1_score(y_va, pred):.3f}  balanced_acc {balanced_accuracy_score(y_va, pred):.3f}")
