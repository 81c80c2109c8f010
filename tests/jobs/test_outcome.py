"""The outcome, sampled, under ``tensortap run`` (tensortap.core._outcome): unmodified scripts
whose labels are shuffled end with AccuracyAtChance judging them at chance; healthy ones are
not flagged (real training loops, as subprocesses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tensortap.core._outcome import MAX_BYTES
from tensortap.jobs._record import JobRecord
from tensortap.trials import create_trial
from tests.jobs.test_framework_jobs import run_job, statuses

HERE = Path(__file__).parent


def judged(record: JobRecord, rule: str) -> dict[str, object]:
    found = statuses(record)[rule]
    assert found["RuleEvaluationStatus"] != "NoData", found["StatusDetails"]
    return found


def outcome_steps(record: JobRecord) -> dict[str, list[int]]:
    """The steps of each mode at which labels and predictions were saved; each step's pair
    of one length (scores per class: a row each) and within the byte bound."""
    trial = create_trial(str(record.trial_dir))
    steps: dict[str, list[int]] = {}
    for step in trial.tensor("labels").steps():
        y, p = trial.tensor("labels").value(step), trial.tensor("predictions").value(step)
        assert y.shape[0] == p.shape[0] and y.nbytes + p.nbytes <= MAX_BYTES
        steps.setdefault(trial.mode(step).name, []).append(step)
    return steps


def test_a_pytorch_script_with_shuffled_labels_is_judged_at_chance(tmp_path: Path) -> None:
    """F.cross_entropy, shuffled labels: held-out accuracy about 0.1 is judged at chance."""
    script = str(HERE / "outcome_torch_script.py")
    done, record = run_job(tmp_path, "python", script, "--shuffle", "--functional")
    assert done.returncode == 0, done.stdout + done.stderr
    found = judged(record, "AccuracyAtChance")
    assert found["RuleEvaluationStatus"] == "IssuesFound", found["StatusDetails"]
    # a problem once the last pass is judged after the trial's end is read; judged live before
    # that, a warning (docs/rules.md, AccuracyAtChance): either says so
    assert "no better than chance in" in str(found["gravest_message"])
    judged(record, "ClassImbalance")
    steps = outcome_steps(record)
    assert len(steps["EVAL"]) == 3 * 3  # every batch (3) of every evaluation pass (3)
    assert 0 < len(steps["TRAIN"]) <= 120 // 10 + 1  # the job's schedule: every 10th step


def test_a_healthy_pytorch_script_is_not_flagged(tmp_path: Path) -> None:
    """nn.CrossEntropyLoss, real labels: the outcome rules judge and stay quiet."""
    script = str(HERE / "outcome_torch_script.py")
    done, record = run_job(tmp_path, "python", script)
    assert done.returncode == 0, done.stdout + done.stderr
    for rule in ("AccuracyAtChance", "ClassImbalance"):
        assert judged(record, rule)["RuleEvaluationStatus"] == "NoIssuesFound"


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "healthy"])
def test_an_evaluation_loop_that_computes_no_loss_is_judged_on_its_scores(
    tmp_path: Path, shuffle: bool
) -> None:
    """An evaluation over a DataLoader that counts ``argmax == y`` and calls no loss: the
    batch's targets and the model's scores are its outcome, at every batch of every pass (the
    training batches, indexed from tensors and not fetched from a loader, keep their loss's)."""
    script = str(HERE / "outcome_torch_script.py")
    done, record = run_job(
        tmp_path, "python", script, "--loader", *(["--shuffle"] if shuffle else [])
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = judged(record, "AccuracyAtChance")
    if shuffle:
        assert found["RuleEvaluationStatus"] == "IssuesFound", found["StatusDetails"]
        assert "no better than chance in" in str(found["gravest_message"])
    else:
        assert found["RuleEvaluationStatus"] == "NoIssuesFound", found["StatusDetails"]
    steps = outcome_steps(record)
    assert len(steps["EVAL"]) == 3 * 3  # every batch (3) of every evaluation pass (3)
    trial = create_trial(str(record.trial_dir))
    y = np.concatenate([trial.tensor("labels").value(s) for s in steps["EVAL"]])
    assert np.array_equal(y, np.tile(load_digits().target[1200:], 3))  # the loader's targets


def test_a_lightning_script_with_shuffled_labels_is_judged_at_chance(tmp_path: Path) -> None:
    """Trainer.fit, F.cross_entropy in validation_step: each validation run (one EVAL step of
    3 batches) is sampled whole and judged at chance."""
    pytest.importorskip("lightning")
    script = str(HERE / "outcome_lightning_script.py")
    done, record = run_job(tmp_path, "python", script, "--shuffle")
    assert done.returncode == 0, done.stdout + done.stderr
    found = judged(record, "AccuracyAtChance")
    assert found["RuleEvaluationStatus"] == "IssuesFound", found["StatusDetails"]
    assert "over 597 samples" in str(found["gravest_message"])  # the whole validation set
    judged(record, "ClassImbalance")


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_lightning_validation_without_a_loss_is_judged_on_its_scores(
    tmp_path: Path, shuffle: bool
) -> None:
    """A validation_step that counts ``argmax == y`` by hand and calls no loss (a stranger's
    Lightning script whose labels were split apart from their inputs, validation accuracy
    0.094, was healthy: its EVAL steps held no outcome). The batch's targets and the model's
    scores give it: at chance judged so, healthy not flagged."""
    pytest.importorskip("lightning")
    script = str(HERE / "outcome_lightning_script.py")
    flags = ("--no-val-loss", "--shuffle") if shuffle else ("--no-val-loss",)
    done, record = run_job(tmp_path, "python", script, *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    found = judged(record, "AccuracyAtChance")
    expected = "IssuesFound" if shuffle else "NoIssuesFound"
    assert found["RuleEvaluationStatus"] == expected, found["StatusDetails"]
    assert len(outcome_steps(record)["EVAL"]) == 3  # one EVAL step per validation run
    if shuffle:
        assert "over 597 samples" in str(found["gravest_message"])  # the whole validation set


@pytest.mark.parametrize("smooth", [False, True])
def test_a_hugging_face_trainer_saves_the_outcome_of_its_evaluations(
    tmp_path: Path, smooth: bool
) -> None:
    """Trainer.train on a tiny BERT classifier: the labels of the batch and the logits' classes
    of each evaluation run (one EVAL step of 3 batches, the whole held-out set, each batch
    once though the model's loss module calls F.cross_entropy), judged by AccuracyAtChance;
    the same where the Trainer smooths the labels (its LabelSmoother computes the loss)."""
    pytest.importorskip("transformers")
    script = str(HERE / "outcome_hf_script.py")
    flags = ["--smooth"] if smooth else []
    done, record = run_job(tmp_path, "python", script, "--out", str(tmp_path / "hf"), *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    assert judged(record, "AccuracyAtChance")["RuleEvaluationStatus"] == "NoIssuesFound"
    trial = create_trial(str(record.trial_dir))
    evaluations = outcome_steps(record)["EVAL"]
    assert len(evaluations) == 3  # every 10 steps of 30
    for step in evaluations:
        labels = trial.tensor("labels").value(step)
        assert labels.size == 300 and set(np.unique(labels)) == {0, 1}
        assert np.mean(trial.tensor("predictions").value(step) == labels) > 0.8


def test_a_keras_script_with_shuffled_labels_is_judged_at_chance(tmp_path: Path) -> None:
    """model.fit with a validation set, shuffled labels: each validation batch's labels and
    predicted classes (not the softmax: bounded) are judged at chance."""
    pytest.importorskip("keras")
    script = str(HERE / "outcome_keras_script.py")
    done, record = run_job(tmp_path, "python", script, "--shuffle")
    assert done.returncode == 0, done.stdout + done.stderr
    found = judged(record, "AccuracyAtChance")
    assert found["RuleEvaluationStatus"] == "IssuesFound", found["StatusDetails"]
    # a problem once the last pass is judged after the trial's end is read; judged live before
    # that, a warning (docs/rules.md, AccuracyAtChance): either says so
    assert "no better than chance in" in str(found["gravest_message"])
    trial = create_trial(str(record.trial_dir))
    step = outcome_steps(record)["EVAL"][0]
    assert trial.tensor("predictions").value(step).shape == (64,)  # classes, not scores


def test_a_healthy_keras_script_with_one_hot_labels_is_not_flagged(tmp_path: Path) -> None:
    pytest.importorskip("keras")
    script = str(HERE / "outcome_keras_script.py")
    done, record = run_job(tmp_path, "python", script, "--onehot")
    assert done.returncode == 0, done.stdout + done.stderr
    for rule in ("AccuracyAtChance", "ClassImbalance"):
        assert judged(record, rule)["RuleEvaluationStatus"] == "NoIssuesFound"


def test_a_healthy_keras_binary_classifier_with_one_sigmoid_output_is_not_flagged(
    tmp_path: Path,
) -> None:
    """Dense(1, "sigmoid") with labels of shape (N,): the sample keeps each output as the
    probability of class 1 (its argmax over one column was always 0, and a stranger's Keras run
    at 97% accuracy was judged at chance)."""
    pytest.importorskip("keras")
    script = str(HERE / "outcome_keras_script.py")
    done, record = run_job(tmp_path, "python", script, "--binary")
    assert done.returncode == 0, done.stdout + done.stderr
    assert judged(record, "AccuracyAtChance")["RuleEvaluationStatus"] == "NoIssuesFound"
    trial = create_trial(str(record.trial_dir))
    step = outcome_steps(record)["EVAL"][-1]
    labels = trial.tensor("labels").value(step)
    predicted = trial.tensor("predictions").value(step) > 0.5
    assert set(np.unique(labels)) == {0, 1} and np.mean(predicted == labels) > 0.8


def test_a_keras_scripts_own_labels_and_predictions_win_over_the_sampled_outcome(
    tmp_path: Path,
) -> None:
    """A callback that saves labels and predictions itself (before the job's hook at each
    batch end): every TRAIN step keeps the script's values, not the tap's sample."""
    pytest.importorskip("keras")
    script = str(HERE / "outcome_keras_script.py")
    done, record = run_job(tmp_path, "python", script, "--own")
    assert done.returncode == 0, done.stdout + done.stderr
    trial = create_trial(str(record.trial_dir))
    train = outcome_steps(record)["TRAIN"]
    assert len(train) >= 2
    for step in train:
        assert trial.tensor("labels").value(step).tolist() == [3] * 5
        assert trial.tensor("predictions").value(step).tolist() == [3] * 5
    # validation batches have no callback of the script's: the tap samples them
    assert trial.tensor("predictions").value(outcome_steps(record)["EVAL"][0]).shape == (64,)


def test_an_xgbclassifier_fit_saves_the_validation_outcome(tmp_path: Path) -> None:
    """XGBClassifier.fit(eval_set=[train, validation]): the validation set's labels and
    scores are saved at the job's rounds, and Confusion judges them. (Saved before the
    outcome was sampled too; what is new is the bound, tested in tests/xgboost.)"""
    pytest.importorskip("xgboost")
    done, record = run_job(tmp_path, "python", str(HERE / "outcome_xgb_script.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    judged(record, "Confusion")
    judged(record, "ClassImbalance")
    trial = create_trial(str(record.trial_dir))
    steps = outcome_steps(record)["TRAIN"]
    assert steps == [0, 10]
    assert trial.tensor("labels").value(10).size == 1797 - 1200  # the validation set


def test_an_xgboost_scripts_own_outcome_wins_over_the_sampled_one(tmp_path: Path) -> None:
    """A script that saves labels and predictions itself (a callback of its own, before the
    job's hook in the callbacks) keeps them: the hook samples nothing at those rounds."""
    pytest.importorskip("xgboost")
    done, record = run_job(tmp_path, "python", str(HERE / "outcome_xgb_script.py"), "--own")
    assert done.returncode == 0, done.stdout + done.stderr
    trial = create_trial(str(record.trial_dir))
    _, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    steps = outcome_steps(record)["TRAIN"]
    assert steps == [0, 10]
    for step in steps:
        labels = trial.tensor("labels").value(step)
        np.testing.assert_array_equal(labels, y[order][1200:1300])  # the script's 100 rows
        assert trial.tensor("predictions").value(step).shape == (100,)
