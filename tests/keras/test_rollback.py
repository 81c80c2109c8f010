"""tensortap.keras.RollbackCallback: a Keras ``model.fit`` rolls back. Three NaN batches in a
row spend the guard's skip budget; the callback restores the model's and the optimizer's
variables of the last checkpoint before the first bad batch (the shared Rollback decides and
records it), and fit goes on to its end with finite weights, whatever the order of the two
callbacks."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import keras

import tensortap.keras as tt
from tensortap.exceptions import InvalidConfigError
from tests.keras.test_guard import BATCH, data, mlp

BAD = (13, 14, 15)  # batches of epoch 0 whose inputs are NaN


class Weights(keras.callbacks.Callback):
    """Every variable of the model and its optimizer at the start of batch ``at`` and at the
    end of each batch (listed last: after the guard and the rollback acted)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.start: list[np.ndarray] = []
        self.ends: dict[int, list[np.ndarray]] = {}

    def _now(self) -> list[np.ndarray]:
        model = self.model
        return [np.array(v.numpy()) for v in [*model.variables, *model.optimizer.variables]]

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if batch == self.at:
            self.start = self._now()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.ends[batch] = self._now()


def poisoned() -> tuple[np.ndarray, np.ndarray]:
    x, y = data()
    x = x.copy()
    for b in BAD:
        x[b * BATCH : (b + 1) * BATCH, 0] = np.nan
    return x, y


@pytest.mark.parametrize("guard_first", [True, False])
def test_a_fit_rolls_back_to_the_last_checkpoint_before_the_bad_batches(guard_first: bool) -> None:
    model = mlp()
    rollback = tt.RollbackCallback(every=5)
    guard = tt.Guard(budget=tt.SkipBudget(2, 5, then="rollback"), rollback=rollback)
    probe = Weights(at=10)
    order = [guard, rollback] if guard_first else [rollback, guard]
    x, y = poisoned()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[*order, probe])
    assert [e.step for e in guard.events] == list(BAD)  # the third one within a fresh budget
    assert rollback.rollbacks == 1
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 13, 10)
    assert set(event.batches) == {(0, 13), (0, 14)}
    # at the end of batch 14 the variables are those before batch 10 trained, bit for bit
    assert all(np.array_equal(a, b) for a, b in zip(probe.ends[14], probe.start, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(probe.ends[13], probe.start, strict=True))
    assert all(np.isfinite(w).all() for w in model.get_weights())
    assert not model.stop_training


def test_without_a_checkpoint_before_the_fault_the_rollback_is_refused_and_fit_stops() -> None:
    model = mlp()
    rollback = tt.RollbackCallback(every=50)  # the only checkpoint: step 0
    guard = tt.Guard(budget=tt.SkipBudget(2, 5, then="rollback"), rollback=rollback)
    x, y = data()
    x = x.copy()
    x[:BATCH, 0] = np.nan  # the very first batches go bad: no checkpoint at or before step -1
    x[BATCH : 2 * BATCH, 0] = np.nan
    model.fit(
        x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard, rollback]
    )
    assert [e.kind for e in rollback.events] == ["refused"]
    assert rollback.rollbacks == 0 and model.stop_training


def test_bad_arguments_say_what_was_expected() -> None:
    with pytest.raises(InvalidConfigError, match="every must be an int >= 1"):
        tt.RollbackCallback(every=0)
    with pytest.raises(InvalidConfigError, match="keep must be an int >= 1"):
        tt.RollbackCallback(keep=True)
