"""Customer churn (rare positive class, ~3%) with a Keras MLP and model.fit."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, classification_report, recall_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(16)

X, y = make_classification(n_samples=10000, n_features=16, n_informative=5, n_redundant=3,
                           weights=[0.97, 0.03], class_sep=0.8, flip_y=0.0, random_state=16)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y, random_state=16)
scaler = StandardScaler()
X_train = scaler.fit_transform(X_train)
X_test = scaler.transform(X_test)
print("positives in train:", int(y_train.sum()), "of", len(y_train))

model = keras.Sequential([
    keras.Input(shape=(16,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy",
              metrics=["accuracy", keras.metrics.Recall(name="recall")])
neg, pos = np.bincount(y_train)
class_weight = {0: len(y_train) / (2 * neg), 1: len(y_train) / (2 * pos)}
model.fit(X_train, y_train, epochs=10, batch_size=64, validation_split=0.15, verbose=2,
          class_weight=class_weight)

pred = (model.predict(X_test, verbose=0).ravel() > 0.5).astype(int)
print(classification_report(y_test, pred, digits=3, zero_division=0))
print(f"final test_acc={(pred == y_test).mean():.4f} churn_recall={recall_score(y_test, pred):.4f} "
      f"balanced_acc={balanced_accuracy_score(y_test, pred):.4f}")
