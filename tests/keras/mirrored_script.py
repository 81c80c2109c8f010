"""Run by the tests: fit under tf.distribute.MirroredStrategy on two logical CPUs."""

import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

import tensortap.keras as tt  # noqa: E402

out = sys.argv[1]
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 8)).astype("float32")
y = rng.integers(0, 2, 64)
hook = tt.KerasHook(
    out,
    save_config=tt.SaveConfig(save_interval=1),
    include_collections=["weights", "gradients", "losses"],
)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(True))
before = model.get_weights()[0].copy()
model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[hook])
hook.close()
trial = tt.create_trial(out)
grad = trial.tensor("gradients/dense/kernel").value(0)
after = trial.tensor("dense/kernel").value(0)
print("replicas", strategy.num_replicas_in_sync, "workers", trial.workers())
print("update_matches", bool(np.allclose(before - 0.5 * grad, after, atol=1e-6)))
