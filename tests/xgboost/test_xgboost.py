"""The XGBoost hook on real training with scikit-learn data sets, and its rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

from sklearn.datasets import load_breast_cancer, load_diabetes, make_classification  # noqa: E402

import tensortap.xgboost as tt  # noqa: E402
from tensortap.rules import (  # noqa: E402
    ClassImbalance,
    FeatureImportanceOverweight,
    TreeDepth,
    invoke_rule,
    iter_findings,
)

EVERYTHING = [
    "metrics",
    "hyperparameters",
    "feature_importance",
    "average_shap",
    "full_shap",
    "predictions",
    "labels",
    "trees",
]


def split(x: np.ndarray, y: np.ndarray) -> tuple:
    n = int(len(y) * 0.7)
    return xgb.DMatrix(x[:n], label=y[:n]), xgb.DMatrix(x[n:], label=y[n:])


def regress(hook: tt.Hook, rounds: int = 25) -> None:
    """``xgb.train`` of a regression of the diabetes set with ``hook``, the validation split
    among its evals."""
    x, y = load_diabetes(return_X_y=True)
    dtrain, dvalid = split(x, y)
    xgb.train(
        {"objective": "reg:squarederror"},
        dtrain,
        rounds,
        evals=[(dvalid, "validation")],
        verbose_eval=False,
        callbacks=[hook],
    )


def boost(path: Path, x, y, params: dict, rounds: int, every: int = 1, **hook_kwargs):
    dtrain, dvalid = split(x, y)
    hook = tt.Hook(
        path,
        save_config=tt.SaveConfig(save_interval=every),
        include_collections=EVERYTHING,
        validation_data=dvalid,
        **hook_kwargs,
    )
    result: dict = {}
    booster = xgb.train(
        params,
        dtrain,
        rounds,
        evals=[(dtrain, "train"), (dvalid, "validation")],
        evals_result=result,
        verbose_eval=False,
        callbacks=[hook],
    )
    hook.close()
    return tt.create_trial(path), booster, result, dvalid


def test_metrics_importance_shap_predictions_and_trees(tmp_path: Path) -> None:
    x, y = load_breast_cancer(return_X_y=True)
    params = {"objective": "binary:logistic", "max_depth": 3, "eval_metric": ["logloss", "error"]}
    trial, booster, result, dvalid = boost(tmp_path / "t", x, y, params, 8)
    assert trial.steps() == list(range(8))
    for data in ("train", "validation"):
        for metric in ("logloss", "error"):
            saved = [float(trial.tensor(f"{data}-{metric}").value(s)) for s in range(8)]
            np.testing.assert_allclose(saved, result[data][metric])
    assert trial.tensor("hyperparameters/max_depth").value(0) == 3
    assert trial.tensor("hyperparameters/max_depth").steps() == [0]
    last = 7
    for kind in ("weight", "gain", "cover", "total_gain", "total_cover"):
        for feature, score in booster.get_score(importance_type=kind).items():
            value = trial.tensor(f"feature_importance/{kind}/{feature}").value(last)
            assert value == pytest.approx(score, rel=1e-6)
    shap = [n for n in trial.tensor_names(collection="full_shap")]
    rows = sum(trial.tensor(n).value(last) for n in shap)  # the features and the bias
    np.testing.assert_allclose(rows, booster.predict(dvalid, output_margin=True), atol=1e-4)
    mean_abs = trial.tensor("average_shap/f0").value(last)
    assert mean_abs == pytest.approx(np.mean(np.abs(trial.tensor("full_shap/f0").value(last))))
    np.testing.assert_allclose(trial.tensor("predictions").value(last), booster.predict(dvalid))
    np.testing.assert_array_equal(trial.tensor("labels").value(last), dvalid.get_label())
    assert trial.tensor("predictions").steps() == list(range(8))
    trees = tt.tree_table(booster[last : last + 1])
    np.testing.assert_array_equal(trial.tensor("trees/depth").value(last), trees["depth"])
    assert trees["depth"].max() == 3 and set(trial.tensor_names(collection="trees")) == {
        f"trees/{c}"
        for c in ("tree", "node", "depth", "feature", "threshold", "gain", "cover", "leaf")
    }


def test_default_saves_metrics_every_10_rounds(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "t")
    regress(hook)
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("validation-rmse").steps() == [0, 10, 20]
    assert "validation-rmse" in trial.tensor_names(collection="metrics")
    # the vital signs every round (issue 43): no training set among the evals, so no loss
    assert trial.steps() == list(range(25))
    assert trial.tensor_names(collection="vitals") == ["vitals/step_time"]
    assert trial.tensor_names(collection="full_shap") == []  # not due, never computed


def test_a_trial_opened_right_after_training_holds_every_round(
    tmp_path: Path, hold_writer: Any
) -> None:
    """The end of xgb.train waits (boundedly) for the writer to publish every round, so a
    script that opens the trial next needs no flush of its own, as with smdebug. The writer
    is held here until someone waits for it, so that a trial opened without that wait could
    not hold them."""
    hook = tt.Hook(tmp_path / "t")
    hold_writer(hook)
    regress(hook)
    assert tt.create_trial(tmp_path / "t").steps() == list(range(25))
    hook.close()


def test_a_writer_slower_than_the_end_wait_is_said_once_and_never_holds_training(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    hold_writer: Any,
) -> None:
    """The wait at the end of training is bounded: a writer slower than it (here held, and a
    wait of 0 s) gets one warning (not one per training), and every round is still published
    once waited for."""
    from tensortap.hook import _hook as core_hook

    monkeypatch.setattr(core_hook, "END_WAIT_SECS", 0.0)
    x, y = load_diabetes(return_X_y=True)
    dtrain, _ = split(x, y)
    hook = tt.Hook(tmp_path / "t")
    hold_writer(hook)
    params = {"objective": "reg:squarederror"}
    with caplog.at_level("WARNING", logger="tensortap.hook"):
        for _ in range(2):
            xgb.train(params, dtrain, 5, verbose_eval=False, callbacks=[hook])
    said = [r for r in caplog.records if "did not publish every step" in r.getMessage()]
    assert len(said) == 1
    assert hook.flush()  # waited for: the writer goes on
    hook.close()
    assert tt.create_trial(tmp_path / "t").steps() == list(range(10))


def test_scikit_learn_api(tmp_path: Path) -> None:
    x, y = make_classification(600, 8, random_state=0)
    hook = tt.Hook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=EVERYTHING,
        validation_data=(x[400:], y[400:]),
    )
    model = xgb.XGBClassifier(n_estimators=5, max_depth=2, callbacks=[hook])
    model.fit(x[:400], y[:400], eval_set=[(x[400:], y[400:])], verbose=False)
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps() == list(range(5))
    assert "validation_0-logloss" in trial.tensor_names(collection="metrics")
    assert trial.tensor("labels").value(4).shape == (200,)


def test_feature_importance_overweight_fires_on_a_leaking_feature(tmp_path: Path) -> None:
    x, y = make_classification(1000, 10, n_informative=6, random_state=0)
    leaking = np.column_stack([x, y + np.random.default_rng(0).normal(0, 0.01, len(y))])
    params = {"objective": "binary:logistic", "max_depth": 3}
    fired = {}
    for label, data in (("leak", leaking), ("clean", x)):
        trial, *_ = boost(tmp_path / label, data, y, params, 10)
        fired[label] = invoke_rule(FeatureImportanceOverweight(trial)).triggered
    assert fired == {"leak": 10, "clean": 0}


def test_class_imbalance_on_xgboost_labels(tmp_path: Path) -> None:
    fired = {}
    for label, weights in (("imbalanced", [0.97, 0.03]), ("balanced", [0.5, 0.5])):
        x, y = make_classification(2000, 8, weights=weights, random_state=0)
        trial, *_ = boost(tmp_path / label, x, y, {"objective": "binary:logistic"}, 5)
        fired[label] = invoke_rule(ClassImbalance(trial, samples=500)).triggered
    assert fired["imbalanced"] > 0 and fired["balanced"] == 0


def test_tree_depth_tells_shallow_from_deep(tmp_path: Path) -> None:
    x, y = load_breast_cancer(return_X_y=True)
    stunted, *_ = boost(
        tmp_path / "stunted", x, y, {"objective": "binary:logistic", "max_depth": 6, "gamma": 50}, 5
    )
    deep, *_ = boost(tmp_path / "deep", x, y, {"objective": "binary:logistic", "max_depth": 8}, 5)
    assert invoke_rule(TreeDepth(stunted, depth=4)).triggered == 5
    assert invoke_rule(TreeDepth(deep, depth=4, direction="deeper")).triggered > 0
    assert invoke_rule(TreeDepth(deep, depth=4)).triggered == 0


def test_tree_depth_at_its_defaults_reads_the_boosters_max_depth(tmp_path: Path) -> None:
    """A healthy booster's trees grow to about its max_depth (6) and end as stumps once the
    model has little left to learn: not a problem. An over-regularised one (gamma=50) never
    grows: a problem from its first round."""
    x, y = load_breast_cancer(return_X_y=True)
    healthy, *_ = boost(tmp_path / "healthy", x, y, {"objective": "binary:logistic"}, 40)
    assert healthy.framework() == "xgboost"  # recorded by the hook: a job picks its rules by it
    assert healthy.tensor("hyperparameters/max_depth").value(0) == 6
    late = [int(d.max()) for d in (healthy.tensor("trees/depth").value(s) for s in (38, 39))]
    assert max(late) <= 2  # the late trees are far shallower than the old default depth 4
    summary = invoke_rule(TreeDepth(healthy))
    assert summary.triggered == 0 and summary.judged == 40
    stunted, *_ = boost(
        tmp_path / "stunted", x, y, {"objective": "binary:logistic", "gamma": 50}, 5
    )
    findings = [f for f in iter_findings(TreeDepth(stunted)) if f.triggered]
    assert [f.step for f in findings] == list(range(5))
    assert "half the booster's max_depth (6), 3" in findings[0].message


def test_zero_code_change(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(
        "import xgboost as xgb\n"
        "from sklearn.datasets import load_breast_cancer\n"
        "x, y = load_breast_cancer(return_X_y=True)\n"
        "d, v = xgb.DMatrix(x[:400], label=y[:400]), xgb.DMatrix(x[400:], label=y[400:])\n"
        "xgb.train({'objective': 'binary:logistic'}, d, 4, evals=[(d, 'train'), (v, 'val')],\n"
        "          verbose_eval=False)\n"
        "xgb.XGBClassifier(n_estimators=2).fit(x, y)\n"
    )
    config = tmp_path / "hook.json"
    config.write_text(
        '{"out_dir": "%s", "hook_parameters": {"save_interval": "1"}, "collection_configurations":'
        ' [{"name": "metrics"}, {"name": "predictions"}]}' % (tmp_path / "t")
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps() == list(range(6))  # 4 rounds of xgb.train, then 2 of the classifier
    assert {"train-logloss", "val-logloss"} <= set(trial.tensor_names(collection="metrics"))
    assert trial.tensor("predictions").value(0).shape == (169,)  # val, found in evals


def test_loss_rules_read_the_metrics(tmp_path: Path) -> None:
    """LossNotDecreasing, Overfit and Overtraining on XGBoost's train-/validation- metrics:
    deep trees at learning rate 1 on noisy labels overfit; shallow ones at 0.05 learn calmly."""
    from tensortap.rules import LossNotDecreasing, Overfit, Overtraining

    x, y = make_classification(600, 10, flip_y=0.3, random_state=0)
    pair = {"training_metric": "train-logloss", "validation_metric": "validation-logloss"}
    fired = {}
    for label, depth, eta in (("noisy", 8, 1.0), ("calm", 2, 0.05)):
        params = {"objective": "binary:logistic", "max_depth": depth, "eta": eta}
        trial, *_ = boost(tmp_path / label, x, y, {**params, "eval_metric": "logloss"}, 20)
        fired[label] = (
            invoke_rule(
                LossNotDecreasing(
                    trial,
                    tensor_regex="validation-logloss",
                    use_losses_collection=False,
                    num_steps=5,
                )
            ).triggered,
            invoke_rule(Overfit(trial, ratio_threshold=0.25, **pair)).triggered,
            invoke_rule(Overtraining(trial, delta=0.001, **pair)).triggered,
        )
    assert all(n > 0 for n in fired["noisy"]), fired
    assert fired["calm"] == (0, 0, 0)


def _report_trial(tmp_path: Path):
    x, y = load_breast_cancer(return_X_y=True)
    params = {"objective": "binary:logistic", "max_depth": 3, "eval_metric": ["logloss", "error"]}
    trial, *_ = boost(tmp_path / "t", x, y, params, 12, every=2)
    return trial


def test_report_is_one_self_contained_page(tmp_path: Path) -> None:
    from tensortap.cli import main

    _report_trial(tmp_path)
    assert main(["report", str(tmp_path / "t"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    for section in (
        "Metrics",
        "Feature importance",
        "SHAP",
        "Confusion matrix",
        "Tree depth",
        "Rule findings",
    ):
        assert f"<h2>{section}</h2>" in page
    assert page.count("<svg") >= 6 and "<script" not in page
    assert "src=" not in page and "href=" not in page  # loads nothing: opens offline
    assert "<td class='text'>FeatureImportanceOverweight</td>" in page
    assert "predicted 1" in page  # the confusion matrix of the binary predictions


def test_report_on_a_healthy_booster_finds_no_problem(tmp_path: Path) -> None:
    """A healthy booster at XGBoost's defaults (max_depth 6): its late trees are stumps and its
    round 0 is one tree; neither is a problem in the report's findings."""
    from tensortap.report import xgboost_report

    x, y = load_breast_cancer(return_X_y=True)
    trial, *_ = boost(tmp_path / "t", x, y, {"objective": "binary:logistic"}, 40, 2)
    page = xgboost_report(trial)
    for rule in ("TreeDepth", "Confusion", "FeatureImportanceOverweight"):
        assert f"<td class='text'>{rule}</td><td class='text NoIssuesFound'>" in page, rule
    assert "(problem)" not in page


