"""``tensortap run`` on unmodified scripts of frameworks other than PyTorch: each is judged by
its own recommended rules (real scripts, real jobs, as subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tensortap as tt
from tensortap.jobs._record import JobRecord
from tensortap.rules.rule_configs import RECOMMENDED_JAX, RECOMMENDED_XGBOOST

HERE = Path(__file__).parent


def run_job(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], JobRecord]:
    """``tensortap run --output runs [OPTIONS --] COMMAND`` in ``tmp_path``; the result and the
    job."""
    if "--" not in args:
        args = ("--", *args)
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "run", "--output", "runs", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    (job,) = (tmp_path / "runs").iterdir()
    return done, JobRecord(job)


def statuses(record: JobRecord) -> dict[str, dict[str, Any]]:
    summary = record.summary() or {}
    return {r["RuleConfigurationName"]: r for r in summary.get("rules", [])}


def chosen(record: JobRecord) -> dict[str, Any]:
    (event,) = [e for e in record.iter_events() if e["event"] == "rules_chosen"]
    return event


def test_an_xgboost_script_is_judged_by_the_rules_for_boosted_trees(tmp_path: Path) -> None:
    pytest.importorskip("xgboost")
    script = str(HERE / "xgboost_script.py")
    done, record = run_job(tmp_path, "python", script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert chosen(record)["framework"] == "xgboost"
    found = statuses(record)
    assert sorted(found) == sorted(RECOMMENDED_XGBOOST)  # no deep-learning rule, no AllZero
    for name, status in found.items():  # each judged the booster, at its defaults
        assert status["RuleEvaluationStatus"] != "NoData", (name, status["StatusDetails"])
        assert status.get("severity") != "problem", (name, status.get("gravest_message"))
    assert "diagnosis: healthy" in done.stdout
    hook = json.loads(record.hook_file.read_text())  # what the rules read was saved
    included = hook["hook_parameters"]["include_collections"].split(",")
    assert {"feature_importance", "trees", "labels", "predictions", "hyperparameters"} <= set(
        included
    )
    # a label leak: one feature holds all the importance
    leak_dir = tmp_path / "leak"
    leak_dir.mkdir()
    done, record = run_job(leak_dir, "python", script, "leak")
    assert done.returncode == 0, done.stdout + done.stderr
    leak = statuses(record)["FeatureImportanceOverweight"]
    assert leak["RuleEvaluationStatus"] == "IssuesFound" and leak["severity"] == "problem"
    assert "f30" in leak["gravest_message"]  # the leaking feature


JAX_SCRIPT = str(HERE / "jax_script.py")


def test_a_jax_script_is_judged_by_the_jax_rules(tmp_path: Path) -> None:
    """Plain JAX and Optax, no tensortap in the script: its steps, loss, gradients and weights
    are saved, and the rules for JAX judge them."""
    pytest.importorskip("optax")
    done, record = run_job(tmp_path, "python", JAX_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert chosen(record)["framework"] == "jax"
    found = statuses(record)
    assert sorted(found) == sorted(RECOMMENDED_JAX)
    for name, status in found.items():
        assert status["RuleEvaluationStatus"] != "NoData", (name, status["StatusDetails"])
        assert status.get("severity") != "problem", (name, status.get("gravest_message"))
    assert "diagnosis: healthy" in done.stdout
    # a learning rate 50 times too high: the ReLUs die, and the first update was far too large
    high = tmp_path / "high"
    high.mkdir()
    done, record = run_job(high, "python", JAX_SCRIPT, "--lr", "25")
    assert done.returncode == 0, done.stdout + done.stderr
    found = statuses(record)
    assert found["VanishingGradient"]["severity"] == "problem"
    ratio = found["WeightUpdateRatio"]
    assert ratio["RuleEvaluationStatus"] == "IssuesFound" and ratio["severity"] == "problem"
    # the first update, judged by the initial weights, then the loss diverging from it
    assert "after a first update of" in ratio["gravest_message"]
    assert "diagnosis: the learning rate is too high" in done.stdout


def test_a_jax_script_with_its_own_hook_writes_the_jobs_trial(tmp_path: Path) -> None:
    """A script that makes its own tensortap.jax.Hook (docs/jax.md's loop, its own out_dir)
    writes the job's trial, as smdebug's hooks wrote a SageMaker job's output, and nothing
    is added to its steps."""
    pytest.importorskip("optax")
    done, record = run_job(tmp_path, "python", JAX_SCRIPT, "--own-hook", "elsewhere")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "elsewhere").exists()
    assert "its hook writes the job's trial" in done.stdout
    assert chosen(record)["framework"] == "jax"
    for name, status in statuses(record).items():
        assert status["RuleEvaluationStatus"] != "NoData", (name, status["StatusDetails"])
    from tensortap import create_trial

    trial = create_trial(record.trial_location)
    assert trial.steps() == list(range(150))  # the script's own steps, once each
    assert trial.tensor("loss").steps() == list(range(0, 150, 10))  # (vitals/loss: every step)
    names = set(trial.tensor_names())
    assert {"params/hidden/kernel", "gradient/params/hidden/kernel", "loss"} <= names
    assert "initial/params/hidden/kernel" in names  # from the optimizer's init


def test_a_jax_script_tensortap_cannot_watch_says_why(tmp_path: Path) -> None:
    """Parameters updated by hand (no Optax optimizer): nothing can be saved without a hook in
    the script, and the job says so, with what to do, rather than a silent NoData."""
    pytest.importorskip("optax")
    done, record = run_job(tmp_path, "python", JAX_SCRIPT, "--sgd-by-hand")
    assert done.returncode == 0, done.stdout + done.stderr
    (said,) = [e for e in record.iter_events() if e["event"] == "training_unwatched"]
    assert said["framework"] == "jax" and "hand-written updates" in said["message"]
    assert f"[tensortap] {said['message']}" in done.stdout
    found = statuses(record)
    assert sorted(found) == sorted(RECOMMENDED_JAX)
    for status in found.values():
        assert status["RuleEvaluationStatus"] == "NoData"
        assert "hand-written updates (p - lr * g)" in status["StatusDetails"]
        assert "tensortap.jax.Hook.create_from_json_file()" in status["StatusDetails"]


def test_a_stop_request_ends_a_compiled_jax_loop(tmp_path: Path) -> None:
    """A rule's StopTraining reaches a loop whose steps are compiled: the step's host callback
    raises it, and the script ends with exit code 0, one line and no traceback."""
    pytest.importorskip("optax")
    done, record = run_job(
        tmp_path, "--stop-on", "VanishingGradient", "--", "python", JAX_SCRIPT,
        "--lr", "25", "--steps", "3000", "--sleep", "0.01",
    )  # fmt: skip
    summary = record.summary() or {}
    assert summary["training"]["status"] == "Stopped", done.stdout
    assert summary["training"]["exit_code"] == 0
    log = record.training_log.read_text()
    assert "training stopped by tensortap: VanishingGradient fired" in log
    assert "Traceback" not in log and "trained 3000 steps" not in log


@pytest.mark.skipif(
    not Path(sys.executable).with_name("accelerate").exists(), reason="accelerate is not installed"
)
def test_a_script_under_accelerate_launch_is_attached(tmp_path: Path) -> None:
    """Issue 46: ``tensortap run -- accelerate launch train.py`` ran the launcher as given, so
    the script it started was never attached: the trial held no step. Now each process it
    starts runs the script through the attach module."""
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    done, record = run_job(
        tmp_path,
        "--no-rules", "--", accelerate, "launch", "--cpu", "--num_processes", "1",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        str(HERE / "train_script.py"), "--steps", "12",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    trial = tt.create_trial(record.trial_location)
    losses = [n for n in trial.tensor_names() if n == "vitals/loss"]
    assert losses, trial.tensor_names()
    assert trial.steps(tt.modes.TRAIN) == list(range(12))
