"""Customer churn model: tabular array -> sklearn ColumnTransformer -> Keras MLP."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras
from keras import layers
from sklearn.compose import ColumnTransformer
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder, StandardScaler

keras.utils.set_random_seed(0)


COLUMNS = ["age", "tenure_months", "num_products", "region", "income", "balance", "credit_score"]


def make_customers(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    cols = {
        "age": rng.integers(18, 80, n),
        "tenure_months": rng.integers(0, 120, n),
        "num_products": rng.integers(1, 6, n),
        "region": rng.integers(0, 4, n),          # 0=north 1=south 2=east 3=west
        "income": rng.lognormal(mean=11.0, sigma=0.5, size=n).round(-2),
        "balance": np.clip(rng.normal(60000, 45000, n), 0, None).round(2),
        "credit_score": rng.integers(300, 850, n),
    }
    z = {c: (v - v.mean()) / v.std() for c, v in cols.items()}
    logit = (1.4 * z["balance"] ** 2 - 1.2 * z["credit_score"] - 0.9 * z["income"] * z["balance"]
             + 0.6 * z["age"] - 0.5 * z["tenure_months"] + 0.4 * (cols["region"] == 1) - 1.0)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype("int32")
    X = np.column_stack([cols[c] for c in COLUMNS]).astype("float64")
    return X, y


features, target = make_customers()
X_train, X_val, y_train, y_val = train_test_split(features, target, test_size=0.25,
                                                  stratify=target, random_state=0)

numeric = ["age", "tenure_months", "num_products", "income", "balance", "credit_score"]
categorical = ["region"]
preprocess = ColumnTransformer(
    [("num", StandardScaler(), [COLUMNS.index(c) for c in numeric]),
     ("cat", OneHotEncoder(handle_unknown="ignore"), [COLUMNS.index(c) for c in categorical])],
    remainder="passthrough",
    sparse_threshold=0.0,
)
X_train_t = preprocess.fit_transform(X_train).astype("float32")
X_val_t = preprocess.transform(X_val).astype("float32")
print("design matrix:", X_train_t.shape, "churn rate:", round(float(y_train.mean()), 3))

model = keras.Sequential([
    keras.Input(shape=(X_train_t.shape[1],)),
    layers.Dense(64, activation="relu"),
    layers.Dense(32, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy",
              metrics=[keras.metrics.AUC(name="auc"), "accuracy"])


class EpochPrinter(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1:2d}  loss {logs['loss']:.4f}  val_loss {logs['val_loss']:.4f}  "
              f"val_auc {logs['val_auc']:.4f}")


model.fit(X_train_t, y_train, validation_data=(X_val_t, y_val), epochs=20, batch_size=64,
          verbose=0, callbacks=[EpochPrinter()])

val_prob = model.predict(X_val_t, verbose=0).ravel()
print(f"final val_auc: {roc_auc_score(y_val, val_prob):.4f}  "
      f"val_accuracy: {((val_prob > 0.5) == y_val).mean():.4f}")
