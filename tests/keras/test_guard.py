"""tensortap.keras.Guard on Keras 3 (TensorFlow backend, as the other Keras tests): a NaN batch
in ``model.fit`` is undone (weights, optimizer state and the epoch's running loss as before
it), fit finishes with finite weights, and the event names the step and the batch; a healthy
fit trips none; the skip budget stops fit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import keras

import tensortap.keras as tt
from tensortap.exceptions import InvalidConfigError

BATCH, NAN_BATCH, SPIKE_BATCH = 16, 13, 20
HERE = Path(__file__).parent


def data(n: int = 480) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x[:n] / 16.0).astype("float32"), y[:n]


def mlp() -> keras.Model:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class Around(keras.callbacks.Callback):
    """The weights and optimizer variables before and after one batch (placed after the guard,
    so it sees them once the guard has acted)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.at, self.step = step, 0
        self.before: list[np.ndarray] = []
        self.after: list[np.ndarray] = []
        self.losses: list[float] = []

    def _now(self) -> list[np.ndarray]:
        variables = [*self.model.variables, *self.model.optimizer.variables]
        return [keras.ops.convert_to_numpy(v).copy() for v in variables]

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.step == self.at:
            self.before = self._now()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.step == self.at:
            self.after = self._now()
        self.losses.append(float(logs["loss"]))
        self.step += 1


def test_nan_batch_is_undone_and_named() -> None:
    x, y = data()
    x[NAN_BATCH * BATCH + 3, 5] = np.nan
    x[SPIKE_BATCH * BATCH : (SPIKE_BATCH + 1) * BATCH] *= 1e6
    model = mlp()
    guard = tt.Guard()
    around = Around(NAN_BATCH)
    history = model.fit(
        x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[guard, around]
    )
    steps_per_epoch = len(x) // BATCH
    assert [(e.step, e.batch) for e in guard.events] == [
        (NAN_BATCH, (0, NAN_BATCH)),
        (SPIKE_BATCH, (0, SPIKE_BATCH)),
        (steps_per_epoch + NAN_BATCH, (1, NAN_BATCH)),
        (steps_per_epoch + SPIKE_BATCH, (1, SPIKE_BATCH)),
    ]
    assert "is a spike" in guard.events[1].reason
    first = guard.events[0]
    # TensorFlow's relu turns the NaN input into 0 (a finite loss); its gradient stays NaN
    assert first.skipped and first.reason.endswith("is nan") and first.grad_norm is None
    assert first.loss is not None and first.update_norm is not None
    assert guard.skipped == 4 and guard.status.steps == 2 * steps_per_epoch
    assert len(around.after) == len(around.before) > 0
    for before, after in zip(around.before, around.after, strict=True):
        assert before.tobytes() == after.tobytes()  # weights and Adam's state, its step too
    assert all(np.isfinite(keras.ops.convert_to_numpy(w)).all() for w in model.weights)
    assert np.isfinite(history.history["loss"]).all()  # the running loss was not poisoned
    assert np.isfinite(around.losses).all()


def test_nan_batch_skipped_equals_fit_without_it() -> None:
    """The guarded fit over data with a NaN batch ends where a fit without that batch does."""
    x, y = data()
    bad = x.copy()
    bad[NAN_BATCH * BATCH + 3, 5] = np.nan
    model = mlp()
    model.fit(bad, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[tt.Guard()])
    keep = np.r_[0 : NAN_BATCH * BATCH, (NAN_BATCH + 1) * BATCH : len(x)]
    reference = mlp()
    reference.fit(x[keep], y[keep], batch_size=BATCH, shuffle=False, verbose=0)
    for ours, theirs in zip(model.weights, reference.weights, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs), rtol=1e-5
        )


def test_healthy_fit_trips_none_and_budget_stops() -> None:
    x, y = data()
    model = mlp()
    guard = tt.Guard()
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=True, verbose=0, callbacks=[guard])
    assert guard.events == [] and guard.status.steps == 3 * (len(x) // BATCH)

    x[[2 * BATCH, 5 * BATCH]] = np.nan
    stopping = tt.Guard(budget=tt.SkipBudget(skips=2, steps=10))
    model = mlp()
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=[stopping])
    assert stopping.should_stop and [e.step for e in stopping.events] == [2, 5]
    assert stopping.status.steps == 6  # fit stopped after the batch that spent the budget


def test_accumulation_and_clipping_trip_only_the_nan_batch() -> None:
    """With gradient_accumulation_steps=2 and clipnorm, half the batches apply no update (a
    norm of 0): they are not judged, so the real updates are not spikes; the NaN batch trips,
    its accumulators put back."""
    x, y = data(320)
    x[5 * BATCH + 3] = np.nan
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(10)]
    )
    optimizer = keras.optimizers.Adam(1e-2, clipnorm=1.0, gradient_accumulation_steps=2)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    guard = tt.Guard()
    history = model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[guard])
    assert [(e.step, e.reason) for e in guard.events] == [(5, "the loss is nan")]
    assert np.isfinite(history.history["loss"]).all()
    assert all(np.isfinite(keras.ops.convert_to_numpy(v)).all() for v in optimizer.variables)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="action must be one of"):
        tt.Guard(action="undo")
    with pytest.raises(InvalidConfigError, match="budget must be a SkipBudget"):
        tt.Guard(budget=3)  # type: ignore[arg-type]


def run_backend(backend: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERAS_BACKEND": backend}
    return subprocess.run(
        [sys.executable, str(HERE / "guard_script.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_torch_backend_undoes_the_nan_batch() -> None:
    """On the torch backend (a subprocess: the backend is chosen at import) the NaN batch's
    loss trips, the update is undone and fit ends finite."""
    pytest.importorskip("torch")
    done = run_backend("torch")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["backend"] == "torch"
    assert result["events"] == [[5, [0, 5], True, "the loss is nan"]]
    assert result["finite"] and np.isfinite(result["loss"]).all()


def test_jax_backend_is_refused_with_what_to_do() -> None:
    pytest.importorskip("jax")
    done = run_backend("jax")
    assert done.returncode != 0
    assert "cannot undo a batch on Keras's JAX backend" in done.stderr
    assert "tensortap.jax.Guard" in done.stderr
