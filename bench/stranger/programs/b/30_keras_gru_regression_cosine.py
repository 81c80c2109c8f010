"""GRU forecaster for a noisy AR(2)-style series: predict the next value from 30 past values.
Keras with warm-up + cosine decay and gradient-norm clipping."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(30)
rng = np.random.default_rng(30)
N = 6000
s = np.zeros(N)
for t in range(2, N):
    s[t] = 1.6 * s[t - 1] - 0.8 * s[t - 2] + rng.normal(0, 0.3)
s = (s - s.mean()) / s.std()
W = 30
X = np.stack([s[i:i + W] for i in range(N - W)])[..., None].astype("float32")
y = s[W:].astype("float32")
split = int(0.8 * len(X))
x_train, y_train, x_val, y_val = X[:split], y[:split], X[split:], y[split:]

EPOCHS, BATCH = 8, 64
steps = EPOCHS * int(np.ceil(len(x_train) / BATCH))
schedule = keras.optimizers.schedules.CosineDecay(initial_learning_rate=1e-4, decay_steps=steps - 60,
                                                  warmup_target=3e-3, warmup_steps=60)
model = keras.Sequential([keras.Input(shape=(W, 1)), layers.GRU(32), layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=schedule, clipnorm=1.0), loss="mse",
              metrics=["mae"])
model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=EPOCHS, batch_size=BATCH,
          shuffle=True, verbose=2)
val_mse, val_mae = model.evaluate(x_val, y_val, verbose=0)
naive = float(np.mean((x_val[:, -1, 0] - y_val) ** 2))
print(f"final val_mse={val_mse:.4f} val_mae={val_mae:.4f} (persistence baseline mse={naive:.4f})")
