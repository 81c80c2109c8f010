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
    validation data (XGBoost's own calls, outside the hook's rounds, are not counted), and
    (step, "tensor") for every tensor the hook considers saving in a step."""
    inside: list[bool] = [False]

    def counted(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                calls.append((hook.step, name))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    recorder = hook._recorder
    begin, record = recorder.begin, recorder.record
    recording = [False]

    def begun(name: str, collections: Any = None) -> Any:  # a tensor a step looked at
        if not recording[0]:
            calls.append((recorder.global_step, "tensor"))
        return begin(name, collections)

    def recorded(name: str, value: Any, collections: Any = None) -> Any:
        # a number under a steady plan (a vital sign) is kept without begin(): counted here
        calls.append((recorder.global_step, "tensor"))
        recording[0] = True
        try:
            return record(name, value, collections)
        finally:
            recording[0] = False

    monkeypatch.setattr(recorder, "begin", begun)
    monkeypatch.setattr(recorder, "record", recorded)
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
    # a round that saves nothing else looks at no tensor one by one, not even the metrics:
    # its two vital signs are saved with the other rounds gathered, in one block (they were
    # two records each, 2 a round, before the block)
    looked = Counter(step for step, name in calls if name == "tensor")
    assert all(looked[step] == 0 for step in range(25) if step % 10)
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


def test_rounds_that_save_only_vital_signs_are_saved_together_each_at_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round where nothing but the vital signs is due is gathered: its after_iteration
    records nothing and hands no step to the writer; the next due round (or the end) saves
    each gathered round as its own step. What a script saves meanwhile (a callback of its own
    before the hook, here a vital sign) still lands in its round's step."""
    x, y = make_classification(600, 8, n_informative=4, random_state=0)
    dtrain = xgb.DMatrix(x[:400], label=y[:400])
    hook = tt.Hook(tmp_path / "t", include_collections=JOB_COLLECTIONS)
    recorder = hook._recorder
    per_call: list[tuple[int, int]] = []  # (records made, steps ended) in each round's call
    counts = Counter[str]()
    for method in ("record", "next_step"):
        original = getattr(recorder, method)

        def counted(*args: Any, _original: Any = original, _name: str = method) -> Any:
            counts[_name] += 1
            return _original(*args)

        monkeypatch.setattr(recorder, method, counted)
    after_iteration = hook.after_iteration

    def watched(*args: Any) -> Any:
        before = counts.copy()
        try:
            return after_iteration(*args)
        finally:
            per_call.append(
                (counts["record"] - before["record"], counts["next_step"] - before["next_step"])
            )

    monkeypatch.setattr(hook, "after_iteration", watched)

    class ScriptLr(xgb.callback.TrainingCallback):  # type: ignore[name-defined]
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            hook.save_vitals({"lr": float(epoch)})
            return False

    result: dict[str, Any] = {}
    xgb.train(
        {"objective": "binary:logistic", "max_depth": 2, "nthread": 1},
        dtrain,
        25,
        evals=[(dtrain, "train")],
        evals_result=result,
        verbose_eval=False,
        callbacks=[ScriptLr(), hook],
    )
    hook.close()
    # rounds 1-9 and 11-19 gathered (saved with rounds 10 and 20), 21-24 saved at the end
    assert [n for n, (records, steps) in enumerate(per_call) if records or steps] == [0, 10, 20]
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps() == list(range(25))
    np.testing.assert_allclose(
        trial.series("vitals/loss")["value"], result["train"]["logloss"], rtol=1e-6
    )
    assert (trial.series("vitals/step_time")["value"] > 0).all()
    assert trial.series("vitals/step_time").rows == 25
    lr = trial.series("vitals/lr")
    np.testing.assert_array_equal(lr["value"], np.arange(25.0))
    np.testing.assert_array_equal(lr["step"], np.arange(25))


def test_the_rounds_gathered_reach_the_writer_as_one_block(
    tmp_path: Path, count_submissions: Any
) -> None:
    """The rounds gathered are handed to the writer as one block each time they are saved
    (one recorder pass, one submission), not one step each; each is still its own step."""
    x, y = make_classification(600, 8, n_informative=4, random_state=0)
    dtrain = xgb.DMatrix(x[:400], label=y[:400])
    hook = tt.Hook(tmp_path / "t", include_collections=JOB_COLLECTIONS)
    handed = count_submissions(hook)
    result: dict[str, Any] = {}
    xgb.train(
        {"objective": "binary:logistic", "max_depth": 2, "nthread": 1},
        dtrain,
        25,
        evals=[(dtrain, "train")],
        evals_result=result,
        verbose_eval=False,
        callbacks=[hook],
    )
    hook.close()
    # round 0; rounds 1-9 with round 10; 11-19 with 20; 21-24 at the end (25 submissions before)
    assert handed == [1, 9, 1, 9, 1, 4]
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps() == list(range(25))
    np.testing.assert_allclose(
        trial.series("vitals/loss")["value"], result["train"]["logloss"], rtol=1e-6
    )
    assert trial.series("vitals/step_time").rows == 25
    assert (trial.series("vitals/step_time")["value"] > 0).all()
