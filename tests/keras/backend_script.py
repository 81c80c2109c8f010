"""Run by the tests with KERAS_BACKEND set: fit with a KerasHook, then print what was saved."""

import sys

import keras
import numpy as np

import tensortap.keras as tt

out = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((48, 6)).astype("float32")
y = rng.integers(0, 3, 48)
hook = tt.KerasHook(
    out,
    save_config=tt.SaveConfig(save_interval=1),
    include_collections=["losses", "weights", "biases", "gradients"],
)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(3)])
model.compile(
    keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
)
before = [w.copy() for w in model.get_weights()]
model.fit(x, y, batch_size=48, epochs=1, verbose=0, callbacks=[hook])
hook.close()
trial = tt.create_trial(out)
grad = trial.tensor("gradients/dense/kernel").value(0)
after = trial.tensor("dense/kernel").value(0)
print("names", sorted(trial.tensor_names()))
print("update_matches", bool(np.allclose(before[0] - 0.1 * grad, after, atol=1e-6)))