def test_report_opens_in_a_real_headless_browser(tmp_path: Path, browser) -> None:
    from selenium.webdriver.common.by import By

    from tensortap.report import write_xgboost_report

    page = browser.open(write_xgboost_report(_report_trial(tmp_path), tmp_path / "r.html"))
    assert page.title.startswith("XGBoost report")
    assert len(page.find_elements(By.TAG_NAME, "svg")) >= 6
    assert all(svg.size["width"] > 100 for svg in page.find_elements(By.TAG_NAME, "svg"))
    assert len(page.find_elements(By.TAG_NAME, "h2")) == 6
    assert browser.errors() == []


def test_confusion_on_multiclass_digits(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    from tensortap.rules import Confusion

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))  # the file is ordered by writer
    x, y = x[order], y[order]
    params = {"objective": "multi:softprob", "num_class": 10, "max_depth": 3}
    shuffled = np.random.default_rng(1).permutation(y)  # labels the features cannot predict
    fired = {}
    for label, labels in (("learned", y), ("shuffled", shuffled)):
        trial, *_ = boost(tmp_path / label, x, labels, params, 30, every=10)
        assert trial.tensor("predictions").value(20).shape == (540, 10)  # scores per class
        # at its default mode: on an XGBoost trial, the TRAIN steps (the validation data's
        # predictions at each round)
        rule = Confusion(trial, min_diag=0.7, max_off_diag=0.2)
        fired[label] = [f.step for f in iter_findings(rule) if f.triggered]
    # round 0 (one tree, 81% accurate) is not judged: the model has not learned yet; then it has
    assert fired == {"learned": [], "shuffled": [10, 20]}
