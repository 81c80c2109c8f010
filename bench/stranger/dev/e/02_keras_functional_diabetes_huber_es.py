"""Functional-API regression on the diabetes data: two input branches, Huber loss, early stopping."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

keras.utils.set_random_seed(1)

data = load_diabetes()
X, y = data.data.astype("float32"), data.target.astype("float32")
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.25, random_state=1)

x_scaler = StandardScaler().fit(X_train)
X_train, X_val = x_scaler.transform(X_train).astype("float32"), x_scaler.transform(X_val).astype("float32")
y_mean, y_std = y_train.mean(), y_train.std()
y_train_s, y_val_s = (y_train - y_mean) / y_std, (y_val - y_mean) / y_std

# age/sex in one branch, the eight clinical measurements in another
demo_train, clin_train = X_train[:, :2], X_train[:, 2:]
demo_val, clin_val = X_val[:, :2], X_val[:, 2:]

demo_in = keras.Input(shape=(2,), name="demographics")
clin_in = keras.Input(shape=(8,), name="clinical")
d = layers.Dense(8, activation="relu")(demo_in)
c = layers.Dense(32, activation="relu", kernel_regularizer=keras.regularizers.l2(1e-3))(clin_in)
c = layers.Dropout(0.2)(c)
h = layers.Concatenate()([d, c])
h = layers.Dense(16, activation="relu")(h)
out = layers.Dense(1, name="progression")(h)
model = keras.Model([demo_in, clin_in], out)

model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.Huber(delta=1.0),
              metrics=[keras.metrics.MeanAbsoluteError(name="mae")])

early = keras.callbacks.EarlyStopping(monitor="val_loss", patience=15, restore_best_weights=True, verbose=1)
history = model.fit([demo_train, clin_train], y_train_s,
                    validation_data=([demo_val, clin_val], y_val_s),
                    epochs=300, batch_size=32, callbacks=[early], verbose=2)

pred = model.predict([demo_val, clin_val], verbose=0).ravel() * y_std + y_mean
mae = float(np.mean(np.abs(pred - y_val)))
r2 = 1.0 - float(np.sum((pred - y_val) ** 2) / np.sum((y_val - y_val.mean()) ** 2))
baseline_mae = float(np.mean(np.abs(y_train.mean() - y_val)))
val_loss, _ = model.evaluate([demo_val, clin_val], y_val_s, verbose=0)
print(f"epochs run {len(history.history['loss'])}")
print(f"final val_loss {val_loss:.4f} val_mae {mae:.2f} (predict-mean baseline {baseline_mae:.2f}) val_r2 {r2:.3f}")
