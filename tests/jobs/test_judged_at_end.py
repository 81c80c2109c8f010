"""A run is judged on how training ends, for every framework (issue 44): an outcome rule's
finding on an early step of a run whose later steps are fine is a warning, not a problem of
the run; a finding that holds to the end is a problem, also when the live job read its last
step before it knew training had ended (``Rule.invoke_at_end``). Real training, unmodified
scripts under ``tensortap run``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensortap.jobs._record import JobRecord
from tests.jobs.test_framework_jobs import run_job, statuses

HERE = Path(__file__).parent


def diagnosis(record: JobRecord) -> dict[str, Any]:
    summary = record.summary() or {}
    found: dict[str, Any] = summary["diagnosis"]
    return found


def validation_error(stdout: str) -> float:
    (line,) = [line for line in stdout.splitlines() if line.startswith("validation error")]
    return float(line.split()[-1])


@pytest.mark.parametrize(
    ("api", "data"), [("train", "cancer"), ("sklearn", "digits")], ids=["train", "sklearn"]
)
def test_a_healthy_booster_is_judged_on_its_last_rounds(
    tmp_path: Path, api: str, data: str
) -> None:
    """100 rounds at eta 0.1: at round 10 the booster misses a class more than Confusion
    allows (a warning now, saying so); it ends with a validation error of a few percent, and
    the job's verdict is healthy."""
    pytest.importorskip("xgboost")
    script = str(HERE / "boosting_script.py")
    done, record = run_job(tmp_path, "python", script, "--api", api, "--data", data)
    assert done.returncode == 0, done.stdout + done.stderr
    assert validation_error(done.stdout) < 0.05
    found = statuses(record)
    confusion = found["Confusion"]
    assert confusion["RuleEvaluationStatus"] != "NoData", confusion["StatusDetails"]
    assert confusion.get("severity") != "problem", confusion.get("gravest_message")
    for name, status in found.items():  # the other outcome rules too
        assert status.get("severity") != "problem", (name, status.get("gravest_message"))
    verdict = diagnosis(record)
    assert verdict["verdict"] == "healthy", verdict["headline"]
    assert "diagnosis: healthy" in done.stdout


def test_a_booster_of_shuffled_labels_is_a_problem_at_its_end(tmp_path: Path) -> None:
    """The same booster on shuffled labels: Confusion names it, judged on the last round it
    judged (the live job read it before training ended: judged again at the end)."""
    pytest.importorskip("xgboost")
    script = str(HERE / "boosting_script.py")
    done, record = run_job(tmp_path, "python", script, "--shuffle")
    assert done.returncode == 0, done.stdout + done.stderr
    assert validation_error(done.stdout) > 0.3
    verdict = diagnosis(record)
    assert verdict["verdict"] == "problem", verdict["headline"]
    (first, *_) = verdict["problems"][0]["evidence"]
    assert first["rule"] == "Confusion"
    assert "to the end of training" in first["message"] and first["step"] >= 90


def test_a_keras_run_whose_last_validation_pass_shows_the_overfit_is_a_problem(
    tmp_path: Path,
) -> None:
    """model.fit validated every 10th of 40 epochs on noisy labels: the validation loss rises
    at each pass after the first, and only the last pass (which ends training) makes the rise
    sustained (3 passes above the best). Read live, that pass was judged as one under way and
    the run called healthy; it is judged whole when training ends."""
    pytest.importorskip("keras")
    done, record = run_job(tmp_path, "python", str(HERE / "overfit_keras_script.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("val_loss of each pass:")]
    losses = [float(v) for v in line.split(":")[1].split()]
    assert len(losses) == 4 and losses[0] < losses[1] < losses[2] < losses[3]
    overfit = statuses(record)["Overfit"]
    assert overfit["severity"] == "problem", overfit.get("gravest_message")
    assert "overfitting" in str(overfit["gravest_message"])
    verdict = diagnosis(record)
    assert verdict["verdict"] == "problem" and verdict["cause"] == "overfitting", verdict
