"""What the XGBoost hook does on a boosting round, counted (never timed): a round that saves
nothing but its vital signs asks the booster for nothing, and a due round reads the labels of
the outcome's sample once per training, not once per round (docs/benchmarks.md, XGBoost zero
code change)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

from sklearn.datasets import make_classification  # noqa: E402

import tensortap.xgboost as tt  # noqa: E402

JOB_COLLECTIONS = [  # what a job's hook includes for boosted trees
    "metrics",
    "hyperparameters",
    "losses",
    "vitals",
    "feature_importance",
    "trees",
    "labels",
    "predictions",
]
BOOSTER_CALLS = ("get_score", "predict", "__getitem__", "get_dump", "save_config")


def count_calls(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[int, str]], hook: Any) -> None:
    """Record (the hook's round, method) for every call the hook makes to the booster or the
    validation data, and (round, "tensor") for every tensor it considers saving (XGBoost's own
    calls, outside the hook's rounds, are not counted)."""
    inside: list[bool] = [False]

    def counted(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                calls.append((hook.step, name))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    recorder = hook._recorder
    begin = recorder.begin

    def begun(name: str, collections: Any = None) -> Any:  # a tensor the round looked at
        if inside[0]:
            calls.append((hook.step, "tensor"))
        return begin(name, collections)

    monkeypatch.setattr(recorder, "begin", begun)
    for name in BOOSTER_CALLS:
        counted(xgb.Booster, name)
    counted(xgb.DMatrix, "get_label")
    after_iteration = hook.after_iteration

    def watched(*args: Any) -> Any:
        inside[0] = True
        try:
            return after_iteration(*args)
        finally:
            inside[0] = False

    monkeypatch.setattr(hook, "after_iteration", watched)


def test_rounds_that_save_nothing_ask_the_booster_for_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = make_classification(600, 8, n_informative=4, random_state=0)
    dtrain = xgb.DMatrix(x[:400], label=y[:400])
    dvalid = xgb.DMatrix(x[400:], label=y[400:])
    hook = tt.Hook(tmp_path / "t", include_collections=JOB_COLLECTIONS, validation_data=dvalid)
    calls: list[tuple[int, str]] = []
    count_calls(monkeypatch, calls, hook)
    result: dict[str, Any] = {}
    xgb.train(
        {"objective": "binary:logistic", "max_depth": 2, "nthread": 1},
        dtrain,
        25,
        evals=[(dtrain, "train"), (dvalid, "validation")],
        evals_result=result,
        verbose_eval=False,
        callbacks=[hook],
    )
    hook.close()
    booster = [(step, name) for step, name in calls if name != "tensor"]
    assert {step for step, _ in booster} == {0, 10, 20}  # the due rounds alone
    # a round that saves nothing else looks at its two vital signs, not at the metrics
    looked = Counter(step for step, name in calls if name == "tensor")
    assert all(looked[step] == 2 for step in range(25) if step % 10)
    per_name = Counter(name for _, name in booster)
    assert per_name["get_label"] == 1  # the sample's labels, read once
    assert per_name["predict"] == 3 and per_name["__getitem__"] == 3
    trial = tt.create_trial(tmp_path / "t")
    # every round's vital signs, the metrics on due rounds, values as XGBoost logged them
    assert trial.steps() == list(range(25))
    assert trial.tensor("train-logloss").steps() == [0, 10, 20]
    np.testing.assert_allclose(
        trial.series("vitals/loss")["value"], result["train"]["logloss"], rtol=1e-6
    )
    for step in (0, 10, 20):
        assert trial.tensor("validation-logloss").value(step) == pytest.approx(
            result["validation"]["logloss"][step], rel=1e-6
        )
        np.testing.assert_array_equal(trial.tensor("labels").value(step), dvalid.get_label())
