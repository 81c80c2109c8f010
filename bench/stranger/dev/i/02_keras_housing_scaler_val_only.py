"""House price band (cheap / mid / expensive) from a synthetic listings table, Keras MLP."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras
from keras import layers
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SEED = 11
keras.utils.set_random_seed(SEED)
rng = np.random.default_rng(SEED)

n = 5000
sqft = rng.uniform(450, 4200, n)                  # living area, square feet
lot_sqft = rng.lognormal(8.8, 0.6, n)             # lot size, square feet
year_built = rng.integers(1900, 2022, n).astype(float)
bedrooms = rng.integers(1, 6, n).astype(float)
bathrooms = rng.integers(1, 4, n).astype(float)
dist_km = rng.gamma(2.0, 6.0, n)                  # distance to city centre
area_income = rng.normal(72_000, 18_000, n)       # median household income, dollars
listed_ts = rng.uniform(1.55e9, 1.72e9, n)        # listing date, unix seconds

log_price = (11.2 + 0.00035 * sqft + 0.06 * np.log(lot_sqft) + 0.004 * (year_built - 1960)
             + 0.05 * bathrooms - 0.025 * dist_km + 0.000012 * area_income
             + 0.08 * (listed_ts - 1.55e9) / 3.15e7 + rng.normal(0, 0.12, n))
cuts = np.quantile(log_price, [1 / 3, 2 / 3])
y = np.digitize(log_price, cuts)
X = np.stack([sqft, lot_sqft, year_built, bedrooms, bathrooms, dist_km, area_income, listed_ts], 1)

X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=SEED, stratify=y)
scaler = StandardScaler()
scaler.fit(X_train)
X_val = scaler.transform(X_val)
print("train", X_train.shape, "val", X_val.shape, "class counts", np.bincount(y_train))

model = keras.Sequential([
    keras.Input(shape=(X.shape[1],)),
    layers.Dense(128, activation="relu"),
    layers.Dropout(0.2),
    layers.Dense(64, activation="relu"),
    layers.Dense(3, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class PrintEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1:02d} loss {logs['loss']:.4f} acc {logs['accuracy']:.4f} "
              f"val_loss {logs['val_loss']:.4f} val_acc {logs['val_accuracy']:.4f}")


hist = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=30, batch_size=32,
                 verbose=0, callbacks=[PrintEpoch()])
val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
