"""Run by tests/keras/test_guard.py with KERAS_BACKEND set: fit with a NaN batch under
tensortap.keras.Guard, then print what it did as JSON."""

from __future__ import annotations

import json

import keras
import numpy as np
from sklearn.datasets import load_digits

import tensortap.keras as tt

BATCH, NAN_BATCH = 16, 5

x, y = load_digits(return_X_y=True)
x, y = (x[:320] / 16.0).astype("float32"), y[:320]
x[NAN_BATCH * BATCH + 3] = np.nan
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [keras.Input((64,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(10)]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-2),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
guard = tt.Guard()
history = model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[guard])
finite = all(bool(np.isfinite(keras.ops.convert_to_numpy(w)).all()) for w in model.weights)
print(
    json.dumps(
        {
            "backend": keras.backend.backend(),
            "events": [[e.step, list(e.batch), e.skipped, e.reason] for e in guard.events],
            "finite": finite,
            "loss": history.history["loss"],
        }
    )
)
