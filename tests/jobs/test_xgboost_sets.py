"""XGBoost under ``tensortap run`` (issue 43): the eval set that is the training data is
recognised whatever XGBoost calls it (``XGBClassifier.fit(eval_set=[train, valid])`` names them
validation_0/1: Overfit and Overtraining ended NoData), only loss metrics are compared as losses
(Overfit compared ``train-error`` with ``validation-error`` and called them "loss"), and every
round's training loss is ``vitals/loss``, equal to the booster's own. Real scripts, real jobs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.rules import invoke_rule
from tensortap.rules.builtin import Overfit
from tests.jobs.test_framework_jobs import run_job, statuses

pytest.importorskip("xgboost")
SCRIPT = str(Path(__file__).parent / "xgboost_sets_script.py")


@pytest.mark.parametrize(
    ("api", "booster_name"), [("sklearn", "validation_0"), ("train", "dtrain")]
)
def test_the_training_set_is_known_by_role_and_its_loss_is_every_rounds_vital(
    tmp_path: Path, api: str, booster_name: str
) -> None:
    done, record = run_job(tmp_path, "python", SCRIPT, "--api", api, "--metrics", "error,logloss")
    assert done.returncode == 0, done.stdout + done.stderr
    found = statuses(record)
    for name in ("Overfit", "Overtraining", "LossNotDecreasing"):
        assert found[name]["RuleEvaluationStatus"] != "NoData", (name, found[name])
    trial = tt.create_trial(record.trial_location)
    metrics = set(trial.tensor_names(collection="metrics"))
    assert {"train-logloss", "train-error"} <= metrics
    assert not any(m.startswith(f"{booster_name}-") for m in metrics)
    # the loss compared is the logloss, never the error rate (sorted first by name)
    rule = Overfit(trial)
    invoke_rule(rule, timeout=60)
    assert rule.training_metric == r"^train\-logloss$"
    # every round's training loss, equal to the booster's own numbers
    evals = json.loads((tmp_path / "evals.json").read_text())
    losses = trial.series("vitals/loss")
    assert losses.rows == 40
    assert np.allclose(losses["value"], evals[booster_name]["logloss"], rtol=1e-6)
    assert trial.series("vitals/step_time").rows == 40
    assert (trial.series("vitals/step_time")["value"] > 0).all()


def test_error_rates_alone_are_no_loss_and_the_advice_says_what_applies(tmp_path: Path) -> None:
    done, record = run_job(tmp_path, "python", SCRIPT, "--metrics", "error")
    assert done.returncode == 0, done.stdout + done.stderr
    overfit = statuses(record)["Overfit"]
    assert overfit["RuleEvaluationStatus"] == "NoData"
    why = overfit["StatusDetails"]
    assert "error rates or scores are no loss" in why and "eval_metric" in why
    assert "include_collections" not in why  # "save losses" does not apply to a booster
    assert "(no step judged)" in done.stdout
    assert not tt.create_trial(record.trial_location).series(regex="^vitals/loss$").rows
