"""Customer-churn style binary classification on synthetic tabular data.

Two inputs: six numeric features (normalised by an adapted Normalization layer)
and a plan id (0..4) one-hot encoded by CategoryEncoding. About 20% of the
customers churn, so the loss is re-weighted with class_weight; early stopping
monitors the validation loss.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras
from keras import layers
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.utils.class_weight import compute_class_weight

SEED = 41
keras.utils.set_random_seed(SEED)
rng = np.random.default_rng(SEED)

numeric, churn = make_classification(
    n_samples=4000,
    n_features=6,
    n_informative=4,
    n_redundant=1,
    weights=[0.8, 0.2],
    class_sep=1.0,
    flip_y=0.02,
    random_state=SEED,
)
# put the numeric features on realistic, very different scales
numeric = numeric * np.array([12.0, 0.5, 300.0, 3.0, 40.0, 1.0]) + np.array(
    [45.0, 2.0, 1200.0, 10.0, 90.0, 0.0]
)
# plan id depends on churn: plans 3 and 4 churn more often
plan_probs = np.where(churn[:, None] == 1, [0.1, 0.15, 0.15, 0.3, 0.3], [0.3, 0.25, 0.2, 0.15, 0.1])
plan = np.array([rng.choice(5, p=p) for p in plan_probs])

idx_train, idx_val = train_test_split(
    np.arange(len(churn)), test_size=0.25, random_state=SEED, stratify=churn
)


def split(idx):
    return (
        {"numeric": numeric[idx].astype("float32"), "plan": plan[idx].astype("int32")},
        churn[idx].astype("float32"),
    )


x_train, y_train = split(idx_train)
x_val, y_val = split(idx_val)
weights = compute_class_weight("balanced", classes=np.array([0, 1]), y=churn[idx_train])
class_weight = {0: float(weights[0]), 1: float(weights[1])}
print(f"train {len(y_train)} val {len(y_val)} churn rate {y_train.mean():.3f} class_weight {class_weight}")

num_in = keras.Input(shape=(6,), name="numeric")
plan_in = keras.Input(shape=(), dtype="int32", name="plan")
norm = layers.Normalization(name="numeric_norm")
norm.adapt(x_train["numeric"])
plan_onehot = layers.CategoryEncoding(num_tokens=5, output_mode="one_hot", name="plan_onehot")(plan_in)
h = layers.Concatenate()([norm(num_in), plan_onehot])
h = layers.Dense(64, activation="relu")(h)
h = layers.Dropout(0.2)(h)
h = layers.Dense(32, activation="relu")(h)
out = layers.Dense(1, activation="sigmoid", name="churn")(h)
model = keras.Model({"numeric": num_in, "plan": plan_in}, out)

model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss="binary_crossentropy",
    metrics=[keras.metrics.BinaryAccuracy(name="acc"), keras.metrics.AUC(name="auc")],
)


class Printer(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['acc']:.4f} auc {logs['auc']:.4f} "
            f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_acc']:.4f} val_auc {logs['val_auc']:.4f}"
        )


model.fit(
    x_train,
    y_train,
    validation_data=(x_val, y_val),
    class_weight=class_weight,
    epochs=30,
    batch_size=64,
    verbose=0,
    callbacks=[
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, restore_best_weights=True),
        Printer(),
    ],
)

res = model.evaluate(x_val, y_val, verbose=0, return_dict=True)
print(f"final val_loss {res['loss']:.4f} val_acc {res['acc']:.4f}")
