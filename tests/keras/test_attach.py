"""Zero code change for Keras however the script imports it, run as real scripts under
``tensortap run`` (and ``python -m tensortap.attach``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import tensortap.keras as tt
from tensortap.attach import unwatched_reason
from tensortap.jobs._record import JobRecord

#: How a script reaches Keras: (its imports, the name its model code uses for the keras API).
IMPORT_STYLES = {
    "import tensorflow as tf": ("import tensorflow as tf", "tf.keras"),
    "from tensorflow import keras": ("from tensorflow import keras", "keras"),
    "import tensorflow.keras": ("import tensorflow.keras", "tensorflow.keras"),
    "import keras": ("import keras", "keras"),
}

SCRIPT = """\
import json
import sys

import numpy as np
{imports}

K = {api}
K.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((120, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(2)])
loss_fn = K.losses.SparseCategoricalCrossentropy(from_logits=True)
model.compile(K.optimizers.SGD(0.05), loss_fn, metrics=["accuracy"])


class OwnLosses(K.callbacks.Callback):
    # each batch's own loss, before its update: what Keras's running mean is made of
    seen = []

    def on_train_batch_begin(self, batch, logs=None):
        part = slice(batch * 24, (batch + 1) * 24)
        self.seen.append(float(loss_fn(y[part], self.model(x[part]))))


model.fit(x, y, batch_size=24, epochs=3, shuffle=False, verbose=2, callbacks=[OwnLosses()])
with open(sys.argv[1], "w") as f:
    json.dump(OwnLosses.seen, f)
"""


def run_job(
    tmp_path: Path, script: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], JobRecord]:
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "run", "--output", "runs", "--",
         sys.executable, str(script), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    (job,) = (tmp_path / "runs").iterdir()
    return done, JobRecord(job)


@pytest.mark.parametrize("style", list(IMPORT_STYLES))
def test_every_import_style_is_watched(tmp_path: Path, style: str) -> None:
    """``import tensorflow as tf`` saved nothing (TensorFlow probes for Keras with
    ``importlib.util.find_spec`` while it imports, which used up the attachment's one look),
    and said "the script uses JAX" after fit printed its epochs. Every style is watched, and
    each batch's own loss is in the trial (vitals/loss), equal to Keras's."""
    imports, api = IMPORT_STYLES[style]
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(imports=imports, api=api))
    done, record = run_job(tmp_path, script, str(tmp_path / "own.json"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Epoch 3/3" in output and "saved nothing" not in output
    trial = tt.create_trial(record.trial_location)
    assert trial.framework() == "keras"
    assert trial.steps(tt.modes.TRAIN) == list(range(15))  # 5 batches x 3 epochs
    own = json.loads((tmp_path / "own.json").read_text())
    loss = trial.tensor("vitals/loss")
    saved = [float(loss.value(s, mode=tt.modes.TRAIN)) for s in range(15)]
    assert saved == pytest.approx(own, rel=1e-6)
    assert {"initial/dense/kernel", "vitals/lr", "vitals/step_time"} <= set(trial.tensor_names())


def test_a_tensorflow_script_without_fit_is_told_what_was_seen(tmp_path: Path) -> None:
    """A tf.GradientTape loop (no fit): nothing is saved, and the message names what the
    script imported (TensorFlow, and its Keras), not JAX, which TensorFlow imports itself."""
    script = tmp_path / "tape.py"
    script.write_text(
        "import tensorflow as tf\n"
        "model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(2)])\n"
        "x = tf.random.normal((16, 8))\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = tf.reduce_mean(model(x) ** 2)\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
    )
    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"out_dir": str(tmp_path / "t")}))
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), str(script)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "saved nothing" in line]
    assert len(said) == 1, done.stderr[-3000:]
    assert "the script imported tensorflow and keras, and no Keras Model.fit" in said[0]
    assert "JAX" not in said[0] and "hook.wrap_tape(tape)" in said[0]


def test_the_reason_names_the_frameworks_the_script_itself_used() -> None:
    """What the script's globals name wins over what its packages imported; with nothing
    named (a script that failed early), everything imported is considered, as before."""
    message, framework = unwatched_reason({"tensorflow", "keras", "jax"}, {"tensorflow"})
    assert framework == "keras" and "JAX" not in message
    assert "the script imported tensorflow, and no Keras" in message
    message, framework = unwatched_reason({"tensorflow", "keras", "jax"}, set())
    assert framework == "jax" and "the script imported tensorflow and keras" in message
