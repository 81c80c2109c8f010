"""The outcome of boosting rounds (tensortap.xgboost._outcome): the validation data's labels
and predictions, bounded in rows and bytes, on the same rows every round."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

import tensortap.xgboost as tt  # noqa: E402
from tensortap.core._outcome import MAX_BYTES, MAX_ROWS  # noqa: E402


def test_a_large_validation_set_is_sampled_within_the_bound(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12_000, 4))
    y = (x[:, 0] + 0.5 * rng.normal(size=len(x)) > 0).astype(np.float32)
    dtrain, dvalid = xgb.DMatrix(x[:2000], y[:2000]), xgb.DMatrix(x[2000:], y[2000:])
    hook = tt.Hook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["labels", "predictions"],
        validation_data=dvalid,
    )
    params = {"objective": "binary:logistic", "max_depth": 2}
    booster = xgb.train(params, dtrain, 4, evals=[(dvalid, "validation")], callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    rows = np.linspace(0, 9_999, MAX_ROWS).round().astype(int)  # evenly spaced, every round
    for step in (0, 2):
        labels, predicted = (trial.tensor(n).value(step) for n in ("labels", "predictions"))
        assert labels.size == predicted.size == MAX_ROWS
        assert labels.nbytes + predicted.nbytes <= MAX_BYTES
        np.testing.assert_array_equal(labels, y[2000:][rows])
    expected = booster.predict(xgb.DMatrix(x[2000:][rows]), iteration_range=(0, 3))  # round 2
    np.testing.assert_allclose(predicted, expected, rtol=1e-6)


def test_scores_per_class_are_thinned_to_the_byte_bound(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 4))
    y = rng.integers(0, 20, len(x)).astype(np.float32)
    dtrain = xgb.DMatrix(x[:1000], y[:1000])
    hook = tt.Hook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["labels", "predictions"],
        validation_data=(x[1000:], y[1000:]),
    )
    xgb.train({"objective": "multi:softprob", "num_class": 20, "max_depth": 1}, dtrain, 1,
              callbacks=[hook])  # fmt: skip
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    scores, labels = trial.tensor("predictions").value(0), trial.tensor("labels").value(0)
    assert scores.shape[1] == 20 and scores.shape[0] == labels.size < 2000
    assert scores.nbytes + labels.nbytes <= MAX_BYTES
