"""Imbalanced (~4% positive) detection with a Keras MLP: class weights, early stopping on
validation AUC with best-weight restore, and threshold 0.5 report on a test split."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, recall_score, roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(29)
X, y = make_classification(n_samples=8000, n_features=12, n_informative=5, weights=[0.96, 0.04],
                           class_sep=0.9, random_state=29)
X_tmp, X_test, y_tmp, y_test = train_test_split(X, y, test_size=0.25, stratify=y, random_state=29)
X_train, X_val, y_train, y_val = train_test_split(X_tmp, y_tmp, test_size=0.2, stratify=y_tmp, random_state=29)
sc = StandardScaler().fit(X_train)
X_train, X_val, X_test = sc.transform(X_train), sc.transform(X_val), sc.transform(X_test)

counts = np.bincount(y_train)
class_weight = {c: len(y_train) / (2.0 * counts[c]) for c in (0, 1)}
print("class weights:", {k: round(v, 2) for k, v in class_weight.items()})

model = keras.Sequential([
    keras.Input(shape=(12,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dropout(0.2),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="binary_crossentropy",
              metrics=[keras.metrics.AUC(name="auc"), keras.metrics.Recall(name="recall")])
model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=40, batch_size=128,
          class_weight=class_weight, verbose=2,
          callbacks=[keras.callbacks.EarlyStopping(monitor="val_auc", mode="max", patience=5,
                                                   restore_best_weights=True)])
p = model.predict(X_test, verbose=0).ravel()
pred = (p > 0.5).astype(int)
print(f"final test_auc={roc_auc_score(y_test, p):.4f} recall={recall_score(y_test, pred):.4f} "
      f"balanced_acc={balanced_accuracy_score(y_test, pred):.4f}")
